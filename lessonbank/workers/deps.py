"""What the worker's distillation, consolidation and credit share: their dependencies, the bank's lock, a run's
view, and the run's fields a verdict may change while a worker holds it."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import redis
from redis.exceptions import LockError

from lessonbank.core import runs
from lessonbank.core.connections import redis_text
from lessonbank.core.constants import BANK_LOCK_POLL, bank_lock_key, run_key
from lessonbank.core.exceptions import TransientDistillError
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.learn.adapters import read_run
from lessonbank.learn.view import RunView
from lessonbank.workers.llm import ChatLLM
from lessonbank.workers.summaries import json_names

logger = logging.getLogger(__name__)
T = TypeVar("T")

# What a verdict, or another credit of the run, changes in its hash while a worker holds the run
CHANGING = ("verdict", "verdict_source", runs.RECOUNT_FIELD, "judged", "taught")


class NotYetDistilled(TransientDistillError):
    """A verdict arrived for a run whose distillation has not finished: credit it once it has."""


@dataclass
class Deps:
    """What distilling needs, built once per process."""

    settings: Settings
    redis: redis.Redis
    store: LessonStoreProtocol
    llm: ChatLLM
    scrubber: Redactor


@contextmanager
def bank_lock(client: redis.Redis, bank: str, timeout: int) -> Iterator[None]:
    """Hold the bank's consolidation lock; TransientDistillError if it stays taken for `timeout` seconds."""
    lock = client.lock(bank_lock_key(bank), timeout=timeout, blocking_timeout=timeout, sleep=BANK_LOCK_POLL)
    if not lock.acquire():
        raise TransientDistillError(f"bank {bank} stayed locked for {timeout}s")
    try:
        yield
    finally:
        try:
            lock.release()
        except LockError:
            logger.warning("bank %s: consolidation lock expired before release", bank)


def view_of(run: runs.Run) -> RunView:
    """The normalised view of a run read from Redis (its records through their agent type's adapter)."""
    return read_run(run.steps, run.task, run.outcome, json_names(run.meta.get("tools")), run.run_id, run.parent_run)


def best_effort(run: runs.Run, what: str, work: Callable[[], T], default: T) -> T:
    """``work()``, or ``default`` when it raises: recipes, fixes and shapes read the agent's own code and
    output, and a case they do not handle must cost the run that extra, not its distilled lessons."""
    try:
        return work()
    except Exception:  # foreign code and data: any failure is the extractor's, logged, never the run's
        logger.warning("bank %s run %s: extracting %s failed; the run is distilled without them", run.bank,
                       run.run_id, what, exc_info=True)
        return default


def taught(run: runs.Run, lesson_ids: list[str]) -> list[str]:
    """The ids of the lessons the run's distillations wrote or reinforced, ``lesson_ids`` (this one's) included."""
    return list(dict.fromkeys([*run.taught, *lesson_ids]))


def refreshed(deps: Deps, run: runs.Run) -> runs.Run:
    """The run with the fields of ``CHANGING`` as its hash holds them now (those it holds)."""
    values = deps.redis.hmget(run_key(run.run_id), list(CHANGING))
    meta = dict(run.meta)
    for key, value in zip(CHANGING, values, strict=True):
        if value is not None:
            meta[key] = redis_text(value)
    return dataclasses.replace(run, meta=meta)
