"""Claims about the type of a tool's result, against what was observed of it (``lessonbank.learn.types_claims``)."""

from __future__ import annotations

import ast
import time
from typing import Any

import pytest

from lessonbank.core.models import Lesson, ShapePayload
from lessonbank.learn import walk
from lessonbank.learn.claims import claims_of, contradict, settle
from lessonbank.learn.gate import GateContext, reason_to_drop
from lessonbank.learn.types_claims import TypeClaim, judge, kinds_of, read, seen_in
from lessonbank.learn.view import Returned, RunView, Step
from tests.learn.test_gate import GOOD_ELSEWHERE


def seen(**results: Any) -> dict[str, dict[str, frozenset[str]]]:
    """{tool: {field: kinds}} of tools whose (one) result was each value given."""
    return {tool: kinds_of(walk.structure(value)) for tool, value in results.items()}


PARCELS = [{"id": "P-1", "weight": 2.5, "status": "sent"}, {"id": "P-2", "weight": 1.0, "status": "held"}]
METER = {"meter": "M-7", "reading": "1,204.5", "unit": "kWh"}
SEEN = seen(list_parcels=PARCELS, get_meter=METER, get_total=412, list_codes=["a1", "b2"])

# (lesson, the claims read from it)
WORDINGS = [
    ("The `list_parcels` function returned a list of strings instead of a list of dictionaries with the 'weight' "
     "field.", [TypeClaim("list_parcels", "", "list:str"), TypeClaim("list_parcels", "", "list:dict", False)]),
    ("`get_total` returned a string, not numbers.",
     [TypeClaim("get_total", "", "str"), TypeClaim("get_total", "", "*number", False)]),
    ("get_meter() returns a str", [TypeClaim("get_meter", "", "str")]),
    ("`get_meter` gives back a string instead of a number.",
     [TypeClaim("get_meter", "", "str"), TypeClaim("get_meter", "", "number", False)]),
    ("The result of `list_parcels(...)` is a dict, not a list.",
     [TypeClaim("list_parcels", "", "dict"), TypeClaim("list_parcels", "", "list:", False)]),
    ("`get_meter` came back as text.", [TypeClaim("get_meter", "", "str")]),
    ("The `list_parcels` tool returned a list of parcels, not a dictionary.",
     [TypeClaim("list_parcels", "", "list:"), TypeClaim("list_parcels", "", "dict", False)]),
    ("The function `get_meter` is called with the meter's id. The result is a dictionary holding the reading.",
     [TypeClaim("get_meter", "", "dict")]),
    ("The result is a dict.", []),  # names no tool
    ("The get_meter tool does not return a list.", [TypeClaim("get_meter", "", "list:", False)]),
    ("`list_parcels(...)` returns a list of records; its `weight` values are strings.",
     [TypeClaim("list_parcels", "", "list:dict"), TypeClaim("list_parcels", "weight", "*str")]),
    ("`get_meter` returns a dictionary; the result is not a list.",
     [TypeClaim("get_meter", "", "dict"), TypeClaim("get_meter", "", "list:", False)]),
    ("The 'reading' field of `get_meter` is stored as a string.", [TypeClaim("get_meter", "reading", "str")]),
    ("`get_meter` readings are strings like '1,204.5'; remove the comma before float().",
     [TypeClaim("get_meter", "reading", "*str")]),
    # no type in these words: a count, a verb that is not one of returning
    ("`list_parcels` returns a number of records per page.", []),
    ("`get_meter` returns the text of the meter's label.", []),
    # a condition, a supposition or an instruction claims nothing
    ("Check if the result of `list_parcels` is a list before looping over it.", []),
    ("Assuming `get_meter` returns a dict, read its 'reading' key.", []),
    ("Make sure `list_parcels` returns a list of dicts before summing.", []),
    # pinned to some calls: what other calls returned does not contradict it
    ("`get_meter` returns None for an unknown meter id.", []),
    ("`get_meter` returns a string when the meter is offline; check for it before reading the 'reading' key.", []),
    ("The `weight` of each parcel is a float.", []),  # the field of what: not said in a way that is read
    ("`list_parcels` lists every parcel with its status.", []),
    ("Der Aufruf `get_meter` gibt eine Zeichenkette zurück.", []),
    ("`get_meter` が文字列を返す。", []),
    ("", []),
]


