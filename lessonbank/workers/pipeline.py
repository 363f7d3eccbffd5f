"""Distilling one run, start to finish, as a plain function the Celery task wraps.

read steps -> transcript -> LLM (output checkpointed in Redis) -> consolidate under the bank's lock
-> mark the run distilled (its data then expires).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from redis.exceptions import LockError

from lessonbank.core.constants import RUN_DISTILLED, bank_lock_key, pending_lesson_key
from lessonbank.core.exceptions import PermanentDistillError, TransientDistillError
from lessonbank.core.models import Lesson
from lessonbank.core.redact import Redactor
from lessonbank.core.runs import (
    Run,
    count_attempt,
    load_checkpoint,
    load_progress,
    load_run,
    mark_distilled,
    save_checkpoint,
    save_progress,
)
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.workers.consolidate import ConsolidationStats, Consolidator, Thresholds, llm_decider
from lessonbank.workers.distiller import DistillOutput, DraftLesson, distill
from lessonbank.workers.llm import ChatLLM
from lessonbank.workers.transcript import build_transcript

logger = logging.getLogger(__name__)


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
    lock = client.lock(bank_lock_key(bank), timeout=timeout, blocking_timeout=timeout)
    if not lock.acquire():
        raise TransientDistillError(f"bank {bank} stayed locked for {timeout}s")
    try:
        yield
    finally:
        try:
            lock.release()
        except LockError:
            logger.warning("bank %s: consolidation lock expired before release", bank)


def _lessons_of(deps: Deps, bank: str, run_id: str, run: Run) -> DistillOutput:
    """The LLM's lessons for the run: from the checkpoint of an earlier attempt, else one LLM call."""
    saved = load_checkpoint(deps.redis, run_id)
    if saved is not None:
        try:
            output = DistillOutput.model_validate_json(saved)
            logger.info("bank %s run %s: reusing the LLM output of an earlier attempt", bank, run_id)
            return output
        except ValueError:
            logger.warning("bank %s run %s: unreadable checkpoint, asking the LLM again", bank, run_id)
    transcript = build_transcript(run.task, run.outcome, run.steps, deps.settings.transcript_budget_chars)
    result = distill(deps.llm, transcript, deps.settings.max_lessons)
    prompt_tokens, completion_tokens = result.tokens
    logger.info(
        "bank %s run %s: LLM answered in %.2fs (%d call(s), %d+%d tokens, %d lessons, judged %s)",
        bank, run_id, result.latency, len(result.replies), prompt_tokens, completion_tokens,
        len(result.output.lessons), result.output.outcome,
    )
    save_checkpoint(deps.redis, run_id, result.output.model_dump_json())
    return result.output


def distill_one(deps: Deps, bank: str, run_id: str) -> ConsolidationStats | None:
    """Distill the run into the bank; None if it was already distilled.

    Raises TransientDistillError / ServiceUnavailable / StoreError (retry) or PermanentDistillError.
    """
    started = time.monotonic()
    run = load_run(deps.redis, run_id)
    if run.state == RUN_DISTILLED:
        logger.info("bank %s run %s: already distilled, nothing to do", bank, run_id)
        return None
    if run.meta.get("bank") and run.meta["bank"] != bank:
        raise PermanentDistillError(f"run {run_id} belongs to bank {run.meta['bank']!r}, not {bank!r}")
    if not run.steps:
        raise PermanentDistillError(f"run {run_id} has no step records (never recorded, or expired)")
    attempt = count_attempt(deps.redis, run_id)
    logger.info(
        "bank %s run %s: attempt %d, %d step records read (%d malformed skipped), recorded outcome %s",
        bank, run_id, attempt, len(run.steps), run.malformed, run.outcome,
    )
    output = _lessons_of(deps, bank, run_id, run)
    settings = deps.settings
    thresholds = Thresholds(duplicate=settings.duplicate_similarity, related=settings.related_similarity)
    with bank_lock(deps.redis, bank, settings.distill_lock_timeout):
        consolidator = Consolidator(
            deps.store, bank, run_id, thresholds, decide=llm_decider(deps.llm), scrubber=deps.scrubber
        )
        done = load_progress(deps.redis, run_id)

        def written(indices: list[int]) -> None:
            done.update(indices)
            save_progress(deps.redis, run_id, done)

        stats = consolidator.run(output.lessons, done=set(done), on_done=written)
    counts = stats.as_dict()
    mark_distilled(deps.redis, run_id, settings.step_ttl, counts)
    logger.info(
        "bank %s run %s: distilled in %.2fs: %d added, %d reinforced, %d merged, %d skipped, %d dropped (secret)",
        bank, run_id, time.monotonic() - started, stats.added, stats.reinforced, stats.merged, stats.skipped,
        stats.dropped_secret,
    )
    return stats


def remember_one(deps: Deps, bank: str, pending_id: str) -> ConsolidationStats | None:
    """Consolidate a lesson an agent handed in (parked at ``pending_lesson_key``); None if already done."""
    key = pending_lesson_key(pending_id)
    raw = deps.redis.get(key)
    if raw is None:
        logger.info("bank %s: remembered lesson %s already consolidated or expired", bank, pending_id)
        return None
    try:
        lesson = Lesson.from_json(raw)
    except ValueError as e:
        raise PermanentDistillError(f"remembered lesson {pending_id} is not a valid lesson") from e
    if lesson.bank != bank:
        raise PermanentDistillError(f"remembered lesson {pending_id} belongs to another bank")
    draft = DraftLesson(kind=lesson.kind, text=lesson.text, tags=lesson.tags)
    settings = deps.settings
    thresholds = Thresholds(duplicate=settings.duplicate_similarity, related=settings.related_similarity)
    with bank_lock(deps.redis, bank, settings.distill_lock_timeout):
        stats = Consolidator(deps.store, bank, f"remembered:{pending_id}", thresholds, decide=llm_decider(deps.llm),
                             scrubber=deps.scrubber, origin="remembered").run([draft])
    deps.redis.delete(key)
    logger.info("bank %s: remembered lesson %s: %d added, %d reinforced, %d merged, %d skipped, %d dropped",
                bank, pending_id, stats.added, stats.reinforced, stats.merged, stats.skipped, stats.dropped_secret)
    return stats
