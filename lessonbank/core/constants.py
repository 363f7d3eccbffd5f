"""The whole Redis layout and every queue and task name, in one screen.

Run state (written by ``lessonbank.core.runs`` only)
    ``lessonbank:run:{run_id}``            hash: bank, agent, task, state, outcome, started_at, updated_at,
                                           arm, given (JSON list of lesson ids), drawn and withheld (the
                                           per-lesson holdout's draw), tool_versions (JSON), verdict,
                                           verdict_source, verdict_note, enqueued, distill_attempts, lessons,
                                           credited, forgotten (when a user forgot it), ...
    ``lessonbank:run:{run_id}:steps``      hash: step sequence number -> step record JSON (HSETNX: replay-safe)
    ``lessonbank:run:{run_id}:managed``    set: ids of the runs of its managed agents (whose hashes name it
                                           ``parent_run``): they inherit its verdict
    ``lessonbank:runs:open``               sorted set: run id -> last activity (unix seconds), for the sweeper
    ``lessonbank:runs:waiting``            sorted set: run id -> when its distillation (or follow-up) was queued, until
                                           it is distilled or dead: the sweeper sends again one whose task is lost

Per bank, kept after a run's steps expire (what ``lessonbank report`` reads)
    ``lessonbank:bank:{bank}:runs``        sorted set: run id -> started_at
    ``lessonbank:bank:{bank}:summaries``   hash: run id -> RunSummary JSON

Outcomes of distillation
    ``lessonbank:dead-letters``            hash: run id -> dead letter JSON (bank, reason, attempts, at)
    ``lessonbank:stats:dropped``           hash: quality-gate reason -> lessons dropped for it
    ``lessonbank:bank:{bank}:lock``        lock held while one worker consolidates into a bank
    ``lessonbank:bank:{bank}:purged``      set: ids of lessons purged for good (tombstones, no text;
                                           ``lessonbank.core.purge``): not learnt again unless allowed
    ``lessonbank:bank:{bank}:deleted``     string: when the bank was deleted (``banks delete``), kept ``step_ttl``:
                                           a run found gone mid-distillation was deleted with it, not lost
    ``lessonbank:bank:{bank}:tools``       hash: tool name -> the fingerprint its latest distilled run had
                                           (``lessonbank.workers.versions``): a change marks lessons stale
    ``lessonbank:bank:{bank}:rekeyed``     string: the fingerprint rule every observed shape and failure of the bank
                                           is stored under (``lessonbank.workers.rekeyed``): no read for earlier ones

Tasks in hand (``lessonbank.workers.jobs``): a job is one task's work, e.g. ``distill:{run_id}``
    ``lessonbank:job:{job_id}``            hash: task, args (JSON), queue, task_id, retries, holder (the worker
                                           process holding its lease; absent while a retry waits)
    ``lessonbank:jobs:due``                sorted set: job id -> when it is published again (its lease lapses,
                                           or its retry is due), unless renewed or finished first

Lessons handed in by agents (remember_lesson tool), waiting for a worker to consolidate them
    ``lessonbank:lesson:pending:{pending_id}`` string: Lesson JSON, TTL = step_ttl

Embedded-store proxy (agent-side reads served by the worker that owns the Qdrant path)
    ``lessonbank:store:requests``          list of request JSON for the reads any process may ask (agents too),
                                           BLPOP'd by the store owner
    ``lessonbank:store:admin-requests``    list of request JSON for writes and deletes (workers and the CLI only:
                                           the agents' Redis user cannot push to it; ``deploy/redis/users.acl``)
    ``lessonbank:store:reply:{request_id}`` list holding one reply JSON, short TTL
    ``lessonbank:store:owner``             string: name of the worker serving the embedded store, TTL (heartbeat)
    ``lessonbank:store:embedded``          string: the embedded store this Redis's lessons live in (JSON: its id, the
                                           host and path of the worker that first served it); no TTL: a worker with
                                           another store refuses to start (``lessonbank.workers.owner.claim_store``)

Workers and agents, for ``lessonbank status`` (written by ``lessonbank.workers.observe`` and ``lessonbank.agent``)
    ``lessonbank:workers``                 sorted set: worker name -> time of its last heartbeat
    ``lessonbank:worker:{name}``           string: the worker's heartbeat JSON (LLM endpoint and model, ...), TTL
    ``lessonbank:stats:recorder``          hash: delivered / spooled -> step records counted by agent processes
    ``lessonbank:probe``                   string written for a second by ``lessonbank status``: does Redis take writes?

The sweeper's schedule (RedBeat's layout under ``BEAT_KEY_PREFIX``; ``lessonbank.workers.app``)
    ``lessonbank:beat::lock``              string: the lock of the one beat that sends scheduled tasks, TTL
    ``lessonbank:beat::schedule``          sorted set: schedule entry key -> when it is due next
    ``lessonbank:beat::statics``           set: the names of the entries the app's configuration defines
    ``lessonbank:beat:{entry}``            hash: one schedule entry (definition and when it last ran)

Celery
    queue ``lessonbank`` (a Redis list of that name, kombu's layout); task names below.
    ``unacked``                            hash: kombu's messages delivered to a worker and not yet acknowledged
"""

