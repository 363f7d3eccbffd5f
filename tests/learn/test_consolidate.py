"""Consolidation decisions on lessons built in the test (no store: the worker's side is
tests/workers/test_consolidate.py), and the verdict rules."""

from __future__ import annotations

from lessonbank.core.models import Lesson, Provenance, Recipe, StepRecord, recipe_id
from lessonbank.learn import consolidate as decisions
from lessonbank.learn import provenance, render, trust, verdicts
from lessonbank.learn.consolidate import Observed, Thresholds
from lessonbank.learn.decide import Decision
from lessonbank.learn.distill import DraftLesson
from lessonbank.learn.fixtext import payload
from tests.learn.runs import view
from tests.learn.test_fixes import date_run, step

THRESHOLDS = Thresholds(duplicate=0.9, related=0.6)
SEMI = "The sales.csv file is semicolon-delimited; read it with pandas.read_csv(path, sep=';')."


def lesson(text: str = SEMI, **fields: object) -> Lesson:
    return Lesson.new("b", "fact", text, run_id="r0").model_copy(update=fields)


def draft(text: str = SEMI, steps: list[int] | None = None) -> DraftLesson:
    return DraftLesson(kind="fact", text=text, steps=steps or [])


def test_a_draft_reinforces_its_own_text_or_a_duplicate_waits_for_related_ones_or_is_added() -> None:
    same, other = lesson(), lesson("The region column is lower case.")
    assert decisions.place(same, same, [], [], THRESHOLDS) == ("reinforce", same)
    assert decisions.place(None, None, [(other, 0.95)], [], THRESHOLDS) == ("reinforce", other)
    assert decisions.place(None, None, [(other, 0.7)], [other], THRESHOLDS) == ("related", None)
    assert decisions.place(None, None, [(other, 0.3)], [], THRESHOLDS) == ("add", None)
    forgotten = lesson(status="forgotten")
    assert decisions.place(None, forgotten, [(other, 0.95)], [], THRESHOLDS) == ("held_back", None)


def test_recipes_observed_facts_and_the_runs_own_lessons_are_never_neighbours_to_merge() -> None:
    fix = lesson("a fix", origin="observed")
    own = lesson("a lesson of this run", source_run_ids=["r1"])
    other = lesson("another run's lesson", source_run_ids=["r2"])
    neighbours, close = decisions.neighbours_of([(fix, 0.99), (own, 0.8), (other, 0.8)], "r1", THRESHOLDS)
    assert [found for found, _ in neighbours] == [own, other] and close == [other]


def test_a_run_does_not_reinforce_what_it_was_given_or_twice() -> None:
    known = lesson(source_run_ids=["r1"])
    assert decisions.reinforcement(known, "r2", {known.id}) == "echo"
    assert decisions.reinforcement(known, "r1", set()) == "skip"
    assert decisions.reinforcement(known, "r2", set()) == "reinforce"
    grown = decisions.reinforced(known, "r2", ["csv"], 1.0, [3], verified=True, failed=True)
    assert (grown.evidence, grown.source_run_ids, grown.failed_runs, grown.verified) == (2, ["r1", "r2"], 1, True)


def test_the_decision_call_is_read_defensively_and_a_contradiction_is_settled_by_evidence() -> None:
    existing = [lesson()]
    drafts = [draft(f"draft lesson number {n}") for n in range(4)]
    said = [Decision(new=1, action="merge", existing=1, text="merged"), Decision(new=2, action="replace", existing=9),
            Decision(new=3, action="skip")]
    assert decisions.resolve(said, drafts, existing) == [
        ("merge", existing[0], "merged"), ("add", None, ""), ("skip", None, ""), ("add", None, "")]
    target = existing[0]
    assert decisions.replaces(target, draft(steps=[2]), verified=False, given=set())
    assert not decisions.replaces(target, draft(), verified=False, given=set())  # rests on nothing
    assert not decisions.replaces(target.model_copy(update={"helpful": 2}), draft(steps=[2]), True, set())
    assert decisions.merge(target, "merged text", "r9", set(), "b", secret=False) == "merge"
    assert decisions.merge(target, "merged text", "r9", set(), "b", secret=True) == "reinforce"
    assert decisions.merge(target, "", "r9", {target.id}, "b", secret=False) == "echo"


def test_what_was_taken_out_stays_out() -> None:
    assert decisions.kept_out(lesson(status="retired")) and decisions.kept_out(lesson(status="forgotten"))
    assert decisions.kept_out(lesson(status="superseded", status_cause="contradicted"))
    assert not decisions.kept_out(lesson(status="superseded", status_cause="merged"))
    merged_into = lesson("the merged one")
    merged = lesson(status="superseded", status_cause="merged", superseded_by=merged_into.id)
    assert decisions.follow(merged, {merged_into.id: merged_into}.get) == merged_into
    assert decisions.follow(lesson(status="superseded", status_cause="contradicted", superseded_by=merged_into.id),
                            {merged_into.id: merged_into}.get) is None


