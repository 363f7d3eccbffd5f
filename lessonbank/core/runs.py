"""Runs in Redis: the one module that writes run state.

A run's hash (``run_key``) holds its metadata and its ``state``; its step records live in
``run_steps_key`` (one field per sequence number, written with HSETNX so a replay never duplicates).

    open ──close (recorder: outcome)────────────┐
      └───close_abandoned (sweeper: abandoned)──┴─▶ closed ──mark_distilled──▶ distilled
                                                        └────mark_dead────────▶ dead ──reopen_for_retry──▶ closed

    any state ──mark_forgotten (a user, ``lessonbank.forget``)──▶ forgotten (and the ``forgotten`` field, which no
    later write removes: nothing distills or credits the run again, and no summary of it is kept)

A close and the publish of the run's distill task happen in one Lua script, guarded by the
``enqueued`` field: whichever close comes first (the recorder's, a replayed one from the spool, the
sweeper's) publishes, and no later one publishes again. Steps are stored by one Lua script too: a step
arriving after its run was closed (a long step, a spool replayed late) never reopens it; it is kept,
and a run distilled already gets one follow-up distillation (``followup``) of its new steps. Whatever
queues a run's distillation (or follow-up) also notes it in ``WAITING_RUNS_KEY`` until the run is distilled
or dead, so that the sweeper can send again a run whose task was lost (``resend_waiting``).

The recorder batches these writes: ``steps_command`` / ``close_command`` / ``verdict_command`` build the
commands, sent by SHA. The fields a distillation keeps about its own progress (checkpoint, lessons written,
attempts, credit) are written by ``run_progress`` and re-exported here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.exceptions import NoScriptError

from lessonbank.core.constants import (
    CREDIT_TASK,
    DEAD_LETTERS_KEY,
    DEFAULT_QUEUE,
    DISTILL_TASK,
    JOBS_DUE_KEY,
    OPEN_RUNS_KEY,
    RUN_DEAD,
    RUN_DISTILLED,
    RUN_FORGOTTEN,
    STEP_TTL,
    WAITING_RUNS_KEY,
    job_key,
    run_key,
    run_steps_key,
)
from lessonbank.core.publish import task_message
from lessonbank.core.run_progress import (
    CHECKPOINT_FIELD,
    PROGRESS_FIELD,
    RECOUNT_FIELD,
    count_attempt,
    count_delivery,
    credit_if_changed,
    load_checkpoint,
    load_credit,
    load_progress,
    save_checkpoint,
    save_credit,
    save_progress,
    save_recount,
    set_fields,
)
from lessonbank.core.runview import Run, json_list, load_run

# The read side and a distillation's own notes (``run_progress``), re-exported for the writers' callers
__all__ = ["RECOUNT_FIELD", "Run", "count_attempt", "count_delivery", "credit_if_changed", "json_list",
           "load_checkpoint", "load_credit", "load_progress", "load_run", "save_checkpoint", "save_credit",
           "save_progress", "save_recount", "set_fields"]

logger = logging.getLogger(__name__)

FORGOTTEN_FIELD = "forgotten"
FORGOTTEN_DONE_FIELD = "forgotten_done"  # what the forgotten run taught is out of the bank (its credit taken back)


# KEYS: run hash, steps hash, open-runs zset, queue, waiting-runs zset. ARGV: run id, run fields (JSON), first
# step's time, last step's time, follow-up task message, the time it was sent, then pairs of seq and step record.
# An open or closed run has no expiry (a verdict written before the run's first record gave its hash one:
# ``set_verdict``). Steps stored already (a replayed spool) are nothing late: only a step new to a closed run sets
# ``late_at`` (and, for a distilled run, queues the follow-up). The open-runs score, which the sweeper reads, is the
# last step's time on Redis's clock: how long before the sending its step was made (both on the agent's clock)
# before Redis's TIME.
STEP_SCRIPT = """
local added = 0
for i = 7, #ARGV, 2 do added = added + redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('HSETNX', KEYS[1], 'started_at', ARGV[3])
local state = redis.call('HGET', KEYS[1], 'state')
if (not state) or state == 'open' then
  redis.call('PERSIST', KEYS[1])
  for name, value in pairs(cjson.decode(ARGV[2])) do redis.call('HSET', KEYS[1], name, value) end
  redis.call('HSET', KEYS[1], 'state', 'open', 'updated_at', ARGV[4])
  local t = redis.call('TIME')
  local ago = math.max(tonumber(ARGV[6]) - tonumber(ARGV[4]), 0)
  redis.call('ZADD', KEYS[3], string.format('%.6f', tonumber(t[1]) + tonumber(t[2]) / 1000000 - ago), ARGV[1])
  return 0
