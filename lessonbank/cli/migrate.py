"""``lessonbank migrate``: rewrite the stored lessons of a bank, or of every bank, in the current schema.

Lessons stored by an earlier release are read into the current schema whenever they are read; this writes them
back that way once, with what only the learning code works out filled in (``lessonbank.learn.upgrade``), and moves
the observed shapes and failures stored under an earlier fingerprint rule to their current ids (``upgrade.rekeyed``),
marking each bank done for the workers (``workers.rekeyed``). A lesson whose payload cannot be read is left as it
was and named; the others are migrated, and the command exits 1.
"""

from __future__ import annotations

from typing import Any

import click
import redis

from lessonbank.cli.context import CliContext, checked_bank, echo_json, fail, json_option, pass_cli
from lessonbank.cli.store_access import EVERY_LESSON, cli_store
from lessonbank.core.models import Lesson
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.learn.render import MALFORMED, unreadable
from lessonbank.learn.upgrade import REKEYED, changed, complete, observed_id, rekeyed
from lessonbank.workers.rekeyed import RekeyMarker

BATCH = 64


def migrate_bank(store: LessonStoreProtocol, bank: str) -> dict[str, Any]:
    """Rewrite every lesson of ``bank`` (every status) in the current schema: a stored record does not say which
    schema it was read from once it is read, so all are written (the same lesson twice changes nothing). One whose
    payload is not one (``render.MALFORMED``) is left as it was, with why, under ``not_migrated_lessons``."""
    lessons = store.list(bank, limit=EVERY_LESSON, include_inactive=True)
    done: list[Lesson] = []
    left: dict[str, str] = {}
    for lesson in lessons:
        try:
            done.append(complete(lesson))
        except MALFORMED as e:
            left[lesson.id] = unreadable(e)
    for start in range(0, len(done), BATCH):
        store.upsert(done[start:start + BATCH])
    before = {lesson.id: lesson for lesson in lessons}
    moved = move_observed(store, bank, [*done, *(before[lesson_id] for lesson_id in left)], left)
    return {"lessons": len(lessons), "completed": sum(changed(before[lesson.id], lesson) for lesson in done),
            "moved": moved, "not_migrated": len(left),
            "not_migrated_lessons": [{"id": lesson_id, "why": why} for lesson_id, why in left.items()]}


def move_observed(store: LessonStoreProtocol, bank: str, lessons: list[Lesson], left: dict[str, str]) -> int:
    """Move the observed shapes and failures among ``lessons`` stored under an earlier fingerprint rule to their
    current ids, joined to what is stored there (superseding them as merged: ``rekeyed``); how many were moved (none
    the second time). Nothing is written over a lesson it would not join (one of another status, a superseded one:
    they stay where they are, as a run's writes leave them), and those that cannot be joined are added to ``left``
    with why."""
    by_id = {lesson.id: lesson for lesson in lessons}
    moving: dict[str, list[Lesson]] = {}
    for lesson in lessons:
        if lesson.status != "superseded" and (now := observed_id(lesson)) is not None and now != lesson.id:
            moving.setdefault(now, []).append(lesson)
    moved = 0
    for now, found in moving.items():
        try:
            moved += _move(store, bank, now, by_id.get(now), found)
        except MALFORMED as e:
            left.update({lesson.id: f"not moved to its current id {now}: {unreadable(e)}" for lesson in found})
    return moved


def _move(store: LessonStoreProtocol, bank: str, now: str, there: Lesson | None, found: list[Lesson]) -> int:
    """Move ``found`` to ``now`` (``there``: what is stored at it), unless that writes over a lesson it does not
    join; how many were moved."""
    joined = rekeyed([*([there] if there is not None else []), *found], now)
    if joined is None or (there is not None and all(lesson.id != now for lesson in joined[1])):
        return 0
    taken = [lesson.id for lesson in joined[1] if lesson.id != now]
    if taken:
        store.upsert([joined[0]])
        store.set_status(bank, taken, "superseded", superseded_by=now, reason=REKEYED, cause="merged")
    return len(taken)


def mark_done(cli: CliContext, banks: list[str]) -> None:
    """Mark ``banks`` as holding no observed fact of an earlier rule, so that no worker reads them for one again;
    without Redis a worker finds that out by reading each bank once more (a warning, not a failure)."""
    try:
        client = cli.redis()
        for bank in banks:
            RekeyMarker(client, bank).mark()
    except (click.ClickException, redis.RedisError) as e:
        click.echo(f"warning: the banks were migrated, but could not be marked so in Redis: {e}", err=True)


def say(done: dict[str, dict[str, Any]]) -> None:
    """One line per bank migrated."""
    if not done:
        click.echo("No banks yet.", err=True)
    for name, counts in done.items():
        click.echo(f"bank {name!r}: {counts['lessons']} lesson(s) rewritten, {counts['completed']} of them "
                   "completed (what a fix changed, the tools a recipe calls)"
                   + (f", {counts['moved']} observed fact(s) moved to their current fingerprint"
                      if counts["moved"] else "")
                   + (f", {counts['not_migrated']} not migrated (left as they were)" if counts["not_migrated"] else ""))


@click.command("migrate")
@click.option("--bank", "-b", "bank", default=None, help="Only this bank (default: every bank).")
@json_option
@pass_cli
def migrate(cli: CliContext, bank: str | None, as_json: bool) -> None:
    """Rewrite stored lessons in the current schema (lessons of an earlier release are read into it anyway:
    this writes them back once, complete). Every bank means every bank with an active lesson. A lesson whose
    payload cannot be read is left as it was and named, one line each; the command then exits 1."""
    with cli_store(cli) as store:
        names = [checked_bank(bank)] if bank is not None else sorted(store.banks())
        done = {name: migrate_bank(store, name) for name in names}
    mark_done(cli, [name for name in names if not done[name]["not_migrated"]])
    for name, counts in done.items():
        for item in counts["not_migrated_lessons"]:
            click.echo(f"bank {name!r}: lesson {item['id']} not migrated, left as it was: {item['why']}", err=True)
    if as_json:
        echo_json(done)
    else:
        say(done)
    if left := sum(counts["not_migrated"] for counts in done.values()):
        raise fail(f"{left} lesson(s) could not be migrated and were left as they were; every other one was")
