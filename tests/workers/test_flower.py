"""Flower watches the worker service: `celery -A workers flower` with basic auth, against real processes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from lessonbank.core.constants import DISTILL_TASK, RUN_DISTILLED
from tests.fixtures.celery_worker import REPO, CeleryWorker, enqueue, producer, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.redis_server import free_port
from tests.fixtures.runs import run_state, write_run

pytestmark = pytest.mark.slow

QUEUE = "flower-test"
AUTH = ("operator", "flower-pass-123")
SECRET_STEP_TEXT = "columns: date;region;amount"  # written into the run's step records by write_run


@pytest.fixture
def worker_and_flower(
    redis_url: str, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path
) -> Iterator[tuple[CeleryWorker, str]]:
    env = worker_env(redis_url, QUEUE, tmp_path / "data", openai_server.url, embed_model_path)
    worker = CeleryWorker(env, QUEUE, tmp_path / "worker.log").start()
    port = free_port()
    flower_env = {**env, "FLOWER_BASIC_AUTH": ":".join(AUTH)}
    log = (tmp_path / "flower.log").open("wb")
    flower = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "lessonbank.workers", "flower", f"--port={port}", "--address=127.0.0.1"],
        cwd=REPO, env=flower_env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/healthcheck", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert flower.poll() is None, (tmp_path / "flower.log").read_text()
            time.sleep(0.3)
        else:
            raise AssertionError("flower did not start:\n" + (tmp_path / "flower.log").read_text())
        yield worker, base
    finally:
        flower.terminate()
        try:
            flower.wait(15)
        except subprocess.TimeoutExpired:
            flower.kill()
        log.close()
        worker.stop()


def poll(fetch, predicate, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = fetch()
        if predicate(value):
            return value
        time.sleep(0.5)
    raise AssertionError(f"condition not met in {timeout}s; last value: {value!r}")


def test_flower_shows_worker_task_and_queue(
    worker_and_flower: tuple[CeleryWorker, str],
    openai_server: FakeOpenAI,
    redis_client: redis.Redis,
    redis_url: str,
) -> None:
    worker, base = worker_and_flower
    client = httpx.Client(base_url=base, auth=AUTH, timeout=10)

    # Unauthenticated API calls are refused.
    for path in ("/api/workers", "/api/tasks", "/api/queues/length"):
        assert httpx.get(base + path, timeout=10).status_code == 401
    assert httpx.get(base + "/api/tasks", auth=("operator", "wrong"), timeout=10).status_code == 401

    # The worker is listed.
    workers = poll(lambda: client.get("/api/workers", params={"refresh": "true"}).json(), lambda w: bool(w))
    assert any(name.startswith("lbtest-") for name in workers)

    # A distilled run appears as a SUCCESS task whose args are only bank and run id.
    openai_server.script(Reply(content=lessons_json(("fact", "The sales CSV uses ';' as separator."))))
    run_id = write_run(redis_client, "flower-bank")
    enqueue(producer(redis_url), QUEUE, "flower-bank", run_id)
    poll(lambda: run_state(redis_client, run_id).get("state"), lambda s: s == RUN_DISTILLED)
    tasks = poll(
        lambda: client.get("/api/tasks").json(),
        lambda t: any(v.get("name") == DISTILL_TASK and v.get("state") == "SUCCESS" for v in t.values()),
    )
    [task] = [v for v in tasks.values() if v.get("name") == DISTILL_TASK]
    assert run_id in task["args"] and "flower-bank" in task["args"]
    assert SECRET_STEP_TEXT not in str(task) and "sales.csv" not in str(task)

    # The queue length is reported for the project's queue.
    queues = client.get("/api/queues/length").json()
    assert any(q["name"] == QUEUE and q["messages"] == 0 for q in queues["active_queues"])

    # Only /healthcheck is open (for the container's health check); the Prometheus /metrics asks for Flower's
    # credentials like every other page. The metrics name tasks and workers, never a task's arguments.
    assert httpx.get(base + "/healthcheck", timeout=10).status_code == 200
    assert httpx.get(base + "/metrics", timeout=10).status_code == 401
    assert httpx.get(base + "/metrics", auth=("operator", "wrong"), timeout=10).status_code == 401
    metrics = poll(lambda: client.get("/metrics").text, lambda text: DISTILL_TASK in text)
    assert "flower_events_total" in metrics
    assert run_id not in metrics and "flower-bank" not in metrics and SECRET_STEP_TEXT not in metrics
    for path in ("/", "/tasks", "/workers", "/broker", f"/task/{task['uuid']}"):  # every page but the health check
        assert httpx.get(base + path, timeout=10, follow_redirects=False).status_code == 401, path

