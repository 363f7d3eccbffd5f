"""Many hosts, one Redis: one embedded store per Redis, the sweeper's schedule run once per cluster."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from lessonbank.core.constants import STORE_CLAIM_KEY
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import Settings
from lessonbank.workers.owner import claim_store, local_store_id
from tests.fixtures.celery_worker import CeleryWorker, worker_env
from tests.fixtures.openai_server import FakeOpenAI


def test_the_first_store_binds_the_redis_and_another_is_refused(settings: Settings, redis_client: redis.Redis,
                                                                tmp_path: Path) -> None:
    claim_store(settings, redis_client)
    claim_store(settings, redis_client)  # the same store again (a restart, a standby on its volume)
    held = json.loads(redis_client.get(STORE_CLAIM_KEY) or b"{}")
    assert held["id"] == local_store_id(settings) and held["path"] == str(settings.resolved_qdrant_path)
    other = settings.model_copy(update={"data_dir": tmp_path / "other-host"})
    with pytest.raises(ConfigurationError, match="LESSONBANK_QDRANT_URL") as refused:
        claim_store(other, redis_client)
    assert str(settings.resolved_qdrant_path) in str(refused.value) and "\n" not in str(refused.value)
    assert json.loads(redis_client.get(STORE_CLAIM_KEY) or b"{}") == held  # the binding stays the first store's


def test_a_store_keeps_its_id_across_restarts(settings: Settings) -> None:
    first = local_store_id(settings)
    assert local_store_id(settings) == first and len(first) == 32


@pytest.mark.slow
def test_a_second_worker_with_its_own_data_dir_refuses_to_start(redis_url: str, openai_server: FakeOpenAI,
                                                                embed_model_path: Path, tmp_path: Path) -> None:
    """Two hosts sharing one Redis, each with its own LESSONBANK_DATA_DIR and no Qdrant server: the second worker
    stops with one line instead of serving half of every bank."""
    first = CeleryWorker(worker_env(redis_url, "hosts", tmp_path / "host-a", openai_server.url, embed_model_path),
                         "hosts", tmp_path / "a.log").start()
    try:
        second = CeleryWorker(worker_env(redis_url, "hosts", tmp_path / "host-b", openai_server.url,
                                         embed_model_path), "hosts", tmp_path / "b.log")
        with pytest.raises(RuntimeError, match="worker exited"):
            second.start(timeout=120)
        lines = [line for line in second.log().splitlines() if "LESSONBANK_QDRANT_URL" in line]
        assert len(lines) == 1 and lines[0].startswith("lessonbank: this Redis's lessons are in the embedded store")
        assert str(tmp_path / "host-a") in lines[0]
        assert "serving the lesson store" not in second.log()
        # the first one still serves every request
        client = redis.Redis.from_url(redis_url)
        assert client.get(STORE_CLAIM_KEY) is not None
        assert "serving the lesson store" in first.log()
    finally:
        first.stop()


@pytest.mark.slow
def test_a_worker_on_the_same_store_waits_as_a_standby(redis_url: str, openai_server: FakeOpenAI,
                                                       embed_model_path: Path, tmp_path: Path) -> None:
    """A second worker on the same data directory (the same host, or the same volume) is no second store: it starts
    and serves the store once the first lets go of it."""
    env = worker_env(redis_url, "standby", tmp_path / "shared", openai_server.url, embed_model_path)
    first = CeleryWorker(env, "standby", tmp_path / "a.log").start()
    second = CeleryWorker(env, "standby", tmp_path / "b.log")
    try:
        second.start(wait_for=("ready.", "tries to own it"))
        first.stop()
        deadline = time.monotonic() + 60
        while "now serves the lesson store" not in second.log():
            assert time.monotonic() < deadline, second.log()[-2000:]
            time.sleep(0.2)
    finally:
        first.stop()
        second.stop()
