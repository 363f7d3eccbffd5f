"""What an observed fix means for another task: its values put in, a value's corrected form carried over to a new
task's values, and how the builder gives it."""

from __future__ import annotations

import time

import pytest

from lessonbank.core.models import FixPayload, Lesson
from lessonbank.instructions import format_lessons
from lessonbank.learn import fixtext, render
from lessonbank.learn.fixtext import payload
from tests.learn.runs import fix_lesson

FAILED = 'w = get_weather(city="Lyon", date="2024-01-02")'
FIXED = 'w = get_weather(city="Lyon", date="02.01.2024")'


@pytest.mark.parametrize(("old", "new", "task", "carried"), [
    ("2024-01-02", "02.01.2024", "Highest temperature in Porto on 2024-09-15?", [("2024-09-15", "15.09.2024")]),
    ("2024-01-02", "02.01.2024", "Compare 2024-09-15 with 2023-12-31.",
     [("2024-09-15", "15.09.2024"), ("2023-12-31", "31.12.2023")]),
    ("2024-01-02", "2024/01/02", "Orders on 2024-09-15", [("2024-09-15", "2024/09/15")]),  # separators only
    ("03/17/2024", "2024-03-17", "Sales on 05/06/2024.", [("05/06/2024", "2024-05-06")]),
    ("14:05", "14.05", "Trains after 09:30", [("09:30", "09.30")]),
    ("2024-01-02", "02.01.2024", "Ghent, 2024-09-22: what was the day's highest temperature?",
     [("2024-09-22", "22.09.2024")]),  # a colon after a value ends it (a reworded task, benchmark seed 5)
    ("14:05", "14.05", "Trains at 09:30:15", []),  # but one that goes on does not: part of a longer value
    ("2024-01-02", "02.01.2024", "Highest temperature in Porto on 15 Sep 2024?", []),  # another form: nothing
    ("2024-01-02", "02.01.2024", "Build 12024-09-151 is out", []),  # part of a longer value
    ("2024-02-02", "02.02.2024", "Weather on 2024-09-15", []),  # ambiguous: which 02 went where
    ("Lyon", "lyon", "Weather in Porto", []),  # not a reordering of parts
    ("2024-01-02", "02.01.2024", "Weather on 2024-01-02", []),  # the very value that failed: the fix says it
])
def test_a_reformatted_value_is_carried_over_to_the_task_values_of_its_old_form(
    old: str, new: str, task: str, carried: list[tuple[str, str]]
) -> None:
    assert fixtext.carry_over(old, new, task) == carried


def test_the_instructions_say_what_a_date_fix_means_for_this_task() -> None:
    fix = fix_lesson(payload(FAILED, "ValueError", FIXED))
    assert fix.text.startswith('Pass `date` like "02.01.2024", not like "2024-01-02": `w = get_weather(')
    text, given = format_lessons([fix], task="What was the highest temperature in Porto on 2024-09-15?")
    assert given == [fix]
    # the fix is shown with the task's own date in place of its example: told 'write "2024-04-20" as
    # "20.04.2024"' next to the fix, a run of the 1.5B model passed the fix's example date (benchmark, seed 6);
    # as the line to write, without the line that failed: given next to a recipe and a shape fact, a 1.5B agent
    # copied the failing line into its first call 11 times in 48, and never in this form (first_call.py --context)
    assert ('- For this task: Write `w = get_weather(city="Lyon", date="15.09.2024")`: pass `date` like '
            '"15.09.2024"; written any other way it failed with ValueError.') in text
    assert "02.01.2024" not in text and "2024-09-15" not in text
    # two dates of that form: which one goes where is the model's to see; the pairs lead the fix as it was
    two, _ = format_lessons([fix], task="Was it warmer in Porto on 2024-09-15 than on 2024-09-16?")
    assert '- For this task, use "15.09.2024" for "2024-09-15", "16.09.2024" for "2024-09-16". Pass' in two
    plain, _ = format_lessons([fix])
    assert "For this task" not in plain
    distilled = Lesson.new("b", "fact", fix.text)  # the same words from the distiller carry nothing over
    assert "For this task" not in format_lessons([distilled], task="On 2024-09-15?")[0]


