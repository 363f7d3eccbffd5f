"""Which of two contradicting lessons the recorded observations support (``lessonbank.learn.claims``)."""

from __future__ import annotations

import pytest

from lessonbank.core.models import Change, FixPayload, Lesson, ShapePayload
from lessonbank.learn.claims import Claim, claims_of, conflict, contradict, observed, settle

WEATHER_SHAPE = ShapePayload(tool="get_weather", records=["records"], structure={
    "fields": [["city", "str"], ["records", {"items": {"fields": [["date", "str"], ["max_c", "float"]],
                                                       "more": False}}]], "more": False})
KEY_FIX = FixPayload(failed="t = w['records'][0]['max_temp']", error="KeyError",
                     fixed="t = w['records'][0]['max_c']",
                     changed=[Change(kind="key", argument="w['records'][0]", before="max_temp", after="max_c")])
RAN_MAX_C = [('w = get_weather(city="Graz", date="02.01.2024")\nprint(w)', "data"),
             ("t = w['records'][0]['max_c']\nprint(t)", "")]
FAILED_MAX_TEMP = [("t = w['records'][0]['max_temp']", "failed")]
EMPTY_GRAZ = [('w = get_weather(city="Graz", date="01.02.2024")\nprint(w)', "empty")]


def distilled(text: str) -> Lesson:
    return Lesson.new("b", "fact", text, run_id="r1")


def shape() -> Lesson:
    return Lesson.new("b", "fact", "shape", tags=["shape"], run_id="r1", origin="observed", shape=WEATHER_SHAPE)


def fix() -> Lesson:
    return Lesson.new("b", "fact", "fix", tags=["fix"], run_id="r1", origin="observed", fix=KEY_FIX)


NOTHING = "The `get_weather` tool returned no results."
NOTHING_PINNED = "`get_weather` did not return any records for Graz on 01.02.2024."
NO_MAX_C = "The result of `get_weather` has no 'max_c' field."
HAS_MAX_TEMP = "The `get_weather` tool returns a dictionary with 'max_temp' as one of its fields."
NO_AMOUNT = "get_invoice has no 'amount' field; read 'amount_cents'."


def test_claims_read_from_payloads_and_texts() -> None:
    assert Claim("get_weather", "", True, observed=True) in claims_of(shape())
    assert Claim("get_weather", "max_c", True, observed=True) in claims_of(shape())
    assert {(c.field, c.holds) for c in claims_of(fix())} == {("max_temp", False), ("max_c", True)}
    assert claims_of(distilled(NOTHING)) == [Claim("get_weather", "", False)]
    assert claims_of(distilled(NOTHING_PINNED)) == [Claim("get_weather", "", False, frozenset({"01.02.2024"}))]
    assert claims_of(distilled(NO_AMOUNT)) == [Claim("get_invoice", "amount", False),
                                               Claim("get_invoice", "amount_cents", True)]
    assert claims_of(distilled("`list_orders` returns 'orders'; `get_order` has no 'items' field.")) == [
        Claim("get_order", "items", False)]  # each clause about the tool it names
    assert claims_of(distilled("Pass timeout=10 to requests.get: the billing API hangs without one.")) == []
    assert claims_of(distilled("The 'amount' field is missing when the file is split on ','.")) == []  # a condition


def test_what_the_steps_observed() -> None:
    assert observed(Claim("", "max_c", True), RAN_MAX_C) is True
    assert observed(Claim("", "max_temp", True), FAILED_MAX_TEMP) is False
    assert observed(Claim("", "max_temp", False), FAILED_MAX_TEMP) is True
    assert observed(Claim("get_weather", "", False), RAN_MAX_C) is False
    assert observed(Claim("get_weather", "", False, frozenset({"01.02.2024"})), RAN_MAX_C) is None
    assert observed(Claim("get_weather", "", False, frozenset({"01.02.2024"})), EMPTY_GRAZ) is True
    assert observed(Claim("", "unit", True), RAN_MAX_C) is None


def test_conflicts_are_about_one_field_of_one_tool() -> None:
    assert conflict(Claim("t", "a", True), Claim("t", "a", False))
    assert conflict(Claim("t", "a", True), Claim("", "a", False))
    assert not conflict(Claim("t", "a", True), Claim("u", "a", False))
    assert not conflict(Claim("t", "a", True), Claim("t", "b", False))
    assert not conflict(Claim("t", "", True), Claim("t", "", True))
    assert not conflict(Claim("", "", True), Claim("", "", False))
    assert contradict(shape(), distilled(NOTHING)) and contradict(distilled(NO_MAX_C), shape())
    assert not contradict(shape(), distilled(HAS_MAX_TEMP)) and not contradict(shape(), fix())


# (new lesson, old lesson, observations, which stays): the decision table
CASES = [
    # a shape shows the tool returned data: "returned no results" goes, whichever came first
    (shape, lambda: distilled(NOTHING), [], "new"),
    (lambda: distilled(NOTHING), shape, [], "old"),
    # a field the shape holds, said to be missing
    (lambda: distilled(NO_MAX_C), shape, [], "old"),
    # a field every step that used it failed on, said to be there; the fix observed the other key work
    (lambda: distilled(HAS_MAX_TEMP), fix, FAILED_MAX_TEMP, "old"),
    (fix, lambda: distilled(HAS_MAX_TEMP), FAILED_MAX_TEMP, "new"),
    # a fix naming no tool, and no step that used the key: it may be about another tool's field
    (fix, lambda: distilled(HAS_MAX_TEMP), [], None),
    # pinned to a call with values no step made: the shape of other calls does not settle it
    (lambda: distilled(NOTHING_PINNED), shape, [], None),
    # ...but a step with those values that printed nothing but empty lists backs it; and the shape is observed too
    (lambda: distilled(NOTHING_PINNED), shape, EMPTY_GRAZ, None),
    # two texts, no step bearing on them: both stay
    (lambda: distilled(NO_MAX_C), lambda: distilled("`get_weather` records hold the 'max_c' field in Celsius."),
     [], None),
    # two texts, a step that ran with the key: the one saying it is missing goes
    (lambda: distilled(NO_MAX_C), lambda: distilled("`get_weather` records hold the 'max_c' field in Celsius."),
     RAN_MAX_C, "old"),
    # observed payloads never supersede each other
    (shape, fix, FAILED_MAX_TEMP, None),
    # lessons about different tools do not contradict each other
    (lambda: distilled("The `get_invoice` tool returned no results."), shape, [], None),
    # a lesson a user wrote is not overruled by what a run observed
    (shape, lambda: Lesson.new("b", "fact", NOTHING, origin="added"), [], None),
]


@pytest.mark.parametrize(("new", "old", "results", "stays"), CASES)
def test_the_lesson_the_observations_support_stays(new, old, results, stays) -> None:  # type: ignore[no-untyped-def]
    verdict = settle(new(), old(), results)
    assert verdict.winner == stays
    assert bool(verdict.why) == (stays is not None)


def test_the_reason_names_what_was_observed() -> None:
    verdict = settle(shape(), distilled(NOTHING), [])
    assert verdict.why == "`get_weather` returned data"
    assert settle(distilled(NO_MAX_C), shape(), []).why == "the field 'max_c' of `get_weather` is there"
