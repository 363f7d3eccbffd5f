"""A bank written before a shape's fingerprint left out the words a field of records shared (and a failure's the
forms its error does not name), on a real embedded store: the next run observing the same tool's result joins the
lesson stored (one lesson, not two), ``lessonbank migrate`` moves them all once, and the hash of the tool's
structure the lesson was stamped with gives no "another structure" warning."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import openai
import pytest
import redis
from smolagents import CodeAgent, tool

from lessonbank.agent import remember
from lessonbank.cli.migrate import migrate_bank
from lessonbank.core.constants import bank_rekeyed_key
from lessonbank.core.models import (
    FailurePayload,
    Lesson,
    ShapePayload,
    StepRecord,
    ToolFingerprint,
    ToolResultRecord,
    recipe_id,
)
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.specimen import specimen
from lessonbank.core.store.base import LessonStoreBase
from lessonbank.learn import consolidate, failures, fingerprint, shapes, upgrade
from lessonbank.learn.view import RunView
from lessonbank.workers.consolidate import Consolidator, Thresholds
from lessonbank.workers.deps import Deps
from lessonbank.workers.llm import ChatLLM
from lessonbank.workers.pipeline import distill_one
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.scripted_model import ScriptedModel, code_reply
from tests.learn.runs import view

BANK = "loans"
TOOL = "check_loan"
SIGNATURE = "check_loan(reader: string) -> object"


@pytest.fixture
def store(embedded_store: LessonStoreBase) -> LessonStoreBase:
    return embedded_store


def _leaf(words: list[str]) -> dict[str, Any]:
    return {"type": "str", "values": words}


def earlier_structure(approved: str, states: list[str]) -> dict[str, Any]:
    """A result's structure as the release before kept it: the words of a string outside the records too."""
    return {"fields": [["approved", _leaf([approved])],
                       ["loans", {"items": {"fields": [["state", _leaf(sorted(set(states)))]], "more": False}}]],
            "more": False}


def earlier_fingerprint(structure: dict[str, Any]) -> str:
    """A shape's fingerprint by the earlier rule: its words in it (this structure holds no flag to leave out)."""
    form = shapes.describe(structure)
    return hashlib.sha256(f"{shapes.TAG}|{TOOL}|{form}|('loans',)".encode()).hexdigest()[:32]


def earlier_digest(approved: str, states: list[str]) -> str:
    """The hash of the tool's structure the release before stamped a lesson with: its specimen's words in it."""
    kept = {"approved": {"~": "str", "values": [approved]}, "loans": [{"state": {"~": "str", "values": states}}]}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def stored_earlier(store: LessonStoreBase, run_id: str, approved: str, states: list[str]) -> Lesson:
    """A shape lesson as the release before wrote it: its id from the earlier fingerprint."""
    structure = earlier_structure(approved, states)
    fact = consolidate.Observed(shapes.TAG, earlier_fingerprint(structure), (0,),
                                shape=ShapePayload(tool=TOOL, structure=structure, records=["loans"]))
    lesson = consolidate.observed_lesson(BANK, fact, run_id, verified=True).model_copy(update={
        "tool_versions": [ToolFingerprint(name=TOOL, signature=SIGNATURE, shape=earlier_digest(approved, states))]})
    store.upsert([lesson])
    return lesson


def observed(approved: str, states: list[str]) -> tuple[RunView, shapes.Shape]:
    result = {"approved": approved, "loans": [{"state": state} for state in states]}
    record = StepRecord(id="r:0", bank=BANK, run_id="r", kind="action", seq=0, code='r = check_loan("reader")',
                        tool_results=[ToolResultRecord(name=TOOL, specimen=specimen(result))])
    run = view([record], tools=[TOOL])
    (shape,) = shapes.extract(run, "")
    return run, shape


def add(store: LessonStoreBase, run_id: str, shape: shapes.Shape) -> str | None:
    fact = consolidate.Observed(shapes.TAG, shape.fingerprint, shape.steps, shape=shape.payload)
    return Consolidator(store, BANK, run_id, Thresholds(0.9, 0.6)).add_observed(fact)


def active_shapes(store: LessonStoreBase) -> list[Lesson]:
    return [lesson for lesson in store.list(BANK, limit=100) if lesson.shape is not None]