PREFIX = "lessonbank"

RUN_KEY = PREFIX + ":run:{run_id}"
RUN_STEPS_KEY = PREFIX + ":run:{run_id}:steps"
RUN_MANAGED_KEY = PREFIX + ":run:{run_id}:managed"
OPEN_RUNS_KEY = PREFIX + ":runs:open"
WAITING_RUNS_KEY = PREFIX + ":runs:waiting"
STEP_TTL = 7 * 24 * 3600  # default seconds a finished run's data is kept (``Settings.step_ttl``)
DEAD_LETTERS_KEY = PREFIX + ":dead-letters"
DROPPED_KEY = PREFIX + ":stats:dropped"
SUPERSEDED_KEY = PREFIX + ":stats:superseded"  # lessons superseded because the observations contradict them
LLM_STATS_KEY = PREFIX + ":stats:llm"  # hash: "unusable" = runs distilled without the LLM's lessons
PENDING_LESSON_KEY = PREFIX + ":lesson:pending:{pending_id}"
STORE_REQUESTS_KEY = PREFIX + ":store:requests"
STORE_ADMIN_REQUESTS_KEY = PREFIX + ":store:admin-requests"
STORE_REPLY_KEY = PREFIX + ":store:reply:{request_id}"
BANK_LOCK_KEY = PREFIX + ":bank:{bank}:lock"
BANK_RUNS_KEY = PREFIX + ":bank:{bank}:runs"
BANK_SUMMARIES_KEY = PREFIX + ":bank:{bank}:summaries"
BANK_PURGED_KEY = PREFIX + ":bank:{bank}:purged"
BANK_DELETED_KEY = PREFIX + ":bank:{bank}:deleted"
BANK_TOOLS_KEY = PREFIX + ":bank:{bank}:tools"
BANK_REKEYED_KEY = PREFIX + ":bank:{bank}:rekeyed"
JOB_KEY = PREFIX + ":job:{job_id}"
JOBS_DUE_KEY = PREFIX + ":jobs:due"
STORE_OWNER_KEY = PREFIX + ":store:owner"
STORE_CLAIM_KEY = PREFIX + ":store:embedded"
WORKERS_KEY = PREFIX + ":workers"
WORKER_KEY = PREFIX + ":worker:{name}"
RECORDER_STATS_KEY = PREFIX + ":stats:recorder"
PROBE_KEY = PREFIX + ":probe"
BEAT_KEY_PREFIX = PREFIX + ":beat:"
BEAT_LOCK_KEY = BEAT_KEY_PREFIX + ":lock"  # RedBeat's lock: held by the one beat sending the schedule

DEFAULT_QUEUE = "lessonbank"
UNACKED_KEY = "unacked"  # kombu's Redis transport: messages in a worker's hands
DISTILL_TASK = "lessonbank.distill_run"
SWEEP_TASK = "lessonbank.sweep_runs"
REMEMBER_TASK = "lessonbank.remember_lesson"
CREDIT_TASK = "lessonbank.credit_run"

# values of the ``state`` field of RUN_KEY
RUN_OPEN = "open"
RUN_CLOSED = "closed"
RUN_DISTILLED = "distilled"
RUN_DEAD = "dead"
RUN_FORGOTTEN = "forgotten"  # a user forgot the run (``lessonbank.forget``): nothing distills or credits it again


def run_key(run_id: str) -> str:
    return RUN_KEY.format(run_id=run_id)


def run_steps_key(run_id: str) -> str:
    return RUN_STEPS_KEY.format(run_id=run_id)


def run_managed_key(run_id: str) -> str:
    return RUN_MANAGED_KEY.format(run_id=run_id)


def store_reply_key(request_id: str) -> str:
    return STORE_REPLY_KEY.format(request_id=request_id)


def pending_lesson_key(pending_id: str) -> str:
    return PENDING_LESSON_KEY.format(pending_id=pending_id)


def bank_lock_key(bank: str) -> str:
    return BANK_LOCK_KEY.format(bank=bank)


# Seconds between two tries at a taken bank lock. redis-py's default, 0.1 s, is 20-100 times the lock's usual
# hold (1-5 ms): with four runs of one bank side by side, one try in six found it taken and slept past it.
BANK_LOCK_POLL = 0.005


def bank_runs_key(bank: str) -> str:
    return BANK_RUNS_KEY.format(bank=bank)


def bank_summaries_key(bank: str) -> str:
    return BANK_SUMMARIES_KEY.format(bank=bank)


def bank_purged_key(bank: str) -> str:
    return BANK_PURGED_KEY.format(bank=bank)


def bank_deleted_key(bank: str) -> str:
    return BANK_DELETED_KEY.format(bank=bank)


def bank_tools_key(bank: str) -> str:
    return BANK_TOOLS_KEY.format(bank=bank)


def bank_rekeyed_key(bank: str) -> str:
    return BANK_REKEYED_KEY.format(bank=bank)


def worker_key(name: str) -> str:
    return WORKER_KEY.format(name=name)


def job_key(job_id: str) -> str:
    return JOB_KEY.format(job_id=job_id)
