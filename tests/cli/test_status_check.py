"""``lessonbank status --check``: a health check that exits 1 unless a worker is alive and its LLM answers, against
a real redis-server, real worker processes and a real HTTP server speaking the OpenAI protocol."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from lessonbank.core.settings import Settings
from lessonbank.workers.observe import Heartbeat
from tests.fixtures.celery_worker import CeleryWorker, worker_env
from tests.fixtures.openai_server import FakeOpenAI
from tests.fixtures.redis_server import free_port

pytestmark = pytest.mark.slow


def check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lessonbank.cli.main", "status", "--check", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def wait_for(predicate: object, timeout: float = 90.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


def test_check_fails_without_a_worker_and_passes_with_one_whose_llm_answers(
    tmp_path: Path, redis_url: str, embed_model_path: Path, openai_server: FakeOpenAI
) -> None:
    queue = f"check-{uuid.uuid4().hex[:6]}"
    env = worker_env(redis_url, queue, tmp_path / "data", openai_server.url, embed_model_path)
    alone = check(env)
    assert alone.returncode == 1, alone.stdout + alone.stderr
    assert alone.stderr.strip() == "Error: check failed: no live worker (start one: `lessonbank worker`)"
    worker = CeleryWorker(env, queue, tmp_path / "worker.log", concurrency=1).start()
    try:
        assert wait_for(lambda: openai_server.models_asked > 0), worker.log()[-2000:]
        assert wait_for(lambda: check(env).returncode == 0), check(env).stderr + worker.log()[-2000:]
        report = json.loads(check(env, "--json").stdout)
        assert report["check"] == {"ok": True, "problems": []} and report["workers_alive"] == 1
    finally:
        worker.stop()
    gone = check(env)
    assert gone.returncode == 1 and "no live worker" in gone.stderr


def test_check_fails_while_the_only_workers_llm_does_not_answer(settings: Settings, tmp_path: Path,
                                                                  redis_url: str, embed_model_path: Path) -> None:
    env = worker_env(redis_url, "check-llm", tmp_path / "data", f"http://127.0.0.1:{free_port()}/v1",
                     embed_model_path)
    beat = Heartbeat(settings.model_copy(update={"openai_base_url": env["OPENAI_BASE_URL"], "llm_timeout": 2.0}),
                     "nollm@host", serves_store=lambda: False)
    beat.start()  # probes the LLM (nothing listens there) in its thread, then beats
    try:
        assert wait_for(lambda: beat.info["llm"]["reachable"] is False, 60)
        beat.beat()
        result = check(env)
        assert result.returncode == 1
        assert result.stderr.startswith("Error: check failed: no live worker's LLM answered: LLM gpt-4o-mini at "), \
            result.stderr
        assert "did NOT answer" in result.stderr and len(result.stderr.splitlines()) == 1
    finally:
        beat.stop()


def test_a_worker_probes_its_llm_again_so_the_check_follows_it(settings: Settings, redis_url: str, tmp_path: Path,
                                                               embed_model_path: Path, openai_server: FakeOpenAI,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from lessonbank.workers.observe import heartbeat

    monkeypatch.setattr(heartbeat, "LLM_PROBE_INTERVAL", 0.5)
    env = worker_env(redis_url, "check-again", tmp_path / "data", openai_server.url, embed_model_path)
    beat = Heartbeat(settings.model_copy(update={"openai_base_url": openai_server.url, "distill_model": "fake-model"}),
                     "again@host", serves_store=lambda: False, interval=0.2)
    beat.start()
    try:
        assert wait_for(lambda: check(env).returncode == 0, 60)
        openai_server.models_status = 503  # the endpoint stops answering
        assert wait_for(lambda: check(env).returncode == 1, 60)
        assert "answered HTTP 503" in check(env).stderr
    finally:
        beat.stop()
