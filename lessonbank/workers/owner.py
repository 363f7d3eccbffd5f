"""The owner of the embedded lesson store: it opens the path and serves the other processes.

One process at a time may open the embedded store (``edge.EdgeLessonStore``). The worker service's
main process owns it: a ``StoreOwner`` serves the calls that other processes (pool children, the
agent process, the CLI) send as requests over Redis (the wire format is in ``remote``). A few serving
threads take requests side by side: embedding a text releases the GIL, so one caller's embedding does
not wait for another caller's query; writes are serialised by the store. Reads come on one queue, writes and
deletes on another that the agents' Redis user cannot push to; a write found on the readers' queue is refused.

One Redis serves one embedded store: ``claim_store`` binds the Redis to the store's id (a file beside its
path) when a worker first serves it, and a worker with another store (another host, another data
directory) refuses to start instead of splitting every bank between two stores' files.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from lessonbank.core.connections import RedisClock, create_redis
from lessonbank.core.constants import STORE_ADMIN_REQUESTS_KEY, STORE_CLAIM_KEY, STORE_REQUESTS_KEY, store_reply_key
from lessonbank.core.exceptions import ConfigurationError, LessonbankError, ServiceUnavailable
from lessonbank.core.settings import Settings
from lessonbank.core.store.base import LessonStoreBase
from lessonbank.core.store.local import open_local_store
from lessonbank.core.store.protocol import READ_METHODS, codec
from lessonbank.core.store.remote import REPLY_TTL

logger = logging.getLogger(__name__)

POLL_SECONDS = 1.0
SERVING_THREADS = 3


def store_id_path(settings: Settings) -> Path:
    """The file beside the embedded store's path that holds the store's id."""
    path = settings.resolved_qdrant_path
    return path.with_name(path.name + ".id")


def local_store_id(settings: Settings) -> str:
    """The id of the embedded store at ``settings``' path, made (a random one) the first time it is asked for."""
    path = store_id_path(settings)
    try:
        found = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        found = ""
    if found:
        return found
    path.parent.mkdir(parents=True, exist_ok=True)
    made = uuid.uuid4().hex
    try:
        with path.open("x", encoding="utf-8") as f:  # another process of this host may make it at the same time
            f.write(made + "\n")
    except FileExistsError:
        return path.read_text(encoding="utf-8").strip()
    return made


def claim_store(settings: Settings, client: redis.Redis) -> None:
    """Bind ``client``'s Redis to the embedded store of ``settings`` (``STORE_CLAIM_KEY``, kept for good), or raise
    ConfigurationError when the Redis is bound to another embedded store already: the two would each take half the
    requests, and every bank's lessons would be split between their files."""
    ident = local_store_id(settings)
    claim = json.dumps({"id": ident, "host": socket.gethostname(), "path": str(settings.resolved_qdrant_path)})
    if client.set(STORE_CLAIM_KEY, claim, nx=True):
        return
    raw = client.get(STORE_CLAIM_KEY)
    try:
        held = json.loads(raw) if raw is not None else {}
        held = held if isinstance(held, dict) else {}
    except ValueError:
        held = {}
    if held.get("id") == ident:
        return
    where = f"{held.get('host', '?')}:{held.get('path', '?')}"
    raise ConfigurationError(
        f"this Redis's lessons are in the embedded store of another worker ({where}); a second embedded store would "
        f"split every bank between the two: point every worker at one Qdrant server (LESSONBANK_QDRANT_URL), or "
        f"give this worker that store's LESSONBANK_DATA_DIR")


