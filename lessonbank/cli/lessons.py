"""``lessonbank lessons``: list, search, show, add, forget (or purge), unforget, release, export and import
the lessons of one bank. Every command that takes lesson ids takes unique id prefixes too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, get_args

import click

from lessonbank.bank import RELEASABLE, Bank
from lessonbank.cli.context import (
    CliContext,
    bank_errors,
    bank_option,
    echo_json,
    fail,
    json_option,
    name_unreadable,
    pass_cli,
    redis_errors,
)
from lessonbank.cli.store_access import EVERY_LESSON, cli_store, find_lessons
from lessonbank.core import purge
from lessonbank.core.models import (
    LESSON_KINDS,
    Lesson,
    LessonOrigin,
    LessonStatus,
    lesson_id,
)
from lessonbank.learn import render, trust

if TYPE_CHECKING:
    from lessonbank.cli.intake import Intake
    from lessonbank.core.store.protocol import LessonStoreProtocol

__all__ = ["bank_option", "json_option", "lessons"]

STATUSES: tuple[str, ...] = get_args(LessonStatus)
TEXT_CHARS = 300


def _line(lesson: Lesson, score: float | None = None) -> str:
    from lessonbank.cli.provenance import one_line

    extra = f" score={score:.3f}" if score is not None else ""
    why = f": {one_line(lesson.status_reason, 120)}{_observed_at(lesson)}" if lesson.status_reason else ""
    status = "" if lesson.status == "active" else f" [{lesson.status}{why}]"
    if lesson.status == "active" and not trust.eligible(lesson):
        status = " [not given yet: waiting for a user, a check or a second run that agrees]"
    text = one_line(render.shown(lesson), TEXT_CHARS)
    failed = f" (failed {lesson.failed_runs})" if lesson.failed_runs else ""
    # what it did for the runs that were handed it: a recipe that runs reuse stays at evidence 1
    outcomes = (f" given={lesson.given} applied={lesson.applied} helped={lesson.helpful} harmed={lesson.harmful}"
                if lesson.given else "")
    return f"{lesson.id}  {lesson.kind:<8} evidence={lesson.evidence}{failed}{outcomes}{extra}{status}  {text}"


def _observed_at(lesson: Lesson) -> str:
    """Where the observation that holds ``lesson`` came from (its first held mark's run and step), "" when none did."""
    from lessonbank.cli.provenance import RUN_ID_CHARS, one_line

    mark = next((mark for mark in lesson.taint if mark.held and mark.step is not None), None)
    return f"; observed by run {one_line(mark.run_id, RUN_ID_CHARS)} at step {mark.step}" if mark else ""


def _print_lessons(bank: str, lessons: list[Lesson], as_json: bool, scores: list[float] | None = None) -> None:
    """The lessons, one line each or as JSON (a lesson whose stored payload could not be read with why, under
    ``unreadable``); then each such lesson named on stderr, exit 1."""
    whys = {lesson.id: why for lesson in lessons if (why := render.readable(lesson)[1])}
    if as_json:
        items = [lesson.model_dump(mode="json") | ({"unreadable": whys[lesson.id]} if lesson.id in whys else {})
                 for lesson in lessons]
        for item, score in zip(items, scores or [], strict=False):
            item["score"] = score
        echo_json(items)
    else:
        if not lessons:
            click.echo("No lessons.", err=True)
        for i, lesson in enumerate(lessons):
            click.echo(_line(lesson, scores[i] if scores is not None else None))
    name_unreadable(bank, whys, "listed")


@click.group("lessons")
def lessons() -> None:
    """List, search, show, add, forget, purge, unforget, release, export and import the lessons of a bank."""


@lessons.command("list")
@bank_option
@click.option(
    "--limit", "-n", type=click.IntRange(1, EVERY_LESSON), default=100, show_default=True, help="At most this many."
)
@click.option("--all", "include_inactive", is_flag=True, help="Every status, not only active lessons.")
@click.option("--status", "statuses", type=click.Choice(STATUSES), multiple=True,
              help="Only lessons with this status (repeatable), e.g. quarantined (shown with the reason).")
@json_option
@pass_cli
def list_cmd(cli: CliContext, bank: str, limit: int, include_inactive: bool, statuses: tuple[str, ...],
             as_json: bool) -> None:
    """The lessons of a bank, most recently seen first (active ones unless --all or --status)."""
    with bank_errors():
        found = Bank.of_cli(cli, bank).list(limit, include_inactive=include_inactive, statuses=statuses)
    _print_lessons(bank, found, as_json)


@lessons.command("search")
@bank_option
@click.argument("query")
@click.option("--limit", "-n", type=click.IntRange(1, 100), default=8, show_default=True, help="At most this many.")
@json_option
@pass_cli
def search_cmd(cli: CliContext, bank: str, query: str, limit: int, as_json: bool) -> None:
    """The active lessons of a bank that best match QUERY (hybrid dense + lexical search)."""
    if not query.strip():
        raise fail("QUERY must not be empty")
    with bank_errors():
        found = Bank.of_cli(cli, bank).search(query, limit=limit)
    _print_lessons(bank, [lesson for lesson, _ in found], as_json, [score for _, score in found])


@lessons.command("show")
@bank_option
@click.argument("lesson_ids", nargs=-1, required=True)
@json_option
@pass_cli
def show_cmd(cli: CliContext, bank: str, lesson_ids: tuple[str, ...], as_json: bool) -> None:
    """Every field of the lessons with these ids (or unique id prefixes), the runs and steps each rests
    on (with short excerpts while the runs' steps are kept in Redis), and a recipe's code."""
    from lessonbank.cli.provenance import lesson_sources, print_lesson

    with cli_store(cli) as store:
        found, _ = find_lessons(store, bank, lesson_ids)
    sources = lesson_sources(cli, found)
    whys = {lesson.id: why for lesson in found if (why := render.readable(lesson)[1])}
    if as_json:
        echo_json([lesson.model_dump(mode="json") | {"sources": sources[lesson.id]}
                   | ({"unreadable": whys[lesson.id]} if lesson.id in whys else {}) for lesson in found])
    else:
        for lesson in found:
            print_lesson(lesson, sources[lesson.id])
            click.echo("")
    name_unreadable(bank, whys, "shown")


def _intake(cli: CliContext, bank: str, origin: LessonOrigin) -> Intake:
    from lessonbank.cli.intake import Intake
    from lessonbank.core.redact import Redactor

    return Intake(bank, Redactor(cli.settings.redact_patterns), origin=origin)


@lessons.command("add")
@bank_option
@click.option("--kind", "-k", type=click.Choice(LESSON_KINDS), default="fact", show_default=True,
              help="What the lesson is: a fact, an approach that works, or a failure to avoid.")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable, at most 8).")
