"""Per-lesson causal credit on a simulated bank, through the real path: a real CodeAgent under ``remember`` (the
builder draws the per-lesson holdout), a check giving each run its verdict, real Redis, an in-memory Qdrant store
with the real embedder, a real HTTP server speaking the OpenAI protocol, and the pipeline functions the worker
calls (distillation, credit, the causal measure).

The scripted agent's chance of success depends on which lessons its prompt holds: lesson HELPS raises it, lesson
HURTS lowers it, lesson IDLE changes nothing. Among the runs given HURTS, about as many succeed as fail, so its
helpful and harmful counts keep the correlation-based rules from retiring it: only the holdout shows it hurts.
"""

from __future__ import annotations

import random
from typing import Any

import openai
import pytest
import redis
from smolagents import CodeAgent

from lessonbank.agent import remember
from lessonbank.core import summary
from lessonbank.core.models import Lesson
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.learn import credit
from lessonbank.report import build_report, render_plots, report_tables
from lessonbank.workers.deps import Deps
from lessonbank.workers.llm import ChatLLM
from lessonbank.workers.pipeline import distill_one
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.scripted_model import ScriptedModel, code_reply

pytestmark = pytest.mark.slow

BANK = "sim"
RUNS = 200
TASK = "Sum the amounts in the ledger export ledger-{n}.csv and report the total."
HELPS = ("fact", "The ledger export is not UTF-8: open it with encoding='latin-1'.", "encoding='latin-1'")
IDLE = ("fact", "The ledger export has one header row: read it with header=0.", "header=0")
HURTS = ("approach", "Round every ledger amount with ndigits=0 before summing the export.", "ndigits=0")


class Agent:
    """Success with chance 0.5, +0.4 given HELPS, -0.3 given HURTS; applies (writes) every lesson it was given."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(self, messages: list[Any]) -> Any:
        told = "\n".join(str(part.get("text", "")) for m in messages[:2] for part in m.content)
        given = [lesson for lesson in (HELPS, IDLE, HURTS) if lesson[1] in told]
        chance = 0.5 + 0.4 * (HELPS in given) - 0.3 * (HURTS in given)
        answer = "ok" if self.rng.random() < chance else "wrong"
        options = ", ".join(lesson[2] for lesson in given)
        return code_reply(f"options = dict({options})\nfinal_answer({answer!r})")


def test_the_holdout_tells_a_helping_an_idle_and_a_hurting_lesson_apart(
        settings: Settings, redis_client: redis.Redis, store: LessonStore, openai_server: FakeOpenAI) -> None:
    openai_server.default = Reply(content=lessons_json())  # the LLM adds nothing: the bank holds the three lessons
    settings = settings.model_copy(update={"lesson_holdout": 0.2, "lesson_holdout_after": 0, "recipes": False,
                                           "distill_lock_timeout": 5})
    client = openai.OpenAI(base_url=openai_server.url, api_key="k", max_retries=0, timeout=30)
    deps = Deps(settings=settings, redis=redis_client, store=store, llm=ChatLLM(client, "fake"), scrubber=Redactor())
    ids = {}
    for kind, text, _ in (HELPS, IDLE, HURTS):
        lesson = Lesson.new(BANK, kind, text).model_copy(update={"verified": True, "evidence": 2})  # type: ignore[arg-type]
        store.upsert([lesson])
        ids[text] = lesson.id
    agent = CodeAgent(tools=[], model=ScriptedModel([], then=Agent(seed=3)), max_steps=2, verbosity_level=0)
    recorder = remember(agent, bank=BANK, settings=settings, store=store, seed=11, judge=lambda answer: answer == "ok")
    try:
        for n in range(RUNS):
            agent.run(TASK.format(n=n))
            run_id = recorder.run_id(agent)
            assert run_id and distill_one(deps, BANK, run_id) is not None
    finally:
        recorder.close()

    helps, idle, hurts = (store.get(BANK, [ids[lesson[1]]])[0] for lesson in (HELPS, IDLE, HURTS))
    assert helps.causal is not None and helps.causal.verdict == "helps" and helps.status == "active"
    assert helps.causal.low is not None and helps.causal.low > 0
    assert idle.causal is not None and idle.causal.verdict == "no effect yet" and idle.status == "active"
    assert hurts.status == "retired" and hurts.status_cause == "hurts", hurts.status_reason
    assert hurts.causal is not None and hurts.causal.high is not None and hurts.causal.high < 0
    assert "did worse than runs it was withheld from" in (hurts.status_reason or "")
    assert not credit.should_retire(hurts)  # its helpful and harmful counts alone would not have retired it

    summaries = summary.load_summaries(redis_client, BANK)
    assert len(summaries) == RUNS
    document = build_report(BANK, summaries, store.list(BANK, limit=100, include_inactive=True))
    rows = {row["id"]: row for row in document["causal"]["lessons"]}
    assert rows[helps.id]["verdict"] == "helps" and rows[helps.id]["uplift"]["low"] > 0
    assert rows[idle.id]["label"].startswith("no effect yet, n=")
    assert rows[hurts.id]["verdict"] == "hurts" and rows[hurts.id]["status"] == "retired"
    assert rows[hurts.id]["uplift"]["high"] < 0
    assert 0 < rows[helps.id]["withheld"]["runs"] < rows[helps.id]["given"]["runs"]
    table = next(t for t in report_tables(document) if t.title == "Causal credit per lesson")
    assert [row[1] for row in table.rows if row[0] == helps.id[:8]] == ["helps"]
    plots = render_plots(document)
    assert plots is None or plots["causal"].startswith(b"\x89PNG")  # the forest plot, where matplotlib is installed
