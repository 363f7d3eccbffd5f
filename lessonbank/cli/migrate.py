"""``lessonbank migrate``: rewrite the stored lessons of a bank, or of every bank, in the current schema.

Lessons stored by an earlier release are read into the current schema whenever they are read; this writes them
back that way once, with what only the learning code works out filled in (``lessonbank.learn.upgrade``), and moves
the observed shapes and failures stored under an earlier fingerprint rule to their current ids (``upgrade.rekeyed``),
marking each bank done for the workers (``workers.rekeyed``).
"""

from __future__ import annotations

import click
import redis

from lessonbank.cli.context import CliContext, checked_bank, echo_json, json_option, pass_cli
from lessonbank.cli.store_access import EVERY_LESSON, cli_store
from lessonbank.core.models import Lesson
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.learn.upgrade import REKEYED, changed, complete, observed_id, rekeyed
from lessonbank.workers.rekeyed import RekeyMarker

BATCH = 64


def migrate_bank(store: LessonStoreProtocol, bank: str) -> dict[str, int]:
    """Rewrite every lesson of ``bank`` (every status) in the current schema: a stored record does not say which
    schema it was read from once it is read, so all are written (the same lesson twice changes nothing)."""
    lessons = store.list(bank, limit=EVERY_LESSON, include_inactive=True)
    done = [complete(lesson) for lesson in lessons]
    for start in range(0, len(done), BATCH):
        store.upsert(done[start:start + BATCH])
    return {"lessons": len(lessons), "completed": sum(changed(a, b) for a, b in zip(lessons, done, strict=True)),
            "moved": move_observed(store, bank, done)}


def move_observed(store: LessonStoreProtocol, bank: str, lessons: list[Lesson]) -> int:
    """Move the observed shapes and failures among ``lessons`` stored under an earlier fingerprint rule to their
    current ids, joined to what is stored there (superseding them as merged: ``rekeyed``); how many were moved (none
    the second time: one of another status than what it would join stays where it is)."""
    by_id = {lesson.id: lesson for lesson in lessons}
    moving: dict[str, list[Lesson]] = {}
    for lesson in lessons:
        if lesson.status != "superseded" and (now := observed_id(lesson)) is not None and now != lesson.id:
            moving.setdefault(now, []).append(lesson)
    moved = 0
    for now, found in moving.items():
        there = by_id.get(now)
        joined = rekeyed([*([there] if there is not None and there.status != "superseded" else []), *found], now)
        taken = [lesson.id for lesson in joined[1] if lesson.id != now] if joined is not None else []
        if joined is not None and taken:
            store.upsert([joined[0]])
            store.set_status(bank, taken, "superseded", superseded_by=now, reason=REKEYED, cause="merged")
            moved += len(taken)
    return moved


def mark_done(cli: CliContext, banks: list[str]) -> None:
    """Mark ``banks`` as holding no observed fact of an earlier rule, so that no worker reads them for one again;
    without Redis a worker finds that out by reading each bank once more (a warning, not a failure)."""
    try:
        client = cli.redis()
        for bank in banks:
            RekeyMarker(client, bank).mark()
    except (click.ClickException, redis.RedisError) as e:
        click.echo(f"warning: the banks were migrated, but could not be marked so in Redis: {e}", err=True)


@click.command("migrate")
@click.option("--bank", "-b", "bank", default=None, help="Only this bank (default: every bank).")
@json_option
@pass_cli
def migrate(cli: CliContext, bank: str | None, as_json: bool) -> None:
    """Rewrite stored lessons in the current schema (lessons of an earlier release are read into it anyway:
    this writes them back once, complete). Every bank means every bank with an active lesson."""
    with cli_store(cli) as store:
        names = [checked_bank(bank)] if bank is not None else sorted(store.banks())
        done = {name: migrate_bank(store, name) for name in names}
    mark_done(cli, names)
    if as_json:
        echo_json(done)
        return
    if not done:
        click.echo("No banks yet.", err=True)
    for name, counts in done.items():
        click.echo(f"bank {name!r}: {counts['lessons']} lesson(s) rewritten, {counts['completed']} of them "
                   "completed (what a fix changed, the tools a recipe calls)"
                   + (f", {counts['moved']} observed fact(s) moved to their current fingerprint"
                      if counts["moved"] else ""))
