"""``lessonbank`` command group: builds settings once and hands them to every subcommand."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

import click

from lessonbank.cli.context import CliContext
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.extras import missing_extra
from lessonbank.core.settings import service_settings

# command name -> "module:attribute"; a command's module is imported only when it is used (or listed).
COMMANDS = {
    "demo": "lessonbank.cli.demo:demo",
    "worker": "lessonbank.cli.worker:worker",
    "instructions": "lessonbank.cli.instructions:instructions",
    "lessons": "lessonbank.cli.lessons:lessons",
    "migrate": "lessonbank.cli.migrate:migrate",
    "banks": "lessonbank.cli.banks:banks",
    "status": "lessonbank.cli.status:status",
    "dead-letters": "lessonbank.cli.dead_letters:dead_letters",
    "spool": "lessonbank.cli.spool:spool",
    "llm": "lessonbank.cli.llm:llm",
    "embed": "lessonbank.cli.embed:embed",
    "report": "lessonbank.cli.report:report",
    "runs": "lessonbank.cli.runs:runs",
    "tools": "lessonbank.cli.tools:tools",
    "feedback": "lessonbank.cli.feedback:feedback",
}


class LazyGroup(click.Group):
    """A group whose subcommands load on first use, so `lessonbank status` does not import smolagents."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attribute = target.split(":")
        try:
            command = getattr(importlib.import_module(module), attribute)
        except ModuleNotFoundError as e:
            if (e.name or "").startswith("lessonbank"):
                raise
            return _needs_extra(cmd_name, missing_extra(e, f"`lessonbank {cmd_name}`"))
        assert isinstance(command, click.Command)
        return command


def _needs_extra(name: str, error: ConfigurationError) -> click.Command:
    """A stand-in for a command whose module needs an extra that is not installed: it says which."""
    def explain() -> None:
        raise click.ClickException(str(error))

    needs = f"(needs {str(error).rsplit(': ', 1)[-1]})"
    return click.Command(name, callback=explain, help=str(error), short_help=needs,
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True})


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("--redis-url", envvar="LESSONBANK_REDIS_URL", default=None, help="Redis URL (LESSONBANK_REDIS_URL).")
@click.option("--env-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Read settings from this file too (KEY=value lines; the environment wins). Default: "
                   "LESSONBANK_ENV_FILE, else none: ./.env is not read unless named.")
@click.version_option(package_name="lessonbank")
@click.pass_context
def cli(ctx: click.Context, verbose: int, redis_url: str | None, env_file: Path | None) -> None:
    """lessonbank: memory across runs for smolagents agents."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = service_settings(env_file, **({"redis_url": redis_url} if redis_url else {}))
    except ConfigurationError as e:
        raise click.ClickException(str(e)) from None
    ctx.obj = CliContext(settings=settings)


if __name__ == "__main__":
    cli()