@click.option("--allow", is_flag=True, help="Add it even though the same text was purged (removes its tombstone).")
@click.argument("text")
@pass_cli
def add_cmd(cli: CliContext, bank: str, kind: str, tags: tuple[str, ...], allow: bool, text: str) -> None:
    """Add a lesson of your own: one or two self-contained sentences. Runs get it without waiting for
    evidence, so it passes the quality gate and the secret check first; one that carries a URL, an
    e-mail address or asks to send data somewhere waits in quarantine for `lessons release`."""
    with bank_errors():
        added = Bank.of_cli(cli, bank).add(text, kind, tags=tags, allow=allow)
    lesson = added.lesson
    if not added.created:
        click.echo(f"Lesson {lesson.id} is already in bank {bank!r} ({lesson.status}); nothing added.")
    elif added.quarantined:
        click.echo(f"Added lesson {lesson.id} to bank {bank!r}, quarantined ({lesson.status_reason}): no run gets it "
                   f"until `lessonbank lessons release --bank {bank} {lesson.id[:8]}`.")
    else:
        click.echo(f"Added lesson {lesson.id} to bank {bank!r}.")


@lessons.command("forget")
@bank_option
@click.argument("lesson_ids", nargs=-1)
@click.option("--query", "-q", default=None, help="Forget the lessons that best match this text instead of ids.")
@click.option(
    "--limit", "-n", type=click.IntRange(1, 100), default=5, show_default=True, help="At most this many (--query)."
)
@click.option("--purge", "purge_", is_flag=True,
              help="Remove them from the store for good (their ids are kept so the same text is not learnt again).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_cli
def forget_cmd(cli: CliContext, bank: str, lesson_ids: tuple[str, ...], query: str | None, limit: int,
               purge_: bool, yes: bool) -> None:
    """Stop handing lessons to runs: status 'forgotten' (they stay exportable with --all and come back
    with `lessons unforget`), or with --purge removed for good.

    Name the lessons by id (or unique id prefix), or by --query with a confirmation of what matched.
    A purged lesson leaves a tombstone without its text: the same text is not learnt again until
    `lessons unforget ID` (or `lessons add --allow`, `lessons import --allow`).
    """
    if bool(lesson_ids) == bool(query and query.strip()):
        raise fail("give either lesson ids or --query (exactly one of them)")
    if purge_:
        cli.redis()  # a purge needs Redis: say so before asking anything
    with cli_store(cli) as store:
        targets = _forget_targets(store, bank, lesson_ids, query, limit, cli.settings.min_relevance)
        if not targets:
            click.echo(f"No active lesson of bank {bank!r} matches {query!r}; nothing forgotten.")
            return
        for lesson in targets:
            click.echo(_line(lesson))
        ids = [lesson.id for lesson in targets]
        if not yes:
            what = "Purge these" if purge_ else "Forget these"
            click.confirm(f"{what} {len(targets)} lesson(s) of bank {bank!r}{' for good' if purge_ else ''}?",
                          abort=True)
    with bank_errors():
        changed = Bank.of_cli(cli, bank).forget(*ids, purge=purge_)
    if not purge_:
        click.echo(f"Forgot {changed} lesson(s).")
        return
    click.echo(f"Purged {changed} lesson(s) for good; `lessonbank lessons unforget --bank {bank} ID` lets the same "
               "text be learnt again.")


@contextmanager
def _bank_steady(cli: CliContext, bank: str) -> Iterator[None]:
    """``Bank.steady``: the bank's consolidation lock while lessons' statuses change."""
    with bank_errors(), Bank.of_cli(cli, bank).steady():
        yield


def _forget_targets(
    store: LessonStoreProtocol, bank: str, lesson_ids: tuple[str, ...], query: str | None, limit: int, floor: float
) -> list[Lesson]:
    if lesson_ids:
        return find_lessons(store, bank, lesson_ids)[0]
    assert query is not None
    return [lesson for lesson, _ in store.search(bank, query, limit=limit, min_similarity=floor)]


def _status_back(lesson: Lesson) -> str:
    """Active again, unless the lesson must wait in quarantine."""
    from lessonbank.learn.quarantine import held_reason

    return "quarantined" if held_reason(lesson) else "active"


@lessons.command("unforget")
@bank_option
@click.argument("lesson_ids", nargs=-1)
@click.option("--text", "-t", default=None, help="Name the lesson by its text instead of an id (purged lessons).")
@pass_cli
def unforget_cmd(cli: CliContext, bank: str, lesson_ids: tuple[str, ...], text: str | None) -> None:
    """Undo a forget: a forgotten lesson is handed to runs again (or waits in quarantine if it carries a
    URL, an e-mail address or asks to send data); a purged one's tombstone goes, so the same text may be
    learnt again (its text is gone: runs and users teach it anew)."""
    if bool(lesson_ids) == bool(text and text.strip()):
        raise fail("give either lesson ids or --text (exactly one of them)")
    client = cli.redis()
    with cli_store(cli) as store:
        with redis_errors(f"reading the purged lessons of bank {bank!r}"):
            known = purge.tombstones(client, bank)
        wanted = lesson_ids or (lesson_id(bank, text or ""),)
        found, purged = find_lessons(store, bank, wanted, also_known=known)
        for lesson in found:
            if lesson.status != "forgotten":
                hint = " (release a quarantined one with `lessons release`)" if lesson.status == "quarantined" else ""
                raise fail(f"lesson {lesson.id} is {lesson.status}, not forgotten{hint}")
        with _bank_steady(cli, bank):
            for status in ("active", "quarantined"):
                ids = [lesson.id for lesson in found if _status_back(lesson) == status]
                if ids:
                    store.set_status(bank, ids, status, reason="unforgotten by a user", cause="unforgotten")
                    click.echo(f"{len(ids)} lesson(s) "
                               f"{'active again' if status == 'active' else 'back in quarantine'}.")
    if purged:
        with redis_errors(f"removing the tombstones of bank {bank!r} (run the command again)"):
            purge.remove_tombstones(client, bank, purged)
        click.echo(f"{len(purged)} purged lesson(s) may be learnt again.")


@lessons.command("release")
@bank_option
@click.argument("lesson_ids", nargs=-1, required=True)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_cli
def release_cmd(cli: CliContext, bank: str, lesson_ids: tuple[str, ...], yes: bool) -> None:
    """Release quarantined or retired lessons: you vouch for them, and runs get them from now on (a
    released lesson is not retired again for going unapplied, only if runs that apply it fail)."""
    with bank_errors():
        lessons_ = Bank.of_cli(cli, bank)
        found = lessons_.get(*lesson_ids)
        for lesson in found:
            if lesson.status not in RELEASABLE:
                raise fail(f"lesson {lesson.id} is {lesson.status}, not quarantined or retired")
            click.echo(_line(lesson))
        if not yes:
            click.confirm(f"Hand these {len(found)} lesson(s) to the runs of bank {bank!r}?", abort=True)
        changed = lessons_.release(*[lesson.id for lesson in found])
    click.echo(f"Released {changed} lesson(s).")


@lessons.command("purged")
@bank_option
@json_option
@pass_cli
def purged_cmd(cli: CliContext, bank: str, as_json: bool) -> None:
    """Ids of the lessons purged from a bank (their tombstones: the text itself is gone)."""
    with redis_errors(f"reading the purged lessons of bank {bank!r}"):
        ids = purge.tombstones(cli.redis(), bank)
    if as_json:
        echo_json([{"id": i} for i in ids])
        return
    if not ids:
        click.echo(f"No purged lessons in bank {bank!r}.", err=True)
    for i in ids:
        click.echo(i)


@lessons.command("export")
@bank_option
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None, help="File (default: stdout)."
)
@click.option("--all", "include_inactive", is_flag=True, help="Every status, not only active lessons.")
@click.option("--limit", type=click.IntRange(1), default=EVERY_LESSON, help="At most this many lessons.")
@pass_cli
def export_cmd(cli: CliContext, bank: str, output: Path | None, include_inactive: bool, limit: int) -> None:
    """Write the lessons of a bank as JSONL (one Lesson per line, UTF-8): what `lessons import` reads."""
    with bank_errors():
        lines = Bank.of_cli(cli, bank).export(include_inactive=include_inactive, limit=limit)
    if output is None:
        click.echo(lines, nl=False)
        return
    try:
        output.write_text(lines, encoding="utf-8")
    except OSError as e:
        raise fail(f"cannot write {output}", e) from e
    click.echo(f"Exported {lines.count(chr(10))} lesson(s) of bank {bank!r} to {output}.", err=True)


