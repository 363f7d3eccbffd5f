"""``lessonbank status --worker`` / ``--beat``: a container's health check read from Redis, without Celery."""

from __future__ import annotations

import socket

import redis
from click.testing import CliRunner

from lessonbank.cli.main import cli
from lessonbank.core.constants import BEAT_LOCK_KEY, worker_key
from lessonbank.core.settings import Settings
from lessonbank.workers.observe import Heartbeat


def probe(env: dict[str, str | None], flag: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["status", flag], env=env)
    return result.exit_code, result.output.strip()


def test_the_worker_probe_passes_while_a_worker_of_this_host_beats(env: dict[str, str | None], settings: Settings,
                                                                   redis_client: redis.Redis) -> None:
    host = socket.gethostname()
    assert probe(env, "--worker") == (1, f"no worker on {host} has a current heartbeat")
    Heartbeat(settings, "celery@another-host").beat()  # another host's worker does not make this one healthy
    assert probe(env, "--worker")[0] == 1
    beat = Heartbeat(settings, f"celery@{host}", serves_store=lambda: False)
    beat.start(probe=False)
    try:
        assert probe(env, "--worker") == (0, f"worker celery@{host} is alive")
    finally:
        beat.stop()
    redis_client.delete(worker_key(f"celery@{host}"))  # its heartbeat expired
    assert probe(env, "--worker")[0] == 1


def test_the_beat_probe_passes_while_a_beat_holds_the_schedules_lock(env: dict[str, str | None],
                                                                     redis_client: redis.Redis) -> None:
    assert probe(env, "--beat") == (1, "no beat holds the schedule's lock")
    redis_client.set(BEAT_LOCK_KEY, "a beat", ex=60)
    assert probe(env, "--beat") == (0, "a beat holds the schedule's lock")


def test_a_probe_with_redis_away_fails(env: dict[str, str | None]) -> None:
    code, output = probe({**env, "LESSONBANK_REDIS_URL": "redis://127.0.0.1:9/0"}, "--worker")
    assert code == 1 and "unreachable" in output
