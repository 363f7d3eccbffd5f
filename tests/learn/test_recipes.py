"""Recipes: the working code of a verified run, extracted deterministically."""

from __future__ import annotations

import ast
import json

from lessonbank.core.models import Recipe, StepRecord, ToolCallRecord
from lessonbank.core.redact import Redactor
from lessonbank.learn import adapt, fixtext, recipes
from lessonbank.learn.recipes import fingerprint, ignored_values, prune
from lessonbank.learn.render import recipe as recipe_text
from tests.learn.runs import view


def extract(steps: list[StepRecord], task: str, tools: list[str], redactor: Redactor,
            verified_by: str) -> Recipe | None:
    """The recipe of a run of ``steps`` for ``task`` with ``tools`` (``recipes.extract`` on its view)."""
    return recipes.extract(view(steps, task, tools=tools), redactor, verified_by)

TASK = "How many orders were placed on 2024-03-05? Answer with the number only."
ORDERS_TASK = "How many orders are there? Answer with the number only."  # no value the code must hold


def step(seq: int, code: str = "", error: str = "", **fields: object) -> StepRecord:
    error_fields = {"error_type": "AgentExecutionError", "error_message": error} if error else {}
    return StepRecord(id=f"r:{seq}", bank="b", run_id="r", kind="action", seq=seq, code=code,
                      **error_fields, **fields)  # type: ignore[arg-type]


FAILED_TWICE_THEN_LOOP = [
    step(0, "orders = list_orders(date='2024-03-05')\nfinal_answer(len(orders['orders']))",
         error="AssertionError: wrong"),
    step(1, "print(list_orders(date='2024-03-05')['pages'])"),
    step(2, "result = list_orders(date='2024-03-05', page=9)", error="ValueError: page out of range"),
    step(3, "import json\ncount = 0\npage = 1\nwhile True:\n    data = list_orders(date='2024-03-05', page=page)\n"
            "    count += len(data['orders'])\n    if page >= data['pages']:\n        break\n    page += 1\n"
            "print(count)"),
    step(4, "final_answer(count)"),
]


def test_the_recipe_is_the_working_loop_without_the_failed_attempts() -> None:
    recipe = extract(FAILED_TWICE_THEN_LOOP, TASK, ["list_orders"], Redactor(), "check")
    assert recipe is not None and recipe.language == "python"
    code = recipe.code
    assert "while True:" in code and "final_answer(count)" in code
    assert "page=9" not in code and "len(orders['orders'])" not in code  # the failed steps
    assert "print(" not in code and "import json" not in code  # inspection and an unused import
    assert recipe.params == ["2024-03-05"] and recipe.checks == ["syntax", "outcome:check"]
    ast.parse(code)
    assert recipe_text(recipe).startswith("Working code for a task like: How many orders")


def test_same_code_with_other_names_and_spacing_has_one_fingerprint() -> None:
    a = extract([step(0, "n = 0\nfor p in range(1, 4):\n    n += len(list_orders(page=p)['orders'])"),
                 step(1, "final_answer(n)")], ORDERS_TASK, ["list_orders"], Redactor(), "user")
    b = extract([step(0, "total   =  0\nfor page_no in range(1,4):\n  total += len(list_orders(page=page_no)"
                         "['orders'])\n"), step(1, "final_answer( total )")], ORDERS_TASK, ["list_orders"], Redactor(),
                 "user")
    other_day = extract([step(0, "k = 0\nfor q in range(1, 4):\n    k += len(list_orders(page=q)['orders'])"),
                         step(1, "final_answer(k)")], ORDERS_TASK.replace("are there", "are listed"), ["list_orders"],
                        Redactor(), "user")
    different = extract([step(0, "final_answer(len(list_orders(page=1)['orders']))")], ORDERS_TASK, ["list_orders"],
                        Redactor(), "user")
    assert a is not None and b is not None and other_day is not None and different is not None
    assert a.fingerprint == b.fingerprint == other_day.fingerprint != different.fingerprint


def test_task_literals_are_parameters_and_do_not_split_recipes() -> None:
    one = extract([step(0, "final_answer(get_rate(date='05/03/2024'))")], "EUR to USD on 05/03/2024?",
                  ["get_rate"], Redactor(), "check")
    two = extract([step(0, "final_answer(get_rate(date='17/08/2023'))")], "EUR to USD on 17/08/2023?",
                  ["get_rate"], Redactor(), "check")
    assert one is not None and two is not None
    assert one.params == ["05/03/2024"] and one.fingerprint == two.fingerprint


def test_a_secret_in_a_literal_is_redacted() -> None:
    secret = "sk-proj-" + "a1B2c3D4" * 4
    recipe = extract([step(0, f"client = connect(api_key='{secret}')\nfinal_answer(client.count())")], ORDERS_TASK,
                     ["connect"], Redactor(), "user")
    assert recipe is not None and secret not in recipe.code and "[REDACTED]" in recipe.code


def test_no_recipe_without_a_final_answer_or_from_bad_code() -> None:
    assert extract([step(0, "x = 1")], TASK, [], Redactor(), "signals") is None
    assert extract([step(0, "final_answer(1", error="SyntaxError")], TASK, [], Redactor(), "signals") is None


def test_tool_calling_runs_give_the_call_sequence() -> None:
    steps = [step(0, tool_calls=[ToolCallRecord(name="get_rate", arguments='{"date": "2024-03-05"}')],
                  error="ValueError: Unparseable date"),
             step(1, tool_calls=[ToolCallRecord(name="get_rate", arguments='{"date": "05/03/2024"}')]),
             step(2, tool_calls=[ToolCallRecord(name="final_answer", arguments='{"answer": "1.09"}')])]
    recipe = extract(steps, "EUR/USD on 05/03/2024", [], Redactor(), "check")
    assert recipe is not None and recipe.language == "tool_calls"
    assert '"2024-03-05"' not in recipe.code and '"05/03/2024"' in recipe.code and recipe.params == ["05/03/2024"]