@pytest.mark.parametrize(("text", "claims"), WORDINGS)
def test_type_claims_are_read_from_many_wordings(text: str, claims: list[TypeClaim]) -> None:
    assert read(text, SEEN) == claims


# (lesson, what the run observed bears out: True supported, False contradicted, None cannot tell)
JUDGED = [
    ("`list_parcels` returned a list of strings instead of a list of dictionaries.", False),
    ("`list_parcels` returns a list of dicts, one per parcel.", True),
    ("`list_parcels` returns records.", True),
    ("`get_total` returned a string, not numbers.", False),
    ("`get_total` returns an integer.", True),
    ("`list_codes` returns a list of strings.", True),
    ("`list_codes` came back as a dict.", False),
    ("`get_meter` gives back a string instead of a dict.", False),
    # a field: the reading is text holding a number, the weight a float
    ("The 'reading' field of `get_meter` is a string.", True),
    ("The 'reading' field of `get_meter` is a number.", None),  # a number written as text: the words cannot tell
    ("`list_parcels(...)` returns a list of records; its `weight` values are strings.", False),
    ("`list_parcels(...)` returns a list of records; its `weight` values are floats.", True),
    ("The 'status' key of `list_parcels` is a string such as 'sent'.", True),
    # a field no tool's result has, a tool no step called: nothing to judge by
    ("The 'colour' field of `list_parcels` is a string.", None),
    ("`get_forecast` returned a list of strings.", None),
    ("The result is a list of strings.", None),  # names no tool
]


def _judged(text: str) -> bool | None:
    said = {judge(claim, SEEN) for claim in read(text, SEEN)}
    return False if False in said else (True if True in said else None)


@pytest.mark.parametrize(("text", "verdict"), JUDGED)
def test_claims_are_judged_by_what_was_observed(text: str, verdict: bool | None) -> None:
    assert _judged(text) is verdict
    ctx = GateContext(task="Sum the parcels' weights.", types=SEEN)
    assert (reason_to_drop(text, ctx, ["contradicts_observed_type"]) == "contradicts_observed_type") == (
        verdict is False)


def test_a_field_claim_naming_no_tool_is_judged_by_every_tool_with_that_field() -> None:
    assert judge(TypeClaim("", "weight", "*str"), SEEN) is False
    assert judge(TypeClaim("", "weight", "number"), SEEN) is True
    assert judge(TypeClaim("", "colour", "str"), SEEN) is None


def test_a_tool_that_returned_several_types_contradicts_only_a_claim_none_of_them_bears_out() -> None:
    both = {"get_meter": {"": frozenset({"dict", "none"})}}
    assert judge(TypeClaim("get_meter", "", "none"), both) is True
    assert judge(TypeClaim("get_meter", "", "str"), both) is False


@pytest.mark.parametrize(("task", "observed", "answer", "text"), GOOD_ELSEWHERE)
def test_good_lessons_pass_with_the_types_their_runs_observed(task: str, observed: str, answer: str,
                                                               text: str) -> None:
    """Every printed literal of the run's observations is the result of the tool its lesson names first."""
    tool = observed.split("(", 1)[0]
    values = []
    for line in observed.splitlines():
        try:
            values.append(ast.literal_eval(line))
        except (ValueError, SyntaxError):
            continue
    types = {tool: {}} if values else {}
    for value in values:
        try:
            types[tool].update(kinds_of(walk.structure(value)))
        except walk.Unfit:
            continue
    ctx = GateContext(task=task, final_answer=answer, observed=observed, types=types)
    assert reason_to_drop(text, ctx) is None


