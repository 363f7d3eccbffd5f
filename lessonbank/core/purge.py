"""Deleting for good: everything Redis holds about a bank, and tombstones of purged lessons.

``delete_bank_data`` removes what Redis holds about one bank: its runs (hash and steps; the LLM-output
checkpoint, progress and credit are fields of the hash), their place in the open-runs set, the bank's
run index and summaries, the dead letters of its runs, the lessons its agents handed in that still
wait (``pending_lesson_key``), its tasks still waiting in the queue, its tombstones, the versions of its tools
(``bank_tools_key``), the fingerprint rule its observed facts are under (``bank_rekeyed_key``). The caller holds
the bank's lock meanwhile (``bank_held``), so no worker consolidates into the bank while it goes; the lock key goes
when the caller lets go of it. It leaves one key: when the bank was deleted (``bank_deleted_key``, for
``step_ttl``), so that a worker that finds its run gone mid-distillation knows it went with its bank rather than
with a Redis that lost its data.

A lesson purged for good leaves a **tombstone**: its id in the set ``bank_purged_key(bank)``, never
its text. Ids are derived from bank + normalised text (``lesson_id``; a recipe's from bank + code
fingerprint, ``recipe_id``), so the id recognises the same text coming back without keeping it.
Whoever writes a new lesson into a bank asks ``purged_ids`` first and leaves those out, unless the
user allowed the text again (``remove_tombstones``: ``lessons unforget``, ``--allow``).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.exceptions import LockError

from lessonbank.core.constants import (
    BANK_LOCK_POLL,
    DEAD_LETTERS_KEY,
    OPEN_RUNS_KEY,
    PENDING_LESSON_KEY,
    PREFIX,
    STEP_TTL,
    WAITING_RUNS_KEY,
    bank_deleted_key,
    bank_lock_key,
    bank_purged_key,
    bank_rekeyed_key,
    bank_runs_key,
    bank_summaries_key,
    bank_tools_key,
    run_key,
    run_managed_key,
    run_steps_key,
)
from lessonbank.core.exceptions import ServiceUnavailable

logger = logging.getLogger(__name__)

SCAN_COUNT = 1000
RUN_PREFIX = PREFIX + ":run:"


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


# -- tombstones -----------------------------------------------------------------------------------


def add_tombstones(client: redis.Redis, bank: str, lesson_ids: Iterable[str]) -> int:
    """Remember that these lessons of ``bank`` were purged; returns how many were new."""
    ids = list(dict.fromkeys(lesson_ids))
    return int(client.sadd(bank_purged_key(bank), *ids)) if ids else 0


def remove_tombstones(client: redis.Redis, bank: str, lesson_ids: Iterable[str]) -> int:
    """Allow these purged lessons of ``bank`` to be learnt again; returns how many tombstones went."""
    ids = list(dict.fromkeys(lesson_ids))
    return int(client.srem(bank_purged_key(bank), *ids)) if ids else 0


def purged_ids(client: redis.Redis, bank: str, lesson_ids: Iterable[str]) -> set[str]:
    """Those of ``lesson_ids`` that were purged from ``bank`` (one round trip): leave them out."""
    ids = list(dict.fromkeys(lesson_ids))
    if not ids:
        return set()
    flags = client.smismember(bank_purged_key(bank), ids)
    return {lesson_id for lesson_id, flag in zip(ids, flags, strict=True) if flag}


def tombstones(client: redis.Redis, bank: str) -> list[str]:
    """Ids of the lessons purged from ``bank``, sorted."""
    return sorted(_text(member) for member in client.smembers(bank_purged_key(bank)))


def bank_deleted(client: redis.Redis, bank: str) -> bool:
    """Whether ``bank`` was deleted (``banks delete``) within ``step_ttl``: a run of it found gone was deleted with
    it, not lost by a Redis that kept nothing on disk."""
    return bool(client.exists(bank_deleted_key(bank)))


# -- a bank's runs --------------------------------------------------------------------------------


def _scanned_run_ids(client: redis.Redis) -> set[str]:
    ids: set[str] = set()
    for raw in client.scan_iter(match=RUN_PREFIX + "*", count=SCAN_COUNT):
        name = _text(raw)[len(RUN_PREFIX) :]
        ids.add(name.split(":", 1)[0])  # a run id holds no ":"; its steps and managed runs are keys below it
    return ids


def _step_bank(client: redis.Redis, run_id: str) -> str:
    """The bank named by one of the run's step records ("" when there is none to read)."""
    _, fields = cast(tuple[int, dict[bytes, bytes]], client.hscan(run_steps_key(run_id), 0, count=10))
    for raw in list(fields.values())[:5]:
        try:
            value = json.loads(raw)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("bank"), str):
            return str(value["bank"])
    return ""


def bank_run_ids(client: redis.Redis, bank: str) -> set[str]:
    """Ids of every run Redis holds for ``bank``: run hashes and steps naming it, its run index, its dead
    letters."""
    ids = {_text(run_id) for run_id in cast(list[bytes], client.zrange(bank_runs_key(bank), 0, -1))}
    candidates = sorted(_scanned_run_ids(client) - ids)
    pipe = client.pipeline(transaction=False)
    for run_id in candidates:
        pipe.hget(run_key(run_id), "bank")
    for run_id, owner in zip(candidates, pipe.execute(), strict=True):
        name = _text(owner) if owner is not None else _step_bank(client, run_id)
        if name == bank:
            ids.add(run_id)
    for letter_id, raw in cast(dict[bytes, bytes], client.hgetall(DEAD_LETTERS_KEY)).items():
        if _json_field(raw, "bank") == bank:
            ids.add(_text(letter_id))
    return ids


