"""``lessonbank worker``: the worker service, with Celery's own worker options passed through."""

from __future__ import annotations

import click

from lessonbank.cli.context import CliContext, fail, pass_cli
from lessonbank.core.exceptions import ConfigurationError


def worker_argv(queue: str, celery_args: tuple[str, ...]) -> list[str]:
    """Celery's argv: the project's queue unless the caller names queues (-Q/--queues) themselves."""
    argv = ["worker", *celery_args]
    if not any(arg in ("-Q", "--queues") or arg.startswith(("-Q", "--queues=")) for arg in celery_args):
        argv += ["-Q", queue]
    return argv


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
@pass_cli
def worker(cli_ctx: CliContext, celery_args: tuple[str, ...]) -> None:
    """Run the worker service (`celery -A workers worker`); every option is Celery's (try --help)."""
    try:
        from lessonbank.workers.app import app, configure

        configure(app, cli_ctx.settings)
    except ConfigurationError as e:
        raise fail("invalid worker settings", e) from e
    import lessonbank.workers  # noqa: F401  (connects the service's signal handlers)

    app.worker_main(argv=worker_argv(cli_ctx.settings.queue, celery_args))
