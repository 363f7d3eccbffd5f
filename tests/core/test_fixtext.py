"""Reading an observed fix back, and carrying a value's corrected form over to a new task's values."""

from __future__ import annotations

import time

import pytest

from lessonbank.core import fixtext
from lessonbank.core.fixtext import task_values
from lessonbank.core.instructions import format_lessons, instantiated
from lessonbank.core.models import Lesson, Recipe

FAILED = 'w = get_weather(city="Lyon", date="2024-01-02")'
FIXED = 'w = get_weather(city="Lyon", date="02.01.2024")'


@pytest.mark.parametrize(("old", "new", "task", "carried"), [
    ("2024-01-02", "02.01.2024", "Highest temperature in Porto on 2024-09-15?", [("2024-09-15", "15.09.2024")]),
    ("2024-01-02", "02.01.2024", "Compare 2024-09-15 with 2023-12-31.",
     [("2024-09-15", "15.09.2024"), ("2023-12-31", "31.12.2023")]),
    ("2024-01-02", "2024/01/02", "Orders on 2024-09-15", [("2024-09-15", "2024/09/15")]),  # separators only
    ("03/17/2024", "2024-03-17", "Sales on 05/06/2024.", [("05/06/2024", "2024-05-06")]),
    ("14:05", "14.05", "Trains after 09:30", [("09:30", "09.30")]),
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
    fix = Lesson.new("b", "fact", fixtext.fix_text(FAILED, "ValueError", FIXED), origin="observed")
    assert fix.text.startswith('Pass `date` like "02.01.2024", not like "2024-01-02": `w = get_weather(')
    text, given = format_lessons([fix], "b", task="What was the highest temperature in Porto on 2024-09-15?")
    assert given == [fix]
    assert '- For this task, write "2024-09-15" as "15.09.2024". Pass `date` like "02.01.2024"' in text
    plain, _ = format_lessons([fix], "b")
    assert "For this task" not in plain
    distilled = Lesson.new("b", "fact", fix.text)  # the same words from the distiller carry nothing over
    assert "For this task" not in format_lessons([distilled], "b", task="On 2024-09-15?")[0]


def test_carrying_over_is_linear_on_hostile_tasks() -> None:
    old = "a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.1"
    started = time.perf_counter()
    fixtext.carry_over(old, "1.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a", "a." * 200_000 + "!")
    fixtext.carry_over("2024-01-02", "02.01.2024", "2024-" * 100_000)
    assert time.perf_counter() - started < 2.0


def test_subject_names_the_function_keyword_and_corrected_form() -> None:
    from lessonbank.core.fixtext import fix_text, subject

    text = fix_text('w = api.get_weather(city="Lyon", date="2024-01-02")', "ValueError",
                    'w = api.get_weather(city="Lyon", date="02.01.2024")')
    assert subject(text) == ("api.get_weather", "date", "9.9.9")
    both = fix_text('w = get_weather(city="lyon", date="2024-01-02")', "ValueError",
                    'w = get_weather(city="Lyon", date="02.01.2024")')
    assert subject(both) is None  # two values changed: no one subject
    assert subject("The weather tool wants dates as DD.MM.YYYY.") is None


def test_task_values_are_the_words_in_the_parameters_places() -> None:
    graz = "Using get_weather, what was the highest temperature in Graz on 2024-03-17? Answer with the number only."
    ghent = graz.replace("Graz", "Ghent").replace("2024-03-17", "2024-12-09")
    assert task_values(graz, ghent, ["Graz", "17.03.2024"]) == {"Graz": "Ghent", "17.03.2024": "09.12.2024"}
    chair = "Using search_catalog, how many 'chair' products cost less than 27 euros? Answer with the number only."
    lamp = chair.replace("chair", "lamp").replace("27", "130")
    assert task_values(chair, lamp, ["chair", "27"]) == {"chair": "lamp", "27": "130"}  # another digit count
    assert task_values("Total of invoice INV-1471?", "Total of invoice INV-2001?", ["INV-1471"]) == {
        "INV-1471": "INV-2001"}
    assert task_values(graz, graz, ["Graz", "17.03.2024"]) == {"Graz": "Graz", "17.03.2024": "17.03.2024"}


def test_task_values_are_none_unless_every_parameter_has_one_value_of_its_form() -> None:
    graz = "What was the highest temperature in Graz on 2024-03-17?"
    cases = {
        "worded otherwise": "On 2024-12-09, what was the highest temperature in Ghent?",
        "a value missing": "What was the highest temperature in Ghent yesterday?",
        "a word for a date": "What was the highest temperature in Ghent on Monday?",
        "a date for a word": "What was the highest temperature in 2024 on 2024-12-09?",
        "nothing alike": "List the open invoices.",
        "empty": "",
    }
    for name, task in cases.items():
        assert task_values(graz, task, ["Graz", "17.03.2024"]) is None, name
    # a parameter found twice in its own task: which place is meant is a guess
    assert task_values("Copy Graz data to Graz-2 from Graz", "Copy Lyon data to Lyon-2 from Rome", ["Graz"]) is None
    assert task_values(graz, graz.replace("Graz", "Ghent"), ["Graz", "a phrase of two words"]) is None


def test_task_values_on_huge_and_hostile_tasks_return_quickly() -> None:
    import time

    started = time.perf_counter()
    for old, new in (("a " * 200_000, "b " * 200_000), ("x-" * 50_000 + "1", "x-" * 50_000 + "2"),
                     ("\x00\ud800 Graz 2024-03-17", "\x00\ud800 Ghent 2024-12-09")):
        task_values(old, new, ["Graz", "17.03.2024"])
    assert time.perf_counter() - started < 2.0


def test_instantiated_replaces_the_parameters_literals_only() -> None:
    code = ("result = search_catalog('chair')\nfiltered = [i for i in result['data']['items'] if i['price'] < 27]\n"
            "print('chair count:', len(filtered), 27.5)\nfinal_answer(len(filtered))")
    recipe = Recipe(code=code, task="t", params=["chair", "27"], fingerprint="f")
    out = instantiated(recipe, {"chair": "lamp", "27": "130"})
    assert out is not None and "search_catalog('lamp')" in out and "i['price'] < 130" in out
    assert "'chair count:'" in out and "27.5" in out  # a string holding the word and another number stay
    assert "i['price'] < 12.5" in (instantiated(recipe, {"27": "12.5"}) or "")
    twice = Recipe(code="top = sorted(rows)[:3]\nfinal_answer(round(top[0], 3))", task="t", params=["3"],
                   fingerprint="j")
    assert instantiated(twice, {"3": "5"}) is None  # which 3 the task gave is a guess
    calls = Recipe(language="tool_calls", code='[{"name": "get_rate", "arguments": {"date": "05/03/2024", "n": 2}}]',
                   task="t", params=["05/03/2024", "2"], fingerprint="g")
    assert instantiated(calls, {"05/03/2024": "06/04/2024", "2": "3"}) == (
        '[{"name": "get_rate", "arguments": {"date": "06/04/2024", "n": 3}}]')
    assert instantiated(Recipe(code="final_answer(", task="t", fingerprint="h"), {"x": "y"}) is None
    assert instantiated(Recipe(language="tool_calls", code="[{", task="t", fingerprint="i"), {"x": "y"}) is None