def test_a_fix_to_write_names_the_line_and_the_form_but_no_failing_value() -> None:
    asked_fix = payload(FAILED, "ValueError", FIXED, form="DD.MM.YYYY", tried=False)
    assert render.to_write(asked_fix) == (
        f'Write `{FIXED}` (as the error asked; not tried yet): pass `date` like "02.01.2024" (DD.MM.YYYY); written '
        'any other way it failed with ValueError.')
    two = payload('w = f(a="1-2", b="x")', "KeyError", 'w = f(a="2.1", b="y")')
    assert render.to_write(two) == (  # the failing line is not shown, so the text does not refer to it
        'Write `w = f(a="2.1", b="y")`; written otherwise, the line failed with KeyError.')
    assert [change.argument for change in two.changed or []] == ["a", "b"]


def in_task(fix: FixPayload, task: str, solved: str = "") -> str | None:
    """``fixtext.in_task``, rendered."""
    placed = fixtext.in_task(fix, task, solved)
    return render.fix(placed) if placed is not None else None


def test_a_fix_is_put_in_a_task_only_for_one_plain_value_of_its_form() -> None:
    fix = payload(FAILED, "ValueError", FIXED)
    assert in_task(fix, "Weather in Porto yesterday?") is None  # nothing of that form
    single = payload("w = get_weather(city='Lyon', date='2024-01-02')", "ValueError",
                     "w = get_weather(city='Lyon', date='02.01.2024')")
    assert in_task(single, "On 2024-09-15?") == render.fix(single).replace("2024-01-02", "2024-09-15").replace(
        "02.01.2024", "15.09.2024")  # single quotes in the lines, double in the lead
    both = payload('w = get_weather(city="lyon", date="2024-01-02")', "ValueError",
                   'w = get_weather(city="Lyon", date="02.01.2024")')
    assert in_task(both, "On 2024-09-15?") is None  # two values changed: which is which is a guess


def test_carrying_over_is_linear_on_hostile_tasks() -> None:
    old = "a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.1"
    started = time.process_time()
    fixtext.carry_over(old, "1.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a", "a." * 200_000 + "!")
    fixtext.carry_over("2024-01-02", "02.01.2024", "2024-" * 100_000)
    assert time.process_time() - started < 2.0


def test_subject_names_the_function_keyword_and_corrected_form() -> None:
    from lessonbank.learn.fixtext import subject

    fix = payload('w = api.get_weather(city="Lyon", date="2024-01-02")', "ValueError",
                  'w = api.get_weather(city="Lyon", date="02.01.2024")')
    assert subject(fix) == ("api.get_weather", "date", "9.9.9")
    both = payload('w = get_weather(city="lyon", date="2024-01-02")', "ValueError",
                   'w = get_weather(city="Lyon", date="02.01.2024")')
    assert subject(both) is None  # two values changed: no one subject
    assert subject(payload("x = f()", "KeyError", "x = g()")) is None  # no value changed


def test_task_values_places_each_value_or_nothing_and_reads_hostile_tasks_quickly() -> None:
    task_values = fixtext.task_values
    solved = "Orders of shop 'north' on 2024-03-05, page size 50?"
    south = "Orders of shop 'south' on 2024-04-01, page size 20?"
    assert task_values(["north", "2024-03-05", "50"], solved, south) == {
        "north": "south", "2024-03-05": "2024-04-01", "50": "20"}
    assert task_values(["05.03.2024"], solved, "Orders of shop 'north' on 2024-04-01, page size 50?") == {
        "05.03.2024": "01.04.2024"}  # the recipe wrote the date its own way: this task's date comes the same way
    for other in ("Orders of shop 'south' on 2024-04-01, page size 20!",  # another word changed
                  "Orders of shop 'south' on 2024-04-01 page size 20?",  # a word fewer
                  "Orders of shop 'south' on 04/01/2024, page size 20?"):  # another form of date
        assert task_values(["north", "2024-03-05", "50"], solved, other) is None, other
    assert task_values(["missing"], solved, solved) is None  # a value the task does not hold
    for hostile in ("a" + "_" * 100_000, ("a" + "_" * 50 + " ") * 2000, "1." * 50_000, "-".join(["ab"] * 30_000)):
        started = time.process_time()
        assert task_values(["ab"], hostile, hostile + "x") is None
        assert time.process_time() - started < 0.5