def test_an_observed_fix_is_a_lesson_by_fingerprint_and_an_ask_seen_to_work_takes_the_new_text() -> None:
    asked = payload('w = get_weather(city="Lyon", date="2024-08-02")', "ValueError",
                    'w = get_weather(city="Lyon", date="02.08.2024")').model_copy(update={"tried": False})
    seen = asked.model_copy(update={"tried": True})
    stored = decisions.observed_lesson("b", Observed("fix", "f" * 32, (0,), fix=asked, task="Lyon?"), "r1", False)
    assert stored.id == recipe_id("b", "f" * 32, kind="fix") and stored.text == render.fix(asked)
    assert stored.fix == asked and stored.task == "Lyon?" and stored.origin == "observed"
    works = Observed("fix", "f" * 32, (2,), fix=seen, task="Graz?")
    assert decisions.observed_update(stored, works) == "now_tried"
    assert decisions.updated(stored, works, "now_tried").text == render.fix(seen)
    tried = decisions.updated(stored, works, "now_tried")
    assert decisions.observed_update(tried, Observed("fix", "f" * 32, (0,), fix=asked)) == "adds_nothing"
    assert decisions.observed_update(None, works) == "none"


def test_a_new_recipe_outdates_older_ones_that_failed() -> None:
    recipe = Recipe(code="final_answer(1)", task="count", fingerprint="new")
    new = decisions.recipe_lesson("b", recipe, "r2", [0])
    assert new.text == "Working code for a task like: count" and new.verified and new.id == recipe_id("b", "new")
    failed = new.model_copy(update={"id": "old", "harmful": 2})
    helped = new.model_copy(update={"id": "helped", "helpful": 2, "harmful": 1})
    assert decisions.outdated_recipes([(failed, 0.85), (helped, 0.9), (new, 1.0)], new.id, THRESHOLDS) == [failed]


def test_the_verdict_rules() -> None:
    answered = [*date_run("Lyon", "2024-01-02", "02.01.2024"),
                StepRecord(id="r:2", bank="b", run_id="r", kind="final", seq=2, action_output="15.0", is_final=True)]
    ended = view(answered, outcome="success")
    assert verdicts.signals(ended) == "success" and verdicts.judge(("unknown", "none"), ended) == ("success", "signals")
    unanswered = view(date_run("Lyon", "2024-01-02", "02.01.2024"), outcome="success")  # no answer: no success
    assert verdicts.signals(unanswered) == "success" and verdicts.judge(("unknown", "none"), unanswered) == (
        "failure", "signals")
    assert verdicts.judge(("failure", "user"), ended) == ("failure", "user")  # the user first
    last_failed = view([step(0, "x = f()", failed_at="x = f()", error="E: x")], outcome="success")
    assert verdicts.signals(last_failed) == "failure"
    assert verdicts.signals(view([], outcome="unknown")) == "unknown"
    assert verdicts.vouches("success", "success", "check") and not verdicts.vouches("max_steps", "success", "check")
    assert not verdicts.vouches("success", "success", "llm")
    assert verdicts.judged_failed("failure", "signals") and not verdicts.judged_failed("failure", "llm")


def test_a_lesson_confirmed_by_many_runs_lists_a_capped_provenance_and_counts_every_run() -> None:
    """Past ``MAX_PROVENANCE`` runs the lesson lists its first run, the latest that vouched, the latest witnesses
    of each answer and the latest runs; it counts the others, and its evidence, failures, credit and trust are
    what they would be uncapped."""
    cap = provenance.MAX_PROVENANCE
    lesson = Lesson.new("b", "fact", "`get_sales` pages hold 50 rows.", run_id="r0").model_copy(
        update={"given": 7, "applied": 5, "helpful": 4, "harmful": 1})
    for n in range(1, cap + 50):
        lesson = decisions.reinforced(lesson, f"r{n}", [], float(n), [n], verified=n == 3, failed=n % 10 == 0)
        if n in (5, 6):  # two runs that agreed, long before the latest
            witness = {"witness": True, "question": "q", "answer": "a"}
            lesson.provenance = [p.model_copy(update=witness) if p.run_id == f"r{n}" else p for p in lesson.provenance]
    assert len(lesson.provenance) == cap and lesson.provenance_dropped == 50
    assert len(lesson.provenance) + lesson.provenance_dropped == cap + 50 == lesson.evidence
    assert [p.run_id for p in lesson.provenance][:4] == ["r0", "r3", "r5", "r6"]
    assert lesson.provenance[-1].run_id == f"r{cap + 49}" and lesson.source_run_ids == [p.run_id for p in
                                                                                        lesson.provenance]
    assert lesson.failed_runs == (cap + 49) // 10 and lesson.verified
    assert (lesson.given, lesson.applied, lesson.helpful, lesson.harmful) == (7, 5, 4, 1)
    assert trust.agreeing_runs(lesson) == 3 and any(p.vouched for p in lesson.provenance)
    assert Lesson.from_json(lesson.to_json()) == lesson
    assert decisions.capped(lesson.model_copy(update={"provenance": [Provenance(run_id="x")]})).provenance_dropped == 50
