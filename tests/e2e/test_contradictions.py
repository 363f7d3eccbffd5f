"""Contradicting lessons settled by what runs observed, with real processes: a scripted CodeAgent under
``remember(judge=...)``, a real ``celery -A lessonbank.workers worker`` distilling through a real HTTP server speaking
the OpenAI protocol, and the CLI reading the bank.

A bank holds "the tool returned no results" (a small distiller's misreading, vouched for by a run that ended well).
A later run calls the tool and the recorder keeps the structure of what it returned: the shape and the old claim
contradict each other, the observations support the shape, and the old claim is superseded — no longer given, with
why in ``lessons list`` and a count in ``status``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

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
from lessonbank.learn.consolidate import vouched_by
from tests.fixtures.celery_worker import CeleryWorker, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.runs import run_state
from tests.fixtures.scripted_model import ScriptedModel, code_reply

pytestmark = pytest.mark.slow

QUEUE = "e2e-contradictions"
BANK = "catalog"
TASK = "How many products does the catalog list in the category 'chairs'? Answer with the number only."
MISREAD = "The `list_products` tool returned no results for a category."


@tool
def list_products(category: str) -> dict:
    """List the products of one category of the catalog.

    Args:
        category: The category's name.
    """
    return {"category": category, "items": [{"sku": f"{category}-{i}", "price": "12.50"} for i in range(3)],
            "count": 3}


@pytest.fixture
def worker(redis_url: str, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path) -> Iterator[CeleryWorker]:
    openai_server.default = Reply(content=lessons_json())  # the LLM writes nothing: what follows is observed
    env = worker_env(redis_url, QUEUE, tmp_path / "data", openai_server.url, embed_model_path)
    worker = CeleryWorker(env, QUEUE, tmp_path / "worker.log").start()
    yield worker
    worker.stop()


def test_a_claim_the_observations_contradict_is_superseded_and_no_longer_given(
    worker: CeleryWorker, redis_url: str, tmp_path: Path, embed_model_path: Path, redis_client: redis.Redis
) -> None:
    settings = Settings(_env_file=None, redis_url=redis_url, queue=QUEUE, data_dir=tmp_path / "data",
                        embed_model_path=embed_model_path, store_timeout=15, qdrant_url=None)
    store = connect_store(settings)
    misread = vouched_by(Lesson.new(BANK, "fact", MISREAD, run_id="an-earlier-run", steps=[0]), "an-earlier-run", True)
    store.upsert([misread])
    env = {"LESSONBANK_REDIS_URL": redis_url, "LESSONBANK_QUEUE": QUEUE, "LESSONBANK_DATA_DIR": str(tmp_path / "data"),
           "LESSONBANK_STORE_TIMEOUT": "15", "LESSONBANK_EMBED_MODEL_PATH": str(embed_model_path)}

    def instructions() -> str:
        result = CliRunner().invoke(cli, ["instructions", "--bank", BANK, "--tool", "list_products", TASK], env=env)
        assert result.exit_code == 0, result.output
        return result.output

    assert MISREAD in instructions()  # given before anything contradicted it

    model = ScriptedModel([code_reply("data = list_products(category='chairs')\nfinal_answer(len(data['items']))")])
    agent = CodeAgent(tools=[list_products], model=model, max_steps=3, verbosity_level=0)
    recorder = lessonbank.remember(agent, bank=BANK, settings=settings, judge=lambda answer: answer == 3)
    agent.run(TASK)
    run_id = recorder.run_id(agent) or ""
    recorder.close()
    deadline = time.monotonic() + 120
    while run_state(redis_client, run_id).get("state") != RUN_DISTILLED:
        assert time.monotonic() < deadline, "the worker did not distill the run in time"
        time.sleep(0.3)

    (after,) = store.get(BANK, [misread.id])
    assert after.status == "superseded" and after.status_cause == "contradicted" and after.status_run == run_id
    (shape,) = [lesson for lesson in store.list(BANK) if lesson.shape is not None]
    assert after.superseded_by == shape.id and shape.status == "active"
    assert "`list_products` returned data" in after.status_reason

    assert MISREAD not in instructions()
    listed = CliRunner().invoke(cli, ["lessons", "list", "--bank", BANK, "--status", "superseded"], env=env)
    assert listed.exit_code == 0, listed.output
    assert misread.id in listed.output and "contradicted by what the runs observed" in listed.output
    status = CliRunner().invoke(cli, ["status"], env=env)
    assert "lessons superseded by another the observations support: 1 (contradicted_by_observations 1)" in \
        status.output, status.output
