"""A stored lesson whose payload is not one (a shape's structure malformed: a store may hold anything), on a real
embedded store: ``lessonbank migrate`` migrates the others and names it, leaving it as it was; the instructions
builder gives the others and leaves it out; and an observed fact of an earlier rule whose current id holds a lesson
it would not join stays where it is, in migrate as in a run's writes."""

from __future__ import annotations

import logging

import pytest

from lessonbank.block import lessons_block
from lessonbank.cli.migrate import migrate_bank
from lessonbank.core.models import Lesson, ShapePayload, recipe_id
from lessonbank.core.settings import Settings
from lessonbank.core.store.base import LessonStoreBase
from lessonbank.instructions import compose_instructions
from lessonbank.learn import consolidate, shapes
from lessonbank.tools import RecallLessonsTool
from tests.workers.test_fingerprints_upgraded import BANK, TOOL, active_shapes, add, observed, stored_earlier

TASK = "Which loans of reader R-7 are late? Use check_loan."


@pytest.fixture
def store(embedded_store: LessonStoreBase) -> LessonStoreBase:
    return embedded_store


def stored_malformed(store: LessonStoreBase) -> Lesson:
    """An observed shape whose stored structure has a field without its value (its text as a shape's)."""
    _, shape = observed("yes", ["ok"])
    fact = consolidate.Observed(shapes.TAG, "f" * 32, (0,), shape=shape.payload)
    lesson = consolidate.observed_lesson(BANK, fact, "r-bad", verified=True)
    broken = lesson.model_copy(update={"shape": ShapePayload(
        tool=TOOL, structure={"fields": [["state"]], "more": False}, records=["loans"])})
    store.upsert([broken])
    return broken


def test_migrate_migrates_every_other_lesson_and_names_the_malformed_one(store: LessonStoreBase) -> None:
    first = stored_earlier(store, "r1", "yes", ["late", "ok"])
    stored_earlier(store, "r2", "no", ["ok"])
    broken = stored_malformed(store)
    counts = migrate_bank(store, BANK)
    assert counts["moved"] == 2 and counts["not_migrated"] == 1
    ((lesson_id, why),) = [(item["id"], item["why"]) for item in counts["not_migrated_lessons"]]
    assert lesson_id == broken.id and "ValueError" in why
    (kept,) = store.get(BANK, [broken.id])
    assert kept.model_dump(mode="json") == broken.model_dump(mode="json")  # left as it was
    (moved,) = [lesson for lesson in active_shapes(store) if lesson.id != broken.id]
    assert moved.evidence == 2 and store.get(BANK, [first.id])[0].superseded_by == moved.id
    again = migrate_bank(store, BANK)
    assert (again["moved"], again["not_migrated"]) == (0, 1)


def test_the_builder_leaves_out_a_malformed_lesson_and_gives_the_others(
        store: LessonStoreBase, settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    good = stored_earlier(store, "r1", "yes", ["late", "ok"])
    broken = stored_malformed(store)
    for kind in ("code", "calls"):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="lessonbank.instructions"):
            block, given = compose_instructions(store, TASK, BANK, tools=[TOOL], min_relevance=0.0,
                                                agent_kind=kind)
        assert [lesson.id for lesson in given] == [good.id], kind
        assert "'state': str ('late' | 'ok')" in block
        assert any(broken.id in record.getMessage() and BANK in record.getMessage() for record in caplog.records)
    given_ids = lessons_block(TASK, BANK, store=store, settings=settings.model_copy(update={"min_relevance": 0.0}))
    assert given_ids.lesson_ids == (good.id,)


def test_an_earlier_fact_whose_current_id_holds_a_superseded_lesson_stays_where_it_is(
        store: LessonStoreBase) -> None:
    """Moving it there would write over the superseded lesson (its record of why): migrate leaves both, as a run's
    writes do."""
    earlier = stored_earlier(store, "r1", "yes", ["late", "ok"])
    _, shape = observed("no", ["ok"])
    now = recipe_id(BANK, shape.fingerprint, kind=shapes.TAG)
    there = earlier.model_copy(update={"id": now, "source_run_ids": ["r0"]})
    store.upsert([there])
    store.set_status(BANK, [now], "superseded", reason="contradicted by run r9", cause="contradicted",
                     superseded_by="another")
    (superseded,) = store.get(BANK, [now])
    assert migrate_bank(store, BANK)["moved"] == 0
    assert store.get(BANK, [now])[0].model_dump(mode="json") == superseded.model_dump(mode="json")
    assert store.get(BANK, [earlier.id])[0].status == "active"
    add(store, "r2", observed("yes", ["late"])[1])  # a run's writes leave them as migrate did
    assert store.get(BANK, [now])[0].source_run_ids == ["r0"]
    assert store.get(BANK, [earlier.id])[0].status == "active"


def test_recall_leaves_out_a_malformed_lesson_and_gives_the_others(
        store: LessonStoreBase, settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    broken = stored_malformed(store)
    recall = RecallLessonsTool(BANK, store=store, settings=settings.model_copy(update={"min_relevance": 0.0}))
    with caplog.at_level(logging.WARNING, logger="lessonbank.tools"):
        assert recall(query="check_loan late loans").startswith("No lessons about")
    assert any(broken.id in record.getMessage() for record in caplog.records)
    stored_earlier(store, "r1", "yes", ["late", "ok"])
    said = recall(query="check_loan late loans")
    assert "1. [facts] `check_loan(...)` returns" in said and "2." not in said


def test_a_run_observing_a_fact_stored_malformed_leaves_it_and_goes_on(
        store: LessonStoreBase, caplog: pytest.LogCaptureFixture) -> None:
    """Its structure has as many fields as the result's, one without its value: the run's values cannot be added to
    it (``walk.merged``); it stays as it was, and the run's other facts are kept."""
    _, shape = observed("no", ["ok"])
    fid = recipe_id(BANK, shape.fingerprint, kind=shapes.TAG)
    structure = {"fields": [["approved"], ["loans", {"items": {"fields": [["state", "str"]], "more": False}}]],
                 "more": False}
    broken = stored_malformed(store).model_copy(update={
        "id": fid, "shape": ShapePayload(tool=TOOL, structure=structure, records=["loans"])})
    store.upsert([broken])
    with caplog.at_level(logging.WARNING, logger="lessonbank.workers.bank_writer"):
        assert add(store, "r2", shape) is None
    (kept,) = store.get(BANK, [fid])
    assert kept.model_dump(mode="json") == broken.model_dump(mode="json")
    assert any(fid in record.getMessage() for record in caplog.records)
