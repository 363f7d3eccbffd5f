"""A control arm measured end to end: 20 runs of a scripted CodeAgent under ``remember(holdout=0.5, judge=...)``,
distilled by a real ``celery -A lessonbank.workers worker`` (through a real HTTP server speaking the OpenAI
protocol), then ``lessonbank report --json`` and ``lessonbank tools --json`` read what the runs left.

The scripted agent knows the trap only when its instructions hold the bank's lesson: with it, it pages
through the orders and answers right; without it (the control arm), its first call fails (a scripted tool
error) and its answer is wrong. So the scenario implies: every lessons-arm run succeeds, every control run
fails, and the tool statistics count exactly one ``list_orders`` error per control run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from smolagents import CodeAgent, tool

import lessonbank
from lessonbank.cli.main import cli
from lessonbank.core.constants import RUN_DISTILLED
from lessonbank.core.models import Lesson
from lessonbank.core.settings import Settings
from lessonbank.core.store.remote import connect_store
from tests.fixtures.celery_worker import CeleryWorker, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.runs import run_state
from tests.fixtures.scripted_model import ScriptedModel, code_reply

pytestmark = pytest.mark.slow

QUEUE, BANK, RUNS = "e2e-report", "orders-report", 20
HEADER = "## Lessons from earlier runs"
LESSON = "list_orders returns at most 2 orders per page: call it with page=1, 2, 3 and add up the 'orders'."


@tool
def list_orders(page: int) -> dict:
    """List the orders of one page.

    Args:
        page: Which page of results to return, from 1.
    """
    if page < 1:
        raise ValueError("pages start at 1")
    return {"orders": [{"id": page * 10 + i} for i in range(2)], "page": page, "pages": 3}


def reply(messages: list[Any]) -> str:
    """The scripted agent: it pages right only when it was given the lesson (after its task)."""
    told = "\n".join(str(m.content[0]["text"]) for m in messages[:2])
    done = sum(1 for m in messages if getattr(m, "role", "") == "assistant")
    if HEADER in told:
        return code_reply("total = sum(len(list_orders(page=p)['orders']) for p in (1, 2, 3))\nfinal_answer(total)")
    if done == 0:
        return code_reply("data = list_orders(page=0)")
    return code_reply("final_answer(len(list_orders(page=1)['orders']))")


@pytest.fixture
def worker(redis_url: str, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path) -> Iterator[CeleryWorker]:
    openai_server.default = Reply(content=lessons_json())
    env = worker_env(redis_url, QUEUE, tmp_path / "data", openai_server.url, embed_model_path)
    worker = CeleryWorker(env, QUEUE, tmp_path / "worker.log").start()
    yield worker
    worker.stop()


def test_report_shows_both_arms_as_the_scenario_implies(worker: CeleryWorker, redis_url: str, tmp_path: Path,
                                                        embed_model_path: Path, redis_client: redis.Redis) -> None:
    settings = Settings(_env_file=None, redis_url=redis_url, queue=QUEUE, data_dir=tmp_path / "data",
                        embed_model_path=embed_model_path, store_timeout=15, qdrant_url=None)
    connect_store(settings).upsert([Lesson.new(BANK, "approach", LESSON, origin="added")])
    agent = CodeAgent(tools=[list_orders], model=ScriptedModel([], then=reply), max_steps=4, verbosity_level=0)
    recorder = lessonbank.remember(agent, bank=BANK, settings=settings, holdout=0.5, seed=11,
                                   judge=lambda answer: answer == 6)
    arms: dict[str, str] = {}
    for _ in range(RUNS):
        agent.run("How many orders are there in total? Answer with the number only.")
        run_id = recorder.run_id(agent) or ""
        arms[run_id] = run_state(redis_client, run_id)["arm"]
    recorder.close()
    deadline = time.monotonic() + 120
    while any(run_state(redis_client, r).get("state") != RUN_DISTILLED for r in arms):
        assert time.monotonic() < deadline, "the worker did not distill every run in time"
        time.sleep(0.3)
    control = sum(1 for arm in arms.values() if arm == "control")
    assert 3 <= control <= 17  # both arms are really there

    env = {"LESSONBANK_REDIS_URL": redis_url, "LESSONBANK_QUEUE": QUEUE, "LESSONBANK_DATA_DIR": str(tmp_path / "data"),
           "LESSONBANK_STORE_TIMEOUT": "15", "LESSONBANK_EMBED_MODEL_PATH": str(embed_model_path)}
    result = CliRunner().invoke(cli, ["report", "--bank", BANK, "--json"], env=env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    lessons_arm, control_arm = report["arms"]["lessons"], report["arms"]["control"]
    assert (lessons_arm["runs"], control_arm["runs"]) == (RUNS - control, control)
    assert (lessons_arm["success_rate"], control_arm["success_rate"]) == (1.0, 0.0)
    assert lessons_arm["mean_steps"] == 1 and control_arm["mean_steps"] == 2

    tools = CliRunner().invoke(cli, ["tools", "--bank", BANK, "--json"], env=env)
    assert tools.exit_code == 0, tools.output
    rows = {row["name"]: row for row in json.loads(tools.output)["tools"]}
    assert rows["list_orders"]["errors"] == control
    assert rows["list_orders"]["calls"] == (RUNS - control) + 2 * control  # call sites in the code of each step
    (lesson,) = [item for item in report["lessons"] if item["text"] == LESSON]
    assert lesson["given"] == RUNS - control and lesson["helpful"] == RUNS - control and lesson["harmful"] == 0
