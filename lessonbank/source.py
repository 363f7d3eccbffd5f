"""Where the agent process reads lessons from: ``LessonSource``.

``LessonSource``: with a Qdrant server, straight to it; otherwise through the worker that owns the
embedded store. When no worker answers, it says so once, plainly (what to start), reads the embedded
store itself while no other process holds it, and does not wait for the absent owner again for
``RECHECK_SECONDS`` (at once when a worker announces itself, ``STORE_OWNER_KEY``). When Redis itself does
not answer (down, frozen, unreachable), a run waits for it at most ``LESSONBANK_STORE_TIMEOUT`` once: later
runs get no lessons without waiting for a back-off period (``AWAY_FIRST`` seconds, doubling up to
``RECHECK_SECONDS``), then one quick ``PING`` (``LESSONBANK_REDIS_TIMEOUT``) tells whether to ask again.

``remember()`` and the memory tools both read through it; importing it does not define the tools
(smolagents ``Tool`` classes), so an agent that only uses ``remember()`` does not pay for them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis

from lessonbank.core.connections import REDIS_AWAY, checked, create_redis, exchange
from lessonbank.core.constants import STORE_OWNER_KEY
from lessonbank.core.exceptions import ServiceUnavailable
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol

logger = logging.getLogger(__name__)

T = TypeVar("T")
RECHECK_SECONDS = 60.0
AWAY_FIRST = 5.0  # seconds lessons are not asked of a Redis that did not answer (doubling while it does not)


@dataclass
class OwnerState:
    """What this process knows about the owner of one embedded store."""

    absent_until: float = 0.0  # monotonic time until which the owner counts as absent (0: not known absent)
    seen: bytes | None = None  # the owner announced when it was found absent
    told_local: bool = False
    told_held: bool = False
    away_until: float = 0.0  # monotonic time until which Redis counts as not answering (0: it answers)
    away_for: float = 0.0  # the back-off that set it


_owners: dict[tuple[str, str], OwnerState] = {}
_owners_lock = threading.Lock()


def owner_state(settings: Settings) -> OwnerState:
    with _owners_lock:
        return _owners.setdefault((settings.redis_url, str(settings.resolved_qdrant_path)), OwnerState())


class LessonSource:
    """The lesson store as the agent process reaches it (see the module docstring); ``store`` overrides all."""

    def __init__(self, settings: Settings, store: LessonStoreProtocol | None = None,
                 redis_client: redis.Redis | None = None) -> None:
        self.settings = settings
        self._given = store
        self._store: LessonStoreProtocol | None = None
        self._redis = redis_client

    def read(self, use: Callable[[LessonStoreProtocol], T]) -> T:
        """``use(store)``; raises ServiceUnavailable (or the store's error) when no store can be read."""
        if self._given is not None:
            return use(self._given)
        if self.settings.qdrant_url:
            return use(self._connected())
        state = owner_state(self.settings)
        self._check_away(state)
        if self._worth_asking(state):
            try:
                result = use(self._connected())
            except ServiceUnavailable as e:
                if isinstance(e.__cause__, REDIS_AWAY):
                    self._away(state)
                    raise
                state.absent_until = time.monotonic() + RECHECK_SECONDS
                state.seen = self._announced(state)
            else:
                if state.absent_until:
                    logger.info("a worker answers for the lesson store again")
                state.absent_until = 0.0
                return result
        return self._read_locally(use, state)

    def unavailable(self, error: Exception) -> None:
        """Log that a run gets no lessons: a warning for a store the caller chose (once said plainly otherwise)."""
        if self._given is not None or self.settings.qdrant_url:
            logger.warning("lesson store unavailable, no lessons for this run: %s", error)
        else:
            logger.info("no lessons for this run: %s", error)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def _connected(self) -> LessonStoreProtocol:
        if self._store is None:
            from lessonbank.core.store.remote import connect_store

            self._store = connect_store(self.settings, self._redis)
        return self._store

    def _announced(self, state: OwnerState) -> bytes | None:
        """The owner Redis announces now (None: none, or Redis did not answer within the store's timeout)."""
        try:
            if self._redis is None:
                self._redis = create_redis(self.settings, "agent")
            value = checked(exchange(self._redis, [("GET", STORE_OWNER_KEY)], self.settings.store_timeout))[0]
        except REDIS_AWAY:
            self._away(state)
            return None
        except redis.RedisError:
            return None
        return value if isinstance(value, bytes) else None

    def _check_away(self, state: OwnerState) -> None:
        """Raise ServiceUnavailable at once while Redis counts as not answering; once its back-off is over, one
        ``PING`` within the recorder's timeout: no answer starts a longer back-off."""
        if not state.away_until:
            return
        if time.monotonic() < state.away_until:
            raise ServiceUnavailable(f"Redis did not answer; lessons are asked again in "
                                     f"{state.away_until - time.monotonic():.0f}s")
        try:
            if self._redis is None:
                self._redis = create_redis(self.settings, "agent")
            checked(exchange(self._redis, [("PING",)], self.settings.redis_timeout))
        except redis.RedisError as e:
            self._away(state)
            raise ServiceUnavailable(f"Redis does not answer yet ({e}); no lessons for this run") from e
        logger.info("Redis answers again; lessons are asked for again")
        state.away_until = state.away_for = 0.0

    @staticmethod
    def _away(state: OwnerState) -> None:
        first = not state.away_for
        state.away_for = min(state.away_for * 2 if state.away_for else AWAY_FIRST, RECHECK_SECONDS)
        state.away_until = time.monotonic() + state.away_for
        logger.log(logging.WARNING if first else logging.INFO, "lessonbank: Redis did not answer for the lessons; "
                   "runs start without them, and Redis is asked again in %.0fs", state.away_for)

    def _worth_asking(self, state: OwnerState) -> bool:
        if not state.absent_until or time.monotonic() >= state.absent_until:
            return True
        announced = self._announced(state)
        return announced is not None and announced != state.seen  # a worker came up since

    def _read_locally(self, use: Callable[[LessonStoreProtocol], T], state: OwnerState) -> T:
        path, wait = self.settings.resolved_qdrant_path, self.settings.store_timeout
        start = ("Start a worker with the same LESSONBANK_REDIS_URL and LESSONBANK_DATA_DIR: `lessonbank worker` (or "
                 "`celery -A lessonbank.workers worker`); or set LESSONBANK_QDRANT_URL to a Qdrant server.")
        if not path.is_dir() or not any(path.iterdir()):
            self._tell(state, "told_local", "lessonbank: no worker answered for the lesson store at %s within %gs: "
                       "runs are recorded, but nothing distills them into lessons. %s", path, wait, start)
            raise ServiceUnavailable(f"no worker answered for the lesson store at {path}, which holds no lessons yet")
        from lessonbank.core.store.local import open_local_store  # the embedded engine: loaded only to read it

        try:
            store = open_local_store(self.settings)
        except ServiceUnavailable:
            self._tell(state, "told_held", "lessonbank: the lesson store at %s is held by a process that did not "
                       "answer within %gs, so runs start without lessons. Check the worker (`lessonbank status`), or "
                       "set LESSONBANK_QDRANT_URL to a Qdrant server.", path, wait)
            raise ServiceUnavailable(f"no worker answered for the lesson store at {path}, and it is held") from None
        self._tell(state, "told_local", "lessonbank: no worker answered for the lesson store at %s within %gs, so "
                   "this process reads the lessons from it directly, and no new lessons are learnt. %s", path, wait,
                   start)
        try:
            return use(store)
        finally:
            store.close()  # the path stays free for a worker that starts later

    @staticmethod
    def _tell(state: OwnerState, flag: str, message: str, *args: Any) -> None:
        """Say ``message`` once per store and kind (a warning: shown even when logging is not configured)."""
        if not getattr(state, flag):
            setattr(state, flag, True)
            logger.warning(message, *args)
