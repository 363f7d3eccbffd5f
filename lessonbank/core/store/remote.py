"""Reaching the lesson store from any process: a Qdrant server directly, or the embedded store through
the process that owns it (``owner.StoreOwner``, in the worker service) over Redis:

- a request is JSON ``{"id", "method", "args", "deadline"}`` RPUSHed to ``STORE_REQUESTS_KEY``, its deadline
  in Redis's clock (``RedisClock``: the agent's machine and the worker's may disagree by seconds);
- the owner BLPOPs it, drops it if its deadline has passed, runs the call and RPUSHes the reply
  ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {"type", "message"}}`` to
  ``store_reply_key(id)``, which expires after ``REPLY_TTL`` seconds;
- the caller BLPOPs its reply key for at most ``settings.store_timeout`` seconds (in waits shorter than
  its client's socket timeout) and raises ``ServiceUnavailable`` when nothing came, taking its request
  back if no owner has; a delete that the owner has taken (it rewrites the embedded store's files) is
  waited for up to ``PURGE_WAIT`` seconds, or until the owner's heartbeat (``STORE_OWNER_KEY``) lapses.

``RemoteLessonStore`` has no method of its own: each method of ``LessonStoreProtocol`` is forwarded,
its arguments and result encoded with the protocol's own annotations (``protocol.codec``). This
module imports neither qdrant-client nor an embedding model.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

from pydantic import ValidationError

from lessonbank.core import exceptions
from lessonbank.core.connections import RedisClock, create_wire, redis_errors, redis_trouble
from lessonbank.core.constants import STORE_OWNER_KEY, STORE_REQUESTS_KEY, store_reply_key
from lessonbank.core.exceptions import LessonbankError, ServiceUnavailable, StoreError
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import REMOTE_METHODS, LessonStoreProtocol, codec

logger = logging.getLogger(__name__)

REPLY_TTL = 30
# Deletes rewrite the embedded store's files (1-2 s per 10k lessons): once the owner has taken one, wait longer.
PURGES = frozenset({"delete", "delete_bank"})
PURGE_WAIT = 600.0


def connect_store(settings: Settings, redis_client: Any = None) -> LessonStoreProtocol:
    """The store a process other than the embedded store's owner should use.

    ``settings.qdrant_url`` set: a direct ``LessonStore`` on the server. Otherwise a
    ``RemoteLessonStore`` that forwards calls to the worker owning the embedded path.
    """
    if settings.qdrant_url:
        from qdrant_client import QdrantClient

        from lessonbank.core.embeddings import embedder_from_settings
        from lessonbank.core.store.qdrant import LessonStore

        api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        client = QdrantClient(url=settings.qdrant_url, api_key=api_key, check_compatibility=False)
        return LessonStore(client, embedder_from_settings(settings), settings.collection)
    # The proxy's methods are attached below, from the protocol itself: the type checker cannot see them.
    return cast(LessonStoreProtocol, RemoteLessonStore(settings, redis_client))


def _raise_remote(error: dict[str, Any]) -> None:
    """Re-raise an error reply as the lessonbank exception it was (StoreError otherwise)."""
    name = str(error.get("type", ""))
    message = str(error.get("message", "the lesson store owner failed"))
    cls = getattr(exceptions, name, None)
    if isinstance(cls, type) and issubclass(cls, LessonbankError):
        raise cls(message)
    raise StoreError(f"{name}: {message}" if name else message)


class RemoteLessonStore:
    """Every method of ``LessonStoreProtocol``, forwarded over Redis to the process that owns the embedded path."""

    def __init__(self, settings: Settings, redis_client: Any = None) -> None:
        self.settings = settings
        self.timeout = settings.store_timeout
        self._redis = redis_client  # a worker's or the CLI's redis-py client; the agent's own Wire otherwise
        self._clock: RedisClock | None = None

    @property
    def redis(self) -> Any:
        if self._redis is None:
            self._redis = create_wire(self.settings, "agent")
        return self._redis

    @property
    def clock(self) -> RedisClock:
        if self._clock is None:
            self._clock = RedisClock(self.redis)
        return self._clock

    def call(self, method: str, args: dict[str, Any]) -> bytes:
        """Send one request and wait for its reply (JSON, as the owner sent it); raises ServiceUnavailable.
        A delete the owner took is waited for up to ``PURGE_WAIT`` seconds: it rewrites the embedded
        store's files."""
        request_id = uuid.uuid4().hex
        key = store_reply_key(request_id)
        payload = ""
        taken = False
        why = f"did not finish {method} within {self.timeout:g}s"
        chunk = self._chunk()
        try:
            ends = time.monotonic() + self.timeout
            deadline = self.clock.now() + self.timeout
            payload = json.dumps({"id": request_id, "method": method, "args": args, "deadline": deadline})
            pipe = self.redis.pipeline(transaction=False)  # the request and the wait in one round trip
            pipe.rpush(STORE_REQUESTS_KEY, payload)
            pipe.blpop([key], timeout=min(self.timeout, chunk))
            _, item = pipe.execute()
            item = item if item is not None else self._wait(key, ends, chunk)
            if item is None:  # nobody took it: do not leave it queued for a later owner
                taken = self.redis.lrem(STORE_REQUESTS_KEY, 1, payload) == 0
                if taken and method in PURGES:
                    item, why = self._wait_for_purge(key, method, chunk)
        except redis_errors() as e:
            self._withdraw(payload)
            raise ServiceUnavailable(f"{redis_trouble(e)} for lesson store requests: {e}") from e
        if item is None:
            if taken:
                raise ServiceUnavailable(f"the lesson store owner {why}")
            raise ServiceUnavailable(
                f"no lesson store owner answered within {self.timeout:g}s; is a worker running?"
            )
        return item[1]

    def _chunk(self) -> float:
        """The longest BLPOP this client can wait for: a second (or half) under its socket timeout."""
        client = self.redis
        pool = getattr(client, "connection_pool", None)
        timeout = pool.connection_kwargs.get("socket_timeout") if pool is not None else client.socket_timeout
        socket_timeout = float(timeout or 10.0)
        return max(socket_timeout - 1.0, socket_timeout / 2)

    def _wait(self, key: str, ends: float, chunk: float) -> Any:
        """BLPOP ``key`` until ``ends`` (monotonic), in waits of at most ``chunk`` seconds."""
        while (left := ends - time.monotonic()) > 0.05:
            item = self.redis.blpop([key], timeout=min(chunk, left))
            if item is not None:
                return item
        return None

    def _wait_for_purge(self, key: str, method: str, chunk: float) -> tuple[Any, str]:
        """(the reply, or None and why): a delete the owner took, waited for up to ``PURGE_WAIT`` seconds while
        the owner's heartbeat, if it had one, lasts (a killed owner never replies)."""
        started = time.monotonic()
        owner = self.redis.get(STORE_OWNER_KEY)
        while time.monotonic() - started < PURGE_WAIT:
            item = self._wait(key, min(time.monotonic() + chunk, started + PURGE_WAIT), chunk)
            if item is not None:
                return item, ""
            if owner is not None and self.redis.get(STORE_OWNER_KEY) != owner:
                lapsed = time.monotonic() - started
                return None, (f"stopped during {method} (its heartbeat lapsed after {lapsed:.0f}s); whatever it "
                              "deleted stays deleted, and a purge left undone is done when the store opens again")
        return None, f"did not finish {method} within {PURGE_WAIT:g}s"

    def _withdraw(self, payload: str) -> None:
        """Take a request back from the queue after an error, if Redis answers (a lost one times out there)."""
        if not payload:
            return
        try:
            self.redis.lrem(STORE_REQUESTS_KEY, 1, payload)
        except redis_errors():
            pass

    def close(self) -> None:
        """Nothing to release (the Redis client is shared or closed with the process)."""


def _forwarder(name: str) -> Callable[..., Any]:
    def forward(self: RemoteLessonStore, *args: Any, **kwargs: Any) -> Any:
        wire = codec(name)  # built on first use: pydantic adapters cost a few ms each
        raw = self.call(name, wire.bind(args, kwargs))
        try:
            reply = wire.load_reply(raw)
        except ValidationError as e:
            first = e.errors()[0]  # its location starts with the reply's "ok" (the union's tag), when there is one
            where = ".".join(map(str, first["loc"][1:])) or "the top"
            raise StoreError(
                f"unreadable reply from the lesson store owner to {name}: {first['msg']} at {where}") from None
        if not reply["ok"]:
            _raise_remote(reply["error"])
        return reply["result"]

    protocol_method = getattr(LessonStoreProtocol, name)
    forward.__name__ = forward.__qualname__ = name
    forward.__doc__ = protocol_method.__doc__
    forward.__signature__ = inspect.signature(protocol_method)  # type: ignore[attr-defined]
    return forward


for _name in REMOTE_METHODS:
    setattr(RemoteLessonStore, _name, _forwarder(_name))
