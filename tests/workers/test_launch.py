"""``lessonbank.workers.launch``: a real worker process on the test Redis, ready inside the block and stopped after
it; a worker that exits or is late is a one-line error naming its log, and the process never outlives the call."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import redis

from lessonbank.core.exceptions import ServiceUnavailable
from lessonbank.workers import launch
from lessonbank.workers.launch import worker_process
from tests.fixtures.celery_worker import worker_env
from tests.fixtures.openai_server import FakeOpenAI

pytestmark = pytest.mark.slow


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen[bytes]]:
    """Every process the launcher starts (real processes: only kept for the test to look at)."""
    processes: list[subprocess.Popen[bytes]] = []

    class Recorded(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            processes.append(self)

    monkeypatch.setattr(launch.subprocess, "Popen", Recorded)
    return processes


def test_the_worker_is_ready_in_the_block_and_stopped_after_it(
        redis_url: str, redis_client: redis.Redis, openai_server: FakeOpenAI, embed_model_path: Path,
        tmp_path: Path) -> None:
    env = worker_env(redis_url, "launched", tmp_path / "data", openai_server.url, embed_model_path)
    log = tmp_path / "logs" / "worker.log"
    with worker_process(env, log, "launched", "launch-test") as process:
        assert process.poll() is None
        text = log.read_text()
        assert "ready." in text and "serving the lesson store at" in text
        assert f"launch-test-{os.getpid()}@" in text  # the node name: prefix and our pid
        assert any(b"launched" in key for key in redis_client.keys("_kombu.binding.*"))  # consumes its queue
    assert process.returncode is not None  # stopped (warm shutdown) when the block ended
    assert "Warm shutdown" in log.read_text()


def test_a_worker_that_exits_before_it_is_ready_is_a_one_line_error_naming_its_log(
        redis_url: str, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path,
        started: list[subprocess.Popen[bytes]]) -> None:
    env = worker_env(redis_url, "broken", tmp_path / "data", openai_server.url, embed_model_path,
                     task_time_limit=30)  # below the soft limit: the app refuses to start
    log = tmp_path / "worker.log"
    log.write_text("an earlier worker: celery@host ready.\nserving the lesson store at /elsewhere\n")
    with pytest.raises(ServiceUnavailable) as raised:
        with worker_process(env, log, "broken", "launch-test"):
            pytest.fail("the block ran without a ready worker")
    message = str(raised.value)
    assert len(message.splitlines()) == 1 and str(log) in message and "exited with code" in message, message
    assert "LESSONBANK_TASK_TIME_LIMIT" in log.read_text()  # why is in the log the message names
    [process] = started
    assert process.returncode not in (None, 0)


def test_a_worker_not_ready_in_time_is_an_error_and_is_stopped(
        redis_url: str, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path,
        started: list[subprocess.Popen[bytes]]) -> None:
    env = worker_env(redis_url, "late", tmp_path / "data", openai_server.url, embed_model_path)
    log = tmp_path / "worker.log"
    with pytest.raises(ServiceUnavailable, match=r"not ready after 0 s; see .*worker\.log$"):
        with worker_process(env, log, "late", "launch-test", ready_timeout=0):
            pytest.fail("the block ran without a ready worker")
    [process] = started
    assert process.returncode is not None  # not left running
