"""``lessonbank lessons``: list, search, show, forget, export and import the lessons of one bank."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click
from pydantic import ValidationError

from lessonbank.cli.context import CliContext, fail, pass_cli
from lessonbank.cli.store_access import cli_store
from lessonbank.core.models import Lesson, lesson_id

if TYPE_CHECKING:
    from lessonbank.core.store.protocol import LessonStoreProtocol

F = TypeVar("F", bound=Callable[..., Any])

IMPORT_BATCH = 64


def bank_option(command: F) -> F:
    """``--bank`` (default: LESSONBANK_BANK)."""
    return click.option(
        "--bank", "-b", default=None, help="Bank whose lessons to use (default: LESSONBANK_BANK, else 'default')."
    )(command)


def json_option(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(command)


def _bank(cli: CliContext, bank: str | None) -> str:
    bank = (bank or cli.settings.bank).strip()
    if not bank:
        raise fail("--bank must not be empty")
    return bank


def _line(lesson: Lesson, score: float | None = None) -> str:
    text = " ".join(lesson.text.split())
    extra = f" score={score:.3f}" if score is not None else ""
    status = "" if lesson.status == "active" else f" [{lesson.status}]"
    return f"{lesson.id}  {lesson.kind:<8} evidence={lesson.evidence}{extra}{status}  {text}"


def _print_lessons(lessons: list[Lesson], as_json: bool, scores: list[float] | None = None) -> None:
    if as_json:
        items = [lesson.model_dump(mode="json") for lesson in lessons]
        if scores is not None:
            for item, score in zip(items, scores, strict=True):
                item["score"] = score
        click.echo(json.dumps(items, indent=2))
        return
    if not lessons:
        click.echo("No lessons.", err=True)
    for i, lesson in enumerate(lessons):
        click.echo(_line(lesson, scores[i] if scores is not None else None))


@click.group("lessons")
def lessons() -> None:
    """List, search, show, forget, export and import the lessons of a bank."""


@lessons.command("list")
@bank_option
@click.option(
    "--limit", "-n", type=click.IntRange(1, 100_000), default=100, show_default=True, help="At most this many."
)
@click.option("--all", "include_inactive", is_flag=True, help="Include forgotten and superseded lessons.")
@json_option
@pass_cli
def list_cmd(cli: CliContext, bank: str | None, limit: int, include_inactive: bool, as_json: bool) -> None:
    """The lessons of a bank, most recently seen first."""
    bank = _bank(cli, bank)
    with cli_store(cli) as store:
        found = store.list(bank, limit=limit, include_inactive=include_inactive)
    _print_lessons(found, as_json)


@lessons.command("search")
@bank_option
@click.argument("query")
@click.option("--limit", "-n", type=click.IntRange(1, 100), default=8, show_default=True, help="At most this many.")
@json_option
@pass_cli
def search_cmd(cli: CliContext, bank: str | None, query: str, limit: int, as_json: bool) -> None:
    """The active lessons of a bank that best match QUERY (hybrid dense + lexical search)."""
    bank = _bank(cli, bank)
    if not query.strip():
        raise fail("QUERY must not be empty")
    with cli_store(cli) as store:
        found = store.search(bank, query, limit=limit)
    _print_lessons([lesson for lesson, _ in found], as_json, [score for _, score in found])


@lessons.command("show")
@bank_option
@click.argument("lesson_ids", nargs=-1, required=True)
@json_option
@pass_cli
def show_cmd(cli: CliContext, bank: str | None, lesson_ids: tuple[str, ...], as_json: bool) -> None:
    """Every field of the lessons with these ids (or unique id prefixes), the runs and steps each rests
    on (with short excerpts while the runs' steps are kept in Redis), and a recipe's code."""
    from lessonbank.cli.provenance import lesson_sources, print_lesson

    bank = _bank(cli, bank)
    with cli_store(cli) as store:
        found = _find_by_prefix(store, bank, lesson_ids)
    sources = lesson_sources(cli, found)
    if as_json:
        items = [lesson.model_dump(mode="json") | {"sources": sources[lesson.id]} for lesson in found]
        click.echo(json.dumps(items, indent=2, ensure_ascii=False))
        return
    for lesson in found:
        print_lesson(lesson, sources[lesson.id])
        click.echo("")


def _find_by_prefix(store: LessonStoreProtocol, bank: str, lesson_ids: tuple[str, ...]) -> list[Lesson]:
    """The lessons named by full ids or unique prefixes, in the order asked; one-line error otherwise."""
    full = [i for i in lesson_ids if _is_uuid(i)]
    by_id = {lesson.id: lesson for lesson in store.get(bank, full)} if full else {}
    every = store.list(bank, limit=1_000_000, include_inactive=True) if len(full) < len(lesson_ids) else []
    found: list[Lesson] = []
    for wanted in lesson_ids:
        matches = [by_id[wanted]] if wanted in by_id else []
        if not _is_uuid(wanted):
            prefix = wanted.strip().lower()
            matches = [lesson for lesson in every if prefix and lesson.id.startswith(prefix)]
        if not matches:
            raise fail(f"no lesson {wanted} in bank {bank!r}")
        if len(matches) > 1:
            raise fail(f"lesson id prefix {wanted!r} is ambiguous in bank {bank!r}: {len(matches)} lessons match")
        found.append(matches[0])
    return found


def _require_all(found: list[Lesson], lesson_ids: Iterable[str], bank: str) -> None:
    missing = [i for i in lesson_ids if i not in {lesson.id for lesson in found}]
    if missing:
        raise fail(f"no lesson {missing[0]} in bank {bank!r}")


@lessons.command("forget")
@bank_option
@click.argument("lesson_ids", nargs=-1)
@click.option("--query", "-q", default=None, help="Forget the lessons that best match this text instead of ids.")
@click.option(
    "--limit", "-n", type=click.IntRange(1, 100), default=5, show_default=True, help="At most this many (--query)."
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_cli
def forget_cmd(
    cli: CliContext, bank: str | None, lesson_ids: tuple[str, ...], query: str | None, limit: int, yes: bool
) -> None:
    """Stop handing lessons to runs (status 'forgotten'; they stay exportable with --all).

    Name the lessons by id, or by --query with a confirmation of what matched.
    """
    bank = _bank(cli, bank)
    if bool(lesson_ids) == bool(query and query.strip()):
        raise fail("give either lesson ids or --query (exactly one of them)")
    with cli_store(cli) as store:
        targets = _forget_targets(store, bank, lesson_ids, query, limit, cli.settings.min_relevance)
        if not targets:
            click.echo(f"No active lesson of bank {bank!r} matches {query!r}; nothing forgotten.")
            return
        for lesson in targets:
            click.echo(_line(lesson))
        if not yes:
            click.confirm(f"Forget these {len(targets)} lesson(s) of bank {bank!r}?", abort=True)
        changed = store.set_status(bank, [lesson.id for lesson in targets], "forgotten")
    click.echo(f"Forgot {changed} lesson(s).")


def _forget_targets(
    store: LessonStoreProtocol, bank: str, lesson_ids: tuple[str, ...], query: str | None, limit: int, floor: float
) -> list[Lesson]:
    if lesson_ids:
        found = store.get(bank, list(lesson_ids))
        _require_all(found, lesson_ids, bank)
        return found
    assert query is not None
    return [lesson for lesson, _ in store.search(bank, query, limit=limit, min_similarity=floor)]


@lessons.command("export")
@bank_option
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None, help="File (default: stdout)."
)
@click.option("--all", "include_inactive", is_flag=True, help="Include forgotten and superseded lessons.")
@click.option("--limit", type=click.IntRange(1), default=1_000_000, help="At most this many lessons.")
@pass_cli
def export_cmd(cli: CliContext, bank: str | None, output: Path | None, include_inactive: bool, limit: int) -> None:
    """Write the lessons of a bank as JSONL (one Lesson per line)."""
    bank = _bank(cli, bank)
    with cli_store(cli) as store:
        found = store.list(bank, limit=limit, include_inactive=include_inactive)
    lines = "".join(lesson.to_json() + "\n" for lesson in found)
    if output is None:
        click.echo(lines, nl=False)
        return
    try:
        output.write_text(lines, encoding="utf-8")
    except OSError as e:
        raise fail(f"cannot write {output}", e) from e
    click.echo(f"Exported {len(found)} lesson(s) of bank {bank!r} to {output}.", err=True)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def read_lessons(stream: IO[str], bank: str) -> list[Lesson]:
    """Lessons from JSONL, moved into ``bank`` (a lesson of another bank gets this bank's id for its text).

    Raises ClickException naming the first bad line; nothing is read half-way.
    """
    lessons: list[Lesson] = []
    for number, raw in enumerate(stream, 1):
        if not raw.strip():
            continue
        try:
            lesson = Lesson.from_json(raw)
        except ValidationError as e:
            error = e.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "line"
            raise fail(f"line {number} is not a lesson: {where}: {error['msg']}") from e
        if not _is_uuid(lesson.id):
            raise fail(f"line {number}: lesson id {lesson.id!r} is not a uuid")
        if lesson.bank != bank:
            lesson = lesson.model_copy(
                update={"bank": bank, "id": lesson_id(bank, lesson.text), "origin": "imported", "superseded_by": None}
            )
        lessons.append(lesson)
    return lessons


@lessons.command("import")
@bank_option
@click.argument("source", type=click.File("r", encoding="utf-8"))
@pass_cli
def import_cmd(cli: CliContext, bank: str | None, source: IO[str]) -> None:
    """Read lessons from a JSONL file (or - for stdin) into a bank; re-importing never duplicates."""
    bank = _bank(cli, bank)
    found = read_lessons(source, bank)
    if not found:
        raise fail("no lessons in the input")
    with cli_store(cli) as store:
        for start in range(0, len(found), IMPORT_BATCH):
            store.upsert(found[start : start + IMPORT_BATCH])
    click.echo(f"Imported {len(found)} lesson(s) into bank {bank!r}.")
