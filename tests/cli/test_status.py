"""``lessonbank status`` against a real Redis and a real embedded store."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result
from qdrant_client import QdrantClient

from lessonbank.cli.main import cli
from lessonbank.core.constants import (
    DEAD_LETTERS_KEY,
    DISTILL_TASK,
    LLM_STATS_KEY,
    OPEN_RUNS_KEY,
    RECORDER_STATS_KEY,
    worker_key,
)
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson
from lessonbank.core.settings import Settings
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.workers.jobs import Job, acquire
from lessonbank.workers.observe import Heartbeat
from tests.fixtures.openai_server import FakeOpenAI
from tests.fixtures.redis_server import RedisServer, free_port


@pytest.fixture
def env(env: dict[str, str | None]) -> dict[str, str | None]:
    return {**env, "LESSONBANK_QUEUE": "lessonbank-test"}


def status(env: dict[str, str | None], *args: str) -> Result:
    return CliRunner().invoke(cli, ["status", *args], env=env)


def test_status_counts_everything(
    env: dict[str, str | None], redis_client: redis.Redis, embedder: FastEmbedEmbedder, tmp_path: Path
) -> None:
    redis_client.rpush("lessonbank-test", "m1", "m2", "m3")
    redis_client.rpush("lessonbank", "not this queue")
    redis_client.zadd(OPEN_RUNS_KEY, {"run-a": 1.0, "run-b": 2.0})
    redis_client.hset(DEAD_LETTERS_KEY, "run-c", "{}")
    redis_client.hset(LLM_STATS_KEY, "unusable", 4)
    spool = tmp_path / "data" / "spool"
    spool.mkdir(parents=True)
    (spool / "spool-1-aa.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    (spool / "spool-2-bb.jsonl").write_text('{"a": 3}\n')
    (spool / "notes.txt").write_text("ignored\n")
    client = QdrantClient(path=env["LESSONBANK_QDRANT_PATH"])
    store = LessonStore(client, embedder)
    store.upsert([Lesson.new("team", "fact", "One."), Lesson.new("team", "fact", "Two.")])
    store.upsert([Lesson.new("ops", "fact", "3")])
    store.set_status("ops", [Lesson.new("ops", "fact", "3").id], "forgotten")
    store.upsert([Lesson.new("ops", "approach", "Four.")])
    client.close()

    result = status(env, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["queue"] == "lessonbank-test" and report["queued"] == 3
    assert report["runs_in_progress"] == 2 and report["dead_letters"] == 1
    assert report["distilled_without_llm_lessons"] == 4
    assert report["spooled"] == 3 and report["spool_files"] == 2
    assert report["lessons"] == {"team": 2, "ops": 1}

    text = status(env).stdout
    assert "queue 'lessonbank-test': 3 task(s) waiting" in text
    assert "runs in progress: 2" in text and "dead letters: 1" in text
    assert "runs distilled without the LLM's lessons (its reply unusable after a repair; " in text
    assert "llm_error): 4" in text
    assert "spool: 3 record(s) in 2 file(s)" in text
    assert "  ops: 1" in text and "  team: 2" in text


def test_status_of_an_empty_install(env: dict[str, str | None]) -> None:
    result = status(env, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["queued"] == report["runs_in_progress"] == report["dead_letters"] == report["spooled"] == 0
    assert report["lessons"] == {}
    assert "lessons: none yet" in status(env).stdout


def test_status_with_services_away(env: dict[str, str | None]) -> None:
    no_redis = status({**env, "LESSONBANK_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    assert no_redis.exit_code == 1 and no_redis.stdout == ""
    assert no_redis.stderr.startswith("Error: Redis at redis://127.0.0.1:") and len(no_redis.stderr.splitlines()) == 1

    no_qdrant = status({**env, "LESSONBANK_QDRANT_URL": f"http://127.0.0.1:{free_port()}"}, "--json")
    assert no_qdrant.exit_code == 1
    report = json.loads(no_qdrant.stdout)  # what could be counted is still shown
    assert report["lessons"] is None and "Qdrant did not answer" in report["store_error"]
    assert len(no_qdrant.stderr.splitlines()) == 1 and "Qdrant did not answer" in no_qdrant.stderr


def test_status_help() -> None:
    result = CliRunner().invoke(cli, ["status", "--help"])
    assert result.exit_code == 0 and "--json" in result.output


def test_status_shows_workers_retries_and_the_recorder(
    env: dict[str, str | None], settings: Settings, redis_client: redis.Redis, openai_server: FakeOpenAI
) -> None:
    beat = Heartbeat(settings.model_copy(update={"openai_base_url": openai_server.url, "distill_model": "m1"}),
                     "w1@host", serves_store=lambda: False)
    beat.start(probe=False)
    Heartbeat(settings, "gone@host").beat()  # a worker that stopped beating: its heartbeat expired
    redis_client.delete(worker_key("gone@host"))
    waiting = Job("distill:run-r", DISTILL_TASK, ["team", "run-r"], "lessonbank-test")
    lease, _ = acquire(redis_client, waiting, 60, 1)
    assert lease is not None and lease.retry(120.0)  # a transient failure: due again in two minutes
    held, _ = acquire(redis_client, Job("distill:run-h", DISTILL_TASK, ["team", "run-h"], "lessonbank-test"), 60, 0)
    redis_client.hset(RECORDER_STATS_KEY, mapping={"delivered": 42, "spooled": 3})
    try:
        result = status(env, "--json")
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["workers_alive"] == 1
        alive, gone = report["workers"]
        assert alive["name"] == "w1@host" and alive["alive"] and alive["llm"]["model"] == "m1"
        assert alive["llm"]["base_url"] == openai_server.url and alive["store"] == "through the owner"
        assert gone["name"] == "gone@host" and gone["alive"] is False
        assert report["waiting_for_retry"] == 1 and report["in_hand"] == 1
        [retry] = report["retrying"]
        assert (retry["run_id"], retry["bank"], retry["retries"]) == ("run-r", "team", 2)
        assert 100 < retry["due_in_s"] <= 120
        assert report["recorder"] == {"delivered": 42, "spooled": 3}

        text = status(env).stdout
        assert "workers alive: 1" in text and "w1@host" in text and "LLM m1 at " + openai_server.url in text
        assert "gone@host: gone" in text and "waiting for a retry: 1" in text
        assert "run run-r (bank team)" in text and "42 record(s) delivered, 3 spooled" in text
    finally:
        beat.stop()
        if held is not None:
            held.finish()
    no_worker = status(env).stdout
    assert "workers alive: 0 (start one: `lessonbank worker`)" in no_worker


def test_a_worker_whose_clock_is_behind_is_seen_beating_now(
    env: dict[str, str | None], settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heartbeat is written in Redis's clock: ``status`` on another machine reads it against the same clock.
    In the worker's own clock, a worker 2 h behind would show as last seen 2 h ago while it beats."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 7200)  # the worker's machine
    Heartbeat(settings, "late@host", serves_store=lambda: False).beat()
    monkeypatch.setattr(time, "time", real)
    result = status(env, "--json")
    assert result.exit_code == 0, result.output
    [late] = json.loads(result.stdout)["workers"]
    assert late["name"] == "late@host" and late["alive"] and late["last_seen_s"] < 5
    assert abs(late["at"] - redis_client.time()[0]) < 5


def test_status_warns_when_redis_may_evict(env: dict[str, str | None], own_redis: RedisServer) -> None:
    admin = own_redis.client()
    env = {**env, "LESSONBANK_REDIS_URL": own_redis.url}
    assert "maxmemory" not in status(env).stdout and json.loads(status(env, "--json").stdout)["redis_eviction"] == ""
    admin.config_set("maxmemory", "64mb")
    admin.config_set("maxmemory-policy", "allkeys-lfu")
    text = status(env).stdout
    assert "warning: Redis may evict any key: the queue, runs in progress and their records" in text
    assert "(maxmemory-policy allkeys-lfu); set maxmemory-policy noeviction" in text
    assert "maxmemory-policy allkeys-lfu" in json.loads(status(env, "--json").stdout)["redis_eviction"]


def test_status_says_when_redis_keeps_nothing_on_disk_or_refuses_writes(env: dict[str, str | None],
                                                                       own_redis: RedisServer) -> None:
    """A Redis without AOF or RDB loses the queue at its next restart; a full one (``noeviction``) refuses writes:
    the runs waiting for distillation wait for it, and status says both."""
    from lessonbank.core.constants import WAITING_RUNS_KEY

    admin = own_redis.client()
    env = {**env, "LESSONBANK_REDIS_URL": own_redis.url}
    found = json.loads(status(env, "--json").stdout)
    assert "keeps nothing on disk" in found["redis_persistence"] and found["redis_refuses_writes"] == ""
    assert "warning: Redis keeps nothing on disk" in status(env).stdout
    admin.config_set("appendonly", "yes")
    assert json.loads(status(env, "--json").stdout)["redis_persistence"] == ""
    admin.zadd(WAITING_RUNS_KEY, {"run-a": 1.0, "run-b": 2.0})
    admin.config_set("maxmemory", 1)  # below what it holds: every write refused
    try:
        found = json.loads(status(env, "--json").stdout)
        text = status(env).stdout
    finally:
        admin.config_set("maxmemory", 0)
    assert "maxmemory" in found["redis_refuses_writes"] and found["runs_waiting"] == 2
    assert "warning: Redis refuses writes (" in text and "2 run(s) wait for distillation until it takes them" in text
    assert json.loads(status(env, "--json").stdout)["redis_refuses_writes"] == ""


def test_status_prints_no_terminal_escapes(env: dict[str, str | None], redis_client: redis.Redis,
                                           embedder: FastEmbedEmbedder) -> None:
    client = QdrantClient(path=env["LESSONBANK_QDRANT_PATH"])
    LessonStore(client, embedder).upsert([Lesson.new("evil\x1b[2J\x1b[31m", "fact", "The export API needs a version.")])
    client.close()
    run_id = "run\x1b]0;PWNED\x07\x9b31m" + "r" * 500
    waiting = Job(f"distill:{run_id}", DISTILL_TASK, ["team\x1b[31m", run_id], "lessonbank-test")
    lease, _ = acquire(redis_client, waiting, 60, 1)
    assert lease is not None and lease.retry(120.0)
    result = status(env)
    assert result.exit_code == 0, result.output
    assert not set(result.stdout) & set("\x1b\x07\x9b")
    lines = result.stdout.splitlines()
    assert "  evil [2J [31m: 1" in lines
    retry = next(line for line in lines if line.startswith("  run run ]0;PWNED 31mrrr"))
    assert "(bank team [31m): " in retry and len(retry) < 200  # the run id capped


def test_status_with_redis_away_at_an_ipv6_address(env: dict[str, str | None]) -> None:
    port = free_port()
    result = status({**env, "LESSONBANK_REDIS_URL": f"redis://:s3cret@[::1]:{port}/0"})
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert result.stderr.startswith(f"Error: Redis at redis://:**@[::1]:{port}/0 is unreachable")
    assert "s3cret" not in result.output


def test_counts_whose_names_are_not_utf8_are_shown_not_fatal(redis_url: str) -> None:
    from lessonbank.cli.status import redis_counts
    from lessonbank.core.constants import DROPPED_KEY

    client = redis.Redis.from_url(redis_url)
    client.hset(DROPPED_KEY, mapping={b"vague": 2, b"bad\xff": 1})  # written by something other than lessonbank
    counts = redis_counts(client, "lessonbank")
    assert counts["dropped_by_gate"] == {"bad\ufffd": 1, "vague": 2}
