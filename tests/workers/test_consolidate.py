"""Consolidation against a real Qdrant collection (qdrant-client in-memory) and the real MiniLM model."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator

import openai
import pytest
from qdrant_client import QdrantClient

from lessonbank.core.models import Lesson, Recipe, StepRecord, ToolResultRecord, lesson_id, recipe_id
from lessonbank.core.redact import Redactor
from lessonbank.core.specimen import specimen
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.learn import fixes, fixtext, render, shapes
from lessonbank.learn.consolidate import CONTRADICTED, Observed
from lessonbank.learn.decide import Decision
from lessonbank.learn.distill import DraftLesson
from lessonbank.workers.asking import llm_decider
from lessonbank.workers.consolidate import Consolidator, Thresholds
from lessonbank.workers.llm import ChatLLM
from tests.fixtures.openai_server import FakeOpenAI, Reply
from tests.learn.runs import view
from tests.learn.test_fixes import date_run

SEMI = "The sales.csv file is semicolon-delimited; read it with pandas.read_csv(path, sep=';')."
SEMI_REWORDED = "Read sales.csv with pandas.read_csv(path, sep=';') because its fields are separated by semicolons."
SEMI_RELATED = "The delimiter in sales.csv is a semicolon: load it using pd.read_csv(path, sep=';')."
KELVIN = "The weather API returns temperatures in Kelvin; subtract 273.15 before reporting Celsius."


@pytest.fixture
def store(embedder) -> Iterator[LessonStore]:  # type: ignore[no-untyped-def]
    s = LessonStore(QdrantClient(":memory:"), embedder, collection=f"c{uuid.uuid4().hex[:6]}")
    s.ensure_collection()
    yield s
    s.close()


LYON = "What was the highest temperature in Lyon on 2024-08-02?"


def draft(text: str, kind: str = "fact") -> DraftLesson:
    return DraftLesson(kind=kind, text=text, tags=["csv"])  # type: ignore[arg-type]


def run(store: LessonStore, run_id: str, *texts: str, decide=None, bank: str = "b"):  # type: ignore[no-untyped-def]
    return Consolidator(store, bank, run_id, Thresholds(0.9, 0.6), decide=decide).run([draft(t) for t in texts])


def test_new_lessons_are_added_with_their_run(store: LessonStore) -> None:
    stats = run(store, "r1", SEMI, KELVIN)
    assert stats.added == 2
    lessons = store.list("b")
    assert sorted(lesson.text for lesson in lessons) == sorted([SEMI, KELVIN])
    assert all(lesson.source_run_ids == ["r1"] and lesson.evidence == 1 for lesson in lessons)
    assert {lesson.id for lesson in lessons} == {lesson_id("b", SEMI), lesson_id("b", KELVIN)}


def test_same_run_twice_changes_nothing(store: LessonStore) -> None:
    run(store, "r1", SEMI, KELVIN)
    before = {lesson.id: lesson.model_dump() for lesson in store.list("b")}
    stats = run(store, "r1", SEMI, KELVIN)
    assert stats.added == stats.reinforced == 0 and stats.skipped == 2
    assert {lesson.id: lesson.model_dump() for lesson in store.list("b")} == before


@pytest.mark.parametrize("status", ["forgotten", "retired"])
def test_a_forgotten_or_retired_lesson_is_not_revived_by_a_run_writing_it_again(
    store: LessonStore, status: str
) -> None:
    # The control runs of the demo distil the same wrong diagnosis again and again: a user's forget and the
    # outcomes' retirement must hold, not be overwritten by a fresh active copy with its counts reset.
    run(store, "r1", SEMI)
    held = lesson_id("b", SEMI)
    store.set_status("b", [held], status, reason="given to 8 runs, applied by none")
    stats = run(store, "r2", SEMI, KELVIN)
    [lesson] = store.get("b", [held])
    assert (lesson.status, lesson.source_run_ids) == (status, ["r1"])
    assert (stats.added, stats.skipped) == (1, 1) and held not in stats.lesson_ids


@pytest.mark.parametrize("status", ["forgotten", "retired"])
def test_a_rewording_of_a_forgotten_or_retired_lesson_is_not_learnt_again(store: LessonStore, status: str) -> None:
    # The 1.5B distiller rewords its diagnoses from run to run: retired noise must not come back as "new".
    run(store, "r1", SEMI)
    held = lesson_id("b", SEMI)
    store.set_status("b", [held], status, reason="given to 8 runs, applied by none")
    stats = run(store, "r2", SEMI_REWORDED, KELVIN)
    assert (stats.added, stats.skipped, stats.reinforced) == (1, 1, 0)
    assert [lesson.text for lesson in store.list("b")] == [KELVIN]
    [lesson] = store.get("b", [held])
    assert (lesson.status, lesson.evidence, lesson.source_run_ids) == (status, 1, ["r1"])


def test_a_run_repeating_a_contradicted_claim_reinforces_neither_claim(store: LessonStore) -> None:
    wrong = "The orders API returned no orders, so the shop has no orders that day."
    right = "The orders API returns orders in pages: follow the 'next' field until it is null."
    run(store, "r1", wrong)
    Consolidator(store, "b", "r2", Thresholds(0.99, 0.1), decide=lambda d, e: replace(1), verified=True).run(
        [draft(right)])
    stats = run(store, "r3", wrong)
    assert (stats.reinforced, stats.added, stats.skipped) == (0, 0, 1)
    old, new = store.get("b", [lesson_id("b", wrong), lesson_id("b", right)])
    assert (old.status, old.source_run_ids) == ("superseded", ["r1"])
    assert (new.status, new.evidence, new.source_run_ids) == ("active", 1, ["r2"])


def test_merged_away_text_still_reinforces_the_lesson_it_was_merged_into(store: LessonStore) -> None:
    run(store, "r1", SEMI)
    merged = "sales.csv uses ';' as separator: pass sep=';' to pandas.read_csv."
    Consolidator(store, "b", "r2", Thresholds(0.99, 0.1),
                 decide=lambda d, e: [Decision(new=1, action="merge", existing=1, text=merged)]).run(
        [draft(SEMI_RELATED)])
    assert store.get("b", [lesson_id("b", SEMI)])[0].superseded_by == lesson_id("b", merged)
    assert run(store, "r3", SEMI).reinforced == 1
    assert store.get("b", [lesson_id("b", merged)])[0].source_run_ids == ["r1", "r2", "r3"]


@pytest.mark.parametrize("status", ["forgotten", "retired", "contradicted"])
def test_a_merge_rewriting_into_a_held_back_text_does_not_revive_it(store: LessonStore, status: str) -> None:
    run(store, "r1", SEMI, KELVIN)
    held = lesson_id("b", KELVIN)
    if status == "contradicted":
        store.set_status("b", [held], "superseded", superseded_by=lesson_id("b", SEMI), reason=f"{CONTRADICTED} r0")
    else:
        store.set_status("b", [held], status)  # type: ignore[arg-type]
    stats = Consolidator(store, "b", "r2", Thresholds(0.99, 0.1),
                         decide=lambda d, e: [Decision(new=1, action="merge", existing=1, text=KELVIN)]).run(
        [draft(SEMI_RELATED)])
    assert stats.merged == 0
    [lesson] = store.get("b", [held])
    assert lesson.status == ("superseded" if status == "contradicted" else status)
    assert lesson.source_run_ids == ["r1"] and store.get("b", [lesson_id("b", SEMI)])[0].status == "active"


def test_a_contradiction_rewording_a_retired_lesson_does_not_replace_anything(store: LessonStore) -> None:
    retired = "The orders API returns all orders at once; there is never a second page to fetch."
    current = "The orders API returns orders in pages: follow the 'next' field until it is null."
    run(store, "r1", retired, current)
    store.set_status("b", [lesson_id("b", retired)], "retired", reason="harmful in 3 runs")
    again = "The orders API returns every order at once, there is never a second page to fetch."
    stats = Consolidator(store, "b", "r2", Thresholds(0.9, 0.1), decide=lambda d, e: replace(1),
                         verified=True).run([draft(again)])
    assert (stats.replaced, stats.added) == (0, 0)
    assert [lesson.text for lesson in store.list("b")] == [current]


def test_near_duplicate_reinforces_instead_of_adding(store: LessonStore) -> None:
    run(store, "r1", SEMI)
    stats = run(store, "r2", SEMI_REWORDED)
    assert stats.reinforced == 1 and stats.added == 0
    [lesson] = store.list("b")
    assert lesson.text == SEMI and lesson.evidence == 2 and lesson.source_run_ids == ["r1", "r2"]
    run(store, "r2", SEMI_REWORDED)  # redelivery of r2
    assert store.list("b")[0].evidence == 2


def test_exact_text_of_another_run_reinforces(store: LessonStore) -> None:
    run(store, "r1", SEMI)
    assert run(store, "r2", SEMI.upper() + "  ").reinforced == 1
    assert store.list("b")[0].evidence == 2


def test_related_lessons_go_to_one_decision_with_small_ids(store: LessonStore) -> None:
    run(store, "r1", SEMI, KELVIN)
    calls: list[tuple[list[str], list[str]]] = []

    def decide(drafts: list[DraftLesson], existing: list[Lesson]) -> list[Decision]:
        calls.append(([d.text for d in drafts], [e.text for e in existing]))
        merged = "sales.csv is semicolon-delimited: use pandas.read_csv(path, sep=';') to load it."
        return [Decision(new=1, action="merge", existing=1, text=merged)]

    stats = run(store, "r2", SEMI_RELATED, decide=decide)
    assert len(calls) == 1 and calls[0] == ([SEMI_RELATED], [SEMI])
    assert stats.merged == 1
    active = {lesson.text: lesson for lesson in store.list("b")}
    merged = active["sales.csv is semicolon-delimited: use pandas.read_csv(path, sep=';') to load it."]
    assert merged.evidence == 2 and merged.source_run_ids == ["r1", "r2"] and SEMI not in active
    [old] = store.get("b", [lesson_id("b", SEMI)])
    assert old.status == "superseded" and old.superseded_by == merged.id  # kept, with a pointer
    # the old text again follows the pointer to the merged lesson
    assert run(store, "r3", SEMI).reinforced == 1
    assert store.get("b", [merged.id])[0].evidence == 3


def test_decision_add_and_skip(store: LessonStore) -> None:
    run(store, "r1", SEMI)

    def add(drafts: list[DraftLesson], existing: list[Lesson]) -> list[Decision]:
        return [Decision(new=1, action="add", existing=None, text="")]

    def skip(drafts: list[DraftLesson], existing: list[Lesson]) -> list[Decision]:
        return [Decision(new=1, action="skip", existing=None, text="")]

    assert run(store, "r2", SEMI_RELATED, decide=skip).skipped == 1
    assert len(store.list("b")) == 1
    assert run(store, "r3", SEMI_RELATED, decide=add).added == 1
    assert len(store.list("b")) == 2


def test_lessons_with_secrets_are_dropped(store: LessonStore) -> None:
    stats = run(store, "r1", "Authenticate with api_key=sk-proj-abcdefghijklmnopqrstuvwxyz123456 on the API.",
                "Log in to the database at postgres://admin:hunter22@db.local:5432/app before querying.", KELVIN)
    assert stats.dropped_secret == 2 and stats.added == 1
    assert [lesson.text for lesson in store.list("b")] == [KELVIN]


def test_banks_stay_apart(store: LessonStore) -> None:
    run(store, "r1", SEMI, bank="a")
    assert run(store, "r2", SEMI, bank="b").added == 1
    assert store.list("a")[0].evidence == 1 and store.list("b")[0].evidence == 1


def test_progress_skips_lessons_already_written(store: LessonStore) -> None:
    seen: list[list[int]] = []
    Consolidator(store, "b", "r1").run([draft(SEMI), draft(KELVIN)], done={0}, on_done=seen.append)
    assert [lesson.text for lesson in store.list("b")] == [KELVIN] and seen == [[1]]


def test_llm_decider_shows_integer_ids_not_uuids(openai_server: FakeOpenAI, store: LessonStore) -> None:
    run(store, "r1", SEMI)
    openai_server.script(Reply(content=json.dumps(
        {"decisions": [{"new": 1, "action": "merge", "existing": 1, "text": ""}]})))
    llm = ChatLLM(openai.OpenAI(base_url=openai_server.url, api_key="k", max_retries=0), "m")
    stats = run(store, "r2", SEMI_RELATED, decide=llm_decider(llm))
    assert stats.reinforced == 1
    user = openai_server.chat_requests()[0]["messages"][1]["content"]
    assert f"1. (fact) {SEMI}" in user and f"1. (fact) {SEMI_RELATED}" in user
    assert lesson_id("b", SEMI) not in user


def test_invalid_decision_adds_the_lesson(openai_server: FakeOpenAI, store: LessonStore) -> None:
    run(store, "r1", SEMI)
    openai_server.script(Reply(content="merge it"), Reply(content="really, merge it"))
    llm = ChatLLM(openai.OpenAI(base_url=openai_server.url, api_key="k", max_retries=0), "m")
    assert run(store, "r2", SEMI_RELATED, decide=llm_decider(llm)).added == 1


def test_settings_patterns_also_drop_lessons(store: LessonStore) -> None:
    from lessonbank.core.redact import Redactor

    scrubber = Redactor(["ACME-[0-9]{6}"])
    stats = Consolidator(store, "b", "r1", scrubber=scrubber).run(
        [draft("Internal builds are tagged ACME-123456 by the release job."), draft(KELVIN)]
    )
    assert stats.dropped_secret == 1 and [lesson.text for lesson in store.list("b")] == [KELVIN]


def test_a_run_given_a_lesson_does_not_reinforce_it(store: LessonStore) -> None:
    run(store, "r1", SEMI)
    (lesson,) = store.list("b")
    echo = Consolidator(store, "b", "r2", Thresholds(0.9, 0.6), given=[lesson.id]).run([draft(SEMI),
                                                                                       draft(SEMI_REWORDED)])
    assert echo.echoes == 2 and echo.reinforced == 0
    assert store.list("b")[0].evidence == 1
    independent = Consolidator(store, "b", "r3", Thresholds(0.9, 0.6)).run([draft(SEMI)])
    assert independent.reinforced == 1 and store.list("b")[0].evidence == 2


def test_reinforcement_keeps_provenance_and_marks_verified(store: LessonStore) -> None:
    Consolidator(store, "b", "r1", Thresholds(0.9, 0.6)).run([draft(SEMI).model_copy(update={"steps": [0, 2]})])
    Consolidator(store, "b", "r2", Thresholds(0.9, 0.6), verified=True).run(
        [draft(SEMI).model_copy(update={"steps": [1]})])
    (lesson,) = store.list("b")
    assert [(p.run_id, p.steps) for p in lesson.provenance] == [("r1", [0, 2]), ("r2", [1])]
    assert lesson.verified and lesson.evidence == 2


def test_runs_judged_failures_are_counted_on_what_they_teach(store: LessonStore) -> None:
    """Two failed runs drawing the same conclusion give it two runs of evidence, both failed: a "what worked"
    lesson they teach is not handed out; a third run not judged a failure makes it eligible."""
    from lessonbank.instructions import eligible

    pack = "Sum the qty column of the stock rows to get the number of units."
    for run_id in ("r1", "r2"):
        Consolidator(store, "b", run_id, Thresholds(0.9, 0.6), failed=True).run([draft(pack, "approach")])
    (lesson,) = store.list("b")
    assert (lesson.evidence, lesson.failed_runs) == (2, 2) and not eligible(lesson)
    assert eligible(lesson.model_copy(update={"kind": "fact"}))  # what a failed run saw is still seen
    Consolidator(store, "b", "r3", Thresholds(0.9, 0.6)).run([draft(pack, "approach")])
    (lesson,) = store.list("b")
    assert (lesson.evidence, lesson.failed_runs) == (3, 2) and not eligible(lesson)
    Consolidator(store, "b", "r4", Thresholds(0.9, 0.6)).run([draft(pack, "approach")])
    assert eligible(store.list("b")[0])


def replace(number: int) -> list[Decision]:
    return [Decision(new=1, action="replace", existing=number, text="")]


def test_a_contradiction_from_a_run_that_ended_well_supersedes(store: LessonStore) -> None:
    wrong = "The orders API returned no orders, so the shop has no orders that day."
    right = "The orders API returns orders in pages: follow the 'next' field until it is null."
    run(store, "r1", wrong)
    stats = Consolidator(store, "b", "r2", Thresholds(0.99, 0.1), decide=lambda d, e: replace(1),
                         verified=True).run([draft(right)])
    assert stats.replaced == 1
    old = store.get("b", [lesson_id("b", wrong)])[0]
    assert old.status == "superseded" and old.superseded_by == lesson_id("b", right) and "r2" in old.status_reason
    assert [lesson.text for lesson in store.list("b")] == [right]


def test_a_contradiction_from_an_unverified_run_loses_to_helpful_credit(store: LessonStore) -> None:
    good = "The orders API returns orders in pages: follow the 'next' field until it is null."
    run(store, "r1", good)
    store.set_counts("b", {lesson_id("b", good): {"applied": 2, "helpful": 2}})
    stats = Consolidator(store, "b", "r2", Thresholds(0.99, 0.1), decide=lambda d, e: replace(1)).run(
        [draft("The orders API returns all orders at once, there is no second page.")])
    assert stats.replaced == 0 and stats.skipped == 1
    assert [lesson.text for lesson in store.list("b")] == [good]


def recipe(fp: str, code: str = "n = 0\nfinal_answer(n)") -> Recipe:
    return Recipe(code=code, task="Count the orders of 2024-03-05", params=["2024-03-05"],
                  checks=["syntax", "outcome:check"], fingerprint=fp)


def test_the_same_recipe_from_three_runs_is_one_lesson_with_evidence_three(store: LessonStore) -> None:
    for run_id in ("r1", "r2", "r3"):
        Consolidator(store, "b", run_id, Thresholds(0.9, 0.6), verified=True).add_recipe(
            recipe("same"), [0, 1])
    (lesson,) = store.list("b")
    assert lesson.recipe is not None and lesson.origin == "recipe" and lesson.evidence == 3
    assert lesson.source_run_ids == ["r1", "r2", "r3"] and lesson.id == recipe_id("b", "same")


def test_a_new_recipe_supersedes_an_old_one_that_failed(store: LessonStore) -> None:
    old_id = Consolidator(store, "b", "r1", Thresholds(0.9, 0.6)).add_recipe(recipe("old"), [0])
    assert old_id is not None
    store.set_counts("b", {old_id: {"applied": 2, "harmful": 2}})
    new_id = Consolidator(store, "b", "r2", Thresholds(0.9, 0.6)).add_recipe(
        recipe("new", "final_answer(1)").model_copy(update={"task": "Count the orders of 2024-04-01"}), [0])
    old = store.get("b", [old_id])[0]
    assert old.status == "superseded" and old.superseded_by == new_id and "succeeded where" in old.status_reason


def test_the_decision_is_asked_before_the_lock_and_reused_unless_the_bank_changed(store: LessonStore) -> None:
    run(store, "r1", SEMI)
    calls: list[int] = []

    def decide(drafts, existing):  # type: ignore[no-untyped-def]
        calls.append(len(existing))
        return [Decision(new=1, action="skip", existing=None, text="")]

    planned = Consolidator(store, "b", "r2", Thresholds(0.99, 0.5), decide=decide)
    planned.plan([draft(SEMI_RELATED)])
    assert calls == [1]
    stats = planned.run([draft(SEMI_RELATED)])
    assert calls == [1] and stats.skipped == 1  # the planned answer, no second call

    changed = Consolidator(store, "b", "r3", Thresholds(0.99, 0.5), decide=decide)
    changed.plan([draft(SEMI_RELATED)])
    other = "In sales.csv the columns are split by a semicolon, so set sep=';' when loading it with pandas."
    store.upsert([Lesson.new("b", "fact", other)])  # another worker wrote a related lesson meanwhile
    changed.run([draft(SEMI_RELATED)])
    assert calls[:2] == [1, 1] and calls[2:] == [2]  # asked again, with the bank as it is now


FIX_PAYLOAD = fixtext.payload('w = get_weather(city="Graz", date="2024-03-17")', "ValueError",
                              'w = get_weather(city="Graz", date="17.03.2024")')
FIX = render.fix(FIX_PAYLOAD)


def graz(fingerprint: str, *steps: int) -> Observed:
    """The Graz date fix observed by steps ``steps`` of a run, its fingerprint ``fingerprint`` * 32."""
    return Observed("fix", fingerprint * 32, steps, fix=FIX_PAYLOAD)


def fixed(fix: fixes.Fix, task: str = "") -> Observed:
    """An observed fix as the worker hands it to the consolidator."""
    return Observed("fix", fix.fingerprint, fix.steps, fix=fix.payload, task=task)


def shaped(shape: shapes.Shape, task: str = "") -> Observed:
    return Observed(shapes.TAG, shape.fingerprint, shape.steps, shape=shape.payload, task=task)


def test_an_observed_fix_is_kept_by_fingerprint_and_no_sentence_rewrites_it(store: LessonStore) -> None:
    fid = Consolidator(store, "b", "r1", Thresholds(0.9, 0.6)).add_observed(graz("f", 0, 1))
    assert fid == recipe_id("b", "f" * 32, kind="fix")
    assert Consolidator(store, "b", "r1", Thresholds(0.9, 0.6)).add_observed(graz("f", 0, 1)) == fid  # same run
    assert Consolidator(store, "b", "r2", Thresholds(0.9, 0.6)).add_observed(graz("f", 3, 4)) == fid
    (fix,) = store.list("b")
    assert (fix.origin, fix.kind, fix.evidence, fix.source_run_ids) == ("observed", "fact", 2, ["r1", "r2"])

    shown: list[list[str]] = []

    def decide(drafts: list[DraftLesson], existing: list[Lesson]) -> list[Decision]:
        shown.append([lesson.text for lesson in existing])
        return [Decision(new=1, action="merge", existing=1, text="Dates are DD.MM.YYYY.")]

    near = FIX.replace("worked.", "worked fine.")  # a distilled copy, as close as a duplicate
    related = "get_weather wants its date as DD.MM.YYYY, e.g. 17.03.2024, not 2024-03-17."
    stats = Consolidator(store, "b", "r3", Thresholds(0.9, 0.6), decide=decide).run([draft(near), draft(related)])
    assert stats.added == 2 and stats.reinforced == stats.merged == 0
    assert all(FIX not in texts for texts in shown)  # never offered to the LLM as a merge target
    (fix,) = [lesson for lesson in store.list("b") if lesson.id == fid]
    assert (fix.text, fix.evidence, fix.status) == (FIX, 2, "active")


def test_a_retired_observed_fix_is_not_revived_by_a_run_observing_it_again(store: LessonStore) -> None:
    fid = Consolidator(store, "b", "r1", Thresholds(0.9, 0.6)).add_observed(graz("e", 0, 1))
    assert fid is not None
    store.set_status("b", [fid], "retired", reason="harmful in 3 of 3 runs that applied it")
    assert Consolidator(store, "b", "r2", Thresholds(0.9, 0.6)).add_observed(graz("e", 0, 1)) is None
    (fix,) = store.list("b", include_inactive=True)
    assert (fix.status, fix.evidence) == ("retired", 1)


def test_an_asked_fix_seen_to_work_later_says_so_and_an_ask_adds_nothing_to_a_seen_fix(store: LessonStore) -> None:
    # a fix an earlier release wrote from an error alone (not tried), then the same correction observed by a run
    (seen,) = fixes.extract(view(date_run("Lyon", "2024-08-02", "02.08.2024"), LYON), Redactor())
    fix = dataclasses.replace(seen, tried=False)

    def consolidator(run_id: str) -> Consolidator:
        return Consolidator(store, "b", run_id, Thresholds(0.9, 0.6))

    fid = consolidator("r1").add_observed(fixed(fix, task="task of r1"))
    assert fid == recipe_id("b", fix.fingerprint, kind="fix")
    (lesson,) = store.list("b")
    assert lesson.text == fix.text and lesson.fix is not None and not lesson.fix.tried and lesson.task == "task of r1"
    assert consolidator("r2").add_observed(fixed(seen, task="task of r2")) == fid
    (lesson,) = store.list("b")
    assert (lesson.text, lesson.evidence, lesson.source_run_ids) == (seen.text, 2, ["r1", "r2"])
    # the task whose values the upgraded text's lines took (learning benchmark, seed 9: run 2's city in its
    # lines, run 1's task kept, so run 3 was given run 2's city)
    assert lesson.task == "task of r2"
    assert consolidator("r3").add_observed(fixed(fix, task="task of r3")) == fid
    (lesson,) = store.list("b")
    assert (lesson.text, lesson.evidence, lesson.task) == (seen.text, 2, "task of r2")  # an ask again: no evidence
    # a run that was given the asked fix and saw it work: its text is upgraded, its evidence is not (an echo)
    store.upsert([lesson.model_copy(update={"text": fix.text, "fix": fix.payload})])
    given = Consolidator(store, "b", "r4", Thresholds(0.9, 0.6), given=[fid])
    assert given.add_observed(fixed(seen)) == fid
    (lesson,) = store.list("b")
    assert (lesson.text, lesson.evidence) == (seen.text, 2)


def test_a_fix_kept_without_a_task_takes_the_task_of_the_next_run_that_observes_it(store: LessonStore) -> None:
    # a fix stored before fixes kept their run's task: only its date could be carried over to a next task,
    # never its city; the next run observing it gives it its task, with its text (whose lines took that
    # task's values), and is counted as evidence as before; a later run's task does not replace it
    (seen,) = fixes.extract(view(date_run("Lyon", "2024-08-02", "02.08.2024"), LYON), Redactor())
    (other,) = fixes.extract(view(date_run("Graz", "2024-03-17", "17.03.2024"), "Graz on 2024-03-17?"), Redactor())
    assert seen.fingerprint == other.fingerprint and seen.text != other.text
    old = Consolidator(store, "b", "r1", Thresholds(0.9, 0.6)).add_observed(fixed(other))
    assert old is not None and store.get("b", [old])[0].task == ""
    assert Consolidator(store, "b", "r2", Thresholds(0.9, 0.6)).add_observed(fixed(seen, task=LYON)) == old
    (lesson,) = store.list("b")
    assert (lesson.text, lesson.task, lesson.evidence, lesson.source_run_ids) == (seen.text, LYON, 2, ["r1", "r2"])
    Consolidator(store, "b", "r3", Thresholds(0.9, 0.6)).add_observed(fixed(other, task="Graz on 2024-03-17?"))
    (lesson,) = store.list("b")
    assert (lesson.text, lesson.task, lesson.evidence) == (seen.text, LYON, 3)


def test_a_shape_kept_without_its_call_takes_the_call_and_task_of_the_next_run_that_names_it(
        store: LessonStore) -> None:
    catalog = {"status": "ok", "data": {"items": [{"name": "desk lamp", "price": 12.5}], "total": 3}}
    task = "Using search_catalog, how many 'lamp' products cost less than 16 euros?"

    def observed(code: str, run_task: str) -> shapes.Shape:
        record = StepRecord(id="r:0", bank="b", run_id="r", kind="action", seq=0, code=code,
                            tool_results=[ToolResultRecord(name="search_catalog", specimen=specimen(catalog))])
        (shape,) = shapes.extract(view([record], tools=["search_catalog"]), run_task)
        return shape

    bare, named = observed('r = search_catalog("lamp price")', task), observed('r = search_catalog("lamp")', task)
    assert bare.fingerprint == named.fingerprint and not bare.call and named.call
    fid = Consolidator(store, "b", "r1", Thresholds(0.9, 0.6)).add_observed(shaped(bare))
    assert Consolidator(store, "b", "r2", Thresholds(0.9, 0.6)).add_observed(shaped(named, task=task)) == fid
    (lesson,) = store.list("b")
    assert (lesson.text, lesson.task, lesson.evidence) == (named.text, task, 2)
    # a run that names no call adds evidence and keeps the call
    Consolidator(store, "b", "r3", Thresholds(0.9, 0.6)).add_observed(shaped(bare))
    (lesson,) = store.list("b")
    assert (lesson.text, lesson.task, lesson.evidence) == (named.text, task, 3)


def test_a_shapes_flags_count_the_results_of_every_run_that_observed_it_once(store: LessonStore) -> None:
    """``truncated`` true in one run's result and false in another's is one fact saying so; a run counted once."""
    task = "Using list_tickets, how many tickets does project 'apollo' have?"

    def observed(truncated: bool, code: str = "r = list_tickets()") -> shapes.Shape:
        result = {"project": "apollo", "tickets": [{"id": "T-1"}], "truncated": truncated}
        record = StepRecord(id="r:0", bank="b", run_id="r", kind="action", seq=0, code=code,
                            tool_results=[ToolResultRecord(name="list_tickets", specimen=specimen(result))])
        (shape,) = shapes.extract(view([record], tools=["list_tickets"]), task)
        return shape

    first, second = observed(True), observed(False)
    assert first.fingerprint == second.fingerprint and first.text != second.text
    fid = Consolidator(store, "b", "r1", Thresholds(0.9, 0.6)).add_observed(shaped(first))
    assert "'truncated': bool (true in the one result seen)" in store.get("b", [fid])[0].text
    for run_id in ("r2", "r2"):  # the same run's task run again counts it once
        Consolidator(store, "b", run_id, Thresholds(0.9, 0.6)).add_observed(shaped(second))
    (lesson,) = store.list("b")
    assert lesson.evidence == 2 and "'truncated': bool (true in 1 of 2 results seen)" in lesson.text
    assert lesson.shape is not None and lesson.text == render.shape(lesson.shape)
    # a run naming the call that got it gives its call and task, and its count joins the others
    named = observed(True, "r = list_tickets(project='apollo')")
    Consolidator(store, "b", "r3", Thresholds(0.9, 0.6)).add_observed(shaped(named, task=task))
    (lesson,) = store.list("b")
    assert lesson.task == task and lesson.shape is not None and lesson.shape.call == named.call
    assert "'truncated': bool (true in 2 of 3 results seen)" in lesson.text and lesson.evidence == 3
