"""The command group: every command and subcommand answers --help; an unknown one, or a bad setting, fails in one
line."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from lessonbank.cli.main import COMMANDS, cli


def all_command_paths() -> list[list[str]]:
    paths: list[list[str]] = []
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        paths.append([name])
        if isinstance(command, click.Group):
            paths += [[name, sub] for sub in command.list_commands(ctx)]
    return paths


def test_every_command_has_help() -> None:
    runner = CliRunner()
    paths = all_command_paths()
    assert {p[0] for p in paths} == set(COMMANDS)
    for path in paths:
        for flag in ("--help", "-h"):
            result = runner.invoke(cli, [*path, flag])
            assert result.exit_code == 0, (path, flag, result.output)
            assert "Usage:" in result.output and len(result.output.splitlines()) > 3, (path, flag)


def test_unknown_command_fails() -> None:
    result = CliRunner().invoke(cli, ["no-such-command"])
    assert result.exit_code != 0 and "No such command" in result.output


def test_status_does_not_import_the_agent_stack() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from click.testing import CliRunner; from lessonbank.cli.main import cli; "
        "CliRunner().invoke(cli, ['status', '--help']); "
        "print('smolagents' in sys.modules, 'lessonbank.demo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# (environment variable, bad value, start of the one line the group must print)
BAD_SETTINGS = [
    ("LESSONBANK_DISTILL_MAX_LESSONS", "-3",
     "LESSONBANK_DISTILL_MAX_LESSONS must be a whole number from 1 to 50 (got '-3')"),
    ("LESSONBANK_MIN_RELEVANCE", "5", "LESSONBANK_MIN_RELEVANCE must be a number from 0 to 1 (got '5')"),
    ("LESSONBANK_LOCAL_LLM_MODEL", "7b", "LESSONBANK_LOCAL_LLM_MODEL must be one of 0.5b, 1.5b (got '7b')"),
    ("LESSONBANK_REDACT_PATTERNS", "not json", "LESSONBANK_REDACT_PATTERNS must be a JSON list of regexes"),
    ("LESSONBANK_REDIS_URL", "localhost:6379", "LESSONBANK_REDIS_URL must be a URL starting with redis://"),
    ("LESSONBANK_REDIS_TIMEOUT", "-1", "LESSONBANK_REDIS_TIMEOUT must be a number of seconds above 0 (got '-1')"),
    ("LESSONBANK_HOLDOUT", "1.0", "LESSONBANK_HOLDOUT must be a number from 0 up to (not including) 1 (got '1.0')"),
    ("OPENAI_BASE_URL", "127.0.0.1:8080", "OPENAI_BASE_URL must be a URL starting with http:// or https://"),
]


@pytest.mark.parametrize(("variable", "value", "line"), BAD_SETTINGS, ids=[v for v, _, _ in BAD_SETTINGS])
def test_a_bad_setting_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str,
                                   line: str) -> None:
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    monkeypatch.setenv(variable, value)
    result = CliRunner().invoke(cli, ["status"])
    assert result.exit_code == 1
    assert len(result.output.splitlines()) == 1 and result.output.startswith(f"Error: {line}"), result.output


def test_a_bad_redis_url_option_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["--redis-url", "http://localhost:6379", "status"])
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1
    assert result.output.startswith("Error: LESSONBANK_REDIS_URL must be a URL starting with redis://")


def test_the_group_reads_an_env_file_only_when_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LESSONBANK_DISTILL_MAX_LESSONS", raising=False)
    monkeypatch.delenv("LESSONBANK_ENV_FILE", raising=False)
    monkeypatch.setenv("LESSONBANK_REDIS_URL", "http://not-read-while-the-file-is-bad")
    (tmp_path / ".env").write_text("LESSONBANK_DISTILL_MAX_LESSONS=0\n")
    (tmp_path / "service.env").write_text("LESSONBANK_DISTILL_MAX_LESSONS=0\n")
    unasked = CliRunner().invoke(cli, ["status"])  # ./.env is not read: the Redis URL is what fails
    assert unasked.exit_code == 1 and unasked.output.startswith("Error: LESSONBANK_REDIS_URL must be"), unasked.output
    assert "MAX_LESSONS" not in unasked.output
    for args, env in ((["--env-file", "service.env"], {}), ([], {"LESSONBANK_ENV_FILE": "service.env"})):
        result = CliRunner().invoke(cli, [*args, "status"], env=env)
        assert result.exit_code == 1 and "LESSONBANK_DISTILL_MAX_LESSONS must be" in result.output, args
    missing = CliRunner().invoke(cli, ["--env-file", "nowhere.env", "status"])
    assert missing.exit_code == 1
    assert missing.output.startswith("Error: the env file nowhere.env (--env-file or LESSONBANK_ENV_FILE) cannot be")
