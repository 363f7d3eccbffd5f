"""``lessonbank report``: success rate, tokens, steps and errors per arm, the bank's lessons, its tools,
and plots over time; in the terminal, as JSON, or as files (HTML page, JSON, PNGs)."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import time
from pathlib import Path

import click
import redis

from lessonbank.cli.context import CliContext, fail, name_unreadable, pass_cli, redis_errors
from lessonbank.cli.lessons import bank_option, json_option
from lessonbank.cli.store_access import cli_store
from lessonbank.core.models import RunSummary
from lessonbank.core.summary import load_summaries
from lessonbank.report.data import DEFAULT_WINDOW

ALL_LESSONS = 1_000_000
MAX_BANKS_LISTED = 10
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_AGE_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
SINCE_SLACK_S = 86400.0  # --since may lie up to a day ahead (another time zone's "today"), no further
SINCE_HELP = (
    "Only runs started at or after this: a date (2024-05-01), a date and time (2024-05-01T12:00, UTC unless "
    "it names a zone) or an age (30m, 12h, 7d, 2w); from 1970 up to a day from now."
)


def resolve_bank(cli: CliContext, bank: str | None) -> str:
    bank = (bank or cli.settings.bank).strip()
    if not bank:
        raise fail("--bank must not be empty")
    return bank


def parse_since(value: str | None, now: float | None = None) -> float | None:
    """``--since`` as a unix time between 1970-01-01 and a day from now, or a one-line ClickException
    naming the option."""
    if value is None:
        return None
    now = time.time() if now is None else now
    text = value.strip()
    age = _AGE.fullmatch(text.lower())
    if age:
        since = now - float(age.group(1)) * _AGE_SECONDS[age.group(2)]
    else:
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise fail(f"--since: expected a date (2024-05-01), a date and time (2024-05-01T12:00) or an age "
                       f"(7d, 12h, 30m), got {value!r}") from None
        try:
            since = (when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)).timestamp()
        except (ValueError, OverflowError):
            since = -math.inf
    if not 0 <= since <= now + SINCE_SLACK_S:
        raise fail(f"--since: {value!r} is out of range: from 1970-01-01 up to a day from now")
    return since


def read_summaries(cli: CliContext, bank: str, since: float | None) -> list[RunSummary]:
    try:
        return load_summaries(cli.redis(), bank, since)
    except redis.RedisError as e:
        raise fail("cannot read run summaries from Redis", e) from e


def warn_unknown_bank(cli: CliContext, bank: str, with_lessons: set[str]) -> None:
    """One line on stderr when ``bank`` has neither runs nor lessons (a mistyped name reads as an empty report)."""
    from lessonbank.cli.banks import run_counts

    with redis_errors("listing the banks"):
        known = sorted(with_lessons | set(run_counts(cli)))
    listed = ", ".join(repr(name) for name in known[:MAX_BANKS_LISTED]) or "none yet"
    more = f" and {len(known) - MAX_BANKS_LISTED} more" if len(known) > MAX_BANKS_LISTED else ""
    click.echo(f"Bank {bank!r} has no runs and no lessons (banks: {listed}{more}; see lessonbank banks list).",
               err=True)


@click.command("report")
@bank_option
@click.option("--since", default=None, help=SINCE_HELP)
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write report.html (self-contained), report.json and the plots (PNG) into this folder.")
@click.option("--window", type=click.IntRange(1, 10_000), default=DEFAULT_WINDOW, show_default=True,
              help="Runs per rolling window in the plots over time.")
@json_option
@pass_cli
def report(cli: CliContext, bank: str | None, since: str | None, out: Path | None, window: int,
           as_json: bool) -> None:
    """What the lessons of a bank did: runs given lessons against control runs (success rate with 95 %
    intervals, steps, tokens, wall time, errors), the lessons and their counts, tool statistics, plots. A lesson
    whose stored payload cannot be read is reported as such and named, one line each; the command then exits 1."""
    from lessonbank.report import build_report, render_plots, render_text, report_tables, write_report
    from lessonbank.report.plots import INSTALL_HINT, plots_available

    bank = resolve_bank(cli, bank)
    since_ts = parse_since(since)
    summaries = read_summaries(cli, bank, since_ts)
    with cli_store(cli) as store:
        lessons = store.list(bank, limit=ALL_LESSONS, include_inactive=True)
        if not summaries and not lessons:
            warn_unknown_bank(cli, bank, set(store.banks()))
    document = build_report(bank, summaries, lessons, since_ts, window=window)
    tables = report_tables(document)
    if out is not None:
        plots = render_plots(document)
        try:
            written = write_report(out, document, tables, plots)
        except OSError as e:
            raise fail(f"cannot write the report into {out}", e) from e
        click.echo(f"Wrote {', '.join(str(p) for p in written)}", err=as_json)
        if plots is None:
            click.echo(f"No plots: matplotlib is not installed ({INSTALL_HINT}).", err=True)
    if as_json:
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    elif out is None:
        hint = (f"Plots and an HTML page: lessonbank report --bank {bank} --out DIR" if plots_available()
                else f"Plots need matplotlib: {INSTALL_HINT}")
        since_text = f" since {document['since']}" if since_ts else ""
        header = f"lessonbank report: bank {bank!r}, {document['runs']} runs{since_text}"
        click.echo(render_text(tables, header, hint), nl=False)
    name_unreadable(bank, {item["id"]: item["why"] for item in document["unreadable"]}, "reported")
