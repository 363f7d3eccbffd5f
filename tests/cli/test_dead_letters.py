"""``lessonbank dead-letters list|retry``: one JSON document, readable times, runs named by unique id prefixes."""

from __future__ import annotations

import json

import redis
from click.testing import CliRunner, Result

from lessonbank.cli.main import cli
from lessonbank.core.runs import mark_dead
from lessonbank.workers import deadletters
from tests.fixtures.recorded import distill_args
from tests.fixtures.runs import write_run


def invoke(redis_url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--redis-url", redis_url, "dead-letters", *args])


def dead_run(client: redis.Redis, run_id: str, bank: str = "b") -> str:
    write_run(client, bank, run_id=run_id)
    deadletters.add(client, run_id, bank, "LLM rejected the request (400)\nwith a second line", attempts=2)
    mark_dead(client, run_id, 3600)
    return run_id


def test_list_prints_one_json_document_and_readable_times(redis_url: str, redis_client: redis.Redis) -> None:
    empty = invoke(redis_url, "list", "--json")
    assert empty.exit_code == 0 and json.loads(empty.stdout) == []
    first, second = dead_run(redis_client, "aaaa1111"), dead_run(redis_client, "aaaa2222", bank="other")
    letters = json.loads(invoke(redis_url, "list", "--json").stdout)
    assert [(item["run_id"], item["bank"], item["attempts"]) for item in letters] == [(first, "b", 2),
                                                                                      (second, "other", 2)]
    lines = invoke(redis_url, "list").stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"{first}  b  20") and " UTC  attempts=2  LLM rejected" in lines[0]
    assert lines[0].endswith("(400) with a second line")


def test_retry_takes_unique_prefixes(redis_url: str, redis_client: redis.Redis) -> None:
    first, second = dead_run(redis_client, "aaaa1111"), dead_run(redis_client, "aaaa2222")
    ambiguous = invoke(redis_url, "retry", "aaaa")
    assert ambiguous.exit_code == 1 and len(ambiguous.stderr.splitlines()) == 1
    assert "run id prefix 'aaaa' is ambiguous among the dead letters: 2 match" in ambiguous.stderr
    unknown = invoke(redis_url, "retry", "bbbb")
    assert unknown.exit_code == 1 and unknown.stderr.strip() == "Error: no dead letter for run bbbb"
    result = invoke(redis_url, "retry", "AAAA2")
    assert result.exit_code == 0 and result.stdout.strip() == f"{second}: sent to the workers"
    assert distill_args(redis_client) == [["b", second]]
    assert [letter.run_id for letter in deadletters.list_all(redis_client)] == [first]


def test_list_prints_no_terminal_escapes(redis_url: str, redis_client: redis.Redis) -> None:
    deadletters.add(redis_client, "run\x1b[2J-1", "bank\x1b[31mRED", "LLM rejected the request: 400 "
                    "\x1b]0;PWNED\x07\x1b[2J\x9b31m<html>bad</html>", attempts=3)
    [line] = invoke(redis_url, "list").stdout.splitlines()
    assert not set(line) & set("\x1b\x07\x9b")
    assert line.startswith("run [2J-1  bank [31mRED  20") and line.endswith("400 ]0;PWNED [2J 31m<html>bad</html>")
