"""Worker service lifecycle: a worker refuses to start without an LLM; its main process owns the embedded store.

A worker with no explicit LLM endpoint or key would send every run to api.openai.com with no key
and dead-letter it; it stops at ``worker_init`` instead, with one line saying which variable to set.

With no Qdrant server configured, qdrant-client's local mode allows one process per path, so the
worker's main process opens it (``StoreOwner``) once the pool is up and serves the pool processes'
store calls over Redis; it closes the path on shutdown. With a Qdrant server nothing is owned.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import signals

from lessonbank.core.exceptions import ConfigurationError
from lessonbank.workers.app import app

logger = logging.getLogger(__name__)

_owner: list[Any] = []


def _ours(sender: Any) -> bool:
    owner_app = getattr(sender, "app", None)
    return owner_app is app


@signals.worker_init.connect
def require_llm(sender: Any = None, **_: Any) -> None:
    """Stop the worker before it takes any run when no LLM to distill with is configured."""
    if not _ours(sender):
        return
    try:
        app.settings.check_llm_endpoint()
    except ConfigurationError as e:
        # SystemExit, not an error: Celery logs and ignores errors raised by signal handlers.
        raise SystemExit(f"lessonbank: {e}") from None


@signals.worker_ready.connect
def start_store_owner(sender: Any = None, **_: Any) -> None:
    """Open the embedded store in the main worker process (not in pool children)."""
    if not _ours(sender) or app.settings.qdrant_url or _owner:
        return
    from lessonbank.core.store.owner import StoreOwner

    owner = StoreOwner(app.settings)
    if owner.start():
        _owner.append(owner)
    else:
        logger.warning("another process holds the lesson store at %s; this worker uses it through Redis",
                       app.settings.resolved_qdrant_path)


@signals.worker_shutdown.connect
def stop_store_owner(sender: Any = None, **_: Any) -> None:
    """Close the embedded store (releases the path)."""
    while _owner:
        _owner.pop().stop()


@signals.worker_init.connect
@signals.beat_init.connect
def make_data_dir(sender: Any = None, **_: Any) -> None:
    """The data directory holds the beat schedule and the embedded store."""
    app.settings.data_dir.mkdir(parents=True, exist_ok=True)