end
if added == 0 then return 3 end
redis.call('HSET', KEYS[1], 'late_at', ARGV[4])
if state == 'distilled' and redis.call('HSETNX', KEYS[1], 'followup', '1') == 1 then
  redis.call('LPUSH', KEYS[4], ARGV[5])
  local now = redis.call('TIME')
  redis.call('ZADD', KEYS[5], now[1], ARGV[1])
  return 2
end
return 1
"""

# KEYS: run hash, steps hash, open-runs zset, queue, waiting-runs zset. ARGV: run id, seq, run_end record, bank,
# agent, task, outcome, at, task message, extra fields (JSON object).
CLOSE_SCRIPT = """
redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3])
local state = redis.call('HGET', KEYS[1], 'state')
if (not state) or state == 'open' then
  redis.call('PERSIST', KEYS[1])
  for name, value in pairs(cjson.decode(ARGV[10])) do
    redis.call('HSET', KEYS[1], name, value)
  end
  redis.call('HSET', KEYS[1], 'bank', ARGV[4], 'agent', ARGV[5], 'task', ARGV[6], 'state', 'closed',
             'outcome', ARGV[7], 'closed_at', ARGV[8], 'updated_at', ARGV[8])
  redis.call('HSETNX', KEYS[1], 'started_at', ARGV[8])
  redis.call('ZREM', KEYS[3], ARGV[1])
end
if redis.call('HSETNX', KEYS[1], 'enqueued', '1') == 1 then
  redis.call('LPUSH', KEYS[4], ARGV[9])
  local now = redis.call('TIME')
  redis.call('ZADD', KEYS[5], now[1], ARGV[1])
  return 1
end
return 0
"""

# KEYS: run hash, open-runs zset, queue, waiting-runs zset. ARGV: run id, now, idle cutoff, task message.
_CLOSE_ABANDONED = """
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score then return 0 end
if tonumber(score) > tonumber(ARGV[3]) then return 0 end
local state = redis.call('HGET', KEYS[1], 'state')
redis.call('ZREM', KEYS[2], ARGV[1])
if state and state ~= 'open' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'closed', 'outcome', 'abandoned', 'closed_at', ARGV[2], 'updated_at', ARGV[2])
if redis.call('HSETNX', KEYS[1], 'enqueued', '1') == 1 then
  redis.call('LPUSH', KEYS[3], ARGV[4])
  redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
end
return 1
"""

# Who may overwrite whose verdict: a user's word beats a check, which beats nothing.
VERDICT_TRUST = {"user": 3, "check": 2}

# KEYS: run hash, queue. ARGV: verdict, source, note, trust of source, time given, credit task message, ttl.
# Returns 0 (ignored: a more trusted verdict is there, or this very verdict -- same source, verdict and time: a
# replayed spool), 1 (recorded), 2 (recorded, credit task queued).
VERDICT_SCRIPT = """
local current = redis.call('HMGET', KEYS[1], 'verdict_trust', 'verdict', 'verdict_source', 'verdict_at')
if current[1] and tonumber(current[1]) > tonumber(ARGV[4]) then return 0 end
if current[2] == ARGV[1] and current[3] == ARGV[2] and current[4] == ARGV[5] then return 0 end
local new = redis.call('EXISTS', KEYS[1]) == 0
redis.call('HSET', KEYS[1], 'verdict', ARGV[1], 'verdict_source', ARGV[2], 'verdict_note', ARGV[3],
           'verdict_trust', ARGV[4], 'verdict_at', ARGV[5])
if new then redis.call('EXPIRE', KEYS[1], ARGV[7]) end
redis.call('HDEL', KEYS[1], 'check')
if redis.call('HGET', KEYS[1], 'state') == 'distilled' then
  redis.call('LPUSH', KEYS[2], ARGV[6])
  return 2
