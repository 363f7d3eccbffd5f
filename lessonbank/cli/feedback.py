"""``lessonbank feedback RUN_ID --success|--failure``: a user's verdict on one run."""

from __future__ import annotations

import click
import redis

from lessonbank.agent import feedback as record_feedback
from lessonbank.cli.context import CliContext, fail, pass_cli, resolve_ids
from lessonbank.core.constants import run_key
from lessonbank.core.exceptions import LessonbankError

# a run's hash is ``lessonbank:run:{run_id}``; its steps live under the same name plus ``:steps``
RUN_HASH_PREFIX = run_key("")


@click.command("feedback")
@click.argument("run_id")
@click.option("--success/--failure", "success", required=True,
              help="Whether the run did its job (its answer was right, its change works, ...).")
@click.option("--note", default="", help="Why, in a few words (kept with the run).")
@pass_cli
def feedback(cli: CliContext, run_id: str, success: bool, note: str) -> None:
    """Record whether run RUN_ID (or a unique prefix of it) did its job, before or after it is distilled.

    A user's verdict is the most trusted outcome: it decides how the lessons the run applied are
    credited, and whether the run's code is kept as a recipe.
    """
    run_id = full_run_id(cli, run_id)
    try:
        known = record_feedback(run_id, success, note, settings=cli.settings)
    except LessonbankError as e:
        if isinstance(e.__cause__, redis.RedisError):
            raise not_recorded(run_id, e.__cause__) from e
        raise fail(str(e)) from e
    if not known:
        raise fail(f"no run {run_id} in Redis (never recorded, or its data expired)")
    click.echo(f"{run_id}: recorded as {'a success' if success else 'a failure'}")


def not_recorded(run_id: str, error: redis.RedisError) -> click.ClickException:
    """The one-line error for feedback Redis did not take: unreachable, or it answered and refused (out of
    memory, a read-only replica, a command the user may not run)."""
    unreachable = isinstance(error, (redis.ConnectionError, redis.TimeoutError))
    return fail(f"Redis {'unreachable' if unreachable else 'failed'}, feedback for run {run_id} not recorded", error)


def full_run_id(cli: CliContext, wanted: str) -> str:
    """``wanted`` if Redis holds that run, else the one run whose id starts with it (a one-line error when
    none or several do)."""
    wanted = wanted.strip()
    if not wanted:
        raise fail("a run id must not be empty")
    try:
        if cli.redis().exists(run_key(wanted)):
            return wanted
        pattern = RUN_HASH_PREFIX + "".join("\\" + c if c in "*?[]^\\" else c for c in wanted) + "*"
        known = {key.decode()[len(RUN_HASH_PREFIX):] for key in cli.redis().scan_iter(match=pattern, count=1000)}
    except redis.RedisError as e:
        raise not_recorded(wanted, e) from e
    known = {run for run in known if run and ":" not in run}  # its steps and managed runs are keys below it
    unknown = "no run {id} in Redis (never recorded, or its data expired)"
    return resolve_ids([wanted], known, "run", "in Redis", unknown)[0]
