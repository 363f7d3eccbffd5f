"""How a CLI command reaches the lesson store.

With ``LESSONBANK_QDRANT_URL``: straight to the Qdrant server. Otherwise the embedded store at
``LESSONBANK_QDRANT_PATH`` is opened directly, unless another process (a running worker) holds
that path, in which case the calls go through that worker over Redis.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from lessonbank.cli.context import CliContext, fail, resolve_ids
from lessonbank.core.exceptions import LessonbankError, ServiceUnavailable
from lessonbank.core.extras import missing_extra
from lessonbank.core.models import Lesson
from lessonbank.core.store.protocol import LessonStoreProtocol

EVERY_LESSON = 1_000_000

logger = logging.getLogger(__name__)


def open_store(cli: CliContext) -> LessonStoreProtocol:
    """The store this command should use (see the module docstring); one-line ClickException on failure."""
    from lessonbank.core.store.remote import connect_store

    settings = cli.settings
    try:
        if settings.qdrant_url:
            return connect_store(settings)
        try:
            from lessonbank.core.store.local import open_local_store  # the embedded engine: slow to import

            return open_local_store(settings)
        except ServiceUnavailable as e:
            logger.info("%s; going through the worker", e)
            return connect_store(settings, redis_client=cli.redis())
    except ModuleNotFoundError as e:
        raise fail(str(missing_extra(e, "reading the lesson store from this process"))) from e
    except (LessonbankError, OSError, ValueError, RuntimeError) as e:
        raise fail("cannot open the lesson store", e) from e


@contextmanager
def cli_store(cli: CliContext) -> Iterator[LessonStoreProtocol]:
    """The store for one command, closed when the command ends; store errors become ClickExceptions."""
    store = open_store(cli)
    try:
        yield store
    except LessonbankError as e:
        raise fail("lesson store error", e) from e
    finally:
        store.close()


def _is_uuid(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def find_lessons(store: LessonStoreProtocol, bank: str, wanted: Sequence[str],
                 also_known: Iterable[str] = ()) -> tuple[list[Lesson], list[str]]:
    """The lessons of ``bank`` named by full ids or unique id prefixes, in the order asked, and the ids
    among ``also_known`` (e.g. tombstones) that were named; one-line error for an unknown or ambiguous
    one. Full ids cost one read; a prefix lists the bank."""
    extra = set(also_known)
    if all(_is_uuid(i.strip().lower()) for i in wanted):
        ids = [i.strip().lower() for i in wanted]
        present = {lesson.id: lesson for lesson in store.get(bank, ids)}
    else:
        present = {lesson.id: lesson for lesson in store.list(bank, limit=EVERY_LESSON, include_inactive=True)}
    named = resolve_ids(wanted, set(present) | extra, "lesson", f"in bank {bank!r}")
    return [present[i] for i in named if i in present], [i for i in named if i not in present]