end
return 1
"""

# The scripts a client sends by SHA (``EVALSHA``) after loading them once (``SCRIPT LOAD``).
SCRIPTS: dict[str, str] = {name: hashlib.sha1(body.encode("utf-8")).hexdigest() for name, body in (
    ("step", STEP_SCRIPT), ("close", CLOSE_SCRIPT), ("verdict", VERDICT_SCRIPT))}
SCRIPT_BODIES = (STEP_SCRIPT, CLOSE_SCRIPT, VERDICT_SCRIPT)

Command = tuple[Any, ...]
"""One Redis command, for a pipeline built by the caller (the recorder batches them)."""


@dataclass(frozen=True)
class RunRef:
    """What every write about one run names. ``extra`` fields (e.g. ``arm``, ``given``, ``tools``) are
    written into the run's hash with its records."""

    bank: str
    run_id: str
    agent: str = ""
    task: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def steps_command(ref: RunRef, steps: list[tuple[int, str, float]], queue: str, sent: float | None = None) -> Command:
    """``EVALSHA`` storing step records (seq, record, at) of one run, in order; ``sent``: when (default now, on
    the same clock as ``at``), so that the run's last activity is put on Redis's clock.

    An open (or new) run stays open with its fields updated. A run closed already stays closed: its late
    steps are kept, and a run distilled already gets one follow-up distillation queued for them; steps it
    holds already (a replayed spool) change nothing.
    """
    fields = {**ref.extra, "bank": ref.bank, "agent": ref.agent, "task": ref.task}
    keys = (run_key(ref.run_id), run_steps_key(ref.run_id), OPEN_RUNS_KEY, queue, WAITING_RUNS_KEY)
    followup = task_message(DISTILL_TASK, [ref.bank, ref.run_id], queue)
    pairs = [item for seq, record, _ in steps for item in (seq, record)]
    return ("EVALSHA", SCRIPTS["step"], len(keys), *keys, ref.run_id, json.dumps(fields), steps[0][2], steps[-1][2],
            followup, time.time() if sent is None else sent, *pairs)


def close_command(ref: RunRef, seq: int, record: str, outcome: str, at: float, queue: str) -> Command:
    """``EVALSHA`` closing the run with ``outcome`` and queueing its distillation (see ``close_run``)."""
    message = task_message(DISTILL_TASK, [ref.bank, ref.run_id], queue)
    keys = (run_key(ref.run_id), run_steps_key(ref.run_id), OPEN_RUNS_KEY, queue, WAITING_RUNS_KEY)
    return ("EVALSHA", SCRIPTS["close"], len(keys), *keys, ref.run_id, seq, record, ref.bank, ref.agent, ref.task,
            outcome, at, message, json.dumps(ref.extra))


def run_command(client: redis.Redis, command: Command) -> Any:
    """Run one scripted command, loading its script first if this Redis does not know it yet."""
    try:
        return client.execute_command(*command)
    except NoScriptError:
        for body in SCRIPT_BODIES:
            client.script_load(body)
        return client.execute_command(*command)


def record_step(client: redis.Redis, ref: RunRef, seq: int, record: str, at: float,
                queue: str = DEFAULT_QUEUE) -> int:
    """Store one step record (replaying it changes nothing; a closed run is never reopened). Returns 0 for
    an open run, 1 for a late step of a closed run, 2 when a follow-up distillation was queued, 3 for a step
    of a closed run stored already (a replay: nothing late, no follow-up)."""
    return int(run_command(client, steps_command(ref, [(seq, record, at)], queue)))


replay_step = record_step  # a record delivered late (from the spool) is stored the same way


def close_run(client: redis.Redis, ref: RunRef, seq: int, record: str, outcome: str, at: float, queue: str) -> bool:
    """Close the run with ``outcome`` (its ``run_end`` record at ``seq``) and queue its distillation.

    One Lua script: a run closed already keeps its outcome, and the distill task is published by the
    first close only. Returns True when this call published it.
    """
    return bool(run_command(client, close_command(ref, seq, record, outcome, at, queue)))


