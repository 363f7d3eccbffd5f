"""Shared fixtures: a real redis-server per session (wiped per test), settings pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from lessonbank.core.settings import Settings
from tests.fixtures.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One real redis-server for the whole session, on a free loopback port."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """URL of the session redis-server, flushed before each test."""
    redis_server.client().flushall()
    yield redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, free to be killed, frozen and restarted."""
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    """Settings pointing at the test Redis and a temp data dir; nothing from the user's environment. The recorder's
    Redis timeout is one a busy machine does not hit (the default 0.25 s is met by an idle one): a test that reads
    Redis right after ``agent.run`` finds the run there, not in the spool. Tests of the timeout set their own."""
    return Settings(
        _env_file=None,
        redis_url=redis_url,
        data_dir=tmp_path / "data",
        openai_base_url=None,
        openai_api_key=None,
        redis_timeout=5.0,
    )

from tests.fixtures.embed_model import embed_model_path, embedder  # noqa: E402,F401
from tests.fixtures.llama_server import llama_server  # noqa: E402,F401
from tests.fixtures.openai_server import openai_server  # noqa: E402,F401
from tests.fixtures.spans import spans  # noqa: E402,F401
