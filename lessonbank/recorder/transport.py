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

import redis

from lessonbank.core import runs
from lessonbank.recorder.ops import Op
from lessonbank.recorder.spool import Spool

logger = logging.getLogger(__name__)


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


class RedisSink:
    """Applies ops to Redis through ``lessonbank.core.runs``. Every op is idempotent, so ops can be replayed."""

    def __init__(self, client: redis.Redis, queue: str) -> None:
        self.client = client
        self.queue = queue

    def apply(self, op: Op, replay: bool = False) -> None:
        """Deliver ``op`` (a close also queues the run's distillation, once). Raises redis errors."""
        ref = runs.RunRef(op.bank, op.run_id, op.agent, op.task)
        if op.op == "close":
            runs.close_run(self.client, ref, op.seq, op.record, op.outcome, op.at, self.queue)
        elif replay:
            runs.replay_step(self.client, ref, op.seq, op.record, op.at)
        else:
            runs.record_step(self.client, ref, op.seq, op.record, op.at)


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
