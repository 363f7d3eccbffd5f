"""``lessonbank spool``: list and replay the local spools that recorders wrote while Redis was away."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from lessonbank.cli.context import CliContext, echo_json, fail, json_option, pass_cli

DIR_HELP = "Spool directory (default: LESSONBANK_SPOOL_DIR, else LESSONBANK_DATA_DIR/spool)."


def _directory(ctx: CliContext, directory: Path | None) -> Path:
    return directory if directory is not None else ctx.settings.resolved_spool_dir


@click.group()
def spool() -> None:
    """Step records that could not reach Redis, kept on local disk."""


@spool.command("list")
@click.option("--dir", "directory", type=click.Path(path_type=Path, file_okay=False), default=None, help=DIR_HELP)
@json_option
@pass_cli
def list_spools(ctx: CliContext, directory: Path | None, as_json: bool) -> None:
    """Show spool files: owner state (live/dead), records, runs, size, last write and age."""
    from lessonbank.recorder.spool import age, describe, spool_files
    from lessonbank.report.data import human_time

    path = _directory(ctx, directory)
    items: list[dict[str, Any]] = []
    for file in spool_files(path):
        try:
            info = describe(file)
        except FileNotFoundError:  # replayed meanwhile
            continue
        except OSError as e:
            raise fail(f"cannot read {file}", e) from e
        items.append({"path": str(file), "state": "live" if info.live else "dead", "records": info.ops,
                      "runs": info.runs, "bytes": info.bytes, "modified": info.modified, "age_s": round(age(info), 1)})
    if as_json:
        echo_json(items)
        return
    if not items:
        click.echo(f"no spool files in {path}")
    for item in items:
        click.echo(f"{item['path']}\t{item['state']}\t{item['records']} records\t{item['runs']} runs\t"
                   f"{item['bytes']} bytes\tlast written {human_time(item['modified'])} ({item['age_s']:.0f}s ago)")


@spool.command("replay")
@click.option("--dir", "directory", type=click.Path(path_type=Path, file_okay=False), default=None, help=DIR_HELP)
@pass_cli
def replay(ctx: CliContext, directory: Path | None) -> None:
    """Deliver spools of dead processes to Redis (in order, exactly once) and enqueue their finished runs."""
    from lessonbank.recorder.spool import replay_directory
    from lessonbank.recorder.transport import RedisSink

    path = _directory(ctx, directory)
    sink = RedisSink(ctx.redis(), ctx.settings.queue)
    started = time.monotonic()
    try:
        reports = replay_directory(path, lambda op: sink.apply(op, replay=True))
    except OSError as e:  # a spool (or its .rejected file) that cannot be read, moved or written
        raise fail(f"cannot replay the spools in {path} (files kept, run again later)", e) from e
    if not reports:
        click.echo(f"no spool files in {path}")
        return
    for report in reports:
        if report.skipped_live:
            click.echo(f"{report.path}: skipped, its process is still running")
            continue
        line = f"{report.path}: {report.delivered} records of {len(report.runs)} runs, {report.closes} runs closed"
        if report.rejected:
            line += f", {report.rejected} unreadable lines kept in {report.path.name}.rejected"
        click.echo(line)
        if report.error:
            raise fail(f"replay of {report.path} stopped (file kept, run again later)", report.error)
    click.echo(f"done in {time.monotonic() - started:.2f}s")