def test_a_call_tried_again_with_one_argument_changed_or_added_is_left_out_of_a_tool_call_recipe() -> None:
    def calling(seq: int, name: str, arguments: dict[str, object]) -> StepRecord:
        return step(seq, tool_calls=[ToolCallRecord(name=name, arguments=json.dumps(arguments))])

    task = "How many of project DELT's open tickets have more than 10 story points?"
    steps = [calling(0, "search_tickets", {"project": "DELT"}),
             calling(1, "search_tickets", {"project": "DELT", "page_size": 100}),  # added
             calling(2, "get_project", {"project": "DELT", "fields": "a"}),
             calling(3, "get_project", {"project": "DELT", "fields": "b"}),  # changed
             calling(4, "get_owner", {"project": "DELT"}),
             calling(5, "get_owner", {"team": "x"}),  # another call, not a retry of the one before
             calling(6, "final_answer", {"answer": "7"})]
    recipe = extract(steps, task, [], Redactor(), "check")
    assert recipe is not None
    assert [(c["name"], c["arguments"]) for c in json.loads(recipe.code)] == [
        ("search_tickets", {"project": "DELT", "page_size": 100}), ("get_project", {"project": "DELT", "fields": "b"}),
        ("get_owner", {"project": "DELT"}), ("get_owner", {"team": "x"}), ("final_answer", {})]


def test_a_code_recipe_drops_a_call_tried_again_with_one_argument_changed_or_added_alike() -> None:
    task = "How many of project DELT's open tickets have more than 10 story points?"
    steps = [step(0, 'r = search_tickets(project="DELT")\nprint(r["truncated"])'),
             step(1, 'r = search_tickets(project="DELT", limit=100)\n'
                     'final_answer(sum(1 for t in r["tickets"] if t["points"] > 10))')]
    recipe = extract(steps, task, ["search_tickets"], Redactor(), "check")
    assert recipe is not None and recipe.code.splitlines()[0] == "r = search_tickets(project='DELT', limit=100)"
    assert recipe.code.count("search_tickets(") == 1
    # a first call whose result the code read before the second one stays
    read = [step(0, 'r = search_tickets(project="DELT")\nn = len(r["tickets"])'),
            step(1, 'r = search_tickets(project="DELT", limit=100)\n'
                    'final_answer(n + sum(1 for t in r["tickets"] if t["points"] > 10))')]
    kept = extract(read, task, ["search_tickets"], Redactor(), "check")
    assert kept is not None and kept.code.count("search_tickets(") == 2


def test_prune_keeps_what_the_answer_needs() -> None:
    body = ast.parse("import os\nimport csv\nx = 1\ny = 2\nprint(y)\nrows = csv.reader(open('f'))\nz = x\n"
                     "final_answer(z)").body
    # an assignment whose value comes from a call is kept (the call may matter), and its import with it
    assert [ast.unparse(s) for s in prune(body)] == ["import csv", "x = 1", "rows = csv.reader(open('f'))",
                                                     "z = x", "final_answer(z)"]
    # the same program with other local names and without what pruning drops has the same fingerprint; one whose
    # answer comes out otherwise has another
    same = ast.parse("import csv\na = 1\nrecords = csv.reader(open('f'))\nb = a\nfinal_answer(b)").body
    other = ast.parse("import csv\na = 2\nrecords = csv.reader(open('f'))\nb = a\nfinal_answer(b)").body
    assert fingerprint(prune(body), [], []) == fingerprint(prune(same), [], []) != fingerprint(prune(other), [], [])


INVOICE_TASK = "Using get_invoice, what is the total of invoice INV-1471 in euros? Answer with the number only."
LOGS = "Execution logs:\n{}\nLast output from code snippet:\nNone"


def test_an_answer_copied_from_an_observation_becomes_the_variable_it_printed() -> None:
    # The 1.5B agent printed the total, then typed the number it read: kept as is, the recipe handed the
    # next invoice's run this invoice's total.
    steps = [step(0, "result = get_invoice(invoice_id='INV-1471')\n"
                     "total = sum(line['qty'] * line['unit_price_cents'] / 100 for line in result['lines'])\n"
                     "print(total)", observations=LOGS.format("152.74")),
             step(1, "final_answer(152.74)")]
    recipe = extract(steps, INVOICE_TASK, ["get_invoice"], Redactor(), "check")
    assert recipe is not None
    assert recipe.code.splitlines()[-1] == "final_answer(total)" and "152.74" not in recipe.code
    assert "total = sum(" in recipe.code and recipe.params == ["INV-1471"]
    printed_with_a_label = [step(0, "n = len(get_invoice(invoice_id='INV-1471')['lines'])\nprint('lines:', n)",
                                 observations=LOGS.format("lines: 12")), step(1, "final_answer(12)")]
    recipe = extract(printed_with_a_label, INVOICE_TASK, ["get_invoice"], Redactor(), "check")
    assert recipe is not None and recipe.code.splitlines()[-1] == "final_answer(n)"
    for printed, shown, answer in (
            ("result['total']", "152.74", "final_answer(result['total'])"),
            ("round(result['total'], 2)", "152.74", "final_answer(round(result['total'], 2))"),
            ("f'Total: {result.total}'", "Total: 152.74", "final_answer(result.total)"),
            ("f'Total: {result.total:.2f} EUR'", "Total: 152.740 EUR".replace("0 ", " "),
             "final_answer(round(result.total, 2))"),
            ("'Total of', result['id'], 'in euros:', result['cents'] / 100", "Total of INV-1471 in euros: 152.74",
             "final_answer(result['cents'] / 100)"),
            ("result['n'], result['total']", "3 152.74", "final_answer(result['total'])"),
            ("'mugs under 21:', len([i['name'] for i in result['items'] if i['price'] < 21])", "mugs under 21: 152.74",
             "final_answer(len([i['name'] for i in result['items'] if i['price'] < 21]))")):
        steps = [step(0, f"result = get_invoice(invoice_id='INV-1471')\nprint({printed})",
                      observations=LOGS.format(shown)), step(1, "final_answer(152.74)")]
        recipe = extract(steps, INVOICE_TASK, ["get_invoice"], Redactor(), "check")
        assert recipe is not None and recipe.code.splitlines()[-1] == answer, printed


