"""``lessonbank banks list|delete|export|import``: the banks with their lessons and runs; deleting one for good;
backing them up and restoring them (``lessonbank.cli.backup``)."""

from __future__ import annotations

from typing import cast

import click
import redis

from lessonbank.cli.context import CliContext, checked_bank, echo_json, fail, json_option, pass_cli
from lessonbank.cli.store_access import EVERY_LESSON, cli_store
from lessonbank.core.constants import BANK_RUNS_KEY, bank_runs_key
from lessonbank.core.exceptions import ServiceUnavailable

SCAN_COUNT = 1000


def run_counts(cli: CliContext) -> dict[str, int]:
    """Bank -> finished runs it keeps summaries of (what `lessonbank report` reads)."""
    client = cli.redis()
    head, tail = BANK_RUNS_KEY.split("{bank}")
    names = sorted({key.decode("utf-8", "replace")[len(head) : -len(tail)]
                    for key in cast(list[bytes], client.scan_iter(match=f"{head}*{tail}", count=SCAN_COUNT))})
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.zcard(bank_runs_key(name))
    return {name: int(count) for name, count in zip(names, pipe.execute(), strict=True) if count}


@click.group("banks")
def banks() -> None:
    """The banks (one per agent, user or project): list them, delete one for good, back them up and restore them."""


@banks.command("list")
@json_option
@pass_cli
def list_cmd(cli: CliContext, as_json: bool) -> None:
    """Every bank with its active lessons and the finished runs it keeps."""
    with cli_store(cli) as store:
        lessons = store.banks()
    runs = run_counts(cli)
    items = [{"bank": name, "lessons": lessons.get(name, 0), "runs": runs.get(name, 0)}
             for name in sorted(set(lessons) | set(runs))]
    if as_json:
        echo_json(items)
        return
    if not items:
        click.echo("No banks yet.", err=True)
        return
    width = max(len(repr(item["bank"])) for item in items)
    click.echo(f"{'bank':<{width}}  {'lessons':>7}  {'runs':>7}")
    for item in items:
        click.echo(f"{item['bank']!r:<{width}}  {item['lessons']:>7}  {item['runs']:>7}")


@banks.command("delete")
@click.argument("bank")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_cli
def delete_cmd(cli: CliContext, bank: str, yes: bool) -> None:
    """Delete BANK for good: its lessons (any status) from the store, and from Redis its runs (steps,
    checkpoints, summaries), the dead letters of its runs, lessons its agents handed in that still wait,
    its tasks still queued, its purged-lesson tombstones and its lock. Nothing of it can be restored but
    from a backup (`banks export`)."""
    from lessonbank.core import purge

    bank = checked_bank(bank, "BANK")
    client = cli.redis()
    settings = cli.settings
    with cli_store(cli) as store:
        held = len(store.list(bank, limit=EVERY_LESSON, include_inactive=True))
        runs = len(purge.bank_run_ids(client, bank))
        if not yes:
            click.confirm(f"Delete bank {bank!r} for good: {held} lesson(s), {runs} run(s) and everything else "
                          "Redis holds about it?", abort=True)
        wait = settings.distill_lock_timeout
        try:
            with purge.bank_held(client, bank, wait=wait, hold=wait):
                removed = store.delete_bank(bank)
                report = purge.delete_bank_data(client, bank, settings.queue)
        except ServiceUnavailable as e:
            raise fail(str(e)) from e
        except redis.RedisError as e:
            raise fail(f"Redis failed while deleting bank {bank!r} (run the command again)", e) from e
    if not (removed or report.runs or report.pending_lessons or report.queued_tasks or report.tombstones):
        click.echo(f"Bank {bank!r} held nothing; nothing deleted.")
        return
    click.echo(f"Deleted bank {bank!r}: {removed} lesson(s), {report.runs} run(s), {report.dead_letters} dead "
               f"letter(s), {report.pending_lessons} pending lesson(s), {report.queued_tasks} queued task(s).")


from lessonbank.cli.backup import export_cmd, import_cmd  # noqa: E402  (after the group they join)

banks.add_command(export_cmd)
banks.add_command(import_cmd)
