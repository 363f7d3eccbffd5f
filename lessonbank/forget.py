"""Forgetting a run: ``forget_run`` takes out of a bank everything one run taught, for a user deleting personal data
or a run found poisoned after the fact (``lessonbank runs forget RUN_ID``).

Under the bank's lock (no worker consolidates or credits meanwhile), by the rules of ``lessonbank.learn.forget``:
the run is marked forgotten first (``runs.mark_forgotten``: a distillation or credit of it under way writes nothing
more, and none starts again); every lesson or recipe whose evidence rests on it alone is removed from the store;
every other lesson behind which it stands, or which it was given, loses its part (evidence, provenance,
verified, the counts its credit gave); what the removed lessons had superseded is active again; the run's summary
goes, so reports count it no more, and the lessons it drew for the per-lesson holdout are measured again without
it. With ``purge``, its step records and the fields of its hash go too (a marker stays ``step_ttl`` seconds, so a
late record or verdict of it is not taken for a new run), and its dead letter.

Which lessons a run taught is read from their provenance, which consolidation keeps through merges: no record of
the run itself is needed, so a run whose records expired long ago is forgotten as exactly. A lesson confirmed by more
runs than its provenance lists (``consolidate.capped``) holds nothing of a run it lists no more but its evidence.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from lessonbank.core import purge as purging
from lessonbank.core import runs, summary
from lessonbank.core.constants import DEAD_LETTERS_KEY, STEP_TTL
from lessonbank.core.exceptions import ConfigurationError, UnknownRun
from lessonbank.core.models import Lesson, RunSummary, validate_bank
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.learn import credit
from lessonbank.learn import forget as rules
from lessonbank.learn.verdicts import judged_failed
from lessonbank.workers.causal import remeasure
from lessonbank.workers.summaries import json_names

logger = logging.getLogger(__name__)

EVERY_LESSON = 1_000_000
LOCK_WAIT = 60.0


@dataclass
class ForgetReport:
    """What forgetting one run did."""

    bank: str
    run_id: str
    purged: list[str] = field(default_factory=list)  # lessons removed from the store
    updated: list[str] = field(default_factory=list)  # lessons that lost the run's part
    restored: list[str] = field(default_factory=list)  # lessons active again
    summary: bool = False  # its summary was dropped
    records: bool = False  # its step records and hash fields were dropped (``purge``)

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def _credited(client: redis.Redis, run_id: str, kept: RunSummary | None) -> dict[str, dict[str, int]]:
    """What the run's credit gave each lesson it was handed: its credit record, else what its summary implies."""
    record = runs.load_credit(client, run_id)
    if record is not None:
        return {lesson_id: {name: int(flags.get(name, 0)) for name in credit.COUNTS}
                for lesson_id, flags in record.get("lessons", {}).items() if isinstance(flags, Mapping)}
    if kept is None:
        return {}
    return {lesson_id: credit.flags(kept.verdict, lesson_id in kept.applied, lesson_id in kept.altered)
            for lesson_id in kept.given}


def _failed(run: runs.Run, kept: RunSummary | None) -> bool:
    """How the run's verdict counted on the lessons it taught (for lessons whose provenance does not say)."""
    judged = run.judged
    if judged:
        return judged_failed(judged.get("verdict", "unknown"), judged.get("source", "none"))
    return kept is not None and judged_failed(kept.verdict, kept.verdict_source)


def _restore(store: LessonStoreProtocol, bank: str, run_id: str, lessons: list[Lesson], purged: set[str]) -> list[str]:
    restored = []
    for lesson in lessons:
        reason = rules.restore_reason(lesson, run_id, purged)
        if reason is not None:
            store.set_status(bank, [lesson.id], "active", reason=reason, cause="restored", cause_run=run_id)
            restored.append(lesson.id)
    return restored


def forget_run(store: LessonStoreProtocol, client: redis.Redis, bank: str, run_id: str, purge: bool = False, *,
               wait: float = LOCK_WAIT, ttl: int = STEP_TTL) -> ForgetReport:
    """Take out of ``bank`` everything run ``run_id`` taught (see the module); with ``purge``, its records too.

    Raises UnknownRun when nothing of the bank knows the run (or it is another bank's), ServiceUnavailable when a
    worker holds the bank's lock longer than ``wait`` seconds, and the store's and Redis's errors.
    """
    validate_bank(bank)
    if not isinstance(run_id, str) or not run_id.strip():
        raise ConfigurationError("forget_run needs the id of a run")
    run = runs.load_run(client, run_id)
    if run.bank and run.bank != bank:
        raise UnknownRun(f"run {run_id} belongs to bank {run.bank!r}, not {bank!r}")
    report = ForgetReport(bank, run_id)
    with purging.bank_held(client, bank, wait=wait, hold=wait):
        kept = summary.load_summary(client, bank, run_id)
        # forgotten once already: its credit was taken back then (taking back what it taught is idempotent)
        lessons = store.list(bank, limit=EVERY_LESSON, include_inactive=True)
        credited = {} if runs.FORGOTTEN_DONE_FIELD in run.meta else rules.through_merges(
            _credited(client, run_id, kept), lessons)
        fates = {lesson.id: rules.fate(lesson, run_id, credited.get(lesson.id)) for lesson in lessons}
        if not run.meta and kept is None and all(fate == "keep" for fate in fates.values()):
            raise UnknownRun(f"no run {run_id} in bank {bank!r}: not in Redis, not in its reports, behind no lesson")
        runs.mark_forgotten(client, bank, run_id, ttl, drop_records=purge)
        failed = _failed(run, kept)
        report.purged = [lesson_id for lesson_id, fate in fates.items() if fate == "purge"]
        updated = [rules.without(lesson, run_id, credited.get(lesson.id), failed) for lesson in lessons
                   if fates[lesson.id] == "update"]
        report.updated = [lesson.id for lesson in updated]
        store.delete(bank, report.purged)
        store.upsert(updated)
        purged = set(report.purged)
        by_id = {lesson.id: lesson for lesson in [*lessons, *updated] if lesson.id not in purged}
        report.restored = _restore(store, bank, run_id, list(by_id.values()), purged)
        runs.set_fields(client, run_id, {runs.FORGOTTEN_DONE_FIELD: "1"})
        report.summary = summary.remove_summary(client, bank, run_id)
        drawn = kept.drawn if kept is not None else json_names(run.meta.get("drawn")) or []
        remeasure(store, client, bank, [lesson_id for lesson_id in drawn if lesson_id not in purged], run_id)
    if purge:
        client.hdel(DEAD_LETTERS_KEY, run_id)
        report.records = True
    logger.info("bank %s: run %s forgotten: %d lesson(s) purged, %d updated, %d restored%s", bank, run_id,
                len(report.purged), len(report.updated), len(report.restored),
                ", its records purged" if purge else "")
    return report
