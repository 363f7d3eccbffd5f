"""The sweeper: closes runs whose process died (no step for ``idle_timeout``), sends due jobs again and expires
finished runs.

An abandoned run is closed with outcome ``abandoned`` and sent to distillation like any other run
(``lessonbank.core.runs.close_abandoned``: one Lua script that re-checks the run's last activity, so a
run that just got a step, or was closed by its recorder, is left alone). Finished runs (distilled or
dead) whose data has no expiry yet get ``step_ttl``. Due jobs (a retry whose time has come, the task of a
worker that died: ``lessonbank.workers.jobs``) are published by every worker's keeper within a second; the
sweeper does it too, for a service whose workers are all busy restarting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from lessonbank.core import runs
from lessonbank.core.connections import redis_time
from lessonbank.core.constants import OPEN_RUNS_KEY, PREFIX, RUN_DEAD, RUN_DISTILLED, run_key, run_steps_key
from lessonbank.core.models import StepRecord
from lessonbank.core.settings import Settings
from lessonbank.workers.jobs import publish_due

logger = logging.getLogger(__name__)

SCAN_BATCH = 500
MAX_EXPIRE_SCAN = 10_000


@dataclass
class SweepReport:
    abandoned: int = 0
    expired: int = 0
    republished: int = 0


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
            logger.warning("abandoned run %s has no bank and no step records; dropped", run_id)
            client.zrem(OPEN_RUNS_KEY, run_id)
            client.expire(run_key(run_id), settings.step_ttl)
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


def sweep(client: redis.Redis, settings: Settings, now: float | None = None) -> SweepReport:
    """One sweeper pass."""
    report = SweepReport(abandoned=close_abandoned(client, settings, now),
                         expired=expire_finished(client, settings), republished=publish_due(client))
    if report.abandoned or report.expired or report.republished:
        logger.info("sweep: %d abandoned run(s) closed, %d due job(s) sent again, %d finished run(s) given a TTL",
                    report.abandoned, report.republished, report.expired)
    return report
