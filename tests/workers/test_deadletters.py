"""Dead letters: recorded, listed and retried (library and `lessonbank dead-letters`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from redis.backoff import NoBackoff
from redis.retry import Retry

from lessonbank.cli.main import cli
from lessonbank.core.constants import (
    DEAD_LETTERS_KEY,
    DISTILL_TASK,
    JOBS_DUE_KEY,
    WAITING_RUNS_KEY,
    job_key,
    run_steps_key,
)
from lessonbank.core.exceptions import NotFound
from lessonbank.core.runs import mark_dead, mark_distilled
from lessonbank.workers import deadletters
from tests.fixtures.recorded import distill_args
from tests.fixtures.relay import Relay
from tests.fixtures.runs import run_state, write_run


def dead_run(client: redis.Redis, bank: str = "b", reason: str = "LLM rejected the request (400)") -> str:
    run_id = write_run(client, bank)
    deadletters.add(client, run_id, bank, reason, attempts=1)
    mark_dead(client, run_id, 3600)
    return run_id


def test_add_list_and_retry(redis_client: redis.Redis) -> None:
    first, second = dead_run(redis_client), dead_run(redis_client, bank="other")
    letters = deadletters.list_all(redis_client)
    assert [letter.run_id for letter in letters] == [first, second]
    assert letters[0].reason.startswith("LLM rejected") and letters[1].bank == "other"
    assert run_state(redis_client, first)["state"] == "dead" and redis_client.ttl(run_steps_key(first)) > 0

    deadletters.retry(redis_client, first, "q")
    assert distill_args(redis_client, "q") == [["b", first]]
    assert deadletters.get(redis_client, first) is None
    assert run_state(redis_client, first)["state"] == "closed"
    assert redis_client.ttl(run_steps_key(first)) == -1  # kept until the retry finishes


def test_retry_of_expired_steps_keeps_nothing_broken(redis_client: redis.Redis) -> None:
    run_id = dead_run(redis_client)
    redis_client.delete(run_steps_key(run_id))
    with pytest.raises(deadletters.StepsExpired):
        deadletters.retry(redis_client, run_id, "q")
    assert deadletters.get(redis_client, run_id) is not None
    assert distill_args(redis_client, "q") == []
    with pytest.raises(NotFound):
        deadletters.retry(redis_client, "nope", "q")


def test_redis_failing_during_the_retry_keeps_the_dead_letter(redis_client: redis.Redis, redis_server) -> None:
    """The reopen, the publish and the removal of the letter are one script: a connection that dies before
    its EVAL reaches the server (a real TCP cut, in a relay in front of the real server) leaves the run dead,
    its letter in place and nothing queued."""
    run_id = dead_run(redis_client)
    relay = Relay(redis_server.port, cut_before=b"EVAL").open()
    try:
        cut = redis.Redis.from_url(relay.url, socket_timeout=2, retry=Retry(NoBackoff(), 0))
        with pytest.raises(redis.ConnectionError):
            deadletters.retry(cut, run_id, "q")
    finally:
        relay.close()
    assert relay.cuts == 1  # the letter was read through the relay, the script never reached the server
    assert deadletters.get(redis_client, run_id) is not None
    assert run_state(redis_client, run_id)["state"] == "dead" and distill_args(redis_client, "q") == []


class _Between(redis.Redis):
    """A client that calls ``between()`` once, right after its first read of a dead letter."""

    between: Callable[[], None] | None = None

    def hget(self, name: Any, key: Any) -> Any:
        value = super().hget(name, key)
        if name == DEAD_LETTERS_KEY and self.between is not None:
            between, self.between = self.between, None
            between()
        return value


def test_a_retry_that_read_the_letter_before_another_retry_took_it_reopens_nothing(
        redis_client: redis.Redis) -> None:
    """Two retries of one letter overlap: the second reads the letter, then the first sends the run to the
    workers and the run is distilled. The second must not reopen (and distil again) the distilled run."""
    run_id = dead_run(redis_client, bank="bk")

    def first_retry_and_distil() -> None:
        deadletters.retry(redis_client, run_id, "q")
        mark_distilled(redis_client, run_id, ttl=3600, stats={"added": 1})

    second = _Between(connection_pool=redis_client.connection_pool)
    second.between = first_retry_and_distil
    with pytest.raises(NotFound):
        deadletters.retry(second, run_id, "q")
    assert second.between is None  # the first retry did run in between
    assert run_state(redis_client, run_id)["state"] == "distilled"
    assert distill_args(redis_client, "q") == [["bk", run_id]]  # queued once, by the first retry
    assert 0 < redis_client.ttl(run_steps_key(run_id)) <= 3600  # the distilled run's data still expires


def test_a_retry_drops_what_is_left_of_the_runs_job(redis_client: redis.Redis) -> None:
    """A job that failed for good leaves nothing that counts against the retry: its hash and due time go."""
    run_id = dead_run(redis_client)
    job = f"distill:{run_id}"
    redis_client.hset(job_key(job), mapping={"retries": "5"})
    redis_client.zadd(JOBS_DUE_KEY, {job: 1.0})
    deadletters.retry(redis_client, run_id, "q")
    assert not redis_client.exists(job_key(job)) and redis_client.zscore(JOBS_DUE_KEY, job) is None
    assert redis_client.zscore(WAITING_RUNS_KEY, run_id) is not None


def test_cli_list(redis_url: str, redis_client: redis.Redis) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["--redis-url", redis_url, "dead-letters", "list"]).output.strip() == "no dead letters"
    run_id = dead_run(redis_client)
    result = runner.invoke(cli, ["--redis-url", redis_url, "dead-letters", "list"])
    assert result.exit_code == 0 and run_id in result.output and "attempts=1" in result.output
    as_json = runner.invoke(cli, ["--redis-url", redis_url, "dead-letters", "list", "--json"])
    assert [letter["run_id"] for letter in json.loads(as_json.output)] == [run_id]


def _queued(client: redis.Redis, queue: str) -> list[tuple[str, list[str]]]:
    out = []
    for raw in client.lrange(queue, 0, -1):
        message = json.loads(raw)
        body = json.loads(base64.b64decode(message["body"]))
        out.append((message["headers"]["task"], body[0]))
    return out


def test_cli_retry_sends_the_task_to_the_queue(redis_url: str, redis_client: redis.Redis) -> None:
    run_id = dead_run(redis_client, bank="bk")
    result = CliRunner().invoke(cli, ["--redis-url", redis_url, "dead-letters", "retry", run_id])
    assert result.exit_code == 0, result.output
    assert _queued(redis_client, "lessonbank") == [(DISTILL_TASK, ["bk", run_id])]
    assert not redis_client.hexists(DEAD_LETTERS_KEY, run_id)


def test_cli_retry_all_and_errors(redis_url: str, redis_client: redis.Redis) -> None:
    runner = CliRunner()
    ids = {dead_run(redis_client), dead_run(redis_client)}
    assert runner.invoke(cli, ["--redis-url", redis_url, "dead-letters", "retry", "--all"]).exit_code == 0
    assert {args[1] for _, args in _queued(redis_client, "lessonbank")} == ids
    missing = runner.invoke(cli, ["--redis-url", redis_url, "dead-letters", "retry", "no-such-run"])
    assert missing.exit_code == 1 and "no dead letter for run no-such-run" in missing.output
    assert runner.invoke(cli, ["--redis-url", redis_url, "dead-letters", "retry"]).exit_code == 2
