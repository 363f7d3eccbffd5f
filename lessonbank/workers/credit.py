"""Credit the lessons a run was given: the counts move in the store by the rules of ``lessonbank.learn.credit``.

The counts move atomically per run (the caller holds the bank's lock) and idempotently: the credit a run gave
is kept with the run, so a later verdict (a user's feedback after distillation) replaces it by its difference
instead of adding to it. A lesson the rules retire is kept for audit with the reason, no longer given to runs;
one its holdout shows to help (``lessonbank.learn.causal``) is not retired by these correlation-based rules.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.learn import causal
from lessonbank.learn.credit import COUNTS, flags, is_idle, retire_cause, retire_reason, should_retire

logger = logging.getLogger(__name__)


@dataclass
class CreditReport:
    """What one credit pass did."""

    credited: dict[str, dict[str, int]] = field(default_factory=dict)
    retired: list[str] = field(default_factory=list)

    def record(self, verdict: str) -> dict[str, Any]:
        return {"verdict": verdict, "lessons": self.credited, "at": time.time()}


def apply_credit(store: LessonStoreProtocol, bank: str, given: list[str], applied_ids: set[str], verdict: str,
                 previous: dict[str, Any] | None, altered_ids: set[str] | frozenset[str] = frozenset()) -> CreditReport:
    """Move the counts of the run's given lessons to what ``verdict`` implies, minus what an earlier
    credit of the same run already gave (the caller holds the bank's lock)."""
    report = CreditReport()
    before: dict[str, dict[str, int]] = (previous or {}).get("lessons", {}) if previous else {}
    lessons = {lesson.id: lesson for lesson in store.get(bank, list(dict.fromkeys(given)))}
    updates: dict[str, dict[str, int]] = {}
    for lesson_id in dict.fromkeys(given):
        target = flags(verdict, lesson_id in applied_ids, lesson_id in altered_ids)
        report.credited[lesson_id] = target
        lesson = lessons.get(lesson_id)
        old = before.get(lesson_id, {})
        delta = {name: target[name] - int(old.get(name, 0)) for name in COUNTS}
        if lesson is None or not any(delta.values()):
            continue
        counts = {name: max(getattr(lesson, name) + delta[name], 0) for name in COUNTS}
        updates[lesson_id] = counts
        lesson = lesson.model_copy(update=counts)
        if lesson.status == "active" and (should_retire(lesson) or is_idle(lesson)) and not causal.helps(lesson):
            report.retired.append(lesson_id)
    if updates:
        store.set_counts(bank, updates)
    for lesson_id in report.retired:
        counted = lessons[lesson_id].model_copy(update=updates[lesson_id])
        reason = retire_reason(counted)
        store.set_status(bank, [lesson_id], "retired", reason=reason, cause=retire_cause(counted))
        logger.info("bank %s: lesson %s retired: %s", bank, lesson_id, reason)
    return report
