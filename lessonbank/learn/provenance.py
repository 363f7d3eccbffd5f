"""A lesson's provenance, capped: a lesson confirmed by thousands of runs keeps a bounded payload.

``capped`` keeps what trust reads and the run that first taught the lesson, and counts the rest in
``provenance_dropped``; evidence, failures and credit are counts of their own and do not change. Forgetting a run
the lesson no longer lists takes nothing back from it but that run's unit of evidence, which is not found.
"""

from __future__ import annotations

from lessonbank.core.models import Lesson, Provenance
from lessonbank.learn.trust import MIN_WITNESSES

MAX_PROVENANCE = 100  # entries a lesson lists (``capped``)


def _kept_entries(entries: list[Provenance]) -> set[int]:
    """The indexes of the provenance entries ``capped`` keeps (see there)."""
    keep = {0, len(entries) - 1}  # the latest: the run being added, not attested yet
    keep.update([index for index, entry in enumerate(entries) if entry.vouched][-1:])
    witnesses: dict[tuple[str, str], list[int]] = {}
    for index, entry in enumerate(entries):
        if entry.witness:
            witnesses.setdefault((entry.question, entry.answer), []).append(index)
    room = min(MAX_PROVENANCE // 2, MAX_PROVENANCE - len(keep))
    keep.update(sorted(index for indexes in witnesses.values() for index in indexes[-MIN_WITNESSES:])[-room:]
                if room > 0 else ())
    for index in range(len(entries) - 1, 0, -1):
        if len(keep) >= MAX_PROVENANCE:
            break
        keep.add(index)
    return keep


def capped(lesson: Lesson) -> Lesson:
    """``lesson`` listing at most ``MAX_PROVENANCE`` provenance entries: the run that first taught it, what trust
    reads (the latest entry that vouches, the latest witnesses of each answer to each question) and the latest
    others. The rest are counted in ``provenance_dropped`` and their run ids leave ``source_run_ids``; evidence,
    failures and credit, counts of their own, do not change."""
    entries = lesson.provenance
    if len(entries) <= MAX_PROVENANCE:
        return lesson
    keep = _kept_entries(entries)
    kept = [entry for index, entry in enumerate(entries) if index in keep]
    listed = {entry.run_id for entry in kept}
    gone = {entry.run_id for index, entry in enumerate(entries) if index not in keep} - listed
    return lesson.model_copy(update={
        "provenance": kept, "source_run_ids": [run for run in lesson.source_run_ids if run not in gone],
        "provenance_dropped": lesson.provenance_dropped + len(entries) - len(kept)})
