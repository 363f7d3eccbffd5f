"""What every CLI command shares: ``ctx.obj`` (settings, and clients built on first use), the ``--bank``
and ``--json`` options, one-line errors (URLs printed with their passwords masked), JSON output and
unique id prefixes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click
import redis

from lessonbank.core.connections import create_redis, masked_url
from lessonbank.core.exceptions import ConfigurationError, LessonbankError
from lessonbank.core.models import MAX_BANK_CHARS, validate_bank
from lessonbank.core.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])

# scheme://anything-up-to-whitespace-or-quote: every URL an error message may carry (linear).
UNREADABLE_CHARS = 400  # a line naming a lesson that could not be read: its bank, id and why (``render.unreadable``)

_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s'\"<>]+")


@dataclass
class CliContext:
    settings: Settings
    _redis: redis.Redis | None = field(default=None, repr=False)

    def redis(self) -> redis.Redis:
        """A Redis client that has answered a PING, or a one-line ClickException."""
        if self._redis is None:
            try:
                client = create_redis(self.settings, "cli")
                client.ping()
            except ConfigurationError as e:
                raise fail(str(e)) from e
            except redis.RedisError as e:
                raise fail(f"Redis at {masked_url(self.settings.redis_url)} is unreachable", e) from e
            self._redis = client
        return self._redis


pass_cli = click.make_pass_decorator(CliContext)


def mask_urls(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``**``."""
    return _URL.sub(lambda match: masked_url(match.group(0)), text)


def fail(message: str, cause: Any = None) -> click.ClickException:
    """A one-line error for the operator (passwords in URLs masked)."""
    text = f"{message}: {cause}" if cause is not None else message
    lines = text.strip().splitlines()
    return click.ClickException(mask_urls(lines[0] if lines else message))


@contextmanager
def redis_errors(doing: str) -> Iterator[None]:
    """A Redis error in the block (Redis answered but failed the command: out of memory, a read-only replica,
    or it went away meanwhile) becomes a one-line error: "Redis failed while <doing>: <error>"."""
    try:
        yield
    except redis.RedisError as e:
        raise fail(f"Redis failed while {doing}", e) from e


@contextmanager
def bank_errors() -> Iterator[None]:
    """A ``LessonbankError`` of a ``Bank`` call in the block becomes a one-line error."""
    try:
        yield
    except LessonbankError as e:
        raise fail(str(e)) from e


def data_dir_failure(settings: Settings, error: OSError) -> click.ClickException:
    """A one-line error for a LESSONBANK_DATA_DIR (or a file or folder in it) the command cannot use."""
    return fail(f"LESSONBANK_DATA_DIR {settings.data_dir} cannot be used", error)


def checked_bank(bank: str, source: str = "--bank") -> str:
    """``bank`` if it is a usable bank name (``validate_bank``: never stripped, never defaulted), else a
    one-line error naming where it came from."""
    try:
        return validate_bank(bank)
    except ConfigurationError:
        if not bank.strip():
            raise fail(f"{source} must not be empty") from None
        if len(bank) > MAX_BANK_CHARS:
            raise fail(f"{source} must be at most {MAX_BANK_CHARS} characters (got {len(bank)})") from None
        raise fail(f"{source} must not start or end with spaces (got {bank!r})") from None


def _bank_value(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    if value is not None:
        return checked_bank(value)
    cli = ctx.find_object(CliContext)
    settings = cli.settings if cli is not None else Settings()
    return checked_bank(settings.bank, "LESSONBANK_BANK")


def bank_option(command: F) -> F:
    """``--bank`` (default: LESSONBANK_BANK); the command receives a validated bank name."""
    return click.option(
        "--bank", "-b", default=None, callback=_bank_value,
        help="Bank to use (default: LESSONBANK_BANK, else 'default'); no surrounding spaces.",
    )(command)


def json_option(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")(command)


def echo_json(document: Any) -> None:
    """Print ``document`` as one JSON document (what every ``--json`` prints)."""
    click.echo(json.dumps(document, indent=2, ensure_ascii=False, sort_keys=False))


def resolve_ids(wanted: Sequence[str], known: Iterable[str], what: str, where: str, unknown: str = "") -> list[str]:
    """The ids named by full ids or unique prefixes (case-insensitive), in the order asked, without
    repeats; a one-line error for an empty, unknown or ambiguous one (``what``: "lesson", "run";
    ``where``: "in bank 'b'", "among the dead letters"; ``unknown``: the error for an unknown id, with
    ``{id}``, default "no {what} {id} {where}")."""
    ids = sorted(set(known))
    found: list[str] = []
    for raw in wanted:
        prefix = raw.strip().lower()
        if not prefix:
            raise fail(f"a {what} id must not be empty")
        matches = [prefix] if prefix in ids else [i for i in ids if i.lower().startswith(prefix)]
        if not matches:
            raise fail(unknown.format(id=raw) if unknown else f"no {what} {raw} {where}")
        if len(matches) > 1:
            raise fail(f"{what} id prefix {raw!r} is ambiguous {where}: {len(matches)} match "
                       f"({', '.join(matches[:3])}{', ...' if len(matches) > 3 else ''})")
        if matches[0] not in found:
            found.append(matches[0])
    return found


def name_unreadable(bank: str, whys: dict[str, str], shown: str) -> None:
    """One line on stderr per lesson of ``bank`` whose stored payload could not be read (id -> why), then exit 1:
    every other one was ``shown`` ("listed", "reported")."""
    from lessonbank.cli.provenance import one_line

    for lesson_id, why in whys.items():
        click.echo(one_line(f"bank {bank!r}: lesson {lesson_id} could not be read: {why}", UNREADABLE_CHARS), err=True)
    if whys:
        raise fail(f"{len(whys)} lesson(s) could not be read; every other one is {shown}")
