"""Reaching the lesson store from any process: a Qdrant server directly, or the embedded store through
the process that owns it (``owner.StoreOwner``, in the worker service) over Redis:

- a request is JSON ``{"id", "method", "args", "deadline"}`` RPUSHed to ``STORE_REQUESTS_KEY``, its deadline
  in Redis's clock (``RedisClock``: the agent's machine and the worker's may disagree by seconds);
- the owner BLPOPs it, drops it if its deadline has passed, runs the call and RPUSHes the reply
  ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {"type", "message"}}`` to
  ``store_reply_key(id)``, which expires after ``REPLY_TTL`` seconds;
- the caller BLPOPs its reply key for at most ``settings.store_timeout`` seconds (every exchange with Redis
  waits only what is left of it, whatever its client's socket timeout: a Redis that does not answer costs
  no more) and raises ``ServiceUnavailable`` when nothing came, taking its request back if no owner has; a
  delete that the owner has taken (it rewrites the embedded store's files) is waited for up to ``PURGE_WAIT``
  seconds, or until the owner's heartbeat (``STORE_OWNER_KEY``) lapses.

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

import redis
from pydantic import ValidationError

from lessonbank.core import exceptions
from lessonbank.core.connections import REDIS_AWAY, RedisClock, checked, create_redis, exchange, redis_trouble
from lessonbank.core.constants import STORE_OWNER_KEY, STORE_REQUESTS_KEY, store_reply_key
from lessonbank.core.exceptions import LessonbankError, ServiceUnavailable, StoreError
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import REMOTE_METHODS, LessonStoreProtocol, codec

logger = logging.getLogger(__name__)

REPLY_TTL = 30
# Deletes rewrite the embedded store's files (1-2 s per 10k lessons): once the owner has taken one, wait longer.
PURGES = frozenset({"delete", "delete_bank"})
PURGE_WAIT = 600.0
PURGE_CHUNK = 5.0  # seconds between two looks at the owner's heartbeat while a delete is waited for
MARGIN = 1.0  # seconds a BLPOP's reply may take to come back after its server-side timeout
MIN_WAIT = 0.05  # the shortest wait for a reply
FIRST_WAIT = 0.5  # the shortest wait for the first reply of a call, before Redis counts as not answering


def _blocking(left: float) -> float:
    """The first BLPOP's own timeout when ``left`` seconds remain: its reply (None) must come back within them,
    or Redis counts as not answering."""
    return round(max(left - min(MARGIN, left / 2), 0.01), 3)


def connect_store(settings: Settings, redis_client: redis.Redis | None = None) -> LessonStoreProtocol:
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

    def __init__(self, settings: Settings, redis_client: redis.Redis | None = None) -> None:
        self.settings = settings
        self.timeout = settings.store_timeout
        self._redis = redis_client  # a worker's or the CLI's client; the agent role's (no retries) otherwise
        self._clock: RedisClock | None = None

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = create_redis(self.settings, "agent")
        return self._redis

    @property
    def clock(self) -> RedisClock:
        if self._clock is None:
            self._clock = RedisClock(self.redis, timeout=self.timeout)
        return self._clock

    def call(self, method: str, args: dict[str, Any]) -> bytes:
        """Send one request and wait for its reply (JSON, as the owner sent it); raises ServiceUnavailable. Each
        exchange with Redis waits only what is left of ``store_timeout`` (a Redis that does not answer costs no
        more), but a delete the owner took is waited for up to ``PURGE_WAIT`` seconds: it rewrites the embedded
        store's files."""
        request_id = uuid.uuid4().hex
        key = store_reply_key(request_id)
        payload = ""
        taken = False
        why = f"did not finish {method} within {self.timeout:g}s"
        try:
            ends = time.monotonic() + self.timeout
            deadline = self.clock.now() + self.timeout
            payload = json.dumps({"id": request_id, "method": method, "args": args, "deadline": deadline})
            left = max(ends - time.monotonic(), 0.0)  # the request and the first wait in one round trip:
            _, item = checked(exchange(self.redis, [("RPUSH", STORE_REQUESTS_KEY, payload),
                                                    ("BLPOP", key, _blocking(left))], max(left, FIRST_WAIT)))
            item = item if item is not None else self._wait(key, ends)
            if item is None:  # nobody took it: do not leave it queued for a later owner
                taken = self._ask(("LREM", STORE_REQUESTS_KEY, 1, payload), max(ends, time.monotonic() + MARGIN)) == 0
                if taken and method in PURGES:
                    item, why = self._wait_for_purge(key, method)
        except redis.RedisError as e:
            if not isinstance(e, REDIS_AWAY):  # a Redis that did not answer is not asked again (its deadline lapses)
                self._withdraw(payload)
            raise ServiceUnavailable(f"{redis_trouble(e)} for lesson store requests: {e}") from e
        if item is None:
            if taken:
                raise ServiceUnavailable(f"the lesson store owner {why}")
            raise ServiceUnavailable(
                f"no lesson store owner answered within {self.timeout:g}s; is a worker running?"
            )
        return bytes(item[1])

    def _ask(self, command: tuple[Any, ...], ends: float) -> Any:
        """One command's reply, waited for until ``ends`` (monotonic; at least ``MIN_WAIT``)."""
        return checked(exchange(self.redis, [command], max(ends - time.monotonic(), MIN_WAIT)))[0]

    def _wait(self, key: str, ends: float) -> Any:
        """BLPOP ``key`` until ``ends`` (monotonic); Redis has answered already, so its reply may come ``MARGIN``
        late."""
        while (left := ends - time.monotonic()) > MIN_WAIT:
            item = self._ask(("BLPOP", key, round(left, 3)), ends + MARGIN)
            if item is not None:
                return item
        return None

    def _wait_for_purge(self, key: str, method: str) -> tuple[Any, str]:
        """(the reply, or None and why): a delete the owner took, waited for up to ``PURGE_WAIT`` seconds while
        the owner's heartbeat, if it had one, lasts (a killed owner never replies)."""
        started = time.monotonic()
        owner = self._ask(("GET", STORE_OWNER_KEY), started + self.timeout)
        while time.monotonic() - started < PURGE_WAIT:
            item = self._wait(key, min(time.monotonic() + PURGE_CHUNK, started + PURGE_WAIT))
            if item is not None:
                return item, ""
            if owner is not None and self._ask(("GET", STORE_OWNER_KEY), time.monotonic() + self.timeout) != owner:
                lapsed = time.monotonic() - started
                return None, (f"stopped during {method} (its heartbeat lapsed after {lapsed:.0f}s); whatever it "
                              "deleted stays deleted, and a purge left undone is done when the store opens again")
        return None, f"did not finish {method} within {PURGE_WAIT:g}s"

    def _withdraw(self, payload: str) -> None:
        """Take a request back from the queue after an error, if Redis answers (a lost one times out there)."""
        if not payload:
            return
        try:
            self._ask(("LREM", STORE_REQUESTS_KEY, 1, payload), time.monotonic() + self.timeout)
        except redis.RedisError:
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
