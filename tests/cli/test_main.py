"""The command group: every command and subcommand answers --help; an unknown one fails in one line."""

from __future__ import annotations

import click
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
        result = runner.invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage:" in result.output and len(result.output.splitlines()) > 3, path


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