def test_an_answer_literal_stays_unless_an_earlier_step_printed_exactly_it() -> None:
    head = "result = get_invoice(invoice_id='INV-1471')\ntotal = result['total_cents'] / 100\n"
    cases = {  # the final step's code, the observations of the printing step -> the literal stays
        "same step": [step(0, head + "print(total)\nfinal_answer(152.74)", observations=LOGS.format("152.74"))],
        "inside a longer number": [step(0, head + "print(total)", observations=LOGS.format("1152.745")),
                                   step(1, "final_answer(152.74)")],
        **{name: [step(0, head + code, observations=LOGS.format(shown)), step(1, "final_answer(152.74)")]
           for name, (code, shown) in {
               "two variables printed alike": ("n = total\nprint(total, n)", "152.74 152.74"),
               "a text that is not what the print writes": ("print(total)", "Total: 152.74"),
               "the literal in the print's own text": ("print('152.74 is not', total)", "152.74 is not 99.1"),
               "two values side by side": ("n = 3\nprint(f'{n}{total}')", "3152.74"),
               "a separator seen twice": ("n = '1 2'\nprint(n, total)", "1 2 152.74"),
               "a print in a loop": ("for t in [total]:\n    print(t)", "152.74"),
               "a format it cannot replay": ("print(f'{total:>10}')", "    152.74"),
               "a constant printed": ("print('total', 152.74)", "total 152.74"),
               "an expression that calls a tool": ("print(total * len(get_invoice(invoice_id='INV-1')))", "152.74"),
           }.items()},
        "a value the task gave": [step(0, head + "k = 'INV-1471'\nprint(k)", observations=LOGS.format("INV-1471")),
                                  step(1, "final_answer('INV-1471')")],
        "a call that may not be replayed": [step(0, head + "print(get_invoice(invoice_id='INV-1471')['total'])",
                                                  observations=LOGS.format("152.74")), step(1, "final_answer(152.74)")],
    }
    failed = [step(0, head + "print(total)", error="KeyError: 'total_cents'", observations=LOGS.format("152.74")),
              step(1, "final_answer(152.74)")]
    # printed by a failed step: the literal stays, and final_answer(152.74) alone holds no value of the task
    assert extract(failed, INVOICE_TASK, ["get_invoice"], Redactor(), "check") is None
    for name, steps in cases.items():  # the literal stays, so the code answers with this run's answer: no recipe
        recipe = extract(steps, INVOICE_TASK, ["get_invoice"], Redactor(), "check")
        if name == "a value the task gave":  # a parameter: the next run puts its own in
            assert recipe is not None and recipe.code.splitlines()[-1] == "final_answer('INV-1471')"
        else:
            assert recipe is None, name
    assert extract(failed, "What is the total in euros?", ["get_invoice"], Redactor(), "check") is None


def test_a_huge_adversarial_observation_is_scanned_in_linear_time() -> None:
    import time

    flood = "152.74" * 400_000 + "1" * 1_000_000  # every occurrence glued to the next: none is a whole value
    steps = [step(0, "total = get_invoice(invoice_id='INV-1471')['total']\nprint(total)", observations=flood),
             step(1, "final_answer(152.74)")]
    started = time.process_time()
    recipe = extract(steps, INVOICE_TASK, ["get_invoice"], Redactor(), "check")
    assert time.process_time() - started < 2.0
    assert recipe is None  # no step showed 152.74 whole: the answer stays typed, and typed answers make no recipe


def test_a_task_value_written_another_way_and_a_named_city_are_parameters() -> None:
    """Seen in the learning benchmark: the recipe from "Graz on 2024-03-17" passed '17.03.2024' and 'Graz'
    and named no parameter; the next run (Ghent on 2024-12-09) copied its task's date as it was, six times."""
    graz = extract([step(0, "result = get_weather(city='Graz', date='2024-03-17')", error="ValueError: bad date"),
                    step(1, "result = get_weather(city='Graz', date='17.03.2024')\n"
                            "final_answer(max(r['max_c'] for r in result['records']))")],
                   "What was the highest temperature in Graz on 2024-03-17?", ["get_weather"], Redactor(), "check")
    ghent = extract([step(0, "result = get_weather(city='Ghent', date='09.12.2024')\n"
                             "final_answer(max(r['max_c'] for r in result['records']))")],
                    "What was the highest temperature in Ghent on 2024-12-09?", ["get_weather"], Redactor(), "check")
    assert graz is not None and ghent is not None
    assert graz.params == ["Graz", "17.03.2024"] and ghent.params == ["Ghent", "09.12.2024"]
    assert graz.fingerprint == ghent.fingerprint  # one recipe with two runs of evidence
    # a literal of the code that the task does not name, or names inside a word, stays
    other = extract([step(0, "final_answer(len(search_catalog(query='lamp', sort='price')))")],
                    "How many lamps are sorted by priceless first?", ["search_catalog"], Redactor(), "check")
    assert other is not None and other.params == []


