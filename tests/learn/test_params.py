"""Parameters of code found by where the task's values flow, and placed in another task by role and form."""

from __future__ import annotations

import ast
import time

import pytest

from lessonbank.learn import params

REGION = "What is the revenue of region North in sales.csv?"


def flows(code: str, task: str) -> list[tuple[str, str]]:
    return [(param.value, param.name) for param in params.flows([ast.parse(code)], task)]


def test_a_value_is_a_parameter_by_where_it_flows_not_by_how_it_looks() -> None:
    passed = 'rows = get_sales(region="North", file="sales.csv")\nfinal_answer(sum(r["revenue"] for r in rows))'
    assert flows(passed, REGION) == [("North", "region"), ("sales.csv", "file")]
    compared = ('rows = read_csv("sales.csv")\n'
                'final_answer(sum(r["revenue"] for r in rows if r["region"] == "North"))')
    assert flows(compared, REGION) == [("sales.csv", "value"), ("North", "region")]
    # the data's own words and keys are not the task's, even when the task holds them
    void = 'final_answer(sum(p["amount"] for p in get_payments("ACC-12") if p["status"] != "void"))'
    assert flows(void, "Total of the void-free payments of ACC-12?") == [("ACC-12", "value")]
    assert flows('final_answer(get_sales(region="South")["revenue"])', REGION) == []  # not from the task
    # a number the code computes with, and a value written another way
    assert flows("final_answer(len([p for p in get_products() if p['price'] > 140]))",
                 "How many products cost more than 140 euros?") == [("140", "value")]
    assert flows('final_answer(get_weather(city="Graz", date="17.03.2024"))', "Graz on 2024-03-17?") == [
        ("Graz", "city"), ("17.03.2024", "date")]


@pytest.mark.parametrize(("task", "placed"), [
    ("What is the revenue of region South in sales.csv?", {"North": "South", "sales.csv": "sales.csv"}),
    ("Revenue of region West, from sales.csv, please.", {"North": "West", "sales.csv": "sales.csv"}),
    ("What is the revenue of region New York in sales.csv?", {"sales.csv": "sales.csv"}),  # not "New" alone
    ("How much did the north-east sell?", {}),
    ("Revenue for the South region, file sales.csv?", {"North": "South", "sales.csv": "sales.csv"}),  # other side
])
def test_a_parameter_is_placed_by_the_word_before_it_and_its_form_or_left_out(task: str,
                                                                              placed: dict[str, str]) -> None:
    found = params.flows([ast.parse('get_sales(region="North", file="sales.csv")')], REGION)
    assert params.place(found, REGION, task) == placed


def test_ids_of_one_form_are_placed_in_order_and_a_rewritten_value_is_written_the_same_way() -> None:
    solved = "Transfers from ACC-1234 to ACC-9142 on 2024-03-17?"
    code = 'final_answer(transfers(src="ACC-1234", dst="ACC-9142", day="17.03.2024"))'
    found = params.flows([ast.parse(code)], solved)
    placed = params.place(found, solved, "On 2024-09-15, what went from ACC-5571 to ACC-7083?")
    assert placed == {"ACC-1234": "ACC-5571", "ACC-9142": "ACC-7083", "17.03.2024": "15.09.2024"}
    lines, values, names = params.for_task(['t = transfers(src="ACC-1234", dst="ACC-9142")'], solved,
                                           "Transfers from ACC-5571?") or ([], {}, {})
    assert lines == ["t = transfers(src=<src>, dst=<dst>)"] and values == {} and set(names) == {"ACC-1234", "ACC-9142"}


def test_hostile_tasks_are_read_in_bounded_time() -> None:
    found = params.flows([ast.parse('get_sales(region="North", file="sales.csv")')], REGION)
    started = time.process_time()
    for hostile in ("region " * 50_000, "a" * 200_000, "North " * 40_000, "-".join(["ab"] * 50_000)):
        params.place(found, REGION, hostile)
        params.flows([ast.parse('get_sales(region="North")')], hostile)
    assert time.process_time() - started < 5.0


def test_a_date_whose_day_and_month_its_form_does_not_tell_apart_is_left_to_adapt() -> None:
    solved = "Weather in Graz on 17/03/2024?"
    code = 'final_answer(get_weather(city="Graz", date="2024-03-17"))'
    found = params.flows([ast.parse(code)], solved)
    assert params.place(found, solved, "Weather in Lyon on 25/08/2024?") == {"Graz": "Lyon", "2024-03-17": "2024-08-25"}
    assert params.place(found, solved, "Weather in Lyon on 05/08/2024?") == {"Graz": "Lyon"}  # 5 August or 8 May?
    lines, _, names = params.for_task(['w = get_weather(city="Graz", date="2024-03-17")'], solved,
                                      "Weather in Lyon on 05/08/2024?") or ([], {}, {})
    assert lines == ['w = get_weather(city="Lyon", date=<date>)'] and set(names) == {"2024-03-17"}
    # the task's own value, passed as it is, needs no order; a year-first date says which is which
    same = params.flows([ast.parse('get_weather(city="Graz", date="17/03/2024")')], solved)
    assert params.place(same, solved, "Weather in Lyon on 05/08/2024?")["17/03/2024"] == "05/08/2024"
    iso = "Weather in Graz on 2024-03-17?"
    found = params.flows([ast.parse('get_weather(city="Graz", date="17.03.2024")')], iso)
    assert params.place(found, iso, "Weather in Lyon on 2024-05-08?")["17.03.2024"] == "08.05.2024"
    assert params.unsure_date("05.08.2024") and params.unsure_date("5/8/24") and not params.unsure_date("25.08.2024")
    assert not params.unsure_date("2024-05-08") and not params.unsure_date("00.08.2024")


def test_a_recipe_with_such_a_date_is_an_example_to_adapt() -> None:
    from lessonbank.core.models import Recipe
    from lessonbank.learn import adapt

    recipe = Recipe(code='final_answer(get_weather(city="Graz", date="2024-03-17")["max_c"])', language="python",
                    task="Highest temperature in Graz on 17/03/2024?", fingerprint="f")
    example = adapt.recipe_example(recipe, "Highest temperature in Lyon on 05/08/2024?")
    assert example is not None and not example.placed and "2024-03-17" not in example.code
    assert 'final_answer(solve(city="Lyon", date=<date>))' in example.code
    placed = adapt.recipe_example(recipe, "Highest temperature in Lyon on 25/08/2024?")
    assert placed is not None and placed.placed and "'2024-08-25'" in placed.code
