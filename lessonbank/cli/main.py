"""``lessonbank`` command group: builds settings once and hands them to every subcommand."""

from __future__ import annotations

import importlib
import logging

import click

from lessonbank.cli.context import CliContext
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import Settings

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
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("--redis-url", envvar="LESSONBANK_REDIS_URL", default=None, help="Redis URL (LESSONBANK_REDIS_URL).")
@click.version_option(package_name="lessonbank")
@click.pass_context
def cli(ctx: click.Context, verbose: int, redis_url: str | None) -> None:
    """lessonbank: memory across runs for smolagents agents."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings(redis_url=redis_url) if redis_url else Settings()
    except ConfigurationError as e:
        raise click.ClickException(str(e)) from None
    ctx.obj = CliContext(settings=settings)


if __name__ == "__main__":
    cli()
