"""``Bank``: the lessons of one bank from Python, with the verbs of ``lessonbank lessons`` (which calls it).

Each call opens the lesson store and closes it again (as a CLI command does), so a ``Bank`` never keeps a
running worker from its embedded store; with a worker holding it, calls go through that worker. Errors
are ``LessonbankError``s: ``NotFound`` for an unknown or ambiguous id, ``InvalidArgument`` for input the
bank refuses, ``ServiceUnavailable`` when Redis or the store does not answer.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from lessonbank.cli.context import CliContext, redis_errors
from lessonbank.cli.store_access import EVERY_LESSON, find_lessons, open_store
from lessonbank.core import purge
from lessonbank.core.exceptions import InvalidArgument, LessonbankError, NotFound, ServiceUnavailable
from lessonbank.core.models import LESSON_KINDS, RELEASED_BY_USER, Lesson, LessonKind, validate_bank
from lessonbank.core.settings import Settings

if TYPE_CHECKING:
    from lessonbank.cli.intake import Checked
    from lessonbank.forget import ForgetReport

IMPORT_BATCH = 64
RELEASABLE = frozenset({"quarantined", "retired"})
_UNAVAILABLE = ("unreachable", "Redis failed", "cannot open the lesson store", "locking bank")


@dataclass(frozen=True)
class Added:
    """What ``Bank.add`` did: the lesson as stored (``quarantined`` until released) and whether it is new."""

    lesson: Lesson
    created: bool

    @property
    def quarantined(self) -> bool:
        return self.lesson.status == "quarantined"


@dataclass(frozen=True)
class Imported:
    """What ``Bank.import_`` did: the lessons written, how many were already there, and a note per line left out."""

    lessons: list[Lesson] = field(default_factory=list)
    present: int = 0
    notes: list[str] = field(default_factory=list)


def _admissible(checked: Sequence[tuple[int, Checked]]) -> tuple[builtins.list[Lesson], builtins.list[str]]:
    """The lessons to write (first of each id) and one message per line left out."""
    lessons: dict[str, Lesson] = {}
    notes: builtins.list[str] = []
    for number, item in checked:
        if item.lesson is None:
            notes.append(f"line {number} skipped: {item.refused}")
        elif item.lesson.id in lessons:
            notes.append(f"line {number} skipped: the same lesson as an earlier line")
        else:
            lessons[item.lesson.id] = item.lesson
    return builtins.list(lessons.values()), notes


def _as_error(error: click.ClickException) -> LessonbankError:
    """A CLI helper's one-line error as the ``LessonbankError`` it stands for."""
    message = error.format_message()
    if any(marker in message for marker in _UNAVAILABLE):
        return ServiceUnavailable(message)
    if message.startswith("no lesson ") or " is ambiguous " in message:
        return NotFound(message)
    return InvalidArgument(message)


