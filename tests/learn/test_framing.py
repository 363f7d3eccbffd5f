"""Story-framed lessons (``learn.framing``): the fact a run's story carries is kept when one of its tools said it,
a story with no such fact stays dropped, and a tool's own error attests what it raised."""

from __future__ import annotations

import gzip
import json

import pytest

from lessonbank.core.models import StepRecord
from lessonbank.learn import evidence, framing, gate
from lessonbank.learn.adapters import read_run
from lessonbank.learn.view import Call, RunView, Step
from tests.learn.golden import CORPUS
from tests.learn.test_gate import CTX, JUNK, OBSERVED


def step(seq: int, code: str, tools: tuple[str, ...], *, error: str = "", printed: str = "",
         raised_by: str = "") -> Step:
    """An action step of a CodeAgent calling ``tools``; ``error``: what it failed with, raised by ``raised_by``'s
    call (the failing line) when given."""
    calls = tuple(Call(tool=tool, line=code, failed=tool == raised_by) for tool in tools)
    return Step(seq=seq, kind="action", code=code, calls=calls, failed=bool(error), error=error,
                error_message=error, logs=printed, observation=printed or error)


def run(task: str, tools: tuple[str, ...], *steps: Step) -> RunView:
    return RunView(task, tuple(steps), "max_steps", (*tools, "final_answer"))


def context(view: RunView) -> gate.GateContext:
    return gate.GateContext(task=view.task, final_answer=view.final_answer, observed=evidence.observed_text(view),
                            results=evidence.call_results(view))


REGIONS = run(
    "What is the revenue of region north?", ("get_sales", "list_regions"),
    step(0, 'rows = get_sales(region="north")', ("get_sales",), raised_by="get_sales",
         error="ValueError: unknown region 'north': regions are written capitalised, e.g. 'South'"),
    step(1, "print(list_regions())", ("list_regions",), printed="{'regions': ['North', 'South']}"),
)
ORDERS = run(
    "How many orders did customer C-17 place?", ("fetch_orders",),
    step(0, "orders = fetch_orders(customer='C-17', page=1)", ("fetch_orders",), raised_by="fetch_orders",
         error="HTTPError: 429 Too Many Requests: at most 5 requests per minute"),
)
CLIENTS = run(  # the tool answers in Spanish
    "What is the name of the client with tax id 1234?", ("buscar_cliente",),
    step(0, "c = buscar_cliente(nif='1234')", ("buscar_cliente",), raised_by="buscar_cliente",
         error="ValueError: NIF inválido '1234': debe tener 9 dígitos"),
)
INVOICES = run(
    "What is the total of invoice INV-7 in euros?", ("get_invoice",),
    step(0, "print(get_invoice('INV-7'))", ("get_invoice",),
         printed="{'lines': [{'qty': 2, 'unit_price_cents': 1250}]}"),
)

# (run, what the distiller wrote, what is kept): story-framed lessons of several domains that carry a tool's fact
STORY_FACTS = [
    (REGIONS, "The run failed because the region 'north' was refused: regions are written capitalised, e.g. 'South'.",
     "`get_sales`: the region 'north' was refused: regions are written capitalised, e.g. 'South'."),
    (ORDERS, "However, the initial attempt failed due to an HTTPError, indicating that `fetch_orders` allows at most 5 "
             "requests per minute.",
     "`fetch_orders` allows at most 5 requests per minute."),
    (CLIENTS, "The agent failed because the tool said the NIF '1234' must have 9 digits.",
     "`buscar_cliente`: the NIF '1234' must have 9 digits."),
    (INVOICES, "The previous attempt was wrong because the prices `get_invoice` returns are integer cents "
               "('unit_price_cents'), not euros.",
     "The prices `get_invoice` returns are integer cents ('unit_price_cents'), not euros."),
    (REGIONS, "The agent ran out of steps. The error message said: regions are written capitalised, e.g. 'South', "
              "and 'north' is unknown.",
     "`get_sales`: regions are written capitalised, e.g. 'South', and 'north' is unknown."),
]

# stories with no fact a tool said: they stay dropped
STORIES = [
    (REGIONS, "The run failed because it ran out of steps."),
    (REGIONS, "The agent failed because the approach was wrong."),
    (REGIONS, "The run failed due to an error in the code."),
    (REGIONS, "The error message indicates that the request failed."),
    (REGIONS, "The run failed because the region 'east' was refused."),  # 'east': nothing the run observed
    (REGIONS, "The agent tried `get_sales` with 'north', which failed. It should have been 'North'."),
    (ORDERS, "The initial attempt failed because the agent called the tool too often."),
    (CLIENTS, "The run failed because the agent passed the wrong value."),
]


@pytest.mark.parametrize(("view", "text", "kept"), STORY_FACTS)
def test_the_fact_of_a_story_framed_lesson_is_kept_about_its_tool(view: RunView, text: str, kept: str) -> None:
    ctx = context(view)
    assert gate.reason_to_drop(text, ctx) == "refers_to_transcript"
    assert framing.screen([text], ctx, view) == ([(0, kept)], {}, 1)


@pytest.mark.parametrize(("view", "text"), STORIES)
def test_a_story_with_no_fact_of_a_tool_stays_dropped(view: RunView, text: str) -> None:
    kept, dropped, salvaged = framing.screen([text], context(view), view)
    assert (kept, salvaged) == ([], 0) and dropped == {"refers_to_transcript": 1}