def test_a_run_after_the_upgrade_joins_the_shape_stored_under_the_earlier_fingerprint(
        store: LessonStoreBase) -> None:
    earlier = stored_earlier(store, "r-old", "yes", ["late", "ok"])
    run, shape = observed("no", ["ok", "ok"])
    fid = add(store, "r-new", shape)
    assert fid == recipe_id(BANK, shape.fingerprint, kind=shapes.TAG) != earlier.id
    (lesson,) = active_shapes(store)  # one lesson, not two
    assert lesson.id == fid and lesson.evidence == 2 and lesson.source_run_ids == ["r-old", "r-new"]
    assert "'state': str ('late' | 'ok')" in lesson.text and "'approved': str," in lesson.text
    (left,) = store.get(BANK, [earlier.id])
    assert left.status == "superseded" and left.superseded_by == fid and left.status_cause == "merged"

    # the run was given it: the hash of the tool's structure it was stamped with is no other structure
    seen = fingerprint.shape_seen(lesson, fingerprint.shapes_of(run), ended_well=False)
    assert seen is not None
    store.upsert([seen])
    (given,) = store.get(BANK, [fid])
    assert fingerprint.warning(given) == ""
    assert given.tool_versions[0].shape == fingerprint.shapes_of(run)[TOOL]
    # a real change of structure later still warns
    other = fingerprint.shape_seen(given, {TOOL: fingerprint.SHAPE_RULE + "0" * 16}, ended_well=False)
    assert other is not None and "returned a result of another structure" in fingerprint.warning(other)

    assert add(store, "r-next", observed("yes", ["late"])[1]) == fid  # and the next run finds it by its id
    (lesson,) = active_shapes(store)
    assert lesson.evidence == 3


def test_lessonbank_migrate_moves_shapes_of_the_earlier_fingerprint_once(store: LessonStoreBase) -> None:
    first = stored_earlier(store, "r1", "yes", ["late", "ok"])
    second = stored_earlier(store, "r2", "no", ["ok"])  # the same shape, another lesson by the earlier rule
    assert first.id != second.id
    counts = migrate_bank(store, BANK)
    assert counts["moved"] == 2
    (lesson,) = active_shapes(store)
    _, shape = observed("no", ["ok"])
    assert lesson.id == recipe_id(BANK, shape.fingerprint, kind=shapes.TAG)
    assert lesson.evidence == 2 and sorted(lesson.source_run_ids) == ["r1", "r2"]
    assert "'state': str ('late' | 'ok')" in lesson.text
    assert {left.superseded_by for left in store.get(BANK, [first.id, second.id])} == {lesson.id}
    before = sorted(item.model_dump_json() for item in store.list(BANK, limit=100, include_inactive=True))
    assert migrate_bank(store, BANK)["moved"] == 0  # idempotent
    assert sorted(item.model_dump_json() for item in store.list(BANK, limit=100, include_inactive=True)) == before
    assert add(store, "r3", shape) == lesson.id
    (lesson,) = active_shapes(store)
    assert lesson.evidence == 3


def test_a_stored_shape_whose_structure_is_not_one_stays_where_it_is(store: LessonStoreBase) -> None:
    broken = stored_earlier(store, "r1", "yes", ["ok"]).model_copy(update={
        "id": recipe_id(BANK, "f" * 32, kind=shapes.TAG),
        "shape": ShapePayload(tool=TOOL, structure={"fields": [["state"]], "more": False}, records=["loans"])})
    store.upsert([broken])
    _, shape = observed("no", ["ok"])
    assert add(store, "r2", shape) == recipe_id(BANK, shape.fingerprint, kind=shapes.TAG)
    (kept,) = store.get(BANK, [broken.id])
    assert kept.status == "active" and kept.shape == broken.shape


def test_a_variant_a_user_forgot_stays_forgotten_and_apart(store: LessonStoreBase) -> None:
    kept = stored_earlier(store, "r1", "yes", ["late", "ok"])
    forgot = stored_earlier(store, "r2", "no", ["ok"])
    store.set_status(BANK, [forgot.id], "forgotten", reason="forgotten by a user", cause="forgotten")
    assert migrate_bank(store, BANK)["moved"] == 1
    assert migrate_bank(store, BANK)["moved"] == 0
    _, shape = observed("no", ["ok"])
    (lesson,) = active_shapes(store)
    assert lesson.id == recipe_id(BANK, shape.fingerprint, kind=shapes.TAG) and lesson.source_run_ids == ["r1"]
    (left,) = store.get(BANK, [forgot.id])
    assert left.status == "forgotten" and store.get(BANK, [kept.id])[0].superseded_by == lesson.id


def test_a_shape_a_user_forgot_is_not_revived_by_the_next_run(store: LessonStoreBase) -> None:
    forgot = stored_earlier(store, "r1", "yes", ["ok"])
    store.set_status(BANK, [forgot.id], "forgotten", reason="forgotten by a user", cause="forgotten")
    _, shape = observed("no", ["ok"])
    assert add(store, "r2", shape) is None
    assert active_shapes(store) == []
    (moved,) = store.get(BANK, [recipe_id(BANK, shape.fingerprint, kind=shapes.TAG)])
    assert moved.status == "forgotten" and moved.source_run_ids == ["r1"]


def loans_tool() -> Any:
    @tool
    def check_loan(reader: str) -> dict:
        """A reader's loans and whether a new one is approved.

        Args:
            reader: The reader's card number, e.g. R-1.
        """
        return {"approved": "no", "loans": [{"state": "ok"}, {"state": "ok"}]}

    return check_loan


