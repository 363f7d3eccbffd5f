"""``lessonbank status``: queue length, runs in progress, spool, dead letters and lessons per bank."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import redis

from lessonbank.cli.context import CliContext, fail, pass_cli
from lessonbank.cli.store_access import cli_store
from lessonbank.core.connections import masked_url
from lessonbank.core.constants import DEAD_LETTERS_KEY, DROPPED_KEY, OPEN_RUNS_KEY


def spooled_records(spool_dir: Path) -> tuple[int, int]:
    """(records, files) waiting in the local spool: one record per line of each ``*.jsonl`` file."""
    if not spool_dir.is_dir():
        return 0, 0
    records = files = 0
    for path in sorted(spool_dir.glob("*.jsonl")):
        try:
            with path.open("rb") as f:
                records += sum(1 for line in f if line.strip())
        except OSError:  # rotated or replayed while counting
            continue
        files += 1
    return records, files


def redis_counts(client: redis.Redis, queue: str) -> dict[str, Any]:
    """Queue length, runs in progress, dead letters and the quality gate's drops, from one round trip."""
    pipe = client.pipeline(transaction=False)
    pipe.llen(queue)
    pipe.zcard(OPEN_RUNS_KEY)
    pipe.hlen(DEAD_LETTERS_KEY)
    pipe.hgetall(DROPPED_KEY)
    queued, open_runs, dead, dropped = pipe.execute()
    return {"queued": int(queued), "runs_in_progress": int(open_runs), "dead_letters": int(dead),
            "dropped_by_gate": {k.decode(): int(v) for k, v in sorted(dropped.items())}}


def _text(report: dict[str, Any]) -> str:
    lines = [
        f"queue {report['queue']!r}: {report['queued']} task(s) waiting",
        f"runs in progress: {report['runs_in_progress']}",
        f"spool: {report['spooled']} record(s) in {report['spool_files']} file(s) at {report['spool_dir']}",
        f"dead letters: {report['dead_letters']}",
    ]
    dropped = report.get("dropped_by_gate") or {}
    if dropped:
        lines.append(f"lessons dropped by the quality gate: {sum(dropped.values())} "
                     f"({', '.join(f'{reason} {n}' for reason, n in dropped.items())})")
    banks = report.get("lessons")
    if banks is None:
        lines.append(f"lessons: unavailable ({report.get('store_error')})")
    elif not banks:
        lines.append("lessons: none yet")
    else:
        lines.append("lessons (active, per bank):")
        lines.extend(f"  {bank}: {count}" for bank, count in sorted(banks.items()))
    return "\n".join(lines)


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@pass_cli
def status(cli: CliContext, as_json: bool) -> None:
    """How the pipeline is doing: queue, open runs, spool, dead letters and lessons per bank."""
    settings = cli.settings
    try:
        report: dict[str, Any] = {"queue": settings.queue, **redis_counts(cli.redis(), settings.queue)}
    except redis.RedisError as e:
        raise fail(f"Redis at {masked_url(settings.redis_url)} is unreachable", e) from e
    spooled, files = spooled_records(settings.resolved_spool_dir)
    report.update(spooled=spooled, spool_files=files, spool_dir=str(settings.resolved_spool_dir))
    error: click.ClickException | None = None
    try:
        with cli_store(cli) as store:
            report["lessons"] = store.banks()
    except click.ClickException as e:
        error = e
        report["lessons"] = None
        report["store_error"] = e.message
    click.echo(json.dumps(report, indent=2) if as_json else _text(report))
    if error is not None:
        raise error
