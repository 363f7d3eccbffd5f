"""``lessonbank dead-letters list|retry``: runs the workers could not distill."""

from __future__ import annotations

import datetime as dt
import json

import click
import redis

from lessonbank.cli.context import CliContext, fail, pass_cli


@click.group("dead-letters")
def dead_letters() -> None:
    """Runs that could not be distilled (kept until their steps expire)."""


@dead_letters.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line instead of a table.")
@pass_cli
def list_cmd(cli_ctx: CliContext, as_json: bool) -> None:
    """List dead-lettered runs, oldest first."""
    from lessonbank.workers import deadletters

    try:
        letters = deadletters.list_all(cli_ctx.redis())
    except redis.RedisError as e:
        raise fail("cannot read dead letters", e) from e
    for letter in letters:
        if as_json:
            click.echo(json.dumps(letter.model_dump(), sort_keys=True))
        else:
            when = dt.datetime.fromtimestamp(letter.at).isoformat(timespec="seconds")
            click.echo(f"{letter.run_id}  {letter.bank}  {when}  attempts={letter.attempts}  {letter.reason}")
    if not letters and not as_json:
        click.echo("no dead letters")


@dead_letters.command("retry")
@click.argument("run_id", required=False)
@click.option("--all", "retry_all", is_flag=True, help="Retry every dead-lettered run.")
@pass_cli
def retry_cmd(cli_ctx: CliContext, run_id: str | None, retry_all: bool) -> None:
    """Send a dead-lettered run (or --all of them) to the workers again."""
    from lessonbank.workers import deadletters

    if bool(run_id) == retry_all:
        raise click.UsageError("name one RUN_ID or pass --all")
    client = cli_ctx.redis()
    queue = cli_ctx.settings.queue
    run_ids = [run_id] if run_id else [letter.run_id for letter in deadletters.list_all(client)]
    failed = []
    for rid in run_ids:
        try:
            deadletters.retry(client, rid, queue)
        except KeyError:
            raise fail(f"no dead letter for run {rid}") from None
        except deadletters.StepsExpired:
            failed.append(rid)
            click.echo(f"{rid}: its steps have expired; cannot retry", err=True)
            continue
        except redis.RedisError as e:
            raise fail(f"cannot send run {rid} to the workers", e) from e
        click.echo(f"{rid}: sent to the workers")
    if failed:
        raise fail(f"{len(failed)} run(s) could not be retried")
