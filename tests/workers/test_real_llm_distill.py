"""A real run, recorded by the real recorder, distilled by the real 0.5B model through the real worker.

Asserts structure and invariants, not wording: the run ends distilled, with at least one lesson of an
allowed kind, non-empty text, its source run recorded, and no secret of the run in any lesson.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from smolagents import CodeAgent, tool

from lessonbank.core.constants import RUN_DEAD, RUN_DISTILLED
from lessonbank.core.models import LESSON_KINDS
from lessonbank.core.settings import Settings
from lessonbank.core.store.remote import connect_store
from lessonbank.recorder import StepRecorder
from tests.fixtures.celery_worker import CeleryWorker, worker_env
from tests.fixtures.llama_server import STARTUP_TIMEOUT, TEST_MODEL_NAME
from tests.fixtures.runs import run_state
from tests.fixtures.scripted_model import ScriptedModel, code_reply

DISTILL_WAIT = 900.0  # one attempt (no retry): well past its hard time limit, so the run ends distilled or dead
# The llama.cpp server's start-up, the worker's, then the distillation.
pytestmark = [pytest.mark.real_llm, pytest.mark.slow, pytest.mark.timeout(STARTUP_TIMEOUT + DISTILL_WAIT + 180)]

BANK = "real-llm"
QUEUE = "real-llm"
SECRET = "sk-proj-Zq8XwV3tL0pN6mR2sK9yB4cH7jD1fG5aE0uI"


@tool
def fetch_orders(page: int) -> str:
    """Fetch one page of the orders API.

    Args:
        page: Page number, starting at 1.
    """
    if page < 1:
        raise ValueError("page numbers start at 1")
    return "orders: [101, 102]; next_page: 2" if page == 1 else "orders: [103]; next_page: null"


@pytest.fixture
def worker(redis_url: str, llama_server: str, embed_model_path: Path, tmp_path: Path) -> Iterator[CeleryWorker]:
    env = worker_env(
        redis_url, QUEUE, tmp_path / "data", llama_server, embed_model_path,
        distill_model=TEST_MODEL_NAME, llm_timeout=240, store_timeout=60, max_retries=0,
        task_soft_time_limit=600, task_time_limit=660,
    )
    worker = CeleryWorker(env, QUEUE, tmp_path / "worker.log", concurrency=1).start()
    yield worker
    worker.stop(timeout=60)


def test_real_model_distills_a_recorded_run(
    worker: CeleryWorker, redis_url: str, redis_client: redis.Redis, embed_model_path: Path, tmp_path: Path
) -> None:
    settings = Settings(_env_file=None, redis_url=redis_url, queue=QUEUE, data_dir=tmp_path / "data",
                        embed_model_path=embed_model_path, store_timeout=60, qdrant_url=None)
    recorder = StepRecorder(bank=BANK, settings=settings)
    model = ScriptedModel([
        code_reply(f"api_key = '{SECRET}'\nprint(fetch_orders(page=0))"),
        code_reply("orders = []\nfor page in (1, 2):\n    print(fetch_orders(page=page))"),
        code_reply("final_answer([101, 102, 103])"),
    ])
    agent = CodeAgent(tools=[fetch_orders], model=model, max_steps=5, step_callbacks=recorder.step_callbacks)
    assert recorder.run(agent, "List every order id from the paginated orders API.") == [101, 102, 103]
    run_id = recorder.run_id(agent)
    assert run_id

    deadline = time.monotonic() + DISTILL_WAIT
    while (state := run_state(redis_client, run_id).get("state")) not in (RUN_DISTILLED, RUN_DEAD):
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(1)
    assert state == RUN_DISTILLED, worker.log()[-3000:]

    lessons = connect_store(settings).list(BANK)
    assert lessons, worker.log()[-3000:]
    for lesson in lessons:
        assert lesson.kind in LESSON_KINDS
        assert lesson.text.strip() and lesson.bank == BANK
        assert lesson.source_run_ids == [run_id]
        assert SECRET not in lesson.text and "sk-proj" not in lesson.text
    assert "LLM" in worker.log() and SECRET not in worker.log()