def _json_field(raw: bytes | str | None, name: str) -> Any:
    try:
        value = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return value.get(name) if isinstance(value, dict) else None


def _pending_keys(client: redis.Redis, bank: str) -> list[str]:
    """Keys of the lessons an agent of ``bank`` handed in that wait for a worker."""
    keys = [_text(raw) for raw in client.scan_iter(match=PENDING_LESSON_KEY.format(pending_id="*"), count=SCAN_COUNT)]
    if not keys:
        return []
    return [key for key, raw in zip(keys, client.mget(keys), strict=True) if _json_field(raw, "bank") == bank]


def task_args(raw: bytes | str) -> list[Any] | None:
    """The positional arguments of a task message in the queue (``lessonbank.core.publish``'s layout)."""
    try:
        envelope = json.loads(raw)
        body: Any = envelope["body"]
        if envelope.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, binascii.Error):
        return None
    return args if isinstance(args, list) else None


def _queued_messages(client: redis.Redis, queue: str, bank: str, run_ids: set[str]) -> list[bytes]:
    """Messages waiting in ``queue`` whose task names ``bank`` or one of its runs."""
    found = []
    for raw in cast(list[bytes], client.lrange(queue, 0, -1)):
        args = task_args(raw) or []
        if (args and args[0] == bank) or any(isinstance(arg, str) and arg in run_ids for arg in args):
            found.append(raw)
    return found


@dataclass
class BankPurge:
    """What ``delete_bank_data`` removed."""

    runs: int = 0
    dead_letters: int = 0
    pending_lessons: int = 0
    queued_tasks: int = 0
    tombstones: int = 0


def delete_bank_data(client: redis.Redis, bank: str, queue: str, keep_deleted: int = STEP_TTL) -> BankPurge:
    """Remove everything Redis holds about ``bank`` (see the module docstring) but its lock, and note when it was
    deleted (kept ``keep_deleted`` seconds)."""
    run_ids = bank_run_ids(client, bank)
    letters = sorted(run_ids & {_text(run_id) for run_id in client.hkeys(DEAD_LETTERS_KEY)})
    pending = _pending_keys(client, bank)
    messages = _queued_messages(client, queue, bank, run_ids)
    report = BankPurge(runs=len(run_ids), dead_letters=len(letters), pending_lessons=len(pending),
                       queued_tasks=len(messages), tombstones=int(client.scard(bank_purged_key(bank))))
    pipe = client.pipeline(transaction=True)
    for message in messages:
        pipe.lrem(queue, 1, message)  # type: ignore[arg-type]  # redis-py takes bytes too
    ordered = sorted(run_ids)
    for start in range(0, len(ordered), SCAN_COUNT):
        batch = ordered[start : start + SCAN_COUNT]
        pipe.delete(*[run_key(run_id) for run_id in batch], *[run_steps_key(run_id) for run_id in batch],
                    *[run_managed_key(run_id) for run_id in batch])
        pipe.zrem(OPEN_RUNS_KEY, *batch)
        pipe.zrem(WAITING_RUNS_KEY, *batch)
    if letters:
        pipe.hdel(DEAD_LETTERS_KEY, *letters)
    pipe.delete(bank_runs_key(bank), bank_summaries_key(bank), bank_purged_key(bank), bank_tools_key(bank),
                bank_rekeyed_key(bank), *pending)
    pipe.set(bank_deleted_key(bank), repr(time.time()), ex=max(int(keep_deleted), 1))
    pipe.execute()
    logger.info("bank %s: removed %d run(s), %d dead letter(s), %d pending lesson(s), %d queued task(s) from Redis",
                bank, report.runs, report.dead_letters, report.pending_lessons, report.queued_tasks)
    return report


@contextmanager
def bank_held(client: redis.Redis, bank: str, wait: float, hold: float, unless_away: bool = False) -> Iterator[None]:
    """Hold the bank's consolidation lock (the one the workers take) for at most ``hold`` seconds;
    ServiceUnavailable if a worker keeps it longer than ``wait`` seconds. The key goes on release.

    ``unless_away``: when Redis cannot be reached, go ahead without the lock (no worker consolidates then).
    """
    lock = client.lock(bank_lock_key(bank), timeout=hold, blocking_timeout=wait, sleep=BANK_LOCK_POLL)
    try:
        held = lock.acquire()
    except (redis.ConnectionError, redis.TimeoutError):
        if not unless_away:
            raise
        logger.warning("bank %s: Redis unreachable, changing its lessons without the bank's lock", bank)
        yield
        return
    if not held:
        raise ServiceUnavailable(f"bank {bank!r} stayed locked by a worker for {wait:g}s; try again later")
    try:
        yield
    finally:
        try:
            lock.release()
        except (LockError, redis.RedisError):
            logger.warning("bank %s: the lock expired (or Redis went away) before the change ended", bank)
