"""Runs in Redis: the one module that writes run state.

A run's hash (``run_key``) holds its metadata and its ``state``; its step records live in
``run_steps_key`` (one field per sequence number, written with HSETNX so a replay never duplicates).

    open ──close (recorder: outcome)────────────┐
      └───close_abandoned (sweeper: abandoned)──┴─▶ closed ──mark_distilled──▶ distilled
                                                        └────mark_dead────────▶ dead ──reopen_for_retry──▶ closed

A close and the publish of the run's distill task happen in one Lua script, guarded by the
``enqueued`` field: whichever close comes first (the recorder's, a replayed one from the spool, the
sweeper's) publishes, and no later one publishes again.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import redis
from pydantic import ValidationError

from lessonbank.core.constants import (
    CREDIT_TASK,
    DISTILL_TASK,
    OPEN_RUNS_KEY,
    RUN_CLOSED,
    RUN_DEAD,
    RUN_DISTILLED,
    RUN_OPEN,
    run_key,
    run_steps_key,
)
from lessonbank.core.models import StepRecord
from lessonbank.core.publish import publish, task_message

logger = logging.getLogger(__name__)

CHECKPOINT_FIELD = "distill_output"
PROGRESS_FIELD = "consolidated"
CREDIT_FIELD = "credited"


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

    @property
    def bank(self) -> str:
        return self.meta.get("bank", "")

    @property
    def arm(self) -> str:
        return "control" if self.meta.get("arm") == "control" else "lessons"

    @property
    def given(self) -> list[str]:
        """Ids of the lessons the run was handed (empty for a control run or unknown)."""
        return json_list(self.meta.get("given"))

    @property
    def verdict(self) -> tuple[str, str]:
        """(verdict, source) recorded by a user or a check, else ("unknown", "none")."""
        verdict = self.meta.get("verdict", "")
        if verdict in ("success", "failure"):
            return verdict, self.meta.get("verdict_source", "user")
        return "unknown", "none"

    @property
    def judged(self) -> dict[str, str]:
        """What distillation went by: ``{"verdict", "source", "recipe"}`` (empty before distillation)."""
        try:
            value = json.loads(self.meta.get("judged") or "{}")
        except ValueError:
            return {}
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

    @property
    def check_pending(self) -> bool:
        """True while the agent process is still running the user's check on the final answer."""
        return self.meta.get("check") == "pending"


_OPEN_STATES = (None, RUN_OPEN.encode())

# KEYS: run hash, steps hash, open-runs zset, queue. ARGV: run id, seq, run_end record, bank, agent, task,
# outcome, at, task message, extra fields (JSON object).
_CLOSE = """
redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3])
local state = redis.call('HGET', KEYS[1], 'state')
if (not state) or state == 'open' then
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
  return 1
end
return 0
"""

# KEYS: run hash, open-runs zset, queue. ARGV: run id, now, idle cutoff, task message.
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
end
return 1
"""


@dataclass(frozen=True)
class RunRef:
    """What every write about one run names. ``extra`` fields (e.g. ``arm``, ``given``, ``tools``) are
    written into the run's hash with its records."""

    bank: str
    run_id: str
    agent: str = ""
    task: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _run_fields(ref: RunRef, state: str, at: float) -> dict[Any, Any]:
    return {**ref.extra, "bank": ref.bank, "agent": ref.agent, "task": ref.task, "state": state, "updated_at": at}


def record_step(client: redis.Redis, ref: RunRef, seq: int, record: str, at: float) -> None:
    """Store one step record of an open run (one round trip; replaying it changes nothing)."""
    pipe = client.pipeline(transaction=False)
    pipe.hsetnx(run_steps_key(ref.run_id), str(seq), record)
    pipe.hset(run_key(ref.run_id), mapping=_run_fields(ref, RUN_OPEN, at))
    pipe.hsetnx(run_key(ref.run_id), "started_at", at)
    pipe.zadd(OPEN_RUNS_KEY, {ref.run_id: at})
    pipe.execute()


def replay_step(client: redis.Redis, ref: RunRef, seq: int, record: str, at: float) -> None:
    """Like ``record_step`` for a record delivered late (from the spool): a run closed meanwhile stays closed."""
    pipe = client.pipeline(transaction=False)
    pipe.hsetnx(run_steps_key(ref.run_id), str(seq), record)
    pipe.hsetnx(run_key(ref.run_id), "started_at", at)
    pipe.hget(run_key(ref.run_id), "state")
    state = pipe.execute()[-1]
    if state in _OPEN_STATES:
        record_step(client, ref, seq, record, at)


def close_run(client: redis.Redis, ref: RunRef, seq: int, record: str, outcome: str, at: float, queue: str) -> bool:
    """Close the run with ``outcome`` (its ``run_end`` record at ``seq``) and queue its distillation.

    One Lua script: a run closed already keeps its outcome, and the distill task is published by the
    first close only. Returns True when this call published it.
    """
    message = task_message(DISTILL_TASK, [ref.bank, ref.run_id], queue)
    keys = [run_key(ref.run_id), run_steps_key(ref.run_id), OPEN_RUNS_KEY, queue]
    args: list[str | int | float] = [
        ref.run_id, seq, record, ref.bank, ref.agent, ref.task, outcome, at, message, json.dumps(ref.extra)
    ]
    return bool(client.eval(_CLOSE, len(keys), *keys, *args))


