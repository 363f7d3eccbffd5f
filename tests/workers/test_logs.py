"""The lines a worker logs while it distills a run say which bank and run they are about, those of
``lessonbank.learn`` (which knows no bank and no run) too; what the gate drops is named at DEBUG, never a secret.

Real Redis, a real in-memory Qdrant store, a real HTTP server speaking the OpenAI protocol and a real CodeAgent
run recorded by the real recorder."""

from __future__ import annotations

import json
import logging

import pytest

from lessonbank.core.store.qdrant import LessonStore
from lessonbank.workers.deps import Deps
from lessonbank.workers.observe import tracing
from lessonbank.workers.pipeline import distill_one
from tests.fixtures.openai_server import FakeOpenAI, Reply
from tests.workers.test_pipeline import get_invoice, recorded_run

TASK = "What is the total of invoice INV-1 in euros?"
COMPUTED = "inv = get_invoice('INV-1')\ntotal = sum(l['qty'] * l['unit_price_cents'] / 100 for l in inv['lines'])"


def reply(*lessons: dict[str, object]) -> Reply:
    return Reply(content=json.dumps({"outcome": "success", "lessons": list(lessons)}))


def learn_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("lessonbank.learn")]


def test_learn_lines_of_a_distillation_name_its_bank_and_run(
    deps: Deps, openai_server: FakeOpenAI, store: LessonStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A lesson of the reply that is not one, and a recipe not kept (the answer is a literal the code never computed):
    both said by lessonbank.learn, both name the bank and the run."""
    caplog.set_level(logging.INFO)
    openai_server.default = reply({"kind": "opinion", "text": "Invoices are paid in euros.", "tags": []})
    run_id = recorded_run(deps.settings, get_invoice, TASK, [f"{COMPUTED}\nprint(total)", "final_answer(49.0)"],
                          verdict=True)
    distill_one(deps, "b", run_id)
    lines = learn_lines(caplog)
    assert lines, "lessonbank.learn logged nothing: the run no longer exercises it"
    assert all(line.startswith(f"bank b run {run_id}: ") for line in lines), lines
    assert any(line.startswith(f"bank b run {run_id}: dropping lesson 0 of the reply") for line in lines)
    assert any(line.startswith(f"bank b run {run_id}: recipe not kept: it answers with '49.0'") for line in lines)


def test_a_scope_prefixes_only_learn_lines_and_keeps_their_arguments(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    learn, other = logging.getLogger("lessonbank.learn.somewhere"), logging.getLogger("lessonbank.workers.x")

    @tracing.traced("test scope")
    def work(bank: str, run_id: str) -> None:
        learn.info("kept %d of %s", 2, "3")
        learn.info("100% of nothing")
        other.info("bank %s run %s: its own words", bank, run_id)

    work("b%s", "r1")
    learn.info("outside any scope")
    assert [r.getMessage() for r in caplog.records] == [
        "bank b%s run r1: kept 2 of 3", "bank b%s run r1: 100% of nothing", "bank b%s run r1: its own words",
        "outside any scope",
    ]
