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
        settings = Settings(**({"redis_url": redis_url} if redis_url else {}))
    except ValidationError as e:
        raise click.ClickException(f"invalid settings: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}") from e
    ctx.obj = CliContext(settings=settings)
