"""Delivery of step records and run closes to Redis, with a circuit breaker and the local spool.

A live step costs one round trip (a non-transactional pipeline). When Redis refuses or hangs, the op
goes to the spool and the breaker stays open for ``breaker_cooldown`` seconds (no network attempt at
all); then one probe. The first delivery that succeeds flushes the spool first, in order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from lessonbank.constants import OPEN_RUNS_KEY, RUN_CLOSED, RUN_OPEN, run_key, run_steps_key
from lessonbank.settings import Settings
from recorder.enqueue import DistillEnqueuer
from recorder.ops import Op
from recorder.spool import Spool

logger = logging.getLogger(__name__)

_OPEN_STATES = (None, RUN_OPEN.encode())


class CircuitBreaker:
    """Closed until a failure; then open (callers must not try) for ``cooldown`` seconds, then one probe."""

    def __init__(self, cooldown: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.cooldown = cooldown
        self._clock = clock
        self._open_until: float | None = None

    @property
    def tripped(self) -> bool:
        """True from a failure until the next success (also while a probe is allowed)."""
        return self._open_until is not None

    def allow(self) -> bool:
        return self._open_until is None or self._clock() >= self._open_until

    def trip(self) -> None:
        self._open_until = self._clock() + self.cooldown

    def reset(self) -> None:
        self._open_until = None


def build_redis_client(settings: Settings) -> redis.Redis:
    """The recorder's Redis client: short timeouts and no client-side retries (the breaker decides)."""
    return redis.Redis.from_url(
        settings.redis_url,
        socket_timeout=settings.redis_timeout,
        socket_connect_timeout=settings.redis_timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )


class RedisSink:
    """Applies ops to Redis. Every method is idempotent, so ops can be replayed any number of times."""

    def __init__(self, client: redis.Redis, enqueuer: DistillEnqueuer) -> None:
        self.client = client
        self.enqueuer = enqueuer

    def apply(self, op: Op, replay: bool = False) -> None:
        """Deliver ``op``. Raises redis errors or ServiceUnavailable (the distill task was not published)."""
        if op.op == "close":
            self._close(op)
        elif replay:
            self._replay_step(op)
        else:
            self._step(op)

    def _run_fields(self, op: Op, state: str) -> dict[Any, Any]:
        return {"bank": op.bank, "agent": op.agent, "task": op.task, "state": state, "updated_at": op.at}

    def _step(self, op: Op) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hsetnx(run_steps_key(op.run_id), str(op.seq), op.record)
        pipe.hset(run_key(op.run_id), mapping=self._run_fields(op, RUN_OPEN))
        pipe.hsetnx(run_key(op.run_id), "started_at", op.at)
        pipe.zadd(OPEN_RUNS_KEY, {op.run_id: op.at})
        pipe.execute()

    def _replay_step(self, op: Op) -> None:
        """Like ``_step``, but a run that was closed meanwhile is not reopened."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hsetnx(run_steps_key(op.run_id), str(op.seq), op.record)
        pipe.hsetnx(run_key(op.run_id), "started_at", op.at)
        pipe.hget(run_key(op.run_id), "state")
        state = pipe.execute()[-1]
        if state in _OPEN_STATES:
            self._step(op)

    def _close(self, op: Op) -> None:
        key = run_key(op.run_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.hsetnx(run_steps_key(op.run_id), str(op.seq), op.record)
        pipe.hget(key, "state")
        state = pipe.execute()[-1]
        pipe = self.client.pipeline(transaction=False)
        if state in _OPEN_STATES:
            fields = self._run_fields(op, RUN_CLOSED)
            fields.update({"outcome": op.outcome, "closed_at": op.at})
            pipe.hset(key, mapping=fields)
            pipe.hsetnx(key, "started_at", op.at)
            pipe.zrem(OPEN_RUNS_KEY, op.run_id)
        pipe.hsetnx(key, "enqueued", op.token)
        pipe.hget(key, "enqueued")
        claim = pipe.execute()[-1]
        if claim is not None and claim.decode() == op.token:
            # This close owns the enqueue and has not published yet (a publish is confirmed by "enqueued" = 1).
            self.enqueuer.enqueue_distill(op.bank, op.run_id)
            self.client.hset(key, "enqueued", "1")


class Transport:
    """Never raises: delivers to Redis when it answers, spools when it does not, and catches up later."""

    def __init__(
        self,
        sink_factory: Callable[[], RedisSink],
        spool: Spool,
        cooldown: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sink_factory = sink_factory
        self._sink: RedisSink | None = None
        self.spool = spool
        self.breaker = CircuitBreaker(cooldown, clock)
        self._lock = threading.RLock()
        self._outage_logged = False
        self._spool_error_logged = False
        self.delivered = 0
        self.spooled = 0

    @property
    def sink(self) -> RedisSink:
        if self._sink is None:
            self._sink = self._sink_factory()
        return self._sink

    def deliver(self, op: Op) -> bool:
        """Push ``op`` (after any spooled ops). False when it went to the spool instead."""
        with self._lock:
            if self.breaker.allow():
                try:
                    self._flush_pending()
                    self.sink.apply(op)
                except Exception as e:  # redis, kombu and socket errors; anything else is logged the same way
                    self._outage(e)
                else:
                    self._recovered()
                    self.delivered += 1
                    return True
            self._spool(op)
            return False

    def flush(self) -> bool:
        """Try to deliver every spooled op now, ignoring the cooldown. True when nothing is left."""
        with self._lock:
            if not len(self.spool):
                return True
            try:
                self._flush_pending()
            except Exception as e:  # as in deliver()
                self._outage(e)
                return False
            self._recovered()
            return True

    def _flush_pending(self) -> None:
        count = 0
        while (op := self.spool.peek()) is not None:
            self.sink.apply(op, replay=True)
            self.spool.delivered()
            count += 1
        if count:
            logger.info("delivered %d spooled step records to Redis", count)

    def _spool(self, op: Op) -> None:
        try:
            self.spool.append(op)
            self.spooled += 1
            self._spool_error_logged = False
        except OSError:
            if not self._spool_error_logged:
                self._spool_error_logged = True
                logger.exception("could not write the spool in %s; step records are lost until it can",
                                 self.spool.directory)

    def _outage(self, error: Exception) -> None:
        self.breaker.trip()
        if not self._outage_logged:
            self._outage_logged = True
            logger.warning(
                "Redis did not take step records (%s: %s); spooling to %s, retrying every %.1fs",
                type(error).__name__, error, self.spool.directory, self.breaker.cooldown, exc_info=True,
            )

    def _recovered(self) -> None:
        if self.breaker.tripped:
            self.breaker.reset()
        if self._outage_logged:
            self._outage_logged = False
            logger.warning("Redis takes step records again; the spool is delivered")

    def close(self) -> None:
        """Last flush attempt, then release the spool file (kept on disk if anything is left)."""
        with self._lock:
            self.flush()
            self.spool.release()
