"""Credit in the store: the counts a verdict moves, retirement, idempotence (the rules: tests/learn/test_credit.py)."""

from __future__ import annotations

from lessonbank.core.models import RELEASED_BY_USER, Lesson, Recipe
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.learn.credit import IDLE_AFTER, altered, applied, run_atoms
from lessonbank.workers.credit import apply_credit
from tests.learn.runs import view
from tests.learn.test_credit import CENTS, PROSE, SEMI, run_of


def test_credit_moves_only_applied_lessons_and_is_replaced_not_added(store: LessonStore) -> None:
    used, unused = Lesson.new("b", "approach", SEMI), Lesson.new("b", "fact", CENTS)
    store.upsert([used, unused])
    first = apply_credit(store, "b", [used.id, unused.id], {used.id}, "success", None)
    lessons = {lesson.id: lesson for lesson in store.get("b", [used.id, unused.id])}
    assert (lessons[used.id].given, lessons[used.id].applied, lessons[used.id].helpful) == (1, 1, 1)
    assert (lessons[unused.id].given, lessons[unused.id].applied, lessons[unused.id].helpful) == (1, 0, 0)
    again = apply_credit(store, "b", [used.id, unused.id], {used.id}, "success", first.record("success"))
    assert store.get("b", [used.id])[0].helpful == 1 and again.retired == []  # same verdict: nothing moves
    apply_credit(store, "b", [used.id, unused.id], {used.id}, "failure", again.record("success"))
    lesson = store.get("b", [used.id])[0]
    assert (lesson.given, lesson.applied, lesson.helpful, lesson.harmful) == (1, 1, 0, 1)


def test_a_lesson_applied_by_three_failing_runs_is_retired(store: LessonStore) -> None:
    wrong = Lesson.new("b", "fact", "The orders API returns no orders when `list_orders` returns one page.")
    store.upsert([wrong])
    for _ in range(3):
        report = apply_credit(store, "b", [wrong.id], {wrong.id}, "failure", None)
    (stored,) = store.get("b", [wrong.id])
    assert report.retired == [wrong.id] and stored.status == "retired" and stored.harmful == 3
    assert "harmful in 3 of 3 runs" in stored.status_reason


def test_a_lesson_no_run_applies_is_retired_as_idle_unless_a_user_added_it(store: LessonStore) -> None:
    # A 1.5B distiller's plans and wrong diagnoses are handed out but never acted on: after IDLE_AFTER runs
    # they stop taking prompt space. One applied run keeps a lesson; a user's own lessons are never idle.
    idle = Lesson.new("b", "failure", "The agent did not handle errors when reading the file.")
    used = Lesson.new("b", "approach", SEMI)
    added = Lesson.new("b", "fact", CENTS, origin="added")
    released = Lesson.new("b", "fact", PROSE).model_copy(update={"status_reason": RELEASED_BY_USER,
                                                                 "status_cause": "released"})
    store.upsert([idle, used, added, released])
    ids = [idle.id, used.id, added.id, released.id]
    retired: list[str] = []
    for number in range(1, IDLE_AFTER + 1):
        report = apply_credit(store, "b", ids, {used.id} if number == IDLE_AFTER else set(), "success", None)
        retired += report.retired
        if number < IDLE_AFTER:
            assert report.retired == [], f"retired after {number} runs"
    stored = {lesson.id: lesson for lesson in store.get("b", ids)}
    assert retired == [idle.id] and stored[idle.id].status == "retired"
    assert stored[idle.id].status_reason == f"given to {IDLE_AFTER} runs, applied by none"
    assert stored[used.id].status == stored[added.id].status == stored[released.id].status == "active"
    assert stored[added.id].given == stored[released.id].given == IDLE_AFTER and stored[added.id].applied == 0


def test_a_recipe_the_run_altered_is_not_blamed_for_its_failure(store: LessonStore) -> None:
    recipe = Recipe(code="rows = get_invoice(invoice_id='A-1')['lines']\n"
                         "total = sum(r['qty'] * r['unit_price_cents'] for r in rows) / 100\nfinal_answer(total)",
                    params=["A-1"], fingerprint="inv")
    lesson = Lesson.new("b", "approach", "Working code for: invoice total", recipe=recipe)
    faithful = run_atoms(view(run_of(recipe.code.replace("A-1", "B-7"))))
    changed = run_atoms(view(run_of(recipe.code.replace("A-1", "B-7").replace("final_answer(total)",
                                                                        "final_answer(currency_converter(total))"))))
    task = "What is the total of invoice B-7?"
    assert applied(lesson, faithful, task) and not altered(lesson, faithful, task)
    assert applied(lesson, changed, task) and altered(lesson, changed, task)
    store.upsert([lesson])
    apply_credit(store, "b", [lesson.id], {lesson.id}, "failure", None, altered_ids={lesson.id})
    stored = store.get("b", [lesson.id])[0]
    assert (stored.applied, stored.harmful) == (1, 0)