WEATHER_TASK = ("Using get_weather, what was the highest temperature in Porto on 2024-09-15? "
                "Answer with the number only.")
PORTO = "{'city': 'Porto', 'date': '15.09.2024', 'records': [{'station': 'Porto-1', 'max_c': 26.3, 'min_c': 18.1}]}"


def final(answer: str, seq: int = 9) -> StepRecord:
    return StepRecord(id=f"r:{seq}", bank="b", run_id="r", kind="final", seq=seq, action_output=answer,
                      is_final=True)


def test_a_verified_answer_forced_at_the_step_limit_is_read_back_where_a_step_printed_it() -> None:
    """Seen in the learning benchmark: the 1.5B agent printed the right record five times and never called
    final_answer; smolagents' forced answer after the step limit was right (the check said so). The recipe is
    the code up to the first step that printed it, answering the place in the printed result that holds it."""
    call = "t = get_weather(city='Porto', date='{}')\nprint(t)"
    steps = [step(0, call.format("2024-09-15"), error="ValueError: invalid date"),
             *[step(i, call.format("15.09.2024"), observations=LOGS.format(PORTO)) for i in (1, 2, 3)],
             StepRecord(id="r:4", bank="b", run_id="r", kind="action", seq=4, error_type="AgentMaxStepsError",
                        error_message="Reached max steps.", action_output="26.3", is_final=True),
             final("26.3", 5)]
    recipe = extract(steps, WEATHER_TASK, ["get_weather"], Redactor(), "check")
    assert recipe is not None
    assert recipe.code == "t = get_weather(city='Porto', date='15.09.2024')\nfinal_answer(t['records'][0]['max_c'])"
    assert recipe.params == ["Porto", "15.09.2024"] and recipe.checks == ["syntax", "answer:printed", "outcome:check"]
    assert extract(steps, WEATHER_TASK, ["get_weather"], Redactor(), "user") is not None
    assert extract(steps, WEATHER_TASK, ["get_weather"], Redactor(), "signals") is None  # no judge found it right
    # a scalar printed on its own line is answered as printed
    scalar = [step(0, "r = get_weather(city='Porto', date='15.09.2024')\nprint(r['records'][0]['max_c'])",
                   observations=LOGS.format("26.3")), final("26.3")]
    recipe = extract(scalar, WEATHER_TASK, ["get_weather"], Redactor(), "check")
    assert recipe is not None and recipe.code.splitlines()[-1] == "final_answer(r['records'][0]['max_c'])"


def test_a_forced_answer_leaves_no_recipe_unless_one_place_of_one_print_shows_it() -> None:
    head = "t = get_weather(city='Porto', date='15.09.2024')\n"
    same = PORTO.replace("18.1", "26.3")  # max and min alike: which one was meant is a guess
    cases = {
        "never printed": [step(0, head + "print(t)", observations=LOGS.format(PORTO.replace("26.3", "25.0"))),
                          final("26.3")],
        "at two places": [step(0, head + "print(t)", observations=LOGS.format(same)), final("26.3")],
        "two prints, not a line each": [step(0, head + "print(t)\nprint(t['city'])",
                                             observations=LOGS.format(PORTO + " Porto")), final("26.3")],
        "a print in a loop": [step(0, head + "for r in t['records']:\n    print(r['max_c'])\nprint(t['city'])",
                                   observations=LOGS.format("26.3\nPorto")), final("26.3")],
        "a sentence": [step(0, head + "print(t)", observations=LOGS.format(PORTO)),
                       final("The highest temperature was 26.3.")],
        "a value of the task": [step(0, head + "print(t['date'])", observations=LOGS.format("2024-09-15")),
                                final("2024-09-15")],
        "printed by a failed step": [step(0, head + "print(t)", observations=LOGS.format(PORTO), error="KeyError"),
                                     final("26.3")],
        "an unreadable structure": [step(0, head + "print(t)", observations=LOGS.format(
            PORTO.replace("'Porto-1'", "Station(1)"))), final("26.3")],
        "no final step": [step(0, head + "print(t)", observations=LOGS.format(PORTO))],
    }
    for name, steps in cases.items():
        assert extract(steps, WEATHER_TASK, ["get_weather"], Redactor(), "check") is None, name


