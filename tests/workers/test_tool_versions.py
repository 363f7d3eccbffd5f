"""Lessons that know which version of a tool they were learnt on: a real CodeAgent under ``remember`` with real
``@tool`` functions, real Redis, an in-memory Qdrant store with the real embedder, a real HTTP server speaking the
OpenAI protocol, and the pipeline functions the worker calls."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
import redis
from smolagents import CodeAgent, tool

from lessonbank.agent import remember
from lessonbank.core.constants import run_key
from lessonbank.core.models import Lesson
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.learn import fingerprint
from lessonbank.workers.deps import Deps
from lessonbank.workers.llm import ChatLLM
from lessonbank.workers.pipeline import distill_one
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.scripted_model import ScriptedModel, code_reply

pytestmark = pytest.mark.slow

BANK = "billing"
TASK = "What is the amount of invoice {invoice}? Answer with the number only."


def old_tool() -> Any:
    @tool
    def get_invoice(invoice_id: str) -> dict:
        """Fetch one invoice.

        Args:
            invoice_id: The invoice's id, e.g. INV-1.
        """
        return {"id": invoice_id, "amount": 12.5}

    return get_invoice


def new_tool() -> Any:
    @tool
    def get_invoice(invoice_id: str, currency: str) -> dict:
        """Fetch one invoice, its amount in a currency.

        Args:
            invoice_id: The invoice's id, e.g. INV-1.
            currency: ISO code of the currency the amount is given in, e.g. EUR.
        """
        return {"id": invoice_id, "amount": 12.5, "currency": currency}

    return get_invoice


@pytest.fixture
def deps(settings: Settings, redis_client: redis.Redis, store: LessonStore, openai_server: FakeOpenAI) -> Deps:
    openai_server.default = Reply(content=lessons_json())  # the LLM adds nothing: what follows is the tools' doing
    client = openai.OpenAI(base_url=openai_server.url, api_key="k", max_retries=0, timeout=30)
    settings = settings.model_copy(update={"distill_lock_timeout": 5, "lesson_holdout": 0.0})
    return Deps(settings=settings, redis=redis_client, store=store, llm=ChatLLM(client, "fake"), scrubber=Redactor())


def run(deps: Deps, store: LessonStore, get_invoice: Any, invoice: str, code: str, right: bool) -> tuple[str, str]:
    """(run id, its task message) of one run of an agent with ``get_invoice``, distilled by the pipeline."""
    model = ScriptedModel([code_reply(code), code_reply("final_answer(amount)")], then=code_reply("final_answer(None)"))
    agent = CodeAgent(tools=[get_invoice], model=model, max_steps=3, verbosity_level=0)
    recorder = remember(agent, bank=BANK, settings=deps.settings, store=store, judge=lambda _: right)
    try:
        agent.run(TASK.format(invoice=invoice))
        run_id = recorder.run_id(agent) or ""
    finally:
        recorder.close()
    assert distill_one(deps, BANK, run_id) is not None
    content = model.calls[0]["messages"][1].content
    return run_id, "".join(part.get("text", "") for part in content) if isinstance(content, list) else str(content)


def recipes(store: LessonStore) -> list[Lesson]:
    return [lesson for lesson in store.list(BANK, limit=100, include_inactive=True) if lesson.recipe is not None]


def signature(lesson: Lesson) -> str:
    return next(v.signature for v in lesson.tool_versions if v.name == "get_invoice")


def test_a_recipe_for_a_tool_whose_signature_changed_is_not_given_goes_stale_and_is_replaced(
        deps: Deps, store: LessonStore, redis_client: redis.Redis) -> None:
    first, _ = run(deps, store, old_tool(), "INV-1", "inv = get_invoice(invoice_id='INV-1')\namount = inv['amount']",
                   right=True)
    (learnt,) = recipes(store)
    assert signature(learnt) == "get_invoice(invoice_id: string) -> object"
    assert json.loads(redis_client.hget(run_key(first), "tool_versions") or "[]")[0][0] == "get_invoice"

    _, told = run(deps, store, old_tool(), "INV-2", "inv = get_invoice(invoice_id='INV-2')\namount = inv['amount']",
                  right=True)
    assert "get_invoice(invoice_id=" in told  # the same tool: the recipe is given

    old_code = "inv = get_invoice(invoice_id='INV-3')\namount = inv['amount']"
    failed, told = run(deps, store, new_tool(), "INV-3", old_code, right=False)
    assert "get_invoice(invoice_id=" not in told  # the tool changed: not given
    (stale,) = recipes(store)
    assert stale.status == "stale" and stale.status_cause == "tool_changed" and stale.status_run == failed
    assert stale.status_reason == "get_invoice's signature changed: new argument currency"

    fixed = "inv = get_invoice(invoice_id='INV-4', currency='EUR')\namount = inv['amount']"
    _, told = run(deps, store, new_tool(), "INV-4", fixed, right=True)
    # the stale recipe is not given; what the changed tool raised in the failed run is (what to avoid)
    assert "Code that solved" not in told and "missing 1 required positional argument: 'currency'" in told
    current = {lesson.status: lesson for lesson in recipes(store)}
    assert current["superseded"].id == stale.id and "for the tool as it is now" in (current["superseded"].status_reason
                                                                                     or "")
    assert "currency='EUR'" in current["active"].recipe.code  # type: ignore[union-attr]
    assert signature(current["active"]) == "get_invoice(invoice_id: string, currency: string) -> object"

    _, told = run(deps, store, new_tool(), "INV-5", fixed.replace("INV-4", "INV-5"), right=True)
    assert "currency=" in told  # the next agent with the new tool gets the new recipe


def test_a_description_change_alone_makes_a_recipe_stale_and_a_shape_change_only_warns() -> None:
    old, new = fingerprint.of_tool(old_tool()), fingerprint.of_tool(new_tool())
    assert old is not None and new is not None
    reworded = old.model_copy(update={"doc": new.doc})
    assert fingerprint.change(old, reworded) == "get_invoice's description changed"
    assert fingerprint.change(old, old) is None
    one, two = fingerprint.SHAPE_RULE + "1", fingerprint.SHAPE_RULE + "2"
    lesson = Lesson.new(BANK, "approach", "x = get_invoice(invoice_id='a')").model_copy(
        update={"tool_versions": [old.model_copy(update={"shape": one})]})
    seen = fingerprint.shape_seen(lesson, {"get_invoice": two}, ended_well=False)
    assert seen is not None and "returned a result of another structure" in fingerprint.warning(seen)
    settled = fingerprint.shape_seen(seen, {"get_invoice": two}, ended_well=True)
    assert settled is not None and fingerprint.warning(settled) == "" and settled.tool_versions[0].shape == two