class StoreOwner:
    """Holds the embedded store's path and serves store calls sent over Redis.

    ``start()`` opens the path (unless a ``store`` was injected) and serves in ``threads`` daemon threads.
    """

    def __init__(
        self, settings: Settings, redis_client: redis.Redis | None = None, store: LessonStoreBase | None = None,
        threads: int = SERVING_THREADS,
    ) -> None:
        self.settings = settings
        self._redis = redis_client
        self.store = store
        self.threads = max(1, threads)
        self._owns_store = store is None
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self._clock: RedisClock | None = None

    @property
    def running(self) -> bool:
        return any(thread.is_alive() for thread in self._workers)

    def start(self) -> bool:
        """Open the store and serve requests in daemon threads; False if another process holds the path."""
        if self.running:
            return True
        if self.store is None:
            try:
                self.store = open_local_store(self.settings)
            except ServiceUnavailable as e:
                logger.warning("not serving the lesson store: %s", e)
                return False
        if self._redis is None:
            self._redis = create_redis(self.settings, "service")
        self._stop.clear()
        self._workers = [threading.Thread(target=self._serve, args=(i,), name=f"lessonbank-store-owner-{i}",
                                          daemon=True) for i in range(self.threads)]
        for thread in self._workers:
            thread.start()
        logger.info("serving the lesson store at %s over Redis (%d threads)", self.settings.resolved_qdrant_path,
                    self.threads)
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and, if this owner opened the store, close it (releasing the path)."""
        self._stop.set()
        for thread in self._workers:
            thread.join(timeout)
        self._workers = []
        if self._owns_store and self.store is not None:
            self.store.close()
            self.store = None

    def _warm_up(self) -> None:
        assert self.store is not None
        try:
            self.store.ensure_collection()
            self.store.embedder.embed(["warm up"])
        except LessonbankError:
            logger.exception("lesson store warm-up failed; requests will report the error")

    def _maintain(self) -> None:
        maintain = getattr(self.store, "maintain", None)
        if callable(maintain):
            try:
                maintain()
            except LessonbankError:
                logger.exception("lesson store maintenance failed")

    def _serve(self, index: int) -> None:
        assert self.store is not None and self._redis is not None
        if index == 0:
            self._warm_up()
        while not self._stop.is_set():
            try:
                item = self._redis.blpop([STORE_ADMIN_REQUESTS_KEY, STORE_REQUESTS_KEY], timeout=POLL_SECONDS)
            except redis.RedisError as e:
                logger.warning("store owner cannot reach Redis (%s); retrying", e)
                self._stop.wait(POLL_SECONDS)
                continue
            if item is not None:
                self.handle(item[1], readers=_text(item[0]) == STORE_REQUESTS_KEY)
            if index == 0:
                self._maintain()

    def handle(self, raw: bytes | str, readers: bool = False) -> bytes | None:
        """Run one request and push its reply; returns the reply as sent (None when dropped). A request from the
        readers' queue (``readers``) may only read."""
        try:
            request = json.loads(raw)
            request_id = str(request["id"])
            method = str(request["method"])
            args = dict(request.get("args") or {})
            deadline = float(request.get("deadline", 0))
        except (ValueError, KeyError, TypeError) as e:
            logger.warning("dropping a malformed store request (%s)", e)
            return None
        if deadline and self._now() > deadline:
            logger.info("dropping store request %s (%s): its caller gave up", request_id, method)
            return None
        if readers and method not in READ_METHODS:
            logger.warning("refusing store request %s: %s came on the readers' queue", request_id, method)
            reply = _error("StoreError", f"{method} is not served to readers: only workers and the CLI may write")
        else:
            reply = self._call(method, args)
        assert self._redis is not None
        key = store_reply_key(request_id)
        try:
            pipe = self._redis.pipeline()
            pipe.rpush(key, reply)
            pipe.expire(key, REPLY_TTL)
            pipe.execute()
        except redis.RedisError as e:
            logger.warning("cannot send the reply to store request %s: %s", request_id, e)
        return reply

    def _now(self) -> float:
        """Redis's clock, the one callers write deadlines in; this machine's if Redis cannot tell it now (the
        reply would not get through either)."""
        assert self._redis is not None
        if self._clock is None:
            self._clock = RedisClock(self._redis)
        try:
            return self._clock.now()
        except redis.RedisError:
            return time.time()

    def _call(self, method: str, args: dict[str, Any]) -> bytes:
        try:
            wire = codec(method)
        except KeyError:
            return _error("StoreError", f"unknown store method {method!r}")
        assert self.store is not None
        try:
            return wire.dump_reply(getattr(self.store, method)(**wire.load_args(args)))
        except LessonbankError as e:
            logger.warning("store call %s failed: %s", method, e)
            return _error(type(e).__name__, str(e))
        except (TypeError, ValueError) as e:  # bad arguments from the caller
            return _error("StoreError", f"bad arguments to {method}: {e}")
        except Exception as e:  # qdrant-client and fastembed internals: report, keep serving
            logger.exception("store call %s crashed", method)
            return _error("StoreError", f"{type(e).__name__}: {e}")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _error(kind: str, message: str) -> bytes:
    return json.dumps({"ok": False, "error": {"type": kind, "message": message}}).encode()