def test_a_forced_answer_is_read_back_from_the_one_value_that_printed_it_among_several() -> None:
    """Seen in the learning benchmark (seeds 1 and 2): the right answer was forced at the step limit after a step
    printed it with a label and another value, or as the length of a filtered list; no recipe was kept, and the
    next runs, given only the result's shape, answered wrong."""
    invoice_task = "Using get_invoice, what is the total of invoice INV-5102 in euros? Answer with the number only."
    failed_line = ("print(f\"Total price of invoice {invoice['invoice']} in euros:\", "
                   "invoice['total_price_cents'] / 100)")
    first = f"invoice = get_invoice(invoice_id=\"INV-5102\")\n{failed_line}"
    second = ("invoice = get_invoice(invoice_id=\"INV-5102\")\n"
              "total_price_cents = sum(item['unit_price_cents'] * item['qty'] for item in invoice['lines'])\n"
              "print(f\"Total price of invoice {invoice['invoice']} in euros:\", total_price_cents / 100)")
    steps = [step(0, first, error=failed_at(first, failed_line, "InterpreterError: Could not index {...} with "
                                                               "'total_price_cents': KeyError: 'total_price_cents'")),
             step(1, second, observations=LOGS.format("Total price of invoice INV-5102 in euros: 235.43")),
             step(2, second, observations=LOGS.format("Total price of invoice INV-5102 in euros: 235.43")),
             StepRecord(id="r:3", bank="b", run_id="r", kind="action", seq=3, error_type="AgentMaxStepsError",
                        error_message="Reached max steps.", action_output="235.43", is_final=True),
             final("235.43", 4)]
    recipe = extract(steps, invoice_task, ["get_invoice"], Redactor(), "check")
    assert recipe is not None and recipe.params == ["INV-5102"]
    assert recipe.code.splitlines() == [
        "invoice = get_invoice(invoice_id='INV-5102')",
        "total_price_cents = sum((item['unit_price_cents'] * item['qty'] for item in invoice['lines']))",
        "final_answer(total_price_cents / 100)"]
    catalog_task = "Using search_catalog, how many mug products cost less than 21 euros? Answer with the number only."
    counted = ("result = search_catalog(query=\"mug\")\nprint(\"Number of mug products costing less than 21 euros:\", "
               "len([item['name'] for item in result['data']['items'] if item['price'] < 21]))")
    steps = [step(0, counted, observations=LOGS.format("Number of mug products costing less than 21 euros: 5")),
             final("5", 1)]
    recipe = extract(steps, catalog_task, ["search_catalog"], Redactor(), "check")
    assert recipe is not None and recipe.params == ["mug", "21"]
    assert recipe.code.splitlines()[-1] == ("final_answer(len([item['name'] for item in result['data']['items'] "
                                            "if item['price'] < 21]))")
    # a tool printed a line of its own: the print's line is the one its text matches
    chatty = [step(0, counted, observations=LOGS.format("fetching page 1\n"
                                                        "Number of mug products costing less than 21 euros: 5")),
              final("5", 1)]
    recipe = extract(chatty, catalog_task, ["search_catalog"], Redactor(), "check")
    assert recipe is not None and recipe.code.splitlines()[-1].startswith("final_answer(len(")
    # a line each for two prints: the one that showed the answer is known
    two = [step(0, "t = get_weather(city='Porto', date='15.09.2024')\nprint(t['city'])\nprint(t)",
                observations=LOGS.format("Porto\n" + PORTO)), final("26.3")]
    recipe = extract(two, WEATHER_TASK, ["get_weather"], Redactor(), "check")
    assert recipe is not None and recipe.code.splitlines()[-1] == "final_answer(t['records'][0]['max_c'])"


def test_a_forced_answer_printed_by_code_that_ignores_a_value_of_the_task_leaves_no_recipe() -> None:
    """Seen in the learning benchmark (seed 3): the run printed ``len(result)``, the number of keys of the search
    result, which happened to equal the right count; the recipe kept from it was given to the next run, which
    counted the keys again and answered wrong. The task's price limit (25) appears nowhere in that code."""
    chairs = "Using search_catalog, how many 'chair' products cost less than 25 euros? Answer with the number only."
    counted = "result = search_catalog(query='chair')\nprint('Total number of chair products:', len(result))"
    steps = [step(0, counted, observations=LOGS.format("Total number of chair products: 3")), final("3", 1)]
    assert extract(steps, chairs, ["search_catalog"], Redactor(), "check") is None
    filtered = ("result = search_catalog(query='chair')\nprint('Chairs under 25:', "
                "len([i for i in result['data']['items'] if i['price'] < 25]))")
    steps = [step(0, filtered, observations=LOGS.format("Chairs under 25: 3")), final("3", 1)]
    recipe = extract(steps, chairs, ["search_catalog"], Redactor(), "check")
    assert recipe is not None and recipe.params == ["chair", "25"]
    # a value the code wrote another way counts as used (the task's 2024-09-15 as '15.09.2024')
    assert ignored_values("get_weather(city='Porto', date='15.09.2024')", ["15.09.2024"], WEATHER_TASK) == []


def test_a_task_date_whose_day_and_month_are_equal_written_another_way_counts_as_used() -> None:
    """Seen in the learning benchmark (seed 23, run 4): the run asked about Ghent on 2024-08-08 passed
    '08.08.2024' and answered right in one step; its recipe was refused as ignoring the task's '2024-08-08',
    because the date's parts (08 twice) did not say which went where."""
    ghent = "Using get_weather, what was the highest temperature in Ghent on 2024-08-08? Answer with the number only."
    code = ("weather_data = get_weather(city='Ghent', date='08.08.2024')\n"
            "final_answer(weather_data['records'][0]['max_c'])")
    recipe = extract([step(0, code, action_output="6.7", is_final=True), final("6.7", 1)], ghent, ["get_weather"],
                     Redactor(), "check")
    assert recipe is not None and recipe.params == ["Ghent", "08.08.2024"]
    assert ignored_values(code, ["Ghent", "08.08.2024"], ghent) == []
    other_separators, other_day = code.replace("08.08.2024", "2024.08.08"), code.replace("08.08.2024", "08.09.2024")
    assert ignored_values(other_separators, ["Ghent", "2024.08.08"], ghent) == []
    assert ignored_values(other_day, ["Ghent", "08.09.2024"], ghent) == ["2024-08-08"]
    # and a recipe passing that date gets it put in for the next task only when its form is known: not guessed
    assert fixtext.carry_over("2024-08-08", "08.08.2024", "on 2024-03-17") == []


