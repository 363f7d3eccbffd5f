"""Sharing the embedded (local-path) Qdrant store between processes.

qdrant-client's local mode lets one process open a path. The worker service owns it: a
``StoreOwner`` opens the path and serves ``LessonStore`` calls that other processes (pool children,
the agent process, the CLI) send as request/reply over Redis:

- a request is JSON ``{"id", "method", "args", "deadline"}`` RPUSHed to ``STORE_REQUESTS_KEY``;
- the owner BLPOPs it, drops it if its deadline has passed, runs the call and RPUSHes the reply
  ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {"type", "message"}}`` to
  ``store_reply_key(id)``, which expires after ``REPLY_TTL`` seconds;
- the caller BLPOPs its reply key for at most ``settings.store_timeout`` seconds and raises
  ``ServiceUnavailable`` when nothing came.

With a Qdrant server (``settings.qdrant_url``) every process talks to Qdrant directly.
"""

from __future__ import annotations

import builtins
import json
import logging
import threading
import time
import uuid
from typing import Any

import redis
from qdrant_client import QdrantClient

from lessonbank import exceptions
from lessonbank.constants import STORE_REQUESTS_KEY, store_reply_key
from lessonbank.embeddings import embedder_from_settings
from lessonbank.exceptions import LessonbankError, ServiceUnavailable, StoreError
from lessonbank.models import Lesson
from lessonbank.settings import Settings
from lessonbank.store import LessonStore

logger = logging.getLogger(__name__)

REPLY_TTL = 30
POLL_SECONDS = 1.0
METHODS = frozenset(
    {"ensure_collection", "upsert", "get", "similar", "search", "list", "banks", "set_status", "record_injection"}
)


def open_local_store(settings: Settings) -> LessonStore:
    """A direct store on the embedded Qdrant path of ``settings``.

    Raises ServiceUnavailable when another process (normally a worker) holds the path.
    """
    path = settings.resolved_qdrant_path
    path.mkdir(parents=True, exist_ok=True)
    try:
        client = QdrantClient(path=str(path))
    except RuntimeError as e:
        if "already accessed" not in str(e):
            raise
        raise ServiceUnavailable(
            f"the embedded lesson store at {path} is held by another process (a running worker?); "
            "go through the worker (connect_store) or set LESSONBANK_QDRANT_URL to a Qdrant server"
        ) from e
    return LessonStore(client, embedder_from_settings(settings), settings.collection)


def connect_store(settings: Settings, redis_client: redis.Redis | None = None) -> LessonStore | RemoteLessonStore:
    """The store a process other than the path owner should use.

    ``settings.qdrant_url`` set: a direct ``LessonStore`` on the server. Otherwise a
    ``RemoteLessonStore`` that forwards calls to the worker owning the embedded path.
    """
    if settings.qdrant_url:
        api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        client = QdrantClient(url=settings.qdrant_url, api_key=api_key, check_compatibility=False)
        return LessonStore(client, embedder_from_settings(settings), settings.collection)
    return RemoteLessonStore(settings, redis_client)


def _encode(value: Any) -> Any:
    """JSON-ready form of a store result (lessons as their JSON dicts, tuples as lists)."""
    if isinstance(value, Lesson):
        return value.model_dump(mode="json")
    if isinstance(value, tuple | builtins.list):
        return [_encode(item) for item in value]
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def _raise_remote(error: dict[str, Any]) -> None:
    """Re-raise an error reply as the lessonbank exception it was (StoreError otherwise)."""
    name = str(error.get("type", ""))
    message = str(error.get("message", "the lesson store owner failed"))
    cls = getattr(exceptions, name, None)
    if isinstance(cls, type) and issubclass(cls, LessonbankError):
        raise cls(message)
    raise StoreError(f"{name}: {message}" if name else message)