@lessons.command("import")
@bank_option
@click.option("--allow", is_flag=True, help="Import lessons even if the same text was purged (removes tombstones).")
@click.argument("source", type=click.File("rb"))
@pass_cli
def import_cmd(cli: CliContext, bank: str, allow: bool, source: IO[bytes]) -> None:
    """Read lessons from a JSONL file (or - for stdin) into a bank: `lessons export` output, or plain
    {"kind": ..., "text": ...} lines.

    Ids are derived from the bank and the text (never taken from the file), so an import cannot touch
    another bank and importing again never duplicates (lessons already in the bank are left as they are).
    Each lesson passes the quality gate and the secret check; one that carries a URL, an e-mail address
    or asks to send data somewhere is imported quarantined. Purged lessons are left out unless --allow.
    """
    with bank_errors():
        done = Bank.of_cli(cli, bank).import_(source.read(), allow=allow, name=getattr(source, "name", "the input"))
    for note in done.notes:
        click.echo(note, err=True)
    quarantined = sum(1 for lesson in done.lessons if lesson.status == "quarantined")
    parts = [f"{quarantined} quarantined: see `lessons list --status quarantined`" if quarantined else "",
             f"{done.present} already in the bank" if done.present else "",
             f"{len(done.notes)} skipped" if done.notes else ""]
    details = "; ".join(part for part in parts if part)
    click.echo(f"Imported {len(done.lessons)} lesson(s) into bank {bank!r}" + (f" ({details})." if details else "."))