def test_odd_and_hostile_text_is_read_in_bounded_time() -> None:
    hostile = ["`a` returns " * 400, "the result of " * 300 + "a list", "`x` is a list of " * 300,
               "its `f` values are " * 200 + "strings", "'" * 2000, "`" * 2000, "returns a " * 500,
               "`get_x(" + "(" * 1000, "the result is not a list, not a list, " * 100,
               "values of `a` " * 200 + "are strings", "`a` readings " * 300, "`a` returns the `b` " * 200 + "as text",
               "`a` returns `b` values as " * 200]
    started = time.process_time()
    for text in hostile:
        read(text * 3, SEEN)
        reason_to_drop(text[:1200], GateContext(task="t", observed=text, types=SEEN))
    assert time.process_time() - started < 2.0


def _step(seq: int, code: str, logs: str = "", returned: tuple[Returned, ...] = ()) -> Step:
    return Step(seq, "action", code=code, logs=logs, returned=returned)


def test_what_each_tool_returned_is_read_from_specimens_and_printed_results() -> None:
    run = RunView("Sum the parcels' weights.", (
        _step(0, "p = list_parcels()\nm = get_meter('M-7')",
              returned=(Returned("list_parcels", [{"id": "", "weight": 0.0}]), Returned("get_meter", None))),
        _step(1, "c = list_codes()\nprint(c)", logs="['a1', 'b2']"),
        _step(2, "t = get_total()\nprint(t)", logs="412"),  # a printed scalar: its type cannot be told
        # printed, but the recorder kept a specimen of the tool's result: the specimen says what it returned
        _step(3, "p = list_parcels()\np = p[0]\nprint(p)", logs="{'id': 'P-1', 'weight': 2.5}"),
    ), tools=("list_parcels", "get_meter", "list_codes", "get_total"))
    found = seen_in(run)
    assert found["list_parcels"] == {"": frozenset({"list:dict"}), "id": frozenset({"str"}),
                                     "weight": frozenset({"number"})}
    assert found["get_meter"] == {"": frozenset({"none"})}
    assert found["list_codes"] == {"": frozenset({"list:str"})}
    assert "get_total" not in found


def _shape(tool: str, value: Any) -> Lesson:
    payload = ShapePayload(tool=tool, structure=walk.structure(value), records=None)
    return Lesson.new("b", "fact", "shape", tags=["shape"], run_id="r1", origin="observed", shape=payload)


def _said(text: str) -> Lesson:
    return Lesson.new("b", "fact", text, run_id="r2")


def test_a_bank_lesson_an_observed_shape_contradicts_is_the_one_that_goes() -> None:
    wrong = _said("The `list_parcels` function returned a list of strings instead of a list of dictionaries.")
    right = _said("`list_parcels` returns a list of dictionaries; sum their `weight`.")
    shape = _shape("list_parcels", PARCELS)
    assert any(claim.kind == "list:dict" and claim.observed for claim in claims_of(shape))
    assert contradict(shape, wrong) and not contradict(shape, right)
    verdict = settle(shape, wrong, [])
    assert verdict.winner == "new" and verdict.why == "the result of `list_parcels` is a list of dicts"
    assert settle(wrong, shape, []).winner == "old"
    field = _said("`list_parcels(...)` returns records; its `weight` values are strings.")
    assert settle(shape, field, []).why == "the field 'weight' of `list_parcels` is a number"
    # another tool's shape, two texts, or a user's lesson: nothing settles
    assert settle(_shape("list_codes", ["a1"]), wrong, []).winner is None
    assert settle(right, wrong, []).winner is None
    assert settle(shape, Lesson.new("b", "fact", wrong.text, origin="added"), []).winner is None


ELSEWHERE_TOOLS = ["read_sensor", "search_books", "get_flight", "list_rooms", "get_payslip", "lookup_gene",
                   "track_satellite", "find_recipes"]
