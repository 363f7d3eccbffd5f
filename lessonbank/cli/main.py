"""``lessonbank`` command group: builds settings once and hands them to every subcommand."""

from __future__ import annotations

import logging

import click
from pydantic import ValidationError

from lessonbank.cli.context import CliContext
from lessonbank.settings import Settings


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("--redis-url", envvar="LESSONBANK_REDIS_URL", default=None, help="Redis URL (LESSONBANK_REDIS_URL).")
@click.version_option(package_name="lessonbank")
@click.pass_context
def cli(ctx: click.Context, verbose: int, redis_url: str | None) -> None:
    """lessonbank: memory across runs for smolagents agents."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings()
        if redis_url:
            settings = settings.model_copy(update={"redis_url": redis_url})
    except ValidationError as e:
        raise click.ClickException(f"invalid settings: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}") from e
    ctx.obj = CliContext(settings=settings)

from lessonbank.cli.llm import llm  # noqa: E402

cli.add_command(llm)

from lessonbank.cli.lessons import lessons  # noqa: E402

cli.add_command(lessons)

from lessonbank.cli.instructions import instructions  # noqa: E402

cli.add_command(instructions)

from lessonbank.cli.status import status  # noqa: E402

cli.add_command(status)

from lessonbank.cli.spool import spool  # noqa: E402

cli.add_command(spool)

from lessonbank.cli.worker import worker  # noqa: E402

cli.add_command(worker)

from lessonbank.cli.dead_letters import dead_letters  # noqa: E402

cli.add_command(dead_letters)

from lessonbank.cli.demo import demo  # noqa: E402

cli.add_command(demo)
