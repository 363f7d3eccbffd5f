"""A distillation's own notes in its run's hash: the LLM output it checkpointed, which of its lessons are in the
bank, how often the run was attempted and delivered, and the credit and recount it gave (and whether a verdict
given meanwhile asks for another credit).

These fields let a redelivered task resume instead of starting over; they write into a run that still exists
only (a run deleted with its bank while a worker held it never comes back as a stub). The run's state and its
transitions are ``runs``'s, which re-exports these.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from lessonbank.core.constants import CREDIT_TASK, run_key
from lessonbank.core.publish import task_message
from lessonbank.core.runview import json_dict

CHECKPOINT_FIELD = "distill_output"
PROGRESS_FIELD = "consolidated"
CREDIT_FIELD = "credited"
RECOUNT_FIELD = "recounted"

# KEYS: run hash. ARGV: field, value, ... Writes only into a run that exists: a run deleted with its bank while a
# worker held it (its LLM call can take minutes) must not come back as a hash of a few fields and no expiry,
# which every later "does the run still exist" check would take for the run.
_SET_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""


def set_fields(client: redis.Redis, run_id: str, fields: dict[str, str]) -> bool:
    """Set fields of the run's hash if the run still exists; False (nothing written) if it is gone."""
    args = [item for pair in fields.items() for item in pair]
    return bool(client.eval(_SET_IF_EXISTS, 1, run_key(run_id), *args))


def credit_if_changed(client: redis.Redis, bank: str, run_id: str, queue: str) -> bool:
    """Queue a credit task for a run just marked distilled whose verdict is not the one it was credited with:
    a verdict given after its credit read the run, before it was marked distilled, queued none (``set_verdict``
    queues one for a distilled run only). One given after this read queues its own (a credit twice is
    harmless: it replaces the run's credit by its difference). Returns whether a task was queued."""
    verdict, credited = client.hmget(run_key(run_id), ["verdict", CREDIT_FIELD])
    given = verdict.decode() if isinstance(verdict, bytes) else verdict
    if given not in ("success", "failure") or json_dict(credited).get("verdict") == given:
        return False
    client.lpush(queue, task_message(CREDIT_TASK, [bank, run_id], queue))
    return True


def save_credit(client: redis.Redis, run_id: str, credit: dict[str, Any]) -> None:
    set_fields(client, run_id, {CREDIT_FIELD: json.dumps(credit)})


def save_recount(client: redis.Redis, run_id: str, counted: dict[str, bool]) -> None:
    """What the lessons the run taught now hold of it (``{"failed": ..., "vouched": ...}``), after a verdict
    that came once they were written."""
    set_fields(client, run_id, {RECOUNT_FIELD: json.dumps(counted)})


def load_credit(client: redis.Redis, run_id: str) -> dict[str, Any] | None:
    """What an earlier credit of the run gave each lesson (``{"verdict", "lessons": {id: "helpful"}}``)."""
    return json_dict(client.hget(run_key(run_id), CREDIT_FIELD)) or None


# KEYS: run hash. ARGV: field. Counts only runs that exist (an unknown or deleted run leaves no key behind).
_COUNT_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
"""


def _count(client: redis.Redis, run_id: str, field: str) -> int:
    """Add one to the run's counter ``field``; the new total, 0 for a run that does not exist."""
    return int(client.eval(_COUNT_IF_EXISTS, 1, run_key(run_id), field))


def count_attempt(client: redis.Redis, run_id: str) -> int:
    """Count one distillation attempt of the run; returns the total so far (0: the run is gone)."""
    return _count(client, run_id, "distill_attempts")


def save_checkpoint(client: redis.Redis, run_id: str, payload: str, llm_error: str = "") -> bool:
    """Keep the LLM's validated output so a redelivered task reuses it instead of asking again (with
    ``llm_error``, why the output is empty: the reply was unusable). False if the run is gone meanwhile."""
    fields = {CHECKPOINT_FIELD: payload} | ({"llm_error": llm_error} if llm_error else {})
    return set_fields(client, run_id, fields)


def load_checkpoint(client: redis.Redis, run_id: str) -> str | None:
    value = client.hget(run_key(run_id), CHECKPOINT_FIELD)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def load_progress(client: redis.Redis, run_id: str) -> set[int]:
    """Indices of the checkpointed lessons already written to the bank."""
    value = client.hget(run_key(run_id), PROGRESS_FIELD)
    try:
        return {int(i) for i in json.loads(value)} if value else set()
    except (ValueError, TypeError):
        return set()


def save_progress(client: redis.Redis, run_id: str, done: set[int]) -> None:
    set_fields(client, run_id, {PROGRESS_FIELD: json.dumps(sorted(done))})


def count_delivery(client: redis.Redis, run_id: str) -> int:
    """Count one delivery of the run's distill task to a worker (duplicates included: a delivery dropped because
    another worker holds the run counts too); returns the total so far, 0 for an unknown run."""
    return _count(client, run_id, "deliveries")

