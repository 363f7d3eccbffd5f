"""Forgetting a run: what each lesson of its bank keeps once the run is gone (``lessonbank.forget`` reads and
writes around these rules).

A user forgets a run that held personal data, or one found poisoned after the fact; nothing it taught may stay:

- a lesson whose evidence rests on that run alone (no other run taught it, no user added it) is purged;
- a lesson with other evidence loses the run's part: one from its evidence (and from ``failed_runs`` if the run
  counted there), the run's provenance entries and source run id, its ``verified`` unless another of its runs
  vouches, and the counts the run's credit gave it (given, applied, helpful, harmful), which a lesson it was
  merged into carries too (``through_merges``);
- a lesson superseded by one that is purged, superseded as contradicted when the forgotten run settled the
  contradiction (its observations decided), or retired as harmful by counts that no longer say so, is active
  again.

Provenance is kept through merges (``lessonbank.learn.consolidate``), so the rules are exact for every lesson
written since, up to its cap: a lesson confirmed by more runs than it lists (``provenance_dropped``), or one of an
earlier version that lists fewer runs than its evidence, keeps the evidence of the runs it does not list, and
nothing else of them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Literal

from lessonbank.core.models import USER_ORIGINS, Lesson
from lessonbank.learn.consolidate import vouched_by_another
from lessonbank.learn.credit import COUNTS, should_retire

Fate = Literal["purge", "update", "keep"]


def taught_by(lesson: Lesson, run_id: str) -> bool:
    """Whether ``run_id`` is among the runs behind ``lesson``."""
    return run_id in lesson.source_run_ids or any(p.run_id == run_id for p in lesson.provenance)


def rests_only_on(lesson: Lesson, run_id: str) -> bool:
    """The run is the lesson's only evidence: no other run behind it, no user's word for it."""
    others = ({p.run_id for p in lesson.provenance} | set(lesson.source_run_ids)) - {run_id}
    return (taught_by(lesson, run_id) and not others and lesson.evidence <= 1
            and lesson.origin not in USER_ORIGINS)


def _failed(lesson: Lesson, run_id: str, judged_failed: bool) -> bool:
    """Whether the run counts in the lesson's ``failed_runs``: as its provenance says, else as its verdict was."""
    known = [p.failed for p in lesson.provenance if p.run_id == run_id and p.failed is not None]
    return any(known) if known else judged_failed


def without(lesson: Lesson, run_id: str, credited: Mapping[str, int] | None = None,
            judged_failed: bool = False) -> Lesson:
    """``lesson`` without what ``run_id`` gave it: its evidence, provenance and failure (``judged_failed``: how
    its verdict counted, for a lesson whose provenance does not say), and ``credited``, the counts the run's
    credit gave it."""
    update: dict[str, object] = {}
    if taught_by(lesson, run_id):
        update = {
            "evidence": max(lesson.evidence - 1, 0),
            "failed_runs": max(lesson.failed_runs - int(_failed(lesson, run_id, judged_failed)), 0),
            "source_run_ids": [r for r in lesson.source_run_ids if r != run_id],
            "provenance": [p for p in lesson.provenance if p.run_id != run_id],
            "verified": vouched_by_another(lesson, run_id),
        }
    for name in COUNTS:
        if credited and credited.get(name):
            update[name] = max(getattr(lesson, name) - int(credited[name]), 0)
    return lesson.model_copy(update=update) if update else lesson


def through_merges(credited: Mapping[str, Mapping[str, int]], lessons: Sequence[Lesson]) -> dict[str, dict[str, int]]:
    """``credited`` (lesson id -> the counts the run's credit gave it) with those counts also on every lesson each
    was merged into: a merged lesson starts from the counts of the one it replaces."""
    by_id = {lesson.id: lesson for lesson in lessons}
    found = {lesson_id: dict(counts) for lesson_id, counts in credited.items()}
    for lesson_id, counts in credited.items():
        seen, current = {lesson_id}, by_id.get(lesson_id)
        while (current is not None and current.status == "superseded" and current.status_cause == "merged"
               and current.superseded_by and current.superseded_by not in seen):
            seen.add(current.superseded_by)
            found.setdefault(current.superseded_by, dict(counts))
            current = by_id.get(current.superseded_by)
    return found


def fate(lesson: Lesson, run_id: str, credited: Mapping[str, int] | None) -> Fate:
    """What forgetting ``run_id`` does to ``lesson``: purge it, update it, or nothing."""
    if rests_only_on(lesson, run_id):
        return "purge"
    return "update" if taught_by(lesson, run_id) or any((credited or {}).values()) else "keep"


def restore_reason(lesson: Lesson, run_id: str, purged: Collection[str]) -> str | None:
    """Why ``lesson`` (as it is once the run is forgotten) is active again, or None: what superseded it is
    purged, the forgotten run settled the contradiction that superseded it, or the counts that retired it as
    harmful no longer say so."""
    if lesson.status == "superseded" and lesson.superseded_by in purged:
        return f"what superseded it rested on the forgotten run {run_id} alone"
    if lesson.status == "superseded" and lesson.status_cause == "contradicted" and lesson.status_run == run_id:
        return f"the forgotten run {run_id} settled the contradiction that superseded it"
    if lesson.status == "retired" and lesson.status_cause == "harmful" and not should_retire(lesson):
        return f"without the forgotten run {run_id} its counts no longer show it harmful"
    return None