@pytest.mark.slow
def test_a_run_given_a_bank_of_the_earlier_rule_leaves_one_lesson_and_no_warning(
        store: LessonStoreBase, settings: Settings, redis_client: redis.Redis, openai_server: FakeOpenAI) -> None:
    """The worker's own path: a real CodeAgent under ``remember``, given the bank's shape lesson stamped with the
    hash of the earlier rule, its run distilled by the pipeline (judged wrong: a structure it saw would warn)."""
    openai_server.default = Reply(content=lessons_json())
    client = openai.OpenAI(base_url=openai_server.url, api_key="k", max_retries=0, timeout=30)
    deps = Deps(settings=settings.model_copy(update={"distill_lock_timeout": 5, "lesson_holdout": 0.0}),
                redis=redis_client, store=store, llm=ChatLLM(client, "fake"), scrubber=Redactor())
    check_loan = loans_tool()
    version = fingerprint.of_tool(check_loan)
    assert version is not None
    earlier = stored_earlier(store, "r-old", "yes", ["late", "ok"])
    store.upsert([earlier.model_copy(update={"tool_versions": [
        version.model_copy(update={"shape": earlier_digest("yes", ["late", "ok"])})]})])

    model = ScriptedModel([code_reply("r = check_loan('R-1')\nn = len(r['loans'])"), code_reply("final_answer(n)")],
                          then=code_reply("final_answer(None)"))
    agent = CodeAgent(tools=[check_loan], model=model, max_steps=3, verbosity_level=0)
    recorder = remember(agent, bank=BANK, settings=deps.settings, store=store, judge=lambda _: False)
    try:
        agent.run("How many loans does reader R-1 have?")
        run_id = recorder.run_id(agent) or ""
    finally:
        recorder.close()
    content = model.calls[0]["messages"][1].content
    told = "".join(part.get("text", "") for part in content) if isinstance(content, list) else str(content)
    assert "`check_loan(...)` returns" in told  # the run was given the earlier lesson
    assert distill_one(deps, BANK, run_id) is not None

    (lesson,) = active_shapes(store)  # one lesson, not two
    assert lesson.id != earlier.id and sorted(lesson.source_run_ids) == sorted(["r-old", run_id])
    assert redis_client.get(bank_rekeyed_key(BANK)) == upgrade.RULE.encode()  # none left: not read for them again
    assert all(fingerprint.warning(item) == "" for item in store.list(BANK, limit=100, include_inactive=True))


TIMED_OUT = "the request timed out after 30 s"


def failure(forms: dict[str, str]) -> FailurePayload:
    return FailurePayload(tool="get_sales", line="get_sales(region=<region>)", forms=forms, error_type="TimeoutError",
                          error=TIMED_OUT)


def test_a_failure_that_blamed_a_form_its_error_does_not_name_is_joined_as_the_current_rule_keeps_it(
        store: LessonStoreBase) -> None:
    blaming = failure({"region": "a"})  # as the release before kept it: every argument's form
    fact = consolidate.Observed(failures.TAG, failures.fingerprint_of(blaming), (0,), failure=blaming)
    earlier = consolidate.observed_lesson(BANK, fact, "r-old", verified=False)
    store.upsert([earlier])
    now = failure({})
    assert add_failure(store, "r-new", now) == recipe_id(BANK, failures.fingerprint_of(now), kind=failures.TAG)
    (lesson,) = [item for item in store.list(BANK, limit=100) if item.failure is not None]
    assert lesson.evidence == 2 and lesson.failure == now and "written like" not in lesson.text
    assert store.get(BANK, [earlier.id])[0].superseded_by == lesson.id


def test_lessonbank_migrate_moves_a_failure_of_the_earlier_rule(store: LessonStoreBase) -> None:
    blaming = failure({"region": "a"})
    named = failure({"region": "a"}).model_copy(update={"error": "unknown region '<region>'"})
    for payload in (blaming, named):
        fact = consolidate.Observed(failures.TAG, failures.fingerprint_of(payload), (0,), failure=payload)
        store.upsert([consolidate.observed_lesson(BANK, fact, "r-old", verified=False)])
    assert migrate_bank(store, BANK)["moved"] == 1  # the one its error names keeps its form and its id
    texts = sorted(item.text for item in store.list(BANK, limit=100))
    assert texts == ['`get_sales` raised TimeoutError when passed `region` written like "a"; its error said: '
                     '"unknown region \'<region>\'".',
                     f'`get_sales` raised TimeoutError; its error said: "{TIMED_OUT}".']
    assert migrate_bank(store, BANK)["moved"] == 0


def add_failure(store: LessonStoreBase, run_id: str, payload: FailurePayload) -> str | None:
    fact = consolidate.Observed(failures.TAG, failures.fingerprint_of(payload), (0,), failure=payload)
    return Consolidator(store, BANK, run_id, Thresholds(0.9, 0.6)).add_observed(fact)
