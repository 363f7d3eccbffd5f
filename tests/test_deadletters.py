"""Dead letters: recorded, listed and retried (library and `lessonbank dead-letters`)."""

from __future__ import annotations

import base64
import json

import pytest
import redis
from click.testing import CliRunner

from lessonbank.cli.main import cli
from lessonbank.constants import DEAD_LETTERS_KEY, DISTILL_TASK, run_steps_key
from tests.fixtures.runs import run_state, write_run
from workers import deadletters
from workers.runs import mark_dead


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

    sent: list[tuple[str, str]] = []
    deadletters.retry(redis_client, first, lambda bank, rid: sent.append((bank, rid)))
    assert sent == [("b", first)]
    assert deadletters.get(redis_client, first) is None
    assert run_state(redis_client, first)["state"] == "closed"
    assert redis_client.ttl(run_steps_key(first)) == -1  # kept until the retry finishes


def test_retry_of_expired_steps_keeps_nothing_broken(redis_client: redis.Redis) -> None:
    run_id = dead_run(redis_client)
    redis_client.delete(run_steps_key(run_id))
    with pytest.raises(deadletters.StepsExpired):
        deadletters.retry(redis_client, run_id, lambda bank, rid: None)
    assert deadletters.get(redis_client, run_id) is not None
    with pytest.raises(KeyError):
        deadletters.retry(redis_client, "nope", lambda bank, rid: None)


def test_failed_enqueue_keeps_the_dead_letter(redis_client: redis.Redis) -> None:
    run_id = dead_run(redis_client)

    def broken(bank: str, rid: str) -> None:
        raise redis.ConnectionError("broker down")

    with pytest.raises(redis.ConnectionError):
        deadletters.retry(redis_client, run_id, broken)
    assert deadletters.get(redis_client, run_id) is not None


def test_cli_list(redis_url: str, redis_client: redis.Redis) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["--redis-url", redis_url, "dead-letters", "list"]).output.strip() == "no dead letters"
    run_id = dead_run(redis_client)
    result = runner.invoke(cli, ["--redis-url", redis_url, "dead-letters", "list"])
    assert result.exit_code == 0 and run_id in result.output and "attempts=1" in result.output
    as_json = runner.invoke(cli, ["--redis-url", redis_url, "dead-letters", "list", "--json"])
    assert json.loads(as_json.output)["run_id"] == run_id


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
