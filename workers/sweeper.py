"""The sweeper: closes runs whose process died (no step for ``idle_timeout``) and expires finished runs.

An abandoned run is closed with outcome ``abandoned`` and sent to distillation like any other run;
the close is one Lua script that re-checks the run's last activity, so a run that just got a step
(or was closed by its recorder) is left alone. Finished runs (distilled or dead) whose data has no
expiry yet get ``step_ttl``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from lessonbank.constants import OPEN_RUNS_KEY, PREFIX, RUN_DEAD, RUN_DISTILLED, run_key, run_steps_key
from lessonbank.models import StepRecord
from lessonbank.settings import Settings

logger = logging.getLogger(__name__)

Enqueue = Callable[[str, str], object]

SCAN_BATCH = 500
MAX_EXPIRE_SCAN = 10_000

# KEYS: run hash, open-runs zset. ARGV: run id, now, idle cutoff.
CLOSE_ABANDONED = """
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score then return 0 end
if tonumber(score) > tonumber(ARGV[3]) then return 0 end
local state = redis.call('HGET', KEYS[1], 'state')
redis.call('ZREM', KEYS[2], ARGV[1])
if state and state ~= 'open' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'closed', 'outcome', 'abandoned', 'closed_at', ARGV[2],
           'updated_at', ARGV[2], 'enqueued', ARGV[2])
return 1
"""


@dataclass
class SweepReport:
    abandoned: int = 0
    expired: int = 0


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


def close_abandoned(client: redis.Redis, settings: Settings, enqueue: Enqueue, now: float | None = None) -> int:
    """Close open runs idle for more than ``idle_timeout`` and enqueue their distillation."""
    now = time.time() if now is None else now
    cutoff = now - settings.idle_timeout
    script = client.register_script(CLOSE_ABANDONED)
    closed = 0
    for raw_id in client.zrangebyscore(OPEN_RUNS_KEY, "-inf", cutoff, start=0, num=SCAN_BATCH):
        run_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
        if not script(keys=[run_key(run_id), OPEN_RUNS_KEY], args=[run_id, now, cutoff]):
            continue
        bank = _bank_of(client, run_id)
        if bank is None:
            logger.warning("abandoned run %s has no bank and no step records; dropped", run_id)
            client.expire(run_key(run_id), settings.step_ttl)
            continue
        enqueue(bank, run_id)
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
        if client.ttl(name) != -1:
            continue
        state = client.hget(run_key(run_id), "state")
        state = state.decode() if isinstance(state, bytes) else state
        if state in (RUN_DISTILLED, RUN_DEAD):
            pipe = client.pipeline(transaction=False)
            pipe.expire(name, settings.step_ttl)
            pipe.expire(run_key(run_id), settings.step_ttl)
            pipe.execute()
            expired += 1
    return expired


def sweep(client: redis.Redis, settings: Settings, enqueue: Enqueue, now: float | None = None) -> SweepReport:
    """One sweeper pass."""
    report = SweepReport(abandoned=close_abandoned(client, settings, enqueue, now),
                         expired=expire_finished(client, settings))
    if report.abandoned or report.expired:
        logger.info("sweep: %d abandoned run(s) closed, %d finished run(s) given a TTL", report.abandoned,
                    report.expired)
    return report