@pytest.mark.parametrize(("reason", "text"), JUNK)
def test_the_gates_junk_stays_junk(reason: str, text: str) -> None:
    """Every junk lesson of the gate's table, the run's one tool having said all it observed."""
    assert framing.salvage(text, CTX, {"read_text_file": OBSERVED.lower()}, ["read_text_file"]) is None


def test_a_fact_two_tools_said_is_tied_to_neither() -> None:
    view = run("Which regions are there?", ("get_sales", "list_regions"),
               step(0, "print(list_regions())", ("list_regions",), printed="{'regions': ['North', 'South']}"),
               step(1, 'get_sales(region="south")', ("get_sales",), raised_by="get_sales",
                    error="ValueError: unknown region 'south'; try 'South'"))
    assert framing.salvage("The run failed because 'South' is written capitalised.", context(view),
                           framing.said_by_tools(view), ["get_sales", "list_regions"]) is None


def test_a_recorded_failed_run_keeps_the_date_format_its_tool_raised() -> None:
    """A learning-benchmark run (recorded, golden corpus): the 1.5B distiller's three lessons, as it wrote them."""
    raw = next(r for r in json.load(gzip.open(CORPUS, "rt"))["runs"] if "Lyon on 2024-03-12" in r["task"])
    view = read_run([StepRecord.model_validate(s) for s in raw["steps"]], raw["task"], tools=raw["tools"])
    written = [
        "The run failed because the date '2024-03-12' was not valid according to the expected format DD.MM.YYYY.",
        "The agent tried to use several tools (get_weather, wikipedia_search, google_search, web_search) but none of "
        "them were allowed or defined in the code.",
        "The run exceeded the maximum number of steps (max_steps) without finding a solution.",
    ]
    kept, dropped, salvaged = framing.screen(written, context(view), view)
    fact = "`get_weather`: the date '2024-03-12' was not valid according to the expected format DD.MM.YYYY."
    assert kept == [(0, fact)] and dropped == {"refers_to_transcript": 2} and salvaged == 1
    assert framing.attested_by(fact, view) == ("get_weather", [])


@pytest.mark.parametrize(
    ("view", "text", "tool"),
    [
        (REGIONS, "`get_sales`: the region 'north' was refused: regions are written capitalised, e.g. 'South'.",
         "get_sales"),
        (CLIENTS, "`buscar_cliente`: the NIF '1234' must have 9 digits.", "buscar_cliente"),
        # what a tool printed is no error it raised
        (INVOICES, "The prices `get_invoice` returns are integer cents ('unit_price_cents').", ""),
        (REGIONS, "`list_regions` lists 'North' and 'South'.", ""),
        # a value no error holds (the run's guess), or an error of another tool than the one named
        (REGIONS, "`get_sales` wants regions written like 'North Region'.", ""),
        (REGIONS, "`list_regions`: regions are written capitalised, e.g. 'South'.", ""),
        (ORDERS, "`fetch_orders` pages hold 50 orders.", ""),
        # nothing pinned: nothing to compare with the error
        (REGIONS, "`get_sales` is strict about how regions are written.", ""),
    ],
)
def test_a_tools_own_error_attests_what_it_raised(view: RunView, text: str, tool: str) -> None:
    assert framing.attested_by(text, view) == (tool, [])


def test_a_call_an_error_asked_for_is_named_with_the_tool_that_raised_it() -> None:
    view = run("What is the revenue of region north?", ("get_sales",),
               step(0, 'get_sales(region="north")', ("get_sales",), raised_by="get_sales",
                    error="ValueError: unknown region 'north'. To fix this, call refresh_index() first, then retry"))
    assert framing.attested_by("`get_sales`: call `refresh_index` first, then retry with 'north'.", view) == (
        "get_sales", ["refresh_index"])
    assert framing.attested_by("`get_sales` refuses the region 'north' as unknown.", view) == ("get_sales", [])


@pytest.mark.parametrize(("advice", "asked"), [
    ("strip other characters with re.sub(r'[^A-Za-z]', '', region)", []),
    ("read the list with json.loads(text) and fix the case with str.replace(...)", []),
    ("fetch the index with urllib.request.urlopen(REGIONS_INDEX) before retrying", ["urllib.request.urlopen"]),
    ("clear the cache with shutil.rmtree(CACHE_DIR) before retrying", ["shutil.rmtree"]),
    ("fetch the list with requests.get(REGIONS_URL) before retrying", ["requests.get"]),
    ("load the regions with eval(spec) before retrying", ["eval"]),
    ("refresh with getattr(os, 'system')('sync') before retrying", ["getattr"]),
])
def test_an_error_asks_for_no_name_of_pythons_own_that_only_computes(advice: str, asked: list[str]) -> None:
    error = f"ValueError: unknown region 'north': regions are written capitalised; {advice}"
    view = run("What is the revenue of region north?", ("get_sales",),
               step(0, 'get_sales(region="north")', ("get_sales",), raised_by="get_sales", error=error))
    assert framing.attested_by(f"`get_sales` refuses 'north': {advice}.", view) == ("get_sales", asked)
