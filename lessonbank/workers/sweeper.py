"""The sweeper: closes runs whose process died (no step for ``idle_timeout``), sends due jobs again, sends again
runs whose distill task was lost, and expires finished runs.

An abandoned run is closed with outcome ``abandoned`` and sent to distillation like any other run
(``lessonbank.core.runs.close_abandoned``: one Lua script that re-checks the run's last activity, so a
run that just got a step, or was closed by its recorder, is left alone). Finished runs (distilled or
dead) whose data has no expiry yet get ``step_ttl``. Due jobs (a retry whose time has come, the task of a
worker that died: ``lessonbank.workers.jobs``) are published by every worker's keeper within a second; the
sweeper does it too, for a service whose workers are all busy restarting.

A run queued for distillation ``resend_after`` seconds ago and still waiting (``WAITING_RUNS_KEY``) whose task
is nowhere — not in the queue, not in a worker's hands (kombu's unacknowledged messages), no job (a lease or a
retry), no dead letter — is sent again: a full Redis (``noeviction``) or a read-only one can refuse the writes
that take a message off the queue into a worker's hands, or that keep a failed one, and the message is gone.
A second copy of a task that was not lost changes nothing (one worker at a time holds a run).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import redis

from lessonbank.core import runs
from lessonbank.core.connections import redis_text, redis_time
from lessonbank.core.constants import (
    DEAD_LETTERS_KEY,
    DISTILL_TASK,
    OPEN_RUNS_KEY,
    PREFIX,
    RUN_CLOSED,
    RUN_DISTILLED,
    UNACKED_KEY,
    WAITING_RUNS_KEY,
    job_key,
    run_key,
    run_steps_key,
)
from lessonbank.core.models import StepRecord
from lessonbank.core.publish import publish
from lessonbank.core.purge import task_args
from lessonbank.core.settings import Settings
from lessonbank.workers.jobs import job_id, publish_due

logger = logging.getLogger(__name__)

SCAN_BATCH = 500
MAX_EXPIRE_SCAN = 10_000

# KEYS: open-runs zset, run hash. ARGV: run id, idle cutoff, TTL. Drops an idle open run read as having neither bank
# nor step records, unless a step came since (its score) or its bank is known now: 1 if dropped.
_DROP_EMPTY = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not score) or tonumber(score) > tonumber(ARGV[2]) or redis.call('HEXISTS', KEYS[2], 'bank') == 1 then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
"""

# KEYS: steps hash, run hash. ARGV: TTL. Gives a finished (distilled or dead) run's data its TTL if it has none: not
# to a dead run sent to the workers again since it was found, whose data waits for them. 1 if given.
_EXPIRE_FINISHED = """
local state = redis.call('HGET', KEYS[2], 'state')
if (state ~= 'distilled' and state ~= 'dead') or redis.call('TTL', KEYS[1]) ~= -1 then return 0 end
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[1])
return 1
"""

# KEYS: run hash, waiting-runs zset, dead letters. ARGV: run id. Takes a run the sweeper read as finished off the
# waiting runs, unless it waits again by now (a follow-up of late steps queued, a dead letter retried): 1 if taken.
_SETTLED = """
local state, followup = unpack(redis.call('HMGET', KEYS[1], 'state', 'followup'))
if (state == 'closed' or (state == 'distilled' and followup)) and redis.call('HEXISTS', KEYS[3], ARGV[1]) == 0 then
  return 0
end
return redis.call('ZREM', KEYS[2], ARGV[1])
"""


@dataclass
class SweepReport:
    abandoned: int = 0
    expired: int = 0
    republished: int = 0
    resent: int = 0


def _bank_of(client: redis.Redis, run_id: str) -> str | None:
    bank = client.hget(run_key(run_id), "bank")
    if bank:
        return bank.decode() if isinstance(bank, bytes) else str(bank)
    for raw in client.hvals(run_steps_key(run_id))[:5]:
        try:
            return StepRecord.from_json(raw).bank
        except ValueError:
            continue
    return None


def close_abandoned(client: redis.Redis, settings: Settings, now: float | None = None) -> int:
    """Close open runs idle for more than ``idle_timeout`` and queue their distillation. ``now`` (default: Redis's
    ``TIME``) is on Redis's clock, as the open runs' last activity is (``runs.steps_command``)."""
    now = redis_time(client) if now is None else now
    cutoff = now - settings.idle_timeout
    closed = 0
    for raw_id in client.zrangebyscore(OPEN_RUNS_KEY, "-inf", cutoff, start=0, num=SCAN_BATCH):
        run_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
        bank = _bank_of(client, run_id)
        if bank is None:
            if client.eval(_DROP_EMPTY, 2, OPEN_RUNS_KEY, run_key(run_id), run_id, cutoff, settings.step_ttl):
                logger.warning("abandoned run %s has no bank and no step records; dropped", run_id)
            continue
        if not runs.close_abandoned(client, bank, run_id, now, cutoff, settings.queue):
            continue
        closed += 1
        logger.info("run %s of bank %s abandoned (idle > %ds): sent to distillation", run_id, bank,
                    settings.idle_timeout)
    return closed