def test_a_forced_answer_whose_code_only_wrote_the_task_s_number_into_a_query_leaves_no_recipe() -> None:
    """Seen in the learning benchmark (seed 4): the run asked the search for "mug price < 21 euro", counted
    every item it returned (the search ignores the limit) and printed 7, which was the answer; the next run
    given that code asked for "chair price < 25 euro" and answered 6 for 3. A number the code computes with
    is a constant of its own; one inside a longer text is not."""
    mugs = "Using search_catalog, how many 'mug' products cost less than 21 euros? Answer with the number only."
    counted = ('products = search_catalog(query="mug price < 21 euro")\n'
               "count = len(products['data']['items'])\nprint(count)")
    steps = [step(i, counted, observations=LOGS.format("7")) for i in range(3)] + [final("7", 3)]
    assert extract(steps, mugs, ["search_catalog"], Redactor(), "check") is None
    assert ignored_values(counted, [], mugs) == ["21"]
    # the same run computing with the limit keeps its recipe, whatever the number's written form
    for limit in ("21", "21.0"):
        filtered = ('products = search_catalog(query="mug price < 21 euro")\n'
                    f"count = len([p for p in products['data']['items'] if p['price'] < {limit}])\nprint(count)")
        steps = [step(0, filtered, observations=LOGS.format("7")), final("7", 1)]
        recipe = extract(steps, mugs, ["search_catalog"], Redactor(), "check")
        assert recipe is not None and "answer:printed" in recipe.checks, limit
    # a value passed whole, as a text of its own, is held; a word (not a number) inside a query still counts
    assert ignored_values("search_catalog(query='mug', max_price='21')", ["mug"], mugs) == []
    assert ignored_values("search_catalog(query='cheap mug', max_price=21)", [], mugs) == []
    # an int too large for a float is compared by its digits, and does not stop the check
    huge = "9" * 400
    big = f"products = search_catalog(query='mug')\nn = {huge}\n"
    assert ignored_values(big + "final_answer(n)", ["mug"], mugs) == ["21"]
    assert ignored_values(big + "final_answer(n < 21)", ["mug"], mugs) == []


def test_a_run_that_answered_itself_with_code_ignoring_a_value_of_the_task_leaves_no_recipe() -> None:
    """Seen in the learning benchmark (seed 4, nested_catalog run 3): the run answered ``len(products)`` itself,
    the 3 keys of the search result, and the answer was 3; the next run given that code answered 3 for 2. The
    task's price limit (25) is nowhere in the code, so the answer was chance whoever gave it."""
    chairs = "Using search_catalog, how many 'chair' products cost less than 25 euros? Answer with the number only."
    counted = "products = search_catalog(query='chair')\nfinal_answer(len(products))"
    assert extract([step(0, counted, is_final=True, action_output="3")], chairs, ["search_catalog"], Redactor(),
                   "check") is None
    filtered = ("products = search_catalog(query='chair')\n"
                "final_answer(len([p for p in products['data']['items'] if p['price'] < 25]))")
    recipe = extract([step(0, filtered, is_final=True, action_output="3")], chairs, ["search_catalog"], Redactor(),
                     "check")
    assert recipe is not None and recipe.params == ["chair", "25"] and "answer:printed" not in recipe.checks


def test_an_unused_value_computed_by_pure_builtins_is_not_kept() -> None:
    """Seen in a nested_catalog recipe: ``total_items = len(...)`` that nothing read, copied by the next run."""
    code = ("result = search_catalog(query='mug')\ntotal_items = len(result['data']['items'])\n"
            "log = get_log()\nfinal_answer(sum(1 for i in result['data']['items'] if i['price'] < 21))")
    recipe = extract([step(0, code, is_final=True, action_output="5")], ORDERS_TASK, ["search_catalog", "get_log"],
                     Redactor(), "check")
    assert recipe is not None
    assert "total_items" not in recipe.code and "log = get_log()" in recipe.code  # a tool call may matter: kept


def test_an_answer_copied_from_a_printed_dict_is_read_at_its_place_not_answered_with_the_dict() -> None:
    steps = [step(0, "t = get_weather(city='Porto', date='15.09.2024')\nprint(t)", observations=LOGS.format(PORTO)),
             step(1, "final_answer(26.3)")]
    recipe = extract(steps, WEATHER_TASK, ["get_weather"], Redactor(), "check")
    assert recipe is not None and recipe.code.splitlines()[-1] == "final_answer(t['records'][0]['max_c'])"
    assert recipe.checks == ["syntax", "outcome:check"]
    twice = [step(0, "t = get_weather(city='Porto', date='15.09.2024')\nprint(t)",
                  observations=LOGS.format(PORTO.replace("18.1", "26.3"))), step(1, "final_answer(26.3)")]
    # two places hold it: which one was read is a guess, so the answer stays typed (not the whole dict): no recipe
    assert extract(twice, WEATHER_TASK, ["get_weather"], Redactor(), "check") is None


def test_hostile_printed_structures_are_refused_quickly() -> None:
    import time

    head = "t = get_weather(city='Porto', date='15.09.2024')\nprint(t)"
    for printed in ("[" * 5000 + "26.3" + "]" * 5000, "{'a': " * 3000 + "26.3" + "}" * 3000,
                    "[" + "26.3, " * 100_000 + "]", "{" + "'k': 'v', " * 3000 + "'x': 26.3}", "[\x00\ud800]"):
        started = time.process_time()
        recipe = extract([step(0, head, observations=LOGS.format(printed)), final("26.3")], WEATHER_TASK,
                         ["get_weather"], Redactor(), "check")
        assert time.process_time() - started < 2.0, printed[:20]
        assert recipe is None or recipe.code.endswith("final_answer(t['x'])"), printed[:20]


def failed_at(code: str, statement: str, error: str = "InterpreterError: Could not index it: KeyError: 'x'") -> str:
    """The error smolagents writes for a step whose top-level ``statement`` raised."""
    assert statement in code
    return f"Code execution failed at line '{statement}' due to: {error}"


INVOICE_1769 = "Using get_invoice, what is the total of invoice INV-1769 in euros? Answer with the number only."
PRINT_TOTAL = "print(f\"The total amount of invoice INV-1769 is {result['total_cents']} cents.\")"
# A learning-benchmark run, as it ran: step 1 set `result`, then failed on a key the invoice does not have;
# step 2 answered from `result` inside a try whose handler only prints, then a dead fallback answer.
SET_THEN_FAILED = f"result = get_invoice(\"INV-1769\")\n{PRINT_TOTAL}\neuros_total = result['total_cents'] / 100\n" \
                  "final_answer(euros_total)"
