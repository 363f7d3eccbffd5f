"""``lessonbank banks export|import``: a backup of banks that restores every field (``lessonbank.core.backup``)."""

from __future__ import annotations

from pathlib import Path

import click

from lessonbank.cli.context import CliContext, checked_bank, fail, pass_cli, redis_errors
from lessonbank.cli.store_access import cli_store
from lessonbank.core import backup
from lessonbank.core.exceptions import ConfigurationError


@click.command("export")
@click.option("--all", "every", is_flag=True, help="Every bank (with an active lesson, or runs kept in Redis).")
@click.option("--bank", "-b", "names", multiple=True, help="This bank (repeatable); also one --all would miss.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="A new directory for the backup.")
@pass_cli
def export_cmd(cli: CliContext, every: bool, names: tuple[str, ...], out: Path) -> None:
    """Back banks up into OUT: every lesson (every status, every field), the run summaries the report reads and
    the purged-lesson tombstones. `banks import OUT` restores them as they were."""
    if not every and not names:
        raise fail("name the banks to export (--bank NAME) or export them all (--all)")
    client = cli.redis()
    with cli_store(cli) as store, redis_errors("reading the banks"):
        chosen = sorted(set(backup.bank_names(store, client) if every else []) | {checked_bank(n) for n in names})
        banks = [backup.read_bank(store, client, name) for name in chosen]
    try:
        backup.write_backup(out, banks)
    except ConfigurationError as e:
        raise fail(str(e)) from e
    except OSError as e:
        raise fail(f"cannot write the backup into {out}", e) from e
    lessons = sum(len(b.lessons) for b in banks)
    runs = sum(len(b.runs) for b in banks)
    click.echo(f"Exported {len(banks)} bank(s), {lessons} lesson(s) and {runs} run summary(ies) to {out}.")


@click.command("import")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--bank", "-b", "names", multiple=True, help="Only this bank of the backup (repeatable).")
@pass_cli
def import_cmd(cli: CliContext, directory: Path, names: tuple[str, ...]) -> None:
    """Restore the banks backed up in DIRECTORY (`banks export`) as they were: ids, origins, provenance, counts,
    statuses and payloads of the lessons, run summaries and tombstones. Only into banks that hold nothing yet
    (delete a bank first to replace it): a bank in use is refused and nothing is written."""
    try:
        manifest = backup.read_manifest(directory)
        wanted = {checked_bank(n) for n in names}
        entries = [e for e in manifest["banks"] if not wanted or e.get("bank") in wanted]
        missing = wanted - {str(e.get("bank")) for e in entries}
        if missing:
            raise fail(f"not in the backup: {', '.join(sorted(map(repr, missing)))}")
        banks = [backup.read_bank_file(directory, entry) for entry in entries]
    except ConfigurationError as e:
        raise fail(str(e)) from e
    client = cli.redis()
    with cli_store(cli) as store, redis_errors("restoring the banks (run the import again into emptied banks)"):
        in_use = [b.bank for b in banks if backup.occupied(store, client, b.bank)]
        if in_use:
            raise fail(f"bank(s) {', '.join(map(repr, in_use))} hold lessons or runs already; nothing imported "
                       "(`banks delete` them first to replace them)")
        for bank in banks:
            backup.restore_bank(store, client, bank)
    lessons = sum(len(b.lessons) for b in banks)
    click.echo(f"Imported {len(banks)} bank(s), {lessons} lesson(s) and {sum(len(b.runs) for b in banks)} run "
               f"summary(ies) from {directory}.")