def close_abandoned(client: redis.Redis, bank: str, run_id: str, now: float, cutoff: float, queue: str) -> bool:
    """Close an open run idle since before ``cutoff`` as ``abandoned`` and queue its distillation.

    False when the run got a step since, or was closed by its recorder meanwhile.
    """
    message = task_message(DISTILL_TASK, [bank, run_id], queue)
    keys = [run_key(run_id), OPEN_RUNS_KEY, queue]
    return bool(client.eval(_CLOSE_ABANDONED, len(keys), *keys, run_id, now, cutoff, message))


def json_list(raw: str | None) -> list[str]:
    """A JSON list of strings from a run hash field ([] when absent or malformed)."""
    try:
        value = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(item) for item in value] if isinstance(value, list) else []


# Who may overwrite whose verdict: a user's word beats a check, which beats nothing.
VERDICT_TRUST = {"user": 3, "check": 2}

# KEYS: run hash, queue. ARGV: verdict, source, note, trust of source, now, credit task message.
# Returns 0 (ignored: a more trusted verdict is there), 1 (recorded), 2 (recorded, credit task queued).
_SET_VERDICT = """
local current = redis.call('HGET', KEYS[1], 'verdict_trust')
if current and tonumber(current) > tonumber(ARGV[4]) then return 0 end
redis.call('HSET', KEYS[1], 'verdict', ARGV[1], 'verdict_source', ARGV[2], 'verdict_note', ARGV[3],
           'verdict_trust', ARGV[4], 'verdict_at', ARGV[5])
redis.call('HDEL', KEYS[1], 'check')
if redis.call('HGET', KEYS[1], 'state') == 'distilled' then
  redis.call('LPUSH', KEYS[2], ARGV[6])
  return 2
end
return 1
"""


def set_verdict(client: redis.Redis, bank: str, run_id: str, success: bool, source: str, note: str,
                queue: str) -> int:
    """Record whether the run did its job (``source``: ``user`` or ``check``), before or after distillation.

    A user's verdict is never overwritten by a check's. When the run is already distilled, a credit task
    is queued so the lessons it applied are credited with the new verdict (atomically with the write).
    Returns 0 when ignored, 1 when recorded, 2 when recorded and a credit task was queued.
    """
    message = task_message(CREDIT_TASK, [bank, run_id], queue)
    verdict = "success" if success else "failure"
    keys = [run_key(run_id), queue]
    args: list[str | int | float] = [verdict, source, note[:500], VERDICT_TRUST.get(source, 1), time.time(), message]
    return int(client.eval(_SET_VERDICT, len(keys), *keys, *args))


def clear_check(client: redis.Redis, run_id: str) -> None:
    """The check on the final answer will not report (it raised, or the run had no answer)."""
    client.hdel(run_key(run_id), "check")


def load_credit(client: redis.Redis, run_id: str) -> dict[str, Any] | None:
    """What an earlier credit of the run gave each lesson (``{"verdict", "lessons": {id: "helpful"}}``)."""
    raw = client.hget(run_key(run_id), CREDIT_FIELD)
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def save_credit(client: redis.Redis, run_id: str, credit: dict[str, Any]) -> None:
    client.hset(run_key(run_id), CREDIT_FIELD, json.dumps(credit))


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


def mark_distilled(client: redis.Redis, run_id: str, ttl: int, stats: dict[str, int],
                   judged: dict[str, str] | None = None) -> None:
    """Record that the run's lessons are in the bank (and the verdict distillation went by, and the
    recipe it kept); its data now expires after `ttl` seconds."""
    now = time.time()
    fields: dict[Any, str | float] = {"state": RUN_DISTILLED, "distilled_at": now, "updated_at": now}
    fields["lessons"] = json.dumps(stats)
    fields["judged"] = json.dumps(judged or {})
    _finish(client, run_id, ttl, fields)


def mark_dead(client: redis.Redis, run_id: str, ttl: int) -> None:
    """Record that the run could not be distilled; its steps stay `ttl` seconds for a retry."""
    now = time.time()
    _finish(client, run_id, ttl, {"state": RUN_DEAD, "updated_at": now})


def reopen_for_retry(client: redis.Redis, run_id: str, bank: str, queue: str, also: Any = None) -> bool:
    """Make a dead run distillable again (state closed, no expiry) and queue its distillation, in one
    transaction; ``also(pipe)`` may add commands to it. False if its steps are gone."""
    if not client.exists(run_steps_key(run_id)):
        return False
    pipe = client.pipeline(transaction=True)
    pipe.hset(run_key(run_id), mapping={"state": RUN_CLOSED, "updated_at": time.time()})
    pipe.persist(run_key(run_id))
    pipe.persist(run_steps_key(run_id))
    publish(pipe, queue, DISTILL_TASK, [bank, run_id])
    if also is not None:
        also(pipe)
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
