"""`lessonbank feedback` and `lessonbank.feedback`: a user's verdict on a run, before or after distillation."""

from __future__ import annotations

import redis
from click.testing import CliRunner

import lessonbank
from lessonbank.cli.main import cli
from lessonbank.core.constants import CREDIT_TASK
from lessonbank.core.settings import Settings
from tests.fixtures.recorded import queued_tasks
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.runs import run_state, write_run


def test_feedback_before_distillation_is_kept_for_it(settings: Settings, redis_client: redis.Redis) -> None:
    run_id = write_run(redis_client, "b")
    assert lessonbank.feedback(run_id, success=False, note="wrong total", settings=settings) is True
    state = run_state(redis_client, run_id)
    assert (state["verdict"], state["verdict_source"], state["verdict_note"]) == ("failure", "user", "wrong total")
    assert queued_tasks(redis_client, settings.queue) == []  # distillation will read it


def test_feedback_after_distillation_queues_a_credit(settings: Settings, redis_client: redis.Redis) -> None:
    run_id = write_run(redis_client, "b", state="distilled")
    result = CliRunner().invoke(cli, ["--redis-url", settings.redis_url, "feedback", run_id, "--success"])
    assert result.exit_code == 0, result.output
    assert f"{run_id}: recorded as a success" in result.output
    assert queued_tasks(redis_client, settings.queue) == [(CREDIT_TASK, ["b", run_id])]


def test_unknown_run_and_missing_flag_are_one_line_errors(settings: Settings) -> None:
    runner = CliRunner()
    unknown = runner.invoke(cli, ["--redis-url", settings.redis_url, "feedback", "nope", "--failure"])
    assert unknown.exit_code == 1 and "no run nope in Redis" in unknown.output
    assert runner.invoke(cli, ["--redis-url", settings.redis_url, "feedback", "nope"]).exit_code == 2
    assert lessonbank.feedback("nope", True, settings=settings) is False


def test_a_unique_prefix_names_the_run_and_an_ambiguous_one_is_refused(settings: Settings,
                                                                     redis_client: redis.Redis) -> None:
    first = write_run(redis_client, "b", run_id="abc123" + "0" * 26)
    second = write_run(redis_client, "b", run_id="abc456" + "0" * 26)
    runner = CliRunner()
    result = runner.invoke(cli, ["--redis-url", settings.redis_url, "feedback", "abc1", "--failure"])
    assert result.exit_code == 0, result.output
    assert f"{first}: recorded as a failure" in result.output
    assert run_state(redis_client, first)["verdict"] == "failure"
    assert "verdict" not in run_state(redis_client, second)
    ambiguous = runner.invoke(cli, ["--redis-url", settings.redis_url, "feedback", "abc", "--success"])
    assert ambiguous.exit_code == 1 and "run id prefix 'abc' is ambiguous in Redis: 2 match" in ambiguous.output
    assert "verdict" not in run_state(redis_client, second)
    glob = runner.invoke(cli, ["--redis-url", settings.redis_url, "feedback", "*", "--success"])
    assert glob.exit_code == 1 and "no run * in Redis" in glob.output  # a glob character is not a wildcard


def test_redis_refusing_the_feedback_is_not_called_unreachable(own_redis: RedisServer) -> None:
    admin = own_redis.client()
    run_id = write_run(admin, "b")
    admin.execute_command("ACL", "SETUSER", "no-exists", "on", ">pw", "~*", "&*", "+@all", "-exists")
    url = f"redis://no-exists:pw@127.0.0.1:{own_redis.port}/0"
    refused = CliRunner().invoke(cli, ["--redis-url", url, "feedback", run_id, "--success"])
    assert refused.exit_code == 1 and len(refused.stderr.splitlines()) == 1, refused.output
    assert refused.stderr.startswith(f"Error: Redis failed, feedback for run {run_id} not recorded: ")
    assert "no permissions to run the 'exists' command" in refused.stderr

    admin.config_set("maxmemory", 1)  # Redis answers, reads work, writes are refused
    try:
        full = CliRunner().invoke(cli, ["--redis-url", own_redis.url, "feedback", run_id, "--success"])
    finally:
        admin.config_set("maxmemory", 0)
    assert full.exit_code == 1 and len(full.stderr.splitlines()) == 1, full.output
    assert full.stderr.startswith(f"Error: Redis failed, feedback for run {run_id} not recorded: command not allowed")
    assert "verdict" not in run_state(admin, run_id)