def expire_finished(client: redis.Redis, settings: Settings) -> int:
    """Give ``step_ttl`` to the data of distilled or dead runs that has no expiry yet."""
    expired = 0
    for scanned, key in enumerate(client.scan_iter(match=PREFIX + ":run:*:steps", count=SCAN_BATCH)):
        if scanned >= MAX_EXPIRE_SCAN:
            break
        name = key.decode() if isinstance(key, bytes) else str(key)
        run_id = name[len(PREFIX + ":run:") : -len(":steps")]
        if client.ttl(name) == -1:  # the script looks again: the run may have been sent to the workers since
            expired += int(client.eval(_EXPIRE_FINISHED, 2, name, run_key(run_id), settings.step_ttl))
    return expired


def _tasks_named(client: redis.Redis, queue: str) -> set[str]:
    """Ids of the runs whose distill task is in ``queue`` or in a worker's hands (kombu's unacknowledged)."""
    found: set[str] = set()
    raws: list[bytes | str] = list(client.lrange(queue, 0, -1))
    for held in client.hvals(UNACKED_KEY):
        try:
            message = json.loads(held)[0]  # [message, exchange, routing key]
            raws.append(json.dumps(message))
        except (ValueError, IndexError, KeyError, TypeError):
            continue
    for raw in raws:
        args = task_args(raw) or []
        if len(args) >= 2 and isinstance(args[1], str):
            found.add(args[1])
    return found


def resend_waiting(client: redis.Redis, settings: Settings, now: float | None = None) -> int:
    """Send again the runs waiting for distillation longer than ``resend_after`` whose task is nowhere (see the
    module docstring); returns how many. ``now`` is on Redis's clock."""
    now = redis_time(client) if now is None else now
    waiting = client.zrangebyscore(WAITING_RUNS_KEY, "-inf", now - settings.resend_after, start=0, num=SCAN_BATCH)
    if not waiting:
        return 0
    queued = _tasks_named(client, settings.queue)
    resent = 0
    for raw_id in waiting:
        run_id = redis_text(raw_id)  # type: ignore[arg-type]
        pipe = client.pipeline(transaction=False)
        pipe.hmget(run_key(run_id), ["state", "bank", "followup"])
        pipe.exists(job_key(job_id("distill", run_id)))
        pipe.hexists(DEAD_LETTERS_KEY, run_id)
        (state, bank, followup), job, dead = pipe.execute()
        state = redis_text(state)
        if state not in (RUN_CLOSED, RUN_DISTILLED) or (state == RUN_DISTILLED and not followup) or dead:
            # finished, gone, or dead-lettered: it waits for nothing, unless it was queued again since it was read
            client.eval(_SETTLED, 3, run_key(run_id), WAITING_RUNS_KEY, DEAD_LETTERS_KEY, run_id)
            continue
        if job or run_id in queued:  # in hand, due for a retry, or queued: look again later; XX: a run that was
            client.zadd(WAITING_RUNS_KEY, {run_id: now}, xx=True)  # finished since it was read is not put back
            continue
        pipe = client.pipeline(transaction=True)
        publish(pipe, settings.queue, DISTILL_TASK, [redis_text(bank), run_id])  # finished meanwhile: dropped
        pipe.zadd(WAITING_RUNS_KEY, {run_id: now}, xx=True)
        pipe.execute()
        resent += 1
        logger.warning("run %s of bank %s waited %ds for distillation with its task nowhere (lost while Redis "
                       "refused writes?); sent again", run_id, redis_text(bank), settings.resend_after)
    return resent


def sweep(client: redis.Redis, settings: Settings, now: float | None = None) -> SweepReport:
    """One sweeper pass."""
    report = SweepReport(abandoned=close_abandoned(client, settings, now),
                         expired=expire_finished(client, settings), republished=publish_due(client),
                         resent=resend_waiting(client, settings, now))
    if report.abandoned or report.expired or report.republished or report.resent:
        logger.info("sweep: %d abandoned run(s) closed, %d due job(s) sent again, %d lost task(s) sent again, "
                    "%d finished run(s) given a TTL", report.abandoned, report.republished, report.resent,
                    report.expired)
    return report
