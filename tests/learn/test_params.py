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
    # a capitalised word across a mark ending the sentence or clause is no part of the name
    ("In sales.csv, what is the revenue of region East? Answer in euros.", {"North": "East", "sales.csv": "sales.csv"}),
    ("In sales.csv, the revenue of region East, Madam?", {"North": "East", "sales.csv": "sales.csv"}),
    ("In sales.csv, what is the revenue of region East Anglia? Answer in euros.", {"sales.csv": "sales.csv"}),
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


def placed(code: str, solved: str, task: str) -> dict[str, str]:
    return params.place(params.flows([ast.parse(code)], solved), solved, task)


BOOKS = "How many books by author 'Tolkien' have more than 300 pages?"
BOOKS_CODE = "final_answer(len([b for b in books(author='Tolkien') if b['pages'] > 300]))"


def test_a_number_is_placed_only_by_one_of_the_same_role_never_by_another_number_of_the_task() -> None:
    """A number's form says nothing of its role: another task's number takes its place only when it is of the same
    kind (a bound, a rounding precision, a year, a count) and has the same words around it; else it is named."""
    rounding = "What is the average page count of the books by author 'Tolkien'? Round to 2 decimals."
    assert placed(BOOKS_CODE, BOOKS, rounding) == {"Tolkien": "Tolkien"}  # not 300 -> 2
    assert placed(BOOKS_CODE, BOOKS.replace("300", "2"), rounding) == {"Tolkien": "Tolkien"}  # nor 2 -> 2
    assert placed(BOOKS_CODE, BOOKS, "How many books did author 'Tolkien' publish in 1954?") == {"Tolkien": "Tolkien"}
    year = "How many books did author 'Tolkien' publish in 1954?"
    year_code = "final_answer(len([b for b in books(author='Tolkien') if b['year'] == 1954]))"
    assert placed(year_code, year, BOOKS.replace("Tolkien", "Atwood")) == {"Tolkien": "Atwood"}  # a bound is no year
    assert placed(year_code, year, "How many books did author 'Atwood' publish in 1969?") == {
        "Tolkien": "Atwood", "1954": "1969"}
    # a number of no such role: the three largest are a count, not a bound of the amount
    invoices = "How many invoices of client ACME exceed 500 euros?"
    code = "final_answer(len([i for i in invoices(client='ACME') if i['amount'] > 500]))"
    assert placed(code, invoices, "What are the 3 largest invoices of client ACME?") == {"ACME": "ACME"}
    assert placed(code, invoices, "How many invoices of client ACME are above 750 euros?") == {
        "ACME": "ACME", "500": "750"}  # other words, the same role
    precision = "Average rating of the films of director Varda, rounded to 2 decimals?"
    rated = "final_answer(round(mean(f['rating'] for f in films(director='Varda')), 2))"
    assert placed(rated, precision, "Average rating of the films of director Ozu, rounded to 1 decimal?") == {
        "Varda": "Ozu", "2": "1"}
    assert placed(rated, precision, "How many films of director Ozu are rated above 8?") == {"Varda": "Ozu"}
    assert placed(rated, precision, "Mean rating of director Ozu's films? Give it to 1 decimal place.") == {
        "Varda": "Ozu", "2": "1"}  # a rounding precision is one whatever the words


def test_numbers_of_one_kind_are_placed_by_the_words_around_them_whatever_their_order() -> None:
    hikes = "How many hikes are longer than 12 km and climb more than 800 metres?"
    code = "final_answer(len([h for h in hikes() if h['km'] > 12 and h['climb'] > 800]))"
    assert placed(code, hikes, "How many hikes climb more than 600 metres and are longer than 9 km?") == {
        "12": "9", "800": "600"}
    # a number both tasks hold takes the place of the one whose words it has, not its own value's place
    assert placed(code, hikes, "How many hikes are longer than 800 km and climb more than 12 metres?") == {
        "12": "800", "800": "12"}
    between = "How many parcels weigh between 2 and 5 kg?"
    weighed = "final_answer(len([p for p in parcels() if 2 <= p['kg'] <= 5]))"
    assert placed(weighed, between, "How many parcels weigh between 3 and 7 kg?") == {"2": "3", "5": "7"}  # in order


def test_a_recurring_question_with_other_values_has_every_value_placed() -> None:
    solved = "In 2023, what share of the hikes of region Tyrol were longer than 12 km? Round to 1 decimal."
    code = ("rows = hikes(region='Tyrol', year=2023)\n"
            "final_answer(round(100 * len([h for h in rows if h['km'] > 12]) / len(rows), 1))")
    task = "In 2021, what share of the hikes of region Valais were longer than 8 km? Round to 2 decimals."
    assert placed(code, solved, task) == {"Tyrol": "Valais", "2023": "2021", "12": "8", "1": "2"}
    lines, values, names = params.for_task(code.splitlines(), solved, task) or ([], {}, {})
    assert not names and "round(100 * len([h for h in rows if h['km'] > 8]) / len(rows), 2)" in lines[1]


def test_a_recipe_whose_number_has_no_counterpart_names_it_and_does_not_claim_this_tasks_values() -> None:
    """Both agent kinds: a number of the task in another role is not put in, the block names the parameter and
    does not say the values are this task's."""
    import json

    from lessonbank.core.models import Lesson, Recipe
    from lessonbank.instructions import format_lessons

    solved, task = "How many orders of shop 'north' have more than 10 items?", "Average basket of shop 'south'? " \
        "Round to 2 decimals."
    code = Recipe(code="rows = list_orders(shop='north')\nfinal_answer(len([r for r in rows if r['items'] > 10]))",
                  language="python", task=solved, checks=["syntax"], fingerprint="f")
    calls = Recipe(language="tool_calls", task=solved, checks=["json"], fingerprint="t", code=json.dumps([
        {"name": "list_orders", "arguments": {"shop": "north", "min_items": 10}},
        {"name": "final_answer", "arguments": {}}]))
    read = "```python\nrows = list_orders(shop='south')\nfor r in rows:\n    items = r['items']\n```"
    for recipe, line in ((code, read),
                         (calls, '```text\nlist_orders(shop="south", min_items=<min_items>)\n```')):
        lesson = Lesson.new("b", "approach", "Working code for a task like it").model_copy(
            update={"verified": True, "recipe": recipe, "origin": "recipe"})
        text, _ = format_lessons([lesson], task=task)
        # its count cannot be this task's average: only how it got and read its data, which holds no value to adapt
        assert line in text and "another question" in text
        assert ("this task's values put in" in text) is (recipe is code)
        assert "> 2" not in text and "=2" not in text and "10" not in text and "len(" not in text