ANSWERED_IN_TRY = ("try:\n    total_cents = sum(line['unit_price_cents'] * line['qty'] for line in result['lines'])\n"
                   "    euros_total = total_cents / 100\n    final_answer(euros_total)\nexcept KeyError:\n"
                   "    print(\"The 'total_cents' key is missing in the invoice.\")\nfinal_answer(\"Error\")")


def test_what_a_failed_step_set_before_its_error_is_kept_and_the_answering_try_is_the_code_that_ran() -> None:
    steps = [step(0, SET_THEN_FAILED, error=failed_at(SET_THEN_FAILED, PRINT_TOTAL)),
             step(1, ANSWERED_IN_TRY, is_final=True, action_output="367.33")]
    recipe = extract(steps, INVOICE_1769, ["get_invoice"], Redactor(), "check")
    assert recipe is not None
    assert recipe.code.splitlines() == [
        "result = get_invoice('INV-1769')",
        "total_cents = sum((line['unit_price_cents'] * line['qty'] for line in result['lines']))",
        "euros_total = total_cents / 100",
        "final_answer(euros_total)",
    ]
    assert recipe.params == ["INV-1769"]
    # before: `result` was used and never set, and the handler's 'total_cents' and the dead 'Error' answer came along
    assert "total_cents'" not in recipe.code and "Error" not in recipe.code


def test_a_failed_step_gives_only_what_later_code_needs_and_nothing_when_its_error_names_no_statement() -> None:
    fetch = "orders = list_orders(date='2024-03-05')\nrows = []\nfor page in (1, 2):\n" \
            "    rows.extend(list_orders(date='2024-03-05', page=page)['orders'])\nfinal_answer(len(orders))"
    steps = [step(0, fetch, error=failed_at(fetch, "final_answer(len(orders))", "TypeError: object has no len()")),
             step(1, "final_answer(len(rows))", is_final=True, action_output="9")]
    recipe = extract(steps, TASK, ["list_orders"], Redactor(), "check")
    assert recipe is not None
    assert recipe.code.splitlines() == [  # the loop that filled `rows` ran and is needed; the unused call is not
        "rows = []", "for page in (1, 2):", "    rows.extend(list_orders(date='2024-03-05', page=page)['orders'])",
        "final_answer(len(rows))"]
    unnamed = [step(0, fetch, error="InterpreterError: the statement is not named"),
               step(1, "final_answer(len(rows))", is_final=True, action_output="9")]
    capped = [step(0, fetch, error=failed_at(fetch, "final_answer(len(orders))")[:40]),
              step(1, "final_answer(len(rows))", is_final=True, action_output="9")]
    for run in (unnamed, capped):  # what is left, final_answer(len(rows)), holds no value of the task: none
        assert extract(run, TASK, ["list_orders"], Redactor(), "check") is None
        recipe = extract(run, ORDERS_TASK, ["list_orders"], Redactor(), "check")
        assert recipe is not None and recipe.code == "final_answer(len(rows))"


def test_a_try_stays_whole_unless_its_body_gave_the_answer_and_its_handlers_only_report() -> None:
    def code_of(code: str, answer: str = "12", final: bool = True) -> str:
        steps = [step(0, code, is_final=final, action_output=answer if final else "")]
        if not final:
            steps.append(step(1, "final_answer(n)", is_final=True, action_output=answer))
        recipe = extract(steps, ORDERS_TASK, ["count"], Redactor(), "signals")
        assert recipe is not None
        return recipe.code

    reporting = "try:\n    n = count()\n    final_answer(n)\nexcept ValueError:\n    print('no count')\n"
    assert code_of(reporting) == "n = count()\nfinal_answer(n)"
    assert code_of(reporting + "final_answer('unknown')") == "n = count()\nfinal_answer(n)"
    assert code_of(reporting + "final_answer('unknown')", answer="unknown").startswith("try:")  # the handler's answer
    assert code_of(reporting + "final_answer(n)").startswith("try:")  # a later answer may have given it
    assert code_of(reporting + "if n is None:\n    final_answer(n)").startswith("try:")  # a nested one too
    assert code_of(reporting.replace("print('no count')", "n = 0")).startswith("try:")  # a handler that sets
    assert code_of(reporting.replace("    final_answer(n)\n", "")
                   + "final_answer(n)").startswith("try:")  # the body does not answer
    assert code_of("try:\n    n = count()\nexcept ValueError:\n    print('no count')\n", final=False).startswith(
        "try:")  # a step that did not give the answer
    assert code_of("n = count()\nfinal_answer(n)\nprint('done')\nfinal_answer(0)") == "n = count()\nfinal_answer(n)"


def test_an_import_a_failed_step_and_the_step_that_redid_its_work_both_made_is_kept_once() -> None:
    failing = ("import csv, io\ntext = read_text_file(path='sales.csv')\n"
               "rows = list(csv.DictReader(io.StringIO(text)))\ntotal = sum(float(row['amount']) for row in rows)")
    redo = "import csv, io, json\nrows = list(csv.DictReader(io.StringIO(text), delimiter=';'))\n" \
           "final_answer(json.dumps(round(sum(float(row['amount']) for row in rows), 2)))"
    steps = [step(0, failing, error=failed_at(failing, "total = sum(float(row['amount']) for row in rows)")),
             step(1, redo, is_final=True, action_output="300.0")]
    recipe = extract(steps, "Total of the 'amount' column in sales.csv?", ["read_text_file"], Redactor(), "check")
    assert recipe is not None
    assert recipe.code.splitlines()[:3] == ["import csv, io", "text = read_text_file(path='sales.csv')", "import json"]
    assert "delimiter=';'" in recipe.code and recipe.code.count("rows = ") == 1


