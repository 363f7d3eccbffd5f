"""The worker's heartbeat in Redis, for ``lessonbank status`` and for agent processes.

The main process writes ``worker_key(name)`` every ``HEARTBEAT_INTERVAL`` seconds (expiring after
``HEARTBEAT_TTL``) and its name in ``WORKERS_KEY``: its LLM endpoint (password masked) and model, whether
that endpoint answered its last probe (``GET /models``, at start-up and every ``LLM_PROBE_INTERVAL``), and how
it reaches the store; a worker serving the
embedded store also sets ``STORE_OWNER_KEY``, which agent processes check before waiting for it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import openai
import redis

from lessonbank.core.connections import RedisClock, create_redis, masked_url
from lessonbank.core.constants import STORE_OWNER_KEY, WORKERS_KEY, worker_key
from lessonbank.core.settings import Settings
from lessonbank.workers.llm import make_client

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 10.0
HEARTBEAT_TTL = 35  # seconds a heartbeat counts: three missed beats and the worker is gone
FORGET_AFTER = 86400  # a worker not seen for a day leaves the list ``lessonbank status`` shows
PROBE_TIMEOUT = 10.0
LLM_PROBE_INTERVAL = 60.0  # seconds between probes of the LLM (`lessonbank status --check` reads the last one)

# KEYS: the store owner's key. ARGV: this worker's name. Deletes the key if it still names this worker (another
# worker that serves the store now keeps its own).
_LET_GO = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def probe_llm(settings: Settings) -> dict[str, Any]:
    """Whether the LLM endpoint answers (``GET /models``): reachable, the HTTP status, one line of detail."""
    try:
        page = make_client(settings).with_options(timeout=min(PROBE_TIMEOUT, settings.llm_timeout)).models.list()
        ids = [model.id for model in page.data][:5]
        return {"reachable": True, "status": 200, "detail": f"models: {', '.join(ids) or 'none listed'}"}
    except openai.APIStatusError as e:
        return {"reachable": True, "status": e.status_code, "detail": f"answered HTTP {e.status_code}"}
    except (openai.OpenAIError, ValueError, OSError) as e:
        return {"reachable": False, "status": None, "detail": f"unreachable ({type(e).__name__})"}


def _not_serving() -> bool:
    return False


class Heartbeat:
    """Writes the worker's heartbeat every ``interval`` seconds from a daemon thread; the first beat at once."""

    def __init__(self, settings: Settings, name: str, client: redis.Redis | None = None,
                 interval: float = HEARTBEAT_INTERVAL, serves_store: Callable[[], bool] = _not_serving,
                 extra: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.name = name
        self.interval = interval
        self.serves_store = serves_store
        self._redis = client
        self._clock: RedisClock | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rivals: set[str] = set()  # other workers found serving an embedded store over this Redis
        try:
            package = version("lessonbank")
        except PackageNotFoundError:
            package = "unknown"
        self.info: dict[str, Any] = {
            "name": name, "host": socket.gethostname(), "pid": os.getpid(), "version": package,
            "started_at": time.time(), "queue": settings.queue, **(extra or {}),
            "llm": {"base_url": masked_url(settings.openai_base_url or "https://api.openai.com/v1"),
                    "model": settings.distill_model, "reachable": None, "status": None, "detail": "not checked yet"},
        }

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = create_redis(self.settings, "service")
        return self._redis

    def start(self, probe: bool = True) -> None:
        self.beat()
        self._thread = threading.Thread(target=self._loop, args=(probe,), name="lessonbank-heartbeat", daemon=True)
        self._thread.start()

    def _loop(self, probe: bool) -> None:
        probed = 0.0
        while True:
            if probe and time.monotonic() - probed >= LLM_PROBE_INTERVAL:
                probed = time.monotonic()
                self.info["llm"].update(probe_llm(self.settings), checked_at=time.time())
                self.beat()
            if self._stop.wait(self.interval):
                return
            self.beat()

    def beat(self) -> None:
        """One beat; its time is Redis's (``RedisClock``), the clock ``lessonbank status`` reads it against from
        another machine, and the one the list forgets workers by."""
        store = "server" if self.settings.qdrant_url else "owner" if self.serves_store() else "through the owner"
        try:
            if self._clock is None:
                self._clock = RedisClock(self.redis)
            now = self._clock.now()
            info = {**self.info, "at": now, "store": store}
            pipe = self.redis.pipeline(transaction=False)
            pipe.set(worker_key(self.name), json.dumps(info), ex=HEARTBEAT_TTL)
            pipe.zadd(WORKERS_KEY, {self.name: now})
            pipe.zremrangebyscore(WORKERS_KEY, "-inf", now - FORGET_AFTER)
            if store == "owner":
                pipe.set(STORE_OWNER_KEY, self.name, ex=HEARTBEAT_TTL, get=True)
            replies = pipe.execute()
        except redis.RedisError as e:
            logger.warning("heartbeat not written: %s", e)
            return
        if store == "owner":
            self._check_rival(replies[-1])

    def _check_rival(self, previous: bytes | str | None) -> None:
        """Say so (once per rival) when another worker served an embedded store over this Redis within
        ``HEARTBEAT_TTL``: on another host, with its own files, each takes half the requests, so a bank's
        lessons are split between two stores."""
        rival = previous.decode(errors="replace") if isinstance(previous, bytes) else previous
        if rival and rival != self.name and rival not in self._rivals:
            self._rivals.add(rival)
            logger.error(
                "another worker (%s) also serves an embedded lesson store over this Redis: requests go to either, "
                "and each bank's lessons are split between the two stores' files; run the embedded store's workers "
                "on one host with one LESSONBANK_DATA_DIR, or point every worker at a Qdrant server "
                "(LESSONBANK_QDRANT_URL)", rival)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            self.redis.delete(worker_key(self.name))
            self.redis.eval(_LET_GO, 1, STORE_OWNER_KEY, self.name)
        except redis.RedisError as e:
            logger.warning("heartbeat not cleared: %s", e)