class Bank:
    """The lessons of one bank (default ``LESSONBANK_BANK``): ``list``, ``search``, ``get``, ``add``, ``forget``,
    ``release``, ``export``, ``import_`` and ``report``, as the ``lessonbank lessons`` commands do them."""

    def __init__(self, name: str | None = None, *, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.name = validate_bank(name if name is not None else self.settings.bank)
        self._cli = CliContext(self.settings)

    @classmethod
    def of_cli(cls, cli: CliContext, name: str) -> Bank:
        """The bank a CLI command works on, sharing the command's settings and Redis client."""
        bank = cls(name, settings=cli.settings)
        bank._cli = cli
        return bank

    def __repr__(self) -> str:
        return f"Bank({self.name!r})"

    def __enter__(self) -> Bank:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the Redis client a call opened (the bank stays usable: the next call opens one again)."""
        client, self._cli._redis = self._cli._redis, None
        if client is not None:
            client.close()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except click.ClickException as e:
            raise _as_error(e) from e.__cause__

    @contextmanager
    def _store(self) -> Iterator[Any]:
        """The store for one call, closed after it; its own errors are ``LessonbankError``s already."""
        with self._errors():
            store = open_store(self._cli)
        try:
            yield store
        finally:
            store.close()

    def list(self, limit: int = 100, *, include_inactive: bool = False,
             statuses: Sequence[str] = ()) -> builtins.list[Lesson]:
        """The lessons, most recently seen first: active ones, every status (``include_inactive``), or those
        with one of ``statuses`` (e.g. ``["quarantined"]``)."""
        with self._store() as store:
            if statuses:
                every = store.list(self.name, limit=EVERY_LESSON, include_inactive=True)
                return [lesson for lesson in every if lesson.status in statuses][:limit]
            return cast(builtins.list[Lesson], store.list(self.name, limit=limit, include_inactive=include_inactive))

    def search(self, query: str, limit: int = 8) -> builtins.list[tuple[Lesson, float]]:
        """The active lessons that best match ``query`` (hybrid dense + lexical search), with their scores."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgument("query must be a non-empty str")
        with self._store() as store:
            return cast(builtins.list[tuple[Lesson, float]], store.search(self.name, query, limit=limit))

    def get(self, *ids: str) -> builtins.list[Lesson]:
        """The lessons with these ids (or unique id prefixes), in the order asked; ``NotFound`` for an unknown one."""
        if not ids:
            raise InvalidArgument("give at least one lesson id")
        with self._store() as store, self._errors():
            return find_lessons(store, self.name, ids)[0]

    def add(self, text: str, kind: str = "fact", *, tags: Sequence[str] = (), allow: bool = False) -> Added:
        """Add a lesson of your own (one or two self-contained sentences). It passes the quality gate and the
        secret check (else ``InvalidArgument``); one carrying a URL, an e-mail address or asking to send data
        waits in quarantine for ``release``. A purged text comes back only with ``allow=True``."""
        from lessonbank.cli.intake import Intake
        from lessonbank.core.redact import Redactor

        if kind not in LESSON_KINDS:
            raise InvalidArgument(f"kind must be one of {', '.join(LESSON_KINDS)} (got {kind!r})")
        intake = Intake(self.name, Redactor(self.settings.redact_patterns), origin="added")
        checked = intake.check(Lesson.new(self.name, cast(LessonKind, kind), text, tags=builtins.list(tags)))
        if checked.lesson is None:
            raise InvalidArgument(f"lesson refused: {checked.refused}")
        lesson = checked.lesson
        with self._errors():
            client = self._cli.redis()
            with redis_errors(f"reading the purged lessons of bank {self.name!r}"):
                purged = purge.purged_ids(client, self.name, [lesson.id])
        if purged and not allow:
            raise InvalidArgument(f"this lesson ({lesson.id}) was purged from bank {self.name!r}; pass allow=True "
                                  "(--allow) to learn it again")
        with self._store() as store:
            existing = store.get(self.name, [lesson.id])
            if existing:
                return Added(existing[0], created=False)
            store.upsert([lesson])
        with self._errors(), redis_errors(f"removing the tombstone of lesson {lesson.id} (added; purged until "
                                          "`lessons unforget`)"):
            purge.remove_tombstones(client, self.name, purged)
        return Added(lesson, created=True)

    @contextmanager
    def steady(self) -> Iterator[None]:
        """The bank's consolidation lock while lessons' statuses change: a worker reinforcing a lesson writes it
        whole, with the status it read, and would undo a forget (or a release) made between its read and its
        write. Without Redis (no worker consolidates then) the change goes ahead."""
        wait = self.settings.distill_lock_timeout
        with self._errors(), redis_errors(f"locking bank {self.name!r}"):
            with purge.bank_held(self._cli.redis(), self.name, wait, wait, unless_away=True):
                yield

    def forget(self, *ids: str, purge: bool = False) -> int:
        """Stop handing these lessons (ids or unique prefixes) to runs: status ``forgotten`` (``unforget`` brings
        them back), or with ``purge=True`` removed for good, leaving a tombstone without the text so the same
        text is not learnt again. Returns how many changed."""
        lessons = self.get(*ids)
        found = [lesson.id for lesson in lessons]
        if not purge:
            with self._store() as store, self.steady():
                return int(store.set_status(self.name, found, "forgotten", cause="forgotten"))
        return self._purge(found)

    def _purge(self, ids: builtins.list[str]) -> int:
        wait = self.settings.distill_lock_timeout
        with self._store() as store, self._errors():
            client = self._cli.redis()
            with redis_errors(f"purging lessons of bank {self.name!r} (run the command again)"):
                purge.add_tombstones(client, self.name, ids)  # first: the text cannot come back while the points go
                with purge.bank_held(client, self.name, wait=wait, hold=wait):  # no worker reinforces one meanwhile
                    return int(store.delete(self.name, ids))

    def forget_run(self, run_id: str, *, purge: bool = False) -> ForgetReport:
        """Take out everything run ``run_id`` taught this bank: lessons resting on it alone are removed for good,
        others lose its evidence, provenance and credit, reports no longer count it; ``purge`` drops its step
        records too. ``UnknownRun`` when the bank does not know the run."""
        from lessonbank.forget import forget_run

        wait = self.settings.distill_lock_timeout
        with self._store() as store, self._errors():
            client = self._cli.redis()
            with redis_errors(f"forgetting run {run_id} of bank {self.name!r} (run the call again)"):
                return forget_run(store, client, self.name, run_id.strip(), purge=purge, wait=wait,
                                  ttl=self.settings.step_ttl)

    def release(self, *ids: str) -> int:
        """Release quarantined or retired lessons: you vouch for them, and runs get them from now on. Returns how
        many changed; ``InvalidArgument`` if one of them is neither quarantined nor retired."""
        lessons = self.get(*ids)
        for lesson in lessons:
            if lesson.status not in RELEASABLE:
                raise InvalidArgument(f"lesson {lesson.id} is {lesson.status}, not quarantined or retired")
        with self._store() as store, self.steady():
            return int(store.set_status(self.name, [lesson.id for lesson in lessons], "active",
                                        reason=RELEASED_BY_USER, cause="released"))

    def export(self, path: str | Path | None = None, *, include_inactive: bool = False,
               limit: int = EVERY_LESSON) -> str:
        """The lessons as JSONL (one Lesson per line, UTF-8: what ``import_`` reads), also written to ``path``."""
        lines = "".join(lesson.to_json() + "\n" for lesson in self.list(limit, include_inactive=include_inactive))
        if path is not None:
            Path(path).write_text(lines, encoding="utf-8")
        return lines

    def import_(self, source: str | bytes | Path, *, allow: bool = False, name: str = "") -> Imported:
        """Read lessons into this bank from JSONL (``export`` output, or plain ``{"kind": ..., "text": ...}``
        lines): a ``Path``, or the text itself. Ids come from this bank and the text, so importing again never
        duplicates; each lesson passes the quality gate and the secret check, one carrying a URL, an e-mail
        address or asking to send data is quarantined, and purged texts are left out unless ``allow``. A malformed
        line fails the whole import (``InvalidArgument`` naming the line), so nothing is written half-way."""
        from lessonbank.cli.intake import Intake, decode, link_superseded, read_lessons
        from lessonbank.core.redact import Redactor

        data = Path(source).read_bytes() if isinstance(source, Path) else source
        data = data.encode("utf-8") if isinstance(data, str) else data
        intake = Intake(self.name, Redactor(self.settings.redact_patterns), origin="imported")
        with self._errors():
            checked = read_lessons(decode(data, name or (str(source) if isinstance(source, Path) else "the input")),
                                   intake)
        if not checked:
            raise InvalidArgument("no lessons in the input")
        link_superseded([item for _, item in checked])
        candidates, notes = _admissible(checked)
        with self._errors(), redis_errors(f"reading the purged lessons of bank {self.name!r}"):
            client = self._cli.redis()
            purged = purge.purged_ids(client, self.name, [lesson.id for lesson in candidates])
        blocked = set() if allow else purged
        notes += [f"lesson {i} skipped: it was purged from the bank (--allow imports it)" for i in sorted(blocked)]
        with self._store() as store:
            present = {lesson.id for lesson in store.get(self.name, [lesson.id for lesson in candidates])}
            new = [lesson for lesson in candidates if lesson.id not in present | blocked]
            if not new and not present:
                more = f" (and {len(notes) - 1} more left out)" if len(notes) > 1 else ""
                raise InvalidArgument(f"no lesson imported: {notes[0]}{more}")
            for start in range(0, len(new), IMPORT_BATCH):
                store.upsert(new[start : start + IMPORT_BATCH])
        with self._errors(), redis_errors("removing the tombstones of the imported lessons (imported; they stay "
                                          "purged until `lessons unforget`)"):
            purge.remove_tombstones(client, self.name, purged & {lesson.id for lesson in new})
        return Imported(new, len(present), notes)

    def report(self, since: float | None = None) -> dict[str, Any]:
        """What the lessons did (``lessonbank report --json``): runs given lessons against control runs, the
        lessons and their counts, tool statistics; ``since``: a Unix time."""
        from lessonbank.core.summary import load_summaries
        from lessonbank.report import build_report

        with self._errors(), redis_errors("reading run summaries"):
            summaries = load_summaries(self._cli.redis(), self.name, since)
        lessons = self.list(EVERY_LESSON, include_inactive=True)
        return build_report(self.name, summaries, lessons, since)
