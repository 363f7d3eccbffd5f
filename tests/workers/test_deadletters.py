"""Dead letters: recorded, listed and retried (library and `lessonbank dead-letters`)."""

from __future__ import annotations

import base64
import json

import pytest
import redis
from click.testing import CliRunner
from redis.backoff import NoBackoff
from redis.retry import Retry

from lessonbank.cli.main import cli
from lessonbank.core.constants import DEAD_LETTERS_KEY, DISTILL_TASK, run_steps_key
from lessonbank.core.exceptions import NotFound
from lessonbank.core.runs import mark_dead
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
    """The reopen, the publish and the removal of the letter are one transaction: a connection that dies
    after MULTI and the queued commands but before EXEC (a real TCP cut, in a relay in front of the real
    server) leaves the run dead, its letter in place and nothing queued."""
    run_id = dead_run(redis_client)
    relay = Relay(redis_server.port, cut_before=b"EXEC").open()
    try:
        cut = redis.Redis.from_url(relay.url, socket_timeout=2, retry=Retry(NoBackoff(), 0))
        with pytest.raises(redis.ConnectionError):
            deadletters.retry(cut, run_id, "q")
    finally:
        relay.close()
    assert relay.cuts == 1  # the transaction reached the server, its EXEC did not
    assert deadletters.get(redis_client, run_id) is not None
    assert run_state(redis_client, run_id)["state"] == "dead" and distill_args(redis_client, "q") == []


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