def test_a_fix_is_put_in_a_task_with_the_other_values_its_run_took_from_its_own_task() -> None:
    fix = payload(FAILED, "ValueError", FIXED)
    text = render.fix(fix)
    solved = "What was the highest temperature in Lyon on 2024-01-02?"
    porto = "What was the highest temperature in Porto on 2024-09-15?"
    assert in_task(fix, porto, solved) == text.replace("2024-01-02", "2024-09-15").replace(
        "02.01.2024", "15.09.2024").replace('"Lyon"', '"Porto"')
    # tasks in other words, a value that cannot be placed, or none given: the date only, the city as it was
    date_only = text.replace("2024-01-02", "2024-09-15").replace("02.01.2024", "15.09.2024")
    assert in_task(fix, "Highest temperature in Porto on 2024-09-15?", solved) == date_only
    assert in_task(fix, "What was the lowest temperature in Porto on 2024-09-15?", solved) == date_only
    assert in_task(fix, "What was the highest temperature in New York on 2024-09-15?", solved) == date_only
    assert in_task(fix, porto) == date_only
    # a value the line did not take from its task stays (the key of a tool, not the city)
    keyed = payload('w = get_weather(city="Lyon", date="2024-01-02", units="metric")', "ValueError",
                    'w = get_weather(city="Lyon", date="02.01.2024", units="metric")')
    placed = in_task(keyed, porto, solved) or ""
    assert '"metric"' in placed and '"Porto"' in placed


INVOICE = "Using get_invoice, what is the total of invoice {} in euros? Answer with the number only."


def with_task_values(fix: FixPayload, task: str, solved: str) -> str | None:
    """``fixtext.with_task_values``, rendered."""
    placed = fixtext.with_task_values(fix, task, solved)
    return render.fix(placed) if placed is not None else None


def test_a_key_fix_is_given_as_the_line_to_write_with_this_tasks_values() -> None:
    key_fix = payload('total = get_invoice(invoice_id="INV-6222")["amount"]', "InterpreterError",
                      'lines = get_invoice(invoice_id="INV-6222")["lines"]')
    text = render.fix(key_fix)
    solved, task = INVOICE.format("INV-6222"), INVOICE.format("INV-6810")
    assert fixtext.in_task(key_fix, task, solved) is None  # no value's form changed
    assert with_task_values(key_fix, task, solved) == text.replace("INV-6222", "INV-6810")
    fix = fix_lesson(key_fix, task=solved)
    block, given = format_lessons([fix], task=task)
    assert given == [fix]
    # given as kept, its failing line was copied next to a recipe holding the corrected one (held-out seed 12)
    assert ('- For this task: Write `lines = get_invoice(invoice_id="INV-6810")["lines"]`; written otherwise, the '
            "line failed with InterpreterError.") in block
    assert '"amount"' not in block and "INV-6222" not in block
    # a task in other words: the invoice cannot be placed, and the fix is given as it was kept
    other, _ = format_lessons([fix], task="Invoice INV-6810: what does it come to in euros?")
    assert f"- {text} (" in other
    assert f"- {text} (" in format_lessons([fix])[0]  # no task: as kept


def test_values_of_a_fix_are_put_in_whatever_the_line_holds_of_its_task() -> None:
    solved = "Using search_catalog, how many 'lamp' products cost less than 16 euros? Answer with the number only."
    task = solved.replace("lamp", "chair").replace("16", "21")
    extra = payload('r = search_catalog(query="lamp", limit=50)', "TypeError", 'r = search_catalog(query="lamp")')
    # the line need not hold every value of its task (the price limit), unlike a recipe's code
    assert with_task_values(extra, task, solved) == render.fix(extra).replace('"lamp"', '"chair"')
    weather = "What was the highest temperature in Lyon on 2024-06-08?"
    keyed = payload("t = get_weather(city='Lyon', date='08.06.2024')['max_temp']", "InterpreterError",
                    "t = get_weather(city='Lyon', date='08.06.2024')['records']")
    # a value the line wrote its own way comes the same way: never the new city with the old date
    assert with_task_values(keyed, "What was the highest temperature in Porto on 2024-09-15?", weather) == (
        render.fix(keyed).replace("Lyon", "Porto").replace("08.06.2024", "15.09.2024"))
    assert with_task_values(keyed, "Highest temperature in Porto on 2024-09-15?", weather) is None
    plain = payload("n = len(r['items'])", "InterpreterError", "n = len(r['data']['items'])")
    assert fixtext.with_task_values(plain, task, solved) is plain  # nothing of its task: as it is
    assert fixtext.with_task_values(extra, task, "") is None  # the task it was observed in is unknown
