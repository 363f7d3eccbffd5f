"""Contradicting lessons settled by the observations when a run is distilled (``lessonbank.workers.contradictions``):
real Redis, a real in-memory Qdrant store with the real embedder, a real HTTP server speaking the OpenAI protocol
and runs recorded from real CodeAgents."""

from __future__ import annotations

import logging

import pytest

from lessonbank.core.constants import DROPPED_KEY, SUPERSEDED_KEY
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.instructions import compose_instructions
from lessonbank.workers.deps import Deps
from lessonbank.workers.pipeline import distill_one
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.workers.test_pipeline import weather_run

MISREAD = "The `get_weather` tool returned no results."
MISSING = "The result of `get_weather` has no 'records' field."
RIGHT = 'w = get_weather(city="Graz", date="02.01.2024")\nprint(w)'


def test_a_run_that_saw_the_tool_return_data_supersedes_its_own_misreading(deps: Deps, openai_server: FakeOpenAI,
                                                                           store: LessonStore) -> None:
    openai_server.default = Reply(content=lessons_json(("fact", MISREAD)))
    run_id = weather_run(deps.settings, "Graz", [RIGHT], verdict=True)
    distill_one(deps, "b", run_id)
    (misread,) = [lesson for lesson in store.list("b", include_inactive=True) if lesson.text == MISREAD]
    (shape,) = [lesson for lesson in store.list("b") if lesson.shape is not None]
    assert misread.status == "superseded" and misread.status_cause == "contradicted"
    assert misread.superseded_by == shape.id and misread.status_run == run_id
    assert deps.redis.hget(SUPERSEDED_KEY, "contradicted_by_observations") == b"1"
    _, given = compose_instructions(store, "What was the highest temperature in Porto on 2024-03-05?", "b",
                                    tools={"get_weather", "final_answer"})
    assert shape in given and all(lesson.id != misread.id for lesson in given)


def test_a_lesson_of_an_earlier_run_goes_when_a_later_run_observes_otherwise(deps: Deps, openai_server: FakeOpenAI,
                                                                            store: LessonStore) -> None:
    """The first run only failed (nothing observed to settle it): its claim stays until a run sees the field."""
    openai_server.default = Reply(content=lessons_json(("fact", MISSING)))
    first = weather_run(deps.settings, "Graz", ['w = get_weather(city="Graz", date="2024-01-02")'], verdict=True)
    distill_one(deps, "b", first)
    (claim,) = [lesson for lesson in store.list("b") if lesson.text == MISSING]
    openai_server.default = Reply(content=lessons_json())
    second = weather_run(deps.settings, "Graz", [RIGHT + "\nprint(w['records'][0])"], verdict=True)
    distill_one(deps, "b", second)
    (after,) = store.get("b", [claim.id])
    assert after.status == "superseded" and after.status_run == second
    assert "the field 'records' of `get_weather` is there" in after.status_reason


def test_claims_no_observation_settles_both_stay(deps: Deps, openai_server: FakeOpenAI, store: LessonStore) -> None:
    openai_server.default = Reply(content=lessons_json(("fact", MISSING)))
    first = weather_run(deps.settings, "Graz", ['w = get_weather(city="Graz", date="2024-01-02")'], verdict=True)
    distill_one(deps, "b", first)
    there = "`get_weather` returns a dictionary whose 'records' field lists the hours."
    openai_server.default = Reply(content=lessons_json(("fact", there)))
    second = weather_run(deps.settings, "Oslo", ['w = get_weather(city="Oslo", date="02.01.2024")'], verdict=True)
    distill_one(deps, "b", second)
    assert sorted(lesson.text for lesson in store.list("b") if lesson.origin == "distilled") == sorted([MISSING, there])
    assert deps.redis.hget(SUPERSEDED_KEY, "contradicted_by_observations") is None


WRONG_TYPE = "The `get_weather` function returned a list of strings instead of a dictionary with a 'records' field."
RIGHT_TYPE = "`get_weather` returns a dictionary; its hours are in the 'records' list."


def test_a_draft_whose_type_claim_the_run_contradicts_is_dropped_and_named(
        deps: Deps, openai_server: FakeOpenAI, store: LessonStore, caplog: pytest.LogCaptureFixture) -> None:
    """The run's recorded result of `get_weather` is a dict: "returned a list of strings" is its misreading."""
    caplog.set_level(logging.INFO, logger="lessonbank.workers.pipeline")
    openai_server.default = Reply(content=lessons_json(("fact", WRONG_TYPE), ("fact", RIGHT_TYPE)))
    run_id = weather_run(deps.settings, "Graz", [RIGHT], verdict=True)
    distill_one(deps, "b", run_id)
    texts = [lesson.text for lesson in store.list("b", include_inactive=True)]
    assert RIGHT_TYPE in texts and WRONG_TYPE not in texts
    assert deps.redis.hget(DROPPED_KEY, "contradicts_observed_type") == b"1"
    assert any("contradicts_observed_type" in record.getMessage() and run_id in record.getMessage()
               for record in caplog.records)  # the log names the rule and the run


def test_a_type_claim_in_the_bank_goes_when_a_later_run_observes_the_tool(
        deps: Deps, openai_server: FakeOpenAI, store: LessonStore) -> None:
    """The first run never got a result of `get_weather` (nothing to judge the claim by): it stays until a run
    observes what the tool returns."""
    openai_server.default = Reply(content=lessons_json(("fact", WRONG_TYPE)))
    first = weather_run(deps.settings, "Graz", ['w = get_weather(city="Graz", date="2024-01-02")'], verdict=True)
    distill_one(deps, "b", first)
    (claim,) = [lesson for lesson in store.list("b") if lesson.text == WRONG_TYPE]
    openai_server.default = Reply(content=lessons_json())
    second = weather_run(deps.settings, "Lyon", [RIGHT.replace("Graz", "Lyon")], verdict=True)
    distill_one(deps, "b", second)
    (after,) = store.get("b", [claim.id])
    (shape,) = [lesson for lesson in store.list("b") if lesson.shape is not None]
    assert after.status == "superseded" and after.status_cause == "contradicted" and after.status_run == second
    assert after.superseded_by == shape.id and "the result of `get_weather` is a dict" in after.status_reason
    assert deps.redis.hget(SUPERSEDED_KEY, "contradicted_by_observations") == b"1"