LYON_TASK = "Using get_weather, what was the highest temperature in Lyon on 2024-01-28? Answer with the number only."
LYON = "{'city': 'Lyon', 'date': '28.01.2024', 'records': [{'station': 'Lyon-1', 'max_c': 25.1, 'min_c': 17.3}]}"


def test_a_value_the_code_converted_from_the_task_stays_a_parameter_with_its_conversion() -> None:
    """The run converted the task's date itself (``strptime`` then ``strftime``): the recipe keeps the import and the
    conversion, and the date is a parameter found by where it flows, so the next task's date is put in its place."""
    steps = [step(0, 'result = get_weather(city="Lyon", date="2024-01-28")\nprint(result)',
                  error="ValueError: invalid date '2024-01-28': expected DD.MM.YYYY, e.g. 31.12.2023"),
             step(1, 'from datetime import datetime\n\ndate = datetime.strptime("2024-01-28", "%Y-%m-%d")'
                     '.strftime("%d.%m.%Y")\nresult = get_weather(city="Lyon", date=date)\nprint(result)',
                  observations=LYON),
             step(2, "final_answer(25.1)")]
    recipe = extract(steps, LYON_TASK, ["get_weather"], Redactor(), "check")
    assert recipe is not None and recipe.code.startswith("from datetime import datetime\n")
    assert set(recipe.params) == {"2024-01-28", "Lyon"}
    example = adapt.recipe_example(recipe, LYON_TASK.replace("Lyon", "Porto").replace("2024-01-28", "2024-09-15"))
    assert example is not None and example.placed
    assert "strptime('2024-09-15', '%Y-%m-%d')" in example.code and "city='Porto'" in example.code


def test_an_answer_copied_from_the_value_a_step_ended_with_becomes_that_value() -> None:
    """The learning benchmark's 1.5B agent assigned the maximum (smolagents showed it as the step's last output),
    then answered with the number it read: the recipe answered every later city and date with 10.6."""
    def shown(value: str) -> str:
        return f"Execution logs:\n\nLast output from code snippet:\n{value}"

    steps = [step(0, 'weather_data = get_weather("Porto", "15.09.2024")',
                  observations=shown("{'city': 'Porto', 'date': '15.09.2024', 'records': [{'station': 'A', "
                                     "'max_c': 10.6, 'min_c': 4.0}]}")),
             step(1, "highest_temperature = max([record['max_c'] for record in weather_data['records']])",
                  observations=shown("10.6")),
             step(2, "final_answer(10.6)")]
    recipe = extract(steps, WEATHER_TASK, ["get_weather"], Redactor(), "check")
    assert recipe is not None
    assert recipe.code.splitlines()[-1] == "final_answer(highest_temperature)" and "10.6" not in recipe.code
    assert "highest_temperature = max(" in recipe.code
    ended_with_an_expression = [step(0, 'weather_data = get_weather("Porto", "15.09.2024")\n'
                                        "max(r['max_c'] for r in weather_data['records'])", observations=shown("10.6")),
                                step(1, "final_answer(10.6)")]
    recipe = extract(ended_with_an_expression, WEATHER_TASK, ["get_weather"], Redactor(), "check")
    assert recipe is not None
    assert recipe.code.splitlines()[-1] == "final_answer(max((r['max_c'] for r in weather_data['records'])))"
    ended_with_none = [step(0, 'weather_data = get_weather("Porto", "15.09.2024")\nx = None',
                            observations=shown("None")), step(1, "final_answer(10.6)")]
    recipe = extract(ended_with_none, WEATHER_TASK, ["get_weather"], Redactor(), "check")
    assert recipe is None  # nothing showed 10.6: code that types the answer computes nothing
    for code in ("final_answer(10.6)", "final_answer('It was 10.6 degrees')", "if True:\n    final_answer(3)\n"
                 "else:\n    final_answer(4)"):
        typed = [step(0, 'weather_data = get_weather("Porto", "15.09.2024")'), step(1, code)]
        assert extract(typed, WEATHER_TASK, ["get_weather"], Redactor(), "check") is None, code
    computed = [step(0, 'weather_data = get_weather("Porto", "15.09.2024")'),
                step(1, "if weather_data:\n    final_answer(max(r['max_c'] for r in weather_data['records']))\n"
                        "else:\n    final_answer(0)")]
    assert extract(computed, WEATHER_TASK, ["get_weather"], Redactor(), "check") is not None  # one computes it


def test_a_compound_word_of_the_question_is_held_when_the_code_uses_one_of_its_parts() -> None:
    """A question's noun written with a hyphen ("shelf-life") or a tool named in it ("get_batch_stats") is no
    value the code must copy: a run that read ``result['shelf_days']`` and answered right keeps its recipe. An id
    the code never touches in any part still marks the answer as chance."""
    task = ("Using get_batch_stats, what is the longest shelf-life among lot K7's batches, in days? "
            "Answer with the number only.")
    code = ("result = get_batch_stats(lot='K7')\n"
            "final_answer(max(batch['shelf_days'] for batch in result['batches']))")
    assert ignored_values(code, ["K7"], task) == []
    recipe = extract([step(0, code, action_output="41", is_final=True), final("41", 1)], task,
                     ["get_batch_stats"], Redactor(), "check")
    assert recipe is not None and recipe.params == ["K7"]
    # no part of the compound in the code: still a value it ignored
    region = "Using get_batch_stats, how many batches does lot K7 hold in north-west? Answer with the number only."
    assert ignored_values("result = get_batch_stats(lot='K7')\nfinal_answer(len(result))", ["K7"], region) \
        == ["north-west"]
