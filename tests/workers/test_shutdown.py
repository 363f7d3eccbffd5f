"""Stopping a worker in the middle of a distillation loses nothing.

- SIGTERM (warm shutdown): the task in hand finishes, then the worker exits.
- SIGTERM with REMAP_SIGTERM=SIGQUIT (how docker-compose stops it): after the soft shutdown timeout the
  task in hand goes back on the queue, and the next worker distills the run.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis

from lessonbank.core.constants import RUN_DISTILLED
from tests.fixtures.celery_worker import CeleryWorker, enqueue, producer, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.runs import run_state, write_run

pytestmark = pytest.mark.slow

QUEUE = "shutdown-test"
GOOD = lessons_json(("fact", "The sales CSV uses ';' as its separator."))


def wait_state(client: redis.Redis, run_id: str, state: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while run_state(client, run_id).get("state") != state:
        assert time.monotonic() < deadline, run_state(client, run_id)
        time.sleep(0.2)


def test_warm_shutdown_finishes_the_task_in_hand(
    redis_url: str, redis_client: redis.Redis, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path
) -> None:
    release = openai_server.released_event()
    openai_server.script(Reply(content=GOOD, block=release))
    env = worker_env(redis_url, QUEUE, tmp_path / "data", openai_server.url, embed_model_path, llm_timeout=30)
    worker = CeleryWorker(env, QUEUE, tmp_path / "worker.log").start()
    try:
        run_id = write_run(redis_client, "bank-warm")
        enqueue(producer(redis_url), QUEUE, "bank-warm", run_id)
        openai_server.wait_for_requests(1)  # the task is in hand, waiting for the LLM
        assert worker.process is not None
        worker.process.send_signal(signal.SIGTERM)
        wait_for_log(worker, "Warm shutdown")  # the shutdown has begun...
        assert worker.process.poll() is None  # ...and waits for the task in hand
        assert run_state(redis_client, run_id)["state"] == "closed"
        release.set()
        assert worker.process.wait(60) == 0
        assert run_state(redis_client, run_id)["state"] == RUN_DISTILLED
        assert len(openai_server.chat_requests()) == 1
        log = worker.log()
        assert log.index("Warm shutdown") < log.index("distilled in")
    finally:
        release.set()
        worker.stop()


def test_remapped_sigterm_requeues_after_soft_timeout(
    redis_url: str, redis_client: redis.Redis, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path
) -> None:
    release = openai_server.released_event()
    openai_server.script(Reply(content=GOOD, block=release), Reply(content=GOOD))
    env = worker_env(redis_url, QUEUE, tmp_path / "data", openai_server.url, embed_model_path,
                     soft_shutdown_timeout=1, llm_timeout=20)
    env["REMAP_SIGTERM"] = "SIGQUIT"
    first = CeleryWorker(env, QUEUE, tmp_path / "first.log").start()
    try:
        run_id = write_run(redis_client, "bank-cold")
        enqueue(producer(redis_url), QUEUE, "bank-cold", run_id)
        openai_server.wait_for_requests(1)
        assert first.process is not None
        first.process.send_signal(signal.SIGTERM)
        first.process.wait(30)
        # It did not wait for the task: the LLM call it was making is still unanswered.
        assert not release.is_set() and "timed out" not in first.log()
        assert run_state(redis_client, run_id).get("state") == "closed"
    finally:
        first.stop()
    release.set()

    env.pop("REMAP_SIGTERM")
    second = CeleryWorker(env, QUEUE, tmp_path / "second.log").start()
    try:
        wait_state(redis_client, run_id, RUN_DISTILLED)
        assert len(openai_server.chat_requests()) == 2  # asked again: the first answer never came
        assert run_state(redis_client, run_id)["distill_attempts"] == "2"
    finally:
        second.stop()


def wait_for_log(worker: CeleryWorker, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in worker.log():
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.05)
