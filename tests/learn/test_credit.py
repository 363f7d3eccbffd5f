"""Credit rules: which given lessons a run applied, which a failed run does not blame, when a lesson retires."""

from __future__ import annotations

import json

import pytest

from lessonbank.core.models import Lesson, Recipe, StepRecord, ToolCallRecord
from lessonbank.learn.credit import Atoms, applied, chance_good, run_atoms, should_retire, unfollowed
from tests.learn.runs import view

TASK = "What is the total of the 'amount' column in /data/sales.csv?"
SEMI = "The sales CSV separates fields with ';': pass delimiter=';' to csv.DictReader."
CENTS = "Amounts are integers in `amount_cents`: divide by 100."
PROSE = "The sales export is small enough to read in one go."


def run_of(code: str) -> list[StepRecord]:
    return [StepRecord(id="r:0", bank="b", run_id="r", kind="action", seq=0, code=code)]


@pytest.mark.parametrize(
    ("text", "code", "expected"),
    [
        (SEMI, "rows = list(csv.DictReader(io.StringIO(t), delimiter=';'))", True),
        (SEMI, 'rows = list(csv.DictReader(io.StringIO(t), delimiter=";"))', True),
        (SEMI, "rows = list(csv.DictReader(io.StringIO(t)))", False),
        (CENTS, "total = sum(o['amount_cents'] for o in rows) / 100", True),
        (CENTS, "total = sum(o['amount'] for o in rows)", False),
        (PROSE, "rows = read_text_file(path='/data/sales.csv')", False),
    ],
)
def test_applied_needs_the_lessons_distinctive_tokens(text: str, code: str, expected: bool) -> None:
    assert applied(Lesson.new("b", "approach", text), run_atoms(view(run_of(code))), TASK) is expected


def test_a_recipe_is_applied_when_most_of_it_is_in_the_run() -> None:
    recipe = Recipe(code="data = list_orders(date='2024-03-05', page=p)\nn += len(data['orders'])\n"
                         "final_answer(n)", params=["2024-03-05"], fingerprint="f")
    lesson = Lesson.new("b", "approach", "Working code for: count orders", recipe=recipe)
    used = "n = 0\nfor p in range(1, 4):\n    data = list_orders(date='2024-04-01', page=p)\n" \
           "    n += len(data['orders'])\nfinal_answer(n)"
    ignored = "final_answer(len(list_orders(date='2024-04-01')))"
    assert applied(lesson, run_atoms(view(run_of(used))), "count the orders of 2024-04-01")
    assert not applied(lesson, run_atoms(view(run_of(ignored))), "count the orders of 2024-04-01")


def test_chance_good_is_the_beta_tail() -> None:
    assert chance_good(0, 0) == pytest.approx(0.5)
    assert chance_good(0, 3) == pytest.approx(1 / 16)
    assert chance_good(3, 0) == pytest.approx(15 / 16)
    assert not should_retire(Lesson.new("b", "fact", "x" * 30).model_copy(update={"harmful": 2}))
    assert should_retire(Lesson.new("b", "fact", "x" * 30).model_copy(update={"harmful": 3}))
    assert not should_retire(Lesson.new("b", "fact", "x" * 30).model_copy(update={"harmful": 3, "helpful": 2}))


def test_a_sentence_ending_in_a_keyword_value_is_still_matched() -> None:
    lesson = Lesson.new("b", "approach", "Every order comes at once when list_orders is called with single_page=True.")
    run = run_atoms(view(run_of("data = list_orders(date='2024-05-01', single_page=True)")))
    assert applied(lesson, run, TASK)


def test_a_loose_value_in_prose_matches_the_keyword_a_quoted_one_does_not() -> None:
    pages = Lesson.new("b", "approach", "Call list_orders with page=1, 2, 3 and add up the 'items'.")
    assert applied(pages, run_atoms(view(run_of("n = sum(len(list_orders(page=p)) for p in (1, 2, 3))"))), TASK)
    semi = Lesson.new("b", "approach", SEMI)
    assert not applied(semi, run_atoms(view(run_of("rows = csv.DictReader(f, delimiter=',')"))), TASK)


INVOICE_RECIPE = Recipe(code="result = get_invoice('INV-1769')\n"
                             "total_cents = sum((line['unit_price_cents'] * line['qty'] for line in result['lines']))\n"
                             "euros_total = total_cents / 100\nfinal_answer(euros_total)", params=["INV-1769"],
                        fingerprint="inv")
WEATHER_RECIPE = Recipe(code="weather_records = get_weather(city='Lyon', date='08.06.2024')\n"
                             "final_answer(weather_records['records'][0]['max_c'])", params=["Lyon", "08.06.2024"],
                        fingerprint="wx")