def close_abandoned(client: redis.Redis, bank: str, run_id: str, now: float, cutoff: float, queue: str) -> bool:
    """Close an open run idle since before ``cutoff`` as ``abandoned`` and queue its distillation.

    False when the run got a step since, or was closed by its recorder meanwhile.
    """
    message = task_message(DISTILL_TASK, [bank, run_id], queue)
    keys = [run_key(run_id), OPEN_RUNS_KEY, queue, WAITING_RUNS_KEY]
    return bool(client.eval(_CLOSE_ABANDONED, len(keys), *keys, run_id, now, cutoff, message))


def verdict_command(bank: str, run_id: str, success: bool, source: str, note: str, at: float, queue: str,
                    ttl: int = STEP_TTL) -> Command:
    """``EVALSHA`` recording whether the run did its job, given at unix time ``at`` (see ``set_verdict``). Sent
    again (a replayed spool) it changes nothing: the same source's same verdict of the same time is there."""
    message = task_message(CREDIT_TASK, [bank, run_id], queue)
    keys = (run_key(run_id), queue)
    return ("EVALSHA", SCRIPTS["verdict"], len(keys), *keys, "success" if success else "failure", source, note[:500],
            VERDICT_TRUST.get(source, 1), repr(float(at)), message, max(1, int(ttl)))


def clear_check_command(run_id: str) -> Command:
    """The run's check will not report (it raised, or the run had no answer): its ``check`` field goes."""
    return ("HDEL", run_key(run_id), "check")


def set_verdict(client: redis.Redis, bank: str, run_id: str, success: bool, source: str, note: str,
                queue: str, ttl: int = STEP_TTL, at: float | None = None) -> int:
    """Record whether the run did its job (``source``: ``user`` or ``check``), before or after distillation.

    A user's verdict is never overwritten by a check's. When the run is already distilled, a credit task
    is queued so the lessons it applied are credited with the new verdict (atomically with the write).
    A verdict may arrive before the run's first record (the recorder writes in the background); a hash it
    creates expires after ``ttl`` seconds unless the run's records follow (they clear the expiry), so a verdict
    for a run that never comes is not kept for ever. ``at`` (default: now) is when it was given: the same
    source's same verdict of the same time is recorded once however often it is sent (a replayed spool).
    Returns 0 when ignored, 1 when recorded, 2 when recorded and a credit task was queued.
    """
    when = time.time() if at is None else at
    return int(run_command(client, verdict_command(bank, run_id, success, source, note, when, queue, ttl)))


def clear_check(client: redis.Redis, run_id: str) -> None:
    """The check on the final answer will not report (it raised, or the run had no answer)."""
    client.execute_command(*clear_check_command(run_id))


def _finish(client: redis.Redis, run_id: str, ttl: int, fields: dict[Any, str | float]) -> None:
    pipe = client.pipeline(transaction=True)
    pipe.hset(run_key(run_id), mapping=fields)
    pipe.hdel(run_key(run_id), CHECKPOINT_FIELD, PROGRESS_FIELD, "followup")
    pipe.zrem(OPEN_RUNS_KEY, run_id)
    pipe.zrem(WAITING_RUNS_KEY, run_id)
    pipe.expire(run_key(run_id), ttl)
    pipe.expire(run_steps_key(run_id), ttl)
    pipe.execute()


def mark_distilled(client: redis.Redis, run_id: str, ttl: int, stats: dict[str, int],
                   judged: dict[str, str] | None = None, upto: int = -1, taught: list[str] | None = None) -> None:
    """Record that the run's lessons are in the bank (the verdict distillation went by, the recipe it kept,
    the last step record it read: ``upto``, the ids of the lessons it wrote or reinforced: ``taught``); its
    data now expires after `ttl` seconds."""
    now = time.time()
    fields: dict[Any, str | float] = {"state": RUN_DISTILLED, "distilled_at": now, "updated_at": now}
    fields["lessons"] = json.dumps(stats)
    if taught is not None:
        fields["taught"] = json.dumps(taught)
    fields["distilled_upto"] = upto
    if judged is not None:
        fields["judged"] = json.dumps(judged)
    _finish(client, run_id, ttl, fields)


