"""How a CLI command reaches the lesson store.

With ``LESSONBANK_QDRANT_URL``: straight to the Qdrant server. Otherwise the embedded store at
``LESSONBANK_QDRANT_PATH`` is opened directly, unless another process (a running worker) holds
that path, in which case the calls go through that worker over Redis.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from lessonbank.cli.context import CliContext, fail
from lessonbank.core.exceptions import LessonbankError, ServiceUnavailable
from lessonbank.core.store.protocol import LessonStoreProtocol

logger = logging.getLogger(__name__)


def open_store(cli: CliContext) -> LessonStoreProtocol:
    """The store this command should use (see the module docstring); one-line ClickException on failure."""
    from lessonbank.core.store.owner import open_local_store
    from lessonbank.core.store.remote import connect_store  # qdrant-client: slow to import

    settings = cli.settings
    try:
        if settings.qdrant_url:
            return connect_store(settings)
        try:
            return open_local_store(settings)
        except ServiceUnavailable as e:
            logger.info("%s; going through the worker", e)
            return connect_store(settings, redis_client=cli.redis())
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
