"""``lessonbank dead-letters list|retry``: runs the workers could not distill."""

from __future__ import annotations

import click
import redis

from lessonbank.cli.context import CliContext, echo_json, fail, json_option, pass_cli, resolve_ids
from lessonbank.core.exceptions import NotFound
from lessonbank.core.models import MAX_BANK_CHARS


@click.group("dead-letters")
def dead_letters() -> None:
    """Runs that could not be distilled (kept until their steps expire)."""


@dead_letters.command("list")
@json_option
@pass_cli
def list_cmd(cli_ctx: CliContext, as_json: bool) -> None:
    """List dead-lettered runs, oldest first."""
    from lessonbank.cli.provenance import RUN_ID_CHARS, one_line
    from lessonbank.report.data import human_time
    from lessonbank.workers import deadletters

    try:
        letters = deadletters.list_all(cli_ctx.redis())
    except redis.RedisError as e:
        raise fail("cannot read dead letters", e) from e
    if as_json:
        echo_json([letter.model_dump() for letter in letters])
        return
    if not letters:
        click.echo("no dead letters", err=True)
    for letter in letters:  # what Redis holds is data: printed on one line, without control characters
        run_id, bank = one_line(letter.run_id, RUN_ID_CHARS), one_line(letter.bank, MAX_BANK_CHARS)
        reason = one_line(letter.reason, deadletters.MAX_REASON_CHARS)
        click.echo(f"{run_id}  {bank}  {human_time(letter.at)}  attempts={letter.attempts}  {reason}")


@dead_letters.command("retry")
@click.argument("run_ids", nargs=-1)
@click.option("--all", "retry_all", is_flag=True, help="Retry every dead-lettered run.")
@pass_cli
def retry_cmd(cli_ctx: CliContext, run_ids: tuple[str, ...], retry_all: bool) -> None:
    """Send dead-lettered runs (RUN_IDS, or unique prefixes of them; or --all) to the workers again."""
    from lessonbank.workers import deadletters

    if bool(run_ids) == retry_all:
        raise click.UsageError("name the runs (RUN_IDS) or pass --all (exactly one of them)")
    client = cli_ctx.redis()
    queue = cli_ctx.settings.queue
    try:
        letters = [letter.run_id for letter in deadletters.list_all(client)]
    except redis.RedisError as e:
        raise fail("cannot read dead letters", e) from e
    chosen = letters if retry_all else resolve_ids(run_ids, letters, "run", "among the dead letters",
                                                   unknown="no dead letter for run {id}")
    failed = []
    for rid in chosen:
        try:
            deadletters.retry(client, rid, queue)
        except deadletters.StepsExpired:
            failed.append(rid)
            click.echo(f"{rid}: its steps have expired; cannot retry", err=True)
            continue
        except NotFound:
            raise fail(f"no dead letter for run {rid}") from None
        except redis.RedisError as e:
            raise fail(f"cannot send run {rid} to the workers", e) from e
        click.echo(f"{rid}: sent to the workers")
    if failed:
        raise fail(f"{len(failed)} run(s) could not be retried")