# KEYS: run hash, queue, waiting-runs zset. ARGV: task message, run id.
_FOLLOWUP = """
if redis.call('HSETNX', KEYS[1], 'followup', '1') == 1 then
  redis.call('LPUSH', KEYS[2], ARGV[1])
  local now = redis.call('TIME')
  redis.call('ZADD', KEYS[3], now[1], ARGV[2])
  return 1
end
return 0
"""


def queue_followup(client: redis.Redis, bank: str, run_id: str, queue: str) -> bool:
    """Queue one follow-up distillation of a distilled run's late steps (none if one is pending)."""
    message = task_message(DISTILL_TASK, [bank, run_id], queue)
    return bool(client.eval(_FOLLOWUP, 3, run_key(run_id), queue, WAITING_RUNS_KEY, message, run_id))


def step_count(client: redis.Redis, run_id: str) -> int:
    """How many step records the run has in Redis now."""
    return int(client.hlen(run_steps_key(run_id)))


def mark_forgotten(client: redis.Redis, bank: str, run_id: str, ttl: int, drop_records: bool = False) -> None:
    """Mark the run forgotten by a user: it leaves every queue of runs to distill, and its data expires after
    ``ttl`` seconds; with ``drop_records`` its step records and every field of its hash go now, but the marker
    (so that a late record or verdict of the run is not taken for a new run to distill)."""
    now = time.time()
    pipe = client.pipeline(transaction=True)
    if drop_records:
        pipe.delete(run_key(run_id), run_steps_key(run_id))
    pipe.hset(run_key(run_id), mapping={"bank": bank, "state": RUN_FORGOTTEN, FORGOTTEN_FIELD: repr(now),
                                        "enqueued": "1", "updated_at": repr(now)})
    pipe.zrem(OPEN_RUNS_KEY, run_id)
    pipe.zrem(WAITING_RUNS_KEY, run_id)
    pipe.expire(run_key(run_id), max(int(ttl), 1))
    pipe.expire(run_steps_key(run_id), max(int(ttl), 1))
    pipe.execute()


def is_forgotten(client: redis.Redis, run_id: str) -> bool:
    """Whether a user forgot the run (``mark_forgotten``)."""
    return bool(client.hexists(run_key(run_id), FORGOTTEN_FIELD))


def mark_dead(client: redis.Redis, run_id: str, ttl: int) -> None:
    """Record that the run could not be distilled; its steps stay `ttl` seconds for a retry."""
    now = time.time()
    _finish(client, run_id, ttl, {"state": RUN_DEAD, "updated_at": now})


# KEYS: run hash, steps, queue, waiting runs, dead letters, job hash, jobs due. ARGV: run id, message, now, job id.
# A retry that read the dead letter before another retry took it (the run maybe distilled since) reopens nothing.
_REOPEN = """
if redis.call('HEXISTS', KEYS[5], ARGV[1]) == 0 then return 'no-letter' end
if redis.call('EXISTS', KEYS[2]) == 0 then return 'no-steps' end
redis.call('HSET', KEYS[1], 'state', 'closed', 'updated_at', ARGV[3])
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[2])
redis.call('LPUSH', KEYS[3], ARGV[2])
redis.call('ZADD', KEYS[4], redis.call('TIME')[1], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
redis.call('DEL', KEYS[6])
redis.call('ZREM', KEYS[7], ARGV[4])
return 'reopened'
"""


def reopen_for_retry(client: redis.Redis, run_id: str, bank: str, queue: str, job: str) -> str:
    """Make a dead-lettered run distillable again (closed, no expiry, queued and waiting; its dead letter and job
    ``job`` dropped) in one script: ``reopened``, else ``no-letter`` / ``no-steps`` and nothing written."""
    keys = [run_key(run_id), run_steps_key(run_id), queue, WAITING_RUNS_KEY, DEAD_LETTERS_KEY, job_key(job),
            JOBS_DUE_KEY]
    message = task_message(DISTILL_TASK, [bank, run_id], queue)
    outcome = client.eval(_REOPEN, len(keys), *keys, run_id, message, repr(time.time()), job)
    return outcome.decode() if isinstance(outcome, bytes) else str(outcome)


