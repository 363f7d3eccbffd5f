"""``lessonbank worker``: the worker service, with Celery's own worker options passed through.

It logs at INFO unless told otherwise (each run's outcome and each retry), and refuses to start
without an LLM to distill with or with limits that cannot work, in one line, before Celery starts. It
assembles the pinned embedding model folder first when it is missing (``model_files.ensure``).
"""

from __future__ import annotations

import click

from lessonbank import model_files
from lessonbank.cli.context import CliContext, fail, pass_cli
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.extras import missing_extra

DEFAULT_LOGLEVEL = "INFO"


def _names_option(celery_args: tuple[str, ...], short: str, long: str) -> bool:
    return any(
        arg in (short, long) or arg.startswith(f"{long}=") or (arg.startswith(short) and not arg.startswith("--"))
        for arg in celery_args
    )


def worker_argv(queue: str, celery_args: tuple[str, ...]) -> list[str]:
    """Celery's argv: the project's queue and INFO logging unless the caller chooses (-Q/--queues, -l/--loglevel)."""
    argv = ["worker", *celery_args]
    if not _names_option(celery_args, "-Q", "--queues"):
        argv += ["-Q", queue]
    if not _names_option(celery_args, "-l", "--loglevel"):
        argv += ["--loglevel", DEFAULT_LOGLEVEL]
    return argv


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
@pass_cli
@click.pass_context
def worker(ctx: click.Context, cli_ctx: CliContext, celery_args: tuple[str, ...]) -> None:
    """Run the worker service (`celery -A lessonbank.workers worker`); every option is Celery's, listed by -h.

    It needs an LLM to distill with (OPENAI_BASE_URL and/or OPENAI_API_KEY, LESSONBANK_DISTILL_MODEL) and
    Redis (LESSONBANK_REDIS_URL); `-B` also runs the sweeper's schedule (one per cluster). The embedding model
    folder (LESSONBANK_EMBED_MODEL_PATH, default DATA_DIR/models/<name>) is assembled first if missing.
    """
    settings = cli_ctx.settings
    wants_help = any(arg in ("-h", "--help") for arg in celery_args)
    try:
        settings.check_worker_limits()
        if not wants_help:
            settings.check_llm_endpoint()
        try:
            import lessonbank.workers  # noqa: F401  (connects the service's signal handlers)
            from lessonbank.workers.app import app, configure
        except ModuleNotFoundError as e:
            if wants_help:
                click.echo(ctx.get_help() + "\n\n" + str(missing_extra(e, "Celery's options")))
                return
            raise missing_extra(e, "`lessonbank worker`") from e
        configure(app, settings)
        if not wants_help:
            model_files.ensure(settings)
    except ConfigurationError as e:
        raise fail(str(e)) from None

    if wants_help:  # Celery's worker knows --help only: ours first, then its options
        click.echo(ctx.get_help())
        click.echo("\nCelery's worker options:\n")
        app.worker_main(argv=["worker", "--help"])
        return
    app.worker_main(argv=worker_argv(settings.queue, celery_args))
