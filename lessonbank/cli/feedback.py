"""``lessonbank feedback RUN_ID --success|--failure``: a user's verdict on one run."""

from __future__ import annotations

import click

from lessonbank.agent import feedback as record_feedback
from lessonbank.cli.context import CliContext, fail, pass_cli
from lessonbank.core.exceptions import LessonbankError


@click.command("feedback")
@click.argument("run_id")
@click.option("--success/--failure", "success", required=True,
              help="Whether the run did its job (its answer was right, its change works, ...).")
@click.option("--note", default="", help="Why, in a few words (kept with the run).")
@pass_cli
def feedback(cli: CliContext, run_id: str, success: bool, note: str) -> None:
    """Record whether run RUN_ID did its job, before or after it is distilled.

    A user's verdict is the most trusted outcome: it decides how the lessons the run applied are
    credited, and whether the run's code is kept as a recipe.
    """
    try:
        known = record_feedback(run_id, success, note, settings=cli.settings)
    except LessonbankError as e:
        raise fail(str(e)) from e
    if not known:
        raise fail(f"no run {run_id} in Redis (never recorded, or its data expired)")
    click.echo(f"{run_id}: recorded as {'a success' if success else 'a failure'}")
