"""``lessonbank tools``: calls, errors, error rate, latency and the most common errors of each tool a
bank's runs called, from the run summaries (no LLM)."""

from __future__ import annotations

import json

import click

from lessonbank.cli.context import CliContext, pass_cli
from lessonbank.cli.lessons import bank_option, json_option
from lessonbank.cli.report import SINCE_HELP, parse_since, read_summaries, resolve_bank
from lessonbank.core.summary import tool_table


@click.command("tools")
@bank_option
@click.option("--since", default=None, help=SINCE_HELP)
@json_option
@pass_cli
def tools(cli: CliContext, bank: str | None, since: str | None, as_json: bool) -> None:
    """Tool statistics of a bank: calls, errors, error rate, p50 step time and the most common errors
    (numbers, strings, ids and paths replaced by placeholders)."""
    from lessonbank.report.tables import tools_table
    from lessonbank.report.text import render_text

    bank = resolve_bank(cli, bank)
    summaries = read_summaries(cli, bank, parse_since(since))
    rows = [row.to_dict() for row in tool_table(summaries)]
    if as_json:
        click.echo(json.dumps({"bank": bank, "runs": len(summaries), "tools": rows}, indent=2, ensure_ascii=False))
        return
    header = f"lessonbank tools: bank {bank!r}, {len(summaries)} runs"
    click.echo(render_text([tools_table(rows)], header), nl=False)
