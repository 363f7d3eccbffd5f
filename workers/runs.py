"""A run as the worker sees it: its metadata and step records in Redis, and its state transitions."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import redis
from pydantic import ValidationError

from lessonbank.constants import (
    OPEN_RUNS_KEY,
    RUN_CLOSED,
    RUN_DEAD,
    RUN_DISTILLED,
    run_key,
    run_steps_key,
)
from lessonbank.models import StepRecord

logger = logging.getLogger(__name__)

CHECKPOINT_FIELD = "distill_output"
PROGRESS_FIELD = "consolidated"


@dataclass
class Run:
    """A run's metadata hash and its well-formed step records, in order."""

    run_id: str
    meta: dict[str, str] = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    malformed: int = 0

    @property
    def state(self) -> str:
        return self.meta.get("state", "")

    @property
    def task(self) -> str:
        if self.meta.get("task"):
            return self.meta["task"]
        return next((s.task for s in self.steps if s.task), "")

    @property
    def outcome(self) -> str:
        """The recorded outcome: the run_end record's, else the metadata's, else ``unknown``."""
        for step in reversed(self.steps):
            if step.kind == "run_end" and step.outcome:
                return step.outcome
        return self.meta.get("outcome") or "unknown"


def _decode(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def load_run(client: redis.Redis, run_id: str) -> Run:
    """Read the run's metadata and step records; malformed records are skipped and counted."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(run_key(run_id))
    pipe.hgetall(run_steps_key(run_id))
    raw_meta, raw_steps = pipe.execute()
    run = Run(run_id=run_id, meta={_decode(k): _decode(v) for k, v in raw_meta.items()})
    records: list[StepRecord] = []
    for seq, data in raw_steps.items():
        try:
            record = StepRecord.from_json(data)
        except ValidationError:
            run.malformed += 1
            logger.warning("run %s: skipping malformed step record (field %s)", run_id, _decode(seq))
            continue
        if record.run_id != run_id:
            run.malformed += 1
            logger.warning("run %s: skipping step record of another run (field %s)", run_id, _decode(seq))
            continue
        records.append(record)
    run.steps = sorted(records, key=lambda r: r.seq)
    return run


def _finish(client: redis.Redis, run_id: str, ttl: int, fields: dict[Any, str | float]) -> None:
    pipe = client.pipeline(transaction=True)
    pipe.hset(run_key(run_id), mapping=fields)
    pipe.hdel(run_key(run_id), CHECKPOINT_FIELD, PROGRESS_FIELD)
    pipe.zrem(OPEN_RUNS_KEY, run_id)
    pipe.expire(run_key(run_id), ttl)
    pipe.expire(run_steps_key(run_id), ttl)
    pipe.execute()


def mark_distilled(client: redis.Redis, run_id: str, ttl: int, stats: dict[str, int]) -> None:
    """Record that the run's lessons are in the bank; its data now expires after `ttl` seconds."""
    now = time.time()
    fields: dict[Any, str | float] = {"state": RUN_DISTILLED, "distilled_at": now, "updated_at": now}
    fields["lessons"] = json.dumps(stats)
    _finish(client, run_id, ttl, fields)


def mark_dead(client: redis.Redis, run_id: str, ttl: int) -> None:
    """Record that the run could not be distilled; its steps stay `ttl` seconds for a retry."""
    now = time.time()
    _finish(client, run_id, ttl, {"state": RUN_DEAD, "updated_at": now})


def reopen_for_retry(client: redis.Redis, run_id: str) -> bool:
    """Make a dead run distillable again (state closed, no expiry). False if its steps are gone."""
    if not client.exists(run_steps_key(run_id)):
        return False
    pipe = client.pipeline(transaction=True)
    pipe.hset(run_key(run_id), mapping={"state": RUN_CLOSED, "updated_at": time.time()})
    pipe.persist(run_key(run_id))
    pipe.persist(run_steps_key(run_id))
    pipe.execute()
    return True


def count_attempt(client: redis.Redis, run_id: str) -> int:
    """Count one distillation attempt of the run; returns the total so far."""
    return int(client.hincrby(run_key(run_id), "distill_attempts", 1))


def save_checkpoint(client: redis.Redis, run_id: str, payload: str) -> None:
    """Keep the LLM's validated output so a redelivered task reuses it instead of asking again."""
    client.hset(run_key(run_id), CHECKPOINT_FIELD, payload)


def load_checkpoint(client: redis.Redis, run_id: str) -> str | None:
    value = client.hget(run_key(run_id), CHECKPOINT_FIELD)
    return _decode(value) if value is not None else None


def load_progress(client: redis.Redis, run_id: str) -> set[int]:
    """Indices of the checkpointed lessons already written to the bank."""
    value = client.hget(run_key(run_id), PROGRESS_FIELD)
    try:
        return {int(i) for i in json.loads(value)} if value else set()
    except (ValueError, TypeError):
        return set()


def save_progress(client: redis.Redis, run_id: str, done: set[int]) -> None:
    client.hset(run_key(run_id), PROGRESS_FIELD, json.dumps(sorted(done)))
