"""`lessonbank worker` passes Celery's options through to the project's worker."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from lessonbank.cli.main import cli
from lessonbank.cli.worker import worker_argv
from lessonbank.workers.app import app, configure
from tests.fixtures.celery_worker import CeleryWorker, worker_env
from tests.fixtures.openai_server import FakeOpenAI
from tests.fixtures.redis_server import RedisServer


@pytest.fixture(autouse=True)
def restore_app_settings() -> Iterator[None]:
    before = app.settings
    yield
    configure(app, before)


def test_argv_adds_the_project_queue_unless_named() -> None:
    assert worker_argv("lb", ("--pool", "solo")) == ["worker", "--pool", "solo", "-Q", "lb"]
    assert worker_argv("lb", ("-Q", "other")) == ["worker", "-Q", "other"]
    assert worker_argv("lb", ("--queues=x,y", "-B")) == ["worker", "--queues=x,y", "-B"]


def test_options_are_passed_through(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(app, "worker_main", lambda argv: seen.append(argv))
    result = CliRunner().invoke(cli, ["--redis-url", redis_url, "worker", "--pool", "prefork", "-c", "2", "-B",
                                      "--loglevel", "INFO"])
    assert result.exit_code == 0, result.output
    assert seen == [["worker", "--pool", "prefork", "-c", "2", "-B", "--loglevel", "INFO", "-Q", "lessonbank"]]
    assert app.conf.broker_url == redis_url and app.settings.redis_url == redis_url


def test_bad_limits_are_a_one_line_error(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    monkeypatch.setenv("LESSONBANK_VISIBILITY_TIMEOUT", "10")
    result = CliRunner().invoke(cli, ["--redis-url", redis_url, "worker"])
    assert result.exit_code == 1 and "visibility_timeout must exceed" in result.output


@pytest.mark.slow
def test_lessonbank_worker_starts_and_warm_shuts_down(tmp_path: Path, embed_model_path: Path,
                                                      openai_server: FakeOpenAI) -> None:
    server = RedisServer(tmp_path / "redis").start()
    queue = f"cli-{uuid.uuid4().hex[:6]}"
    env = worker_env(server.url, queue, tmp_path / "data", openai_server.url, embed_model_path)
    command = [sys.executable, "-c", "from lessonbank.cli.main import cli; cli()", "worker"]
    worker = CeleryWorker(env, queue, tmp_path / "worker.log", command=command)
    try:
        worker.start()
        assert f".> {queue}" in worker.log() and "lessonbank.distill_run" in worker.log()
        assert worker.stop() == 0
        assert "Warm shutdown" in worker.log()
    finally:
        worker.stop()
        server.stop()
