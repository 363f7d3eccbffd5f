"""``lessonbank runs``: what a bank keeps of one run; ``runs forget`` takes out everything a run taught."""

from __future__ import annotations

import click

from lessonbank.cli.context import CliContext, bank_option, echo_json, fail, json_option, pass_cli, redis_errors
from lessonbank.cli.store_access import cli_store
from lessonbank.core.exceptions import ServiceUnavailable, UnknownRun


@click.group("runs")
def runs() -> None:
    """What a bank keeps of its runs: forget one, and everything it taught."""


@runs.command("forget")
@bank_option
@click.argument("run_id")
@click.option("--purge", "purge_", is_flag=True,
              help="Remove the run's step records too (a marker without them stays until LESSONBANK_STEP_TTL).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@json_option
@pass_cli
def forget_cmd(cli: CliContext, bank: str, run_id: str, purge_: bool, yes: bool, as_json: bool) -> None:
    """Forget RUN_ID: a lesson or recipe resting on that run alone is removed from the store for good, others
    lose its part (evidence, provenance, the credit it gave), and reports no longer count it. For personal data,
    or a run found poisoned after the fact."""
    from lessonbank.forget import forget_run

    run_id = run_id.strip()
    if not run_id:
        raise fail("RUN_ID must not be empty")
    if not yes:
        records = " and its step records" if purge_ else ""
        click.confirm(f"Forget run {run_id} of bank {bank!r}{records}, and everything it taught?", abort=True)
    client = cli.redis()
    wait = cli.settings.distill_lock_timeout
    with cli_store(cli) as store:
        try:
            with redis_errors(f"forgetting run {run_id} (run the command again)"):
                report = forget_run(store, client, bank, run_id, purge=purge_, wait=wait, ttl=cli.settings.step_ttl)
        except (UnknownRun, ServiceUnavailable) as e:
            raise fail(str(e)) from e
    if as_json:
        echo_json(report.to_dict())
        return
    dropped = ("; its summary dropped" if report.summary else "") + ("; its records purged" if report.records else "")
    click.echo(f"Forgot run {run_id} of bank {bank!r}: {len(report.purged)} lesson(s) removed, "
               f"{len(report.updated)} lost its part, {len(report.restored)} active again{dropped}.")
    for lesson_id in report.purged:
        click.echo(f"  removed {lesson_id}")
