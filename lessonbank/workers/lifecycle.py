"""Worker service lifecycle: a worker refuses to start without an LLM; its main process owns the embedded store.

A worker with no explicit LLM endpoint or key would send every run to api.openai.com with no key
and dead-letter it; it stops at ``worker_init`` instead, with one line saying which variable to set. So
does a worker whose embedding model folder is incomplete (the embedder never downloads one by name).

With no Qdrant server configured, the embedded store (a Qdrant Edge shard) allows one process per
path, so the worker's main process opens it (``StoreOwner``) once the pool is up and serves the store
calls of the pool processes, agents and the CLI over Redis, in a few threads; it closes the path on
shutdown. With a Qdrant server nothing is owned: every process talks to the server directly. One Redis
serves one embedded store: a worker whose store is not the one the Redis is bound to (another host,
another data directory) stops at ``worker_init`` with one line naming ``LESSONBANK_QDRANT_URL``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import signals

from lessonbank.core.exceptions import ConfigurationError
from lessonbank.workers.app import app

logger = logging.getLogger(__name__)

_owner: list[Any] = []
_stop_retrying = threading.Event()
OWNER_RETRY_SECONDS = 5.0


def serving_store() -> bool:
    """Whether this worker process serves the embedded lesson store right now."""
    return any(owner.running for owner in _owner)


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


@signals.worker_init.connect
def require_embed_model(sender: Any = None, **_: Any) -> None:
    """Stop the worker before it takes any run when the embedding model folder lacks a file."""
    if not _ours(sender) or app.settings.embed_base_url:
        return
    from lessonbank.core.embeddings import check_model_folder, model_folder

    try:
        check_model_folder(model_folder(app.settings))
    except ConfigurationError as e:
        raise SystemExit(f"lessonbank: {e}") from None


@signals.worker_init.connect
def refuse_second_store(sender: Any = None, **_: Any) -> None:
    """Stop the worker before it takes any run when this Redis's lessons are in another worker's embedded store."""
    if not _ours(sender) or app.settings.qdrant_url:
        return
    import redis

    from lessonbank.core.connections import create_redis
    from lessonbank.workers.owner import claim_store

    client = create_redis(app.settings, "service")
    try:
        claim_store(app.settings, client)
    except ConfigurationError as e:
        raise SystemExit(f"lessonbank: {e}") from None
    except (redis.RedisError, OSError) as e:  # Redis not up yet: the heartbeat still reports a rival store
        logger.warning("cannot check which embedded store this Redis serves: %s", e)
    finally:
        client.close()


@signals.worker_ready.connect
def start_store_owner(sender: Any = None, **_: Any) -> None:
    """Open the embedded store in the main worker process (not in pool children); while another process
    holds it (another worker, or the CLI for a moment), try again every few seconds."""
    if not _ours(sender) or app.settings.qdrant_url or _owner:
        return
    _stop_retrying.clear()
    if not _try_own():
        logger.warning("another process holds the lesson store at %s; this worker uses it through Redis and "
                       "tries to own it again every %.0f s", app.settings.resolved_qdrant_path, OWNER_RETRY_SECONDS)
        threading.Thread(target=_retry_owning, name="lessonbank-store-owner-retry", daemon=True).start()


def _try_own() -> bool:
    from lessonbank.workers.owner import StoreOwner

    owner = StoreOwner(app.settings)
    if owner.start():
        _owner.append(owner)
        return True
    return False


def _retry_owning() -> None:
    while not _stop_retrying.wait(OWNER_RETRY_SECONDS):
        if _try_own():
            logger.info("this worker now serves the lesson store at %s", app.settings.resolved_qdrant_path)
            return


@signals.worker_ready.connect
def warn_of_redis_risks(sender: Any = None, **_: Any) -> None:
    """Say once, at start, when Redis may evict lessonbank's keys or keeps nothing on disk
    (``redis_health.eviction_risk``, ``persistence_risk``)."""
    if not _ours(sender):
        return
    from lessonbank.core.connections import create_redis
    from lessonbank.core.redis_health import eviction_risk, persistence_risk

    client = create_redis(app.settings, "service")
    try:
        risks = [eviction_risk(client), persistence_risk(client)]
    finally:
        client.close()
    for risk in filter(None, risks):
        logger.warning("%s", risk)


@signals.worker_shutdown.connect
def stop_store_owner(sender: Any = None, **_: Any) -> None:
    """Close the embedded store (releases the path)."""
    _stop_retrying.set()
    while _owner:
        _owner.pop().stop()


@signals.worker_init.connect
@signals.beat_init.connect
def make_data_dir(sender: Any = None, **_: Any) -> None:
    """The data directory holds the beat schedule and the embedded store."""
    app.settings.data_dir.mkdir(parents=True, exist_ok=True)