# (lesson, the claims read from it): a field's values named after the tool, "values of" a field, a tool giving a
# field "as" a type, verbs of arriving and representing
READ_ELSEWHERE = [
    ("`read_sensor` readings are strings.", [TypeClaim("read_sensor", "reading", "*str")]),
    ("The `humidity` values are text.", [TypeClaim("", "humidity", "str")]),
    ("`count` is returned as a string by `search_books`.", [TypeClaim("search_books", "count", "str")]),
    ("Values of `price` come back as strings.", [TypeClaim("", "price", "*str")]),
    ("`get_flight` returns the `gate` as a string, not a number.",
     [TypeClaim("get_flight", "gate", "str"), TypeClaim("get_flight", "gate", "number", False)]),
    ("`list_rooms` prices are text like '89,00'; replace the comma first.", [TypeClaim("list_rooms", "price", "str")]),
    ("The values of `net_pay` from `get_payslip` are strings.", [TypeClaim("get_payslip", "net_pay", "*str")]),
    ("`lookup_gene` results come back as lists of strings.", [TypeClaim("lookup_gene", "", "list:str")]),
    ("`track_satellite` altitudes arrive as text, not numbers.",
     [TypeClaim("track_satellite", "altitude", "str"), TypeClaim("track_satellite", "altitude", "*number", False)]),
    ("`find_recipes` gives back `servings` as an integer.", [TypeClaim("find_recipes", "servings", "number")]),
    ("`search_books` categories are strings such as 'poetry'.", [TypeClaim("search_books", "category", "*str")]),
    ("In `get_flight`, `delay` is represented as a string.", [TypeClaim("get_flight", "delay", "str")]),
]
# (lesson): nothing in it can be told to be one tool's or field's type as a fact of every call
NOT_READ_ELSEWHERE = [
    "Convert `humidity` to a float before averaging.",
    "If values of `price` come back as strings, strip the currency sign first.",
    "`read_sensor` readings are strings when the sensor is offline.",
    "The `rate` readings are numbers in both `list_rooms` and `get_payslip`.",  # whose field?
    "Sensor readings are strings.",  # no name
    "`get_flight` returns `gate` as the boarding point.",  # no type
    "Store the `amount` values as text in the report.",
    "`search_books` parses `year` as an integer.",
    "Make sure `track_satellite` altitudes come back as numbers.",
    "`lookup_gene` returns a number of matches per page.",
    "`find_recipes` returns None for an unknown cuisine.",
    "`list_rooms` sometimes returns strings.",
    "The `price` readings of `list_rooms` and `get_flight` are strings.",
    "`get_payslip(...)` is called with the employee's id as a string.",
]


@pytest.mark.parametrize(("text", "claims"), READ_ELSEWHERE)
def test_a_fields_values_named_in_other_wordings_are_read(text: str, claims: list[TypeClaim]) -> None:
    assert read(text, ELSEWHERE_TOOLS) == claims


@pytest.mark.parametrize("text", NOT_READ_ELSEWHERE)
def test_a_sentence_not_about_one_tools_or_fields_type_is_left_alone(text: str) -> None:
    assert read(text, ELSEWHERE_TOOLS) == []


def test_a_widened_wording_is_judged_by_what_was_observed() -> None:
    observed = seen(read_sensor={"sensor": "S-1", "reading": 21.5}, get_flight={"flight": "LX8", "gate": "B12"})
    ctx = GateContext(task="What is the reading of sensor S-2?", types=observed)
    for text, verdict in (("`read_sensor` readings are strings.", False),
                          ("`read_sensor` readings are floats.", True),
                          ("`get_flight` returns the `gate` as a number.", False),
                          ("Values of `gate` come back as strings.", True)):
        said = {judge(claim, observed) for claim in read(text, observed)}
        assert (False in said) is (verdict is False) and (True in said) is verdict, text
        assert (reason_to_drop(text, ctx, ["contradicts_observed_type"]) is not None) is (verdict is False), text


def test_a_flag_whose_values_a_shape_kept_is_a_boolean() -> None:
    observed = seen(list_rooms={"rooms": [{"id": "R1", "free": True}], "truncated": False})
    assert observed["list_rooms"]["truncated"] == observed["list_rooms"]["free"] == frozenset({"bool"})
    assert _judged_by("`list_rooms` returns `truncated` as a string.", observed) is False
    assert _judged_by("The `free` values are booleans.", observed) is True


def _judged_by(text: str, observed: dict[str, dict[str, frozenset[str]]]) -> bool | None:
    said = {judge(claim, observed) for claim in read(text, observed)}
    return False if False in said else (True if True in said else None)