COPIED_BADLY = [
    (INVOICE_RECIPE, "result = get_invoice('INV-3883')\n"  # the loop over the lines dropped
                     "total_cents = result['lines'][0]['unit_price_cents'] * result['lines'][0]['qty']\n"
                     "euros_total = total_cents / 100\nfinal_answer(euros_total)"),
    (INVOICE_RECIPE, "result = get_invoice('INV-6460')\n"  # one more division before the answer
                     "total_cents = sum((line['unit_price_cents'] * line['qty'] for line in result['lines']))\n"
                     "euros_total = total_cents / 100\nin_euros = euros_total / 100\nfinal_answer(in_euros)"),
    (INVOICE_RECIPE, "result = get_invoice('INV-6460')\n"  # rounded
                     "total_cents = sum((line['unit_price_cents'] * line['qty'] for line in result['lines']))\n"
                     "euros_total = round(total_cents / 100)\nfinal_answer(euros_total)"),
    (WEATHER_RECIPE, "weather_records = get_weather(city='Porto', date='2024-09-06')\n"  # another date format
                     "final_answer(weather_records['records'][0]['max_c'])"),
]
COPIED = [
    (INVOICE_RECIPE, "import json\ninv = get_invoice('INV-3883')\nprint(inv)\n"  # other names and values, prints
                     "cents = sum(l['unit_price_cents'] * l['qty'] for l in inv['lines'])\n"
                     "total = cents / 100\nprint(total)\nfinal_answer(total)"),
    (INVOICE_RECIPE, "for attempt in range(1):\n    result = get_invoice('INV-3883')\n"  # inside a block
                     "    total_cents = sum((line['unit_price_cents'] * line['qty'] for line in result['lines']))\n"
                     "    euros_total = total_cents / 100\n    final_answer(euros_total)"),
    (WEATHER_RECIPE, "w = get_weather(city='Porto', date='06.09.2024')\nfinal_answer(w['records'][0]['max_c'])"),
]
SPLIT = ["result = get_invoice('INV-4356')\nprint(result)",  # one step fetches, the next computes and answers
         "total_cents = sum((line['unit_price_cents'] * line['qty'] for line in result['lines']))\n"
         "euros_total = total_cents / 100\nfinal_answer(euros_total)"]


@pytest.mark.parametrize(("recipe", "code"), COPIED_BADLY)
def test_a_recipe_the_run_did_not_reproduce_is_applied_but_not_blamed(recipe: Recipe, code: str) -> None:
    lesson = Lesson.new("b", "approach", "Working code for: the task", recipe=recipe)
    task = "What is it? Answer with the number only."
    assert applied(lesson, run_atoms(view(run_of(code))), task)
    assert unfollowed(lesson, view(run_of(code)))
    assert unfollowed(lesson, view(run_of("x = 1") + run_of(code)))


@pytest.mark.parametrize(("recipe", "code"), COPIED)
def test_a_recipe_the_run_reproduced_is_blamed(recipe: Recipe, code: str) -> None:
    lesson = Lesson.new("b", "approach", "Working code for: the task", recipe=recipe)
    assert not unfollowed(lesson, view(run_of("this is not python (") + run_of(code)))


def test_a_recipe_reproduced_over_several_steps_is_blamed() -> None:
    lesson = Lesson.new("b", "approach", "Working code for: the task", recipe=INVOICE_RECIPE)
    steps = [StepRecord(id=f"r:{i}", bank="b", run_id="r", kind="action", seq=i, code=code)
             for i, code in enumerate(SPLIT)]
    assert not unfollowed(lesson, view(steps))
    assert unfollowed(lesson, view(steps[::-1]))  # the answer before the invoice is fetched is not the recipe


def test_only_a_python_recipe_is_compared() -> None:
    prose = Lesson.new("b", "approach", "Call get_invoice and sum the lines.")
    calls = Lesson.new("b", "approach", "Tool calls that worked", recipe=Recipe(
        code="get_invoice(invoice_id='A-1')", language="tool_calls", fingerprint="t"))
    assert not unfollowed(prose, view(run_of("x = 1"))) and not unfollowed(calls, view(run_of("x = 1")))


def test_a_tool_calling_run_applies_a_tool_call_recipe_with_its_own_values() -> None:
    calls = [{"name": "get_sales", "arguments": {"region": "North", "file": "sales.csv", "unit": "eur"}},
             {"name": "final_answer", "arguments": {}}]
    recipe = Recipe(language="tool_calls", code=json.dumps(calls), task="Revenue of region North in sales.csv?",
                    params=["North"], checks=["json"], fingerprint="t")
    lesson = Lesson.new("b", "approach", "Working code for a task like: revenue", origin="recipe", recipe=recipe)

    def run(arguments: dict[str, str]) -> Atoms:
        step = StepRecord(id="r:0", bank="b", run_id="r", kind="action", seq=0, observations="[{'revenue': 1}]",
                          tool_calls=[ToolCallRecord(name="get_sales", arguments=json.dumps(arguments))])
        return run_atoms(view([step], "Revenue of region South in sales.csv?", tools=["get_sales"]))

    task = "Revenue of region South in sales.csv?"
    assert applied(lesson, run({"region": "South", "file": "sales.csv", "unit": "eur"}), task)
    assert not applied(lesson, run({"area": "South"}), task)