class StoreOwner:
    """Holds the embedded Qdrant path and serves ``LessonStore`` calls sent over Redis.

    ``start()`` opens the path (unless a ``store`` was injected) and serves in a daemon thread.
    """

    def __init__(
        self, settings: Settings, redis_client: redis.Redis | None = None, store: LessonStore | None = None
    ) -> None:
        self.settings = settings
        self._redis = redis_client
        self.store = store
        self._owns_store = store is None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> bool:
        """Open the store and serve requests in a daemon thread; False if another process holds the path."""
        if self.running:
            return True
        if self.store is None:
            try:
                self.store = open_local_store(self.settings)
            except ServiceUnavailable as e:
                logger.warning("not serving the lesson store: %s", e)
                return False
        if self._redis is None:
            self._redis = redis.Redis.from_url(self.settings.redis_url, socket_timeout=POLL_SECONDS + 5)
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, name="lessonbank-store-owner", daemon=True)
        self._thread.start()
        logger.info("serving the lesson store at %s over Redis", self.settings.resolved_qdrant_path)
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and, if this owner opened the store, close it (releasing the path)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self._owns_store and self.store is not None:
            self.store.close()
            self.store = None

    def _serve(self) -> None:
        assert self.store is not None and self._redis is not None
        try:
            self.store.ensure_collection()
            self.store.embedder.embed(["warm up"])
        except LessonbankError:
            logger.exception("lesson store warm-up failed; requests will report the error")
        while not self._stop.is_set():
            try:
                item = self._redis.blpop([STORE_REQUESTS_KEY], timeout=POLL_SECONDS)
            except redis.RedisError as e:
                logger.warning("store owner cannot reach Redis (%s); retrying", e)
                self._stop.wait(POLL_SECONDS)
                continue
            if item is not None:
                self.handle(item[1])

    def handle(self, raw: bytes | str) -> dict[str, Any] | None:
        """Run one request and push its reply; returns the reply (None when dropped)."""
        try:
            request = json.loads(raw)
            request_id = str(request["id"])
            method = str(request["method"])
            args = dict(request.get("args") or {})
            deadline = float(request.get("deadline", 0))
        except (ValueError, KeyError, TypeError) as e:
            logger.warning("dropping a malformed store request (%s)", e)
            return None
        if deadline and time.time() > deadline:
            logger.info("dropping store request %s (%s): its caller gave up", request_id, method)
            return None
        reply = self._call(method, args)
        assert self._redis is not None
        key = store_reply_key(request_id)
        try:
            pipe = self._redis.pipeline()
            pipe.rpush(key, json.dumps(reply))
            pipe.expire(key, REPLY_TTL)
            pipe.execute()
        except redis.RedisError as e:
            logger.warning("cannot send the reply to store request %s: %s", request_id, e)
        return reply

    def _call(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if method not in METHODS:
            return {"ok": False, "error": {"type": "StoreError", "message": f"unknown store method {method!r}"}}
        assert self.store is not None
        try:
            if method == "upsert":
                args["lessons"] = [Lesson.model_validate(item) for item in args.get("lessons", [])]
            result = getattr(self.store, method)(**args)
        except LessonbankError as e:
            logger.warning("store call %s failed: %s", method, e)
            return {"ok": False, "error": {"type": type(e).__name__, "message": str(e)}}
        except (TypeError, ValueError) as e:  # bad arguments from the caller
            return {"ok": False, "error": {"type": "StoreError", "message": f"bad arguments to {method}: {e}"}}
        except Exception as e:  # qdrant-client and fastembed internals: report, keep serving
            logger.exception("store call %s crashed", method)
            return {"ok": False, "error": {"type": "StoreError", "message": f"{type(e).__name__}: {e}"}}
        return {"ok": True, "result": _encode(result)}


class RemoteLessonStore:
    """``LessonStore``'s methods, forwarded over Redis to the process that owns the embedded path."""

    def __init__(self, settings: Settings, redis_client: redis.Redis | None = None) -> None:
        self.settings = settings
        self.timeout = settings.store_timeout
        self._redis = redis_client

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = redis.Redis.from_url(self.settings.redis_url, socket_timeout=self.timeout + 5)
        return self._redis

    def _call(self, method: str, **args: Any) -> Any:
        request_id = uuid.uuid4().hex
        request = {"id": request_id, "method": method, "args": args, "deadline": time.time() + self.timeout}
        key = store_reply_key(request_id)
        payload = json.dumps(request)
        try:
            self.redis.rpush(STORE_REQUESTS_KEY, payload)
            item = self.redis.blpop([key], timeout=self.timeout)
            if item is None:  # nobody took it: do not leave it queued for a later owner
                self.redis.lrem(STORE_REQUESTS_KEY, 1, payload)
        except redis.RedisError as e:
            raise ServiceUnavailable(f"Redis unreachable for lesson store requests: {e}") from e
        if item is None:
            raise ServiceUnavailable(
                f"no lesson store owner answered within {self.timeout:g}s; is a worker running?"
            )
        reply = json.loads(item[1])
        if not reply.get("ok"):
            _raise_remote(reply.get("error") or {})
        return reply.get("result")

    def ensure_collection(self) -> None:
        self._call("ensure_collection")

    def upsert(self, lessons: builtins.list[Lesson]) -> None:
        self._call("upsert", lessons=[lesson.model_dump(mode="json") for lesson in lessons])

    def get(self, bank: str, lesson_ids: builtins.list[str]) -> builtins.list[Lesson]:
        return [Lesson.model_validate(item) for item in self._call("get", bank=bank, lesson_ids=lesson_ids)]

    def similar(self, bank: str, text: str, limit: int = 5) -> builtins.list[tuple[Lesson, float]]:
        result = self._call("similar", bank=bank, text=text, limit=limit)
        return [(Lesson.model_validate(item), float(score)) for item, score in result]

    def search(
        self,
        bank: str,
        query: str,
        limit: int = 8,
        kinds: builtins.list[str] | None = None,
        min_similarity: float | None = None,
    ) -> builtins.list[tuple[Lesson, float]]:
        args: dict[str, Any] = {"bank": bank, "query": query, "limit": limit, "kinds": kinds}
        if min_similarity is not None:
            args["min_similarity"] = min_similarity
        result = self._call("search", **args)
        return [(Lesson.model_validate(item), float(score)) for item, score in result]

    def list(self, bank: str, limit: int = 100, include_inactive: bool = False) -> builtins.list[Lesson]:
        result = self._call("list", bank=bank, limit=limit, include_inactive=include_inactive)
        return [Lesson.model_validate(item) for item in result]

    def banks(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self._call("banks").items()}

    def set_status(
        self, bank: str, lesson_ids: builtins.list[str], status: str, superseded_by: str | None = None
    ) -> int:
        return int(
            self._call("set_status", bank=bank, lesson_ids=lesson_ids, status=status, superseded_by=superseded_by)
        )

    def record_injection(self, bank: str, lesson_ids: builtins.list[str], run_id: str | None) -> None:
        self._call("record_injection", bank=bank, lesson_ids=lesson_ids, run_id=run_id)

    def close(self) -> None:
        """Nothing to release (the Redis client is shared or closed with the process)."""
