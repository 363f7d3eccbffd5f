"""The worker's main process owns the embedded store — also when another process held it at start-up."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lessonbank.core.settings import Settings
from lessonbank.core.store.local import open_local_store
from tests.fixtures.celery_worker import CeleryWorker, worker_env
from tests.fixtures.openai_server import FakeOpenAI
from tests.fixtures.redis_server import RedisServer

pytestmark = pytest.mark.slow


def test_a_worker_owns_the_store_once_the_cli_lets_go_of_it(redis_url: str, openai_server: FakeOpenAI,
                                                             embed_model_path: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    held = open_local_store(Settings(_env_file=None, redis_url=redis_url, data_dir=data,
                                     embed_model_path=embed_model_path))
    held.ensure_collection()
    env = worker_env(redis_url, "lifecycle", data, openai_server.url, embed_model_path)
    worker = CeleryWorker(env, "lifecycle", tmp_path / "worker.log").start(wait_for=("ready.", "tries to own it"))
    try:
        held.close()  # the CLI command ends
        deadline = time.monotonic() + 30
        while "now serves the lesson store" not in worker.log():
            assert time.monotonic() < deadline, worker.log()[-2000:]
            time.sleep(0.2)
        with pytest.raises(Exception, match="held by another process"):
            open_local_store(Settings(_env_file=None, redis_url=redis_url, data_dir=data,
                                      embed_model_path=embed_model_path))
    finally:
        worker.stop()


def test_a_worker_says_at_start_when_redis_may_evict_or_lose_its_keys(own_redis: RedisServer, openai_server: FakeOpenAI,
                                                              embed_model_path: Path, tmp_path: Path) -> None:
    admin = own_redis.client()
    admin.config_set("maxmemory", "256mb")
    admin.config_set("maxmemory-policy", "allkeys-lru")
    env = worker_env(own_redis.url, "evicting", tmp_path / "data", openai_server.url, embed_model_path)
    worker = CeleryWorker(env, "evicting", tmp_path / "worker.log").start(wait_for=("ready.",))
    try:
        deadline = time.monotonic() + 10
        while "maxmemory-policy allkeys-lru" not in worker.log():
            assert time.monotonic() < deadline, worker.log()[-2000:]
            time.sleep(0.1)
        [line] = [line for line in worker.log().splitlines() if "maxmemory-policy" in line]
        assert "WARNING" in line and "set maxmemory-policy noeviction for lessonbank's Redis" in line
        [line] = [line for line in worker.log().splitlines() if "keeps nothing on disk" in line]  # --save ''
        assert "WARNING" in line and "set appendonly yes for lessonbank's Redis" in line
    finally:
        worker.stop()
