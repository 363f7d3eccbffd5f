"""Forgetting a run (``lessonbank.learn.forget``), and the provenance consolidation keeps through merges for it."""

from __future__ import annotations

from lessonbank.core.models import Lesson
from lessonbank.learn import forget
from lessonbank.learn.consolidate import merged, new_lesson, reinforced
from lessonbank.learn.distill import DraftLesson
from lessonbank.learn.provenance import MAX_PROVENANCE

BANK = "b"


def taught(text: str, *run_ids: str, failed: tuple[str, ...] = ()) -> Lesson:
    draft = DraftLesson(kind="fact", text=text)
    lesson = new_lesson(BANK, draft, run_ids[0], "distilled", verified=True, failed=run_ids[0] in failed, now=0.0)
    for run_id in run_ids[1:]:
        lesson = reinforced(lesson, run_id, [], 0.0, [1], verified=False, failed=run_id in failed)
    return lesson


def test_a_lesson_of_one_run_is_purged_and_one_of_several_loses_that_runs_part() -> None:
    only, shared = taught("Only the first run saw this.", "r1"), taught("Three runs saw this.", "r1", "r2", "r3",
                                                                         failed=("r1",))
    assert forget.fate(only, "r1", None) == "purge" and forget.fate(only, "r2", None) == "keep"
    assert forget.fate(shared, "r1", None) == "update"
    kept = forget.without(shared, "r1", {"given": 1, "applied": 1, "harmful": 1}, judged_failed=False)
    assert kept.evidence == 2 and kept.source_run_ids == ["r2", "r3"] and kept.failed_runs == 0
    assert [p.run_id for p in kept.provenance] == ["r2", "r3"]
    assert not kept.verified  # r1 vouched; r2 and r3 did not
    user = only.model_copy(update={"origin": "added"})
    assert forget.fate(user, "r1", None) == "update"  # a user's word stands without the run


def test_a_lesson_only_given_to_the_run_loses_the_credit_it_gave() -> None:
    lesson = taught("Taught by another run.", "r2").model_copy(update={"given": 3, "applied": 2, "helpful": 2})
    assert forget.fate(lesson, "r1", {"given": 1, "applied": 1, "helpful": 1, "harmful": 0}) == "update"
    kept = forget.without(lesson, "r1", {"given": 1, "applied": 1, "helpful": 1, "harmful": 0})
    assert (kept.given, kept.applied, kept.helpful, kept.evidence) == (2, 1, 1, 1)


def test_a_merged_lesson_carries_the_runs_behind_it_its_first_and_its_latest_past_the_cap() -> None:
    """Forgetting the first run or a recent one finds it; a run past the cap is listed no more (nothing of it stays
    in the lesson), and the lesson's evidence still counts it."""
    lesson = taught("Read the ledger export with encoding='latin-1'.", *(f"r{n}" for n in range(250)))
    draft = DraftLesson(kind="fact", text="The ledger export is latin-1: open it with encoding='latin-1'.")
    merge = merged(lesson, draft, draft.text, BANK, "r250", 0.0, verified=False, failed=False)
    assert merge.evidence == 251 and len(merge.provenance) == MAX_PROVENANCE == len(merge.source_run_ids)
    assert merge.provenance_dropped == 251 - MAX_PROVENANCE
    assert forget.taught_by(merge, "r0") and forget.without(merge, "r0").evidence == 250
    assert forget.taught_by(merge, "r250") and forget.without(merge, "r250").evidence == 250
    assert not forget.taught_by(merge, "r100") and forget.fate(merge, "r100", None) == "keep"


def test_what_a_purged_lesson_superseded_is_active_again() -> None:
    older = taught("An older wording.", "r2").model_copy(update={"status": "superseded", "superseded_by": "x"})
    assert forget.restore_reason(older, "r1", {"x"}) is not None
    assert forget.restore_reason(older, "r1", {"y"}) is None


def test_a_lesson_a_forgotten_run_found_contradicted_is_active_again() -> None:
    """The run's observations decided the contradiction: without the run, nothing says the lesson is wrong."""
    loser = taught("`list_sites` returns no records.", "r2").model_copy(update={
        "status": "superseded", "status_cause": "contradicted", "status_run": "r1", "superseded_by": "x"})
    assert forget.restore_reason(loser, "r1", set()) is not None
    assert forget.restore_reason(loser, "r3", set()) is None  # another run settled it: it stays superseded
    merged_away = loser.model_copy(update={"status_cause": "merged"})
    assert forget.restore_reason(merged_away, "r1", set()) is None  # a merge is about wording, not evidence


def test_the_credit_a_run_gave_a_lesson_is_taken_from_the_lessons_it_was_merged_into_too() -> None:
    first = taught("The first wording.", "r2").model_copy(update={"helpful": 3})
    second = taught("The second wording.", "r3").model_copy(update={"helpful": 3})
    third = taught("The third wording.", "r4").model_copy(update={"helpful": 4})
    first = first.model_copy(update={"status": "superseded", "status_cause": "merged", "superseded_by": second.id})
    second = second.model_copy(update={"status": "superseded", "status_cause": "merged", "superseded_by": third.id})
    other = taught("Replaced, not merged.", "r5").model_copy(update={"status": "superseded",
                                                                     "status_cause": "outdated",
                                                                     "superseded_by": third.id})
    gave = {"given": 1, "applied": 1, "helpful": 1, "harmful": 0}
    credited = forget.through_merges({first.id: gave, other.id: gave}, [first, second, third, other])
    assert credited == {first.id: gave, second.id: gave, third.id: gave, other.id: gave}
    assert forget.without(third, "r1", credited[third.id]).helpful == 3
    assert forget.through_merges({other.id: gave}, [third, other]) == {other.id: gave}  # a replacement starts anew
