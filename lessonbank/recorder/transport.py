"""Delivery of step records and run closes to Redis, with a circuit breaker and the local spool.

The recorder's writer hands over batches of ops. A batch costs one round trip: the writes of
``lessonbank.core.runs.record_step`` for each step (HSETNX per sequence number, the run's hash, the
open-runs set) and the close script of ``runs.close_run`` (EVALSHA) for each close, in one pipeline.

- When Redis has not answered a batch ``SPILL_AFTER`` (40 ms) after its oldest record was handed over,
  the batch and every record handed over since go to the fsync'd spool; the wait for the reply goes on
  up to the recorder's timeout (``LESSONBANK_REDIS_TIMEOUT``). A record is thus in Redis or in the
  spool within 100 ms (unless connecting itself hangs: a host that drops packets costs one timeout).
- When Redis refuses, hangs or errs, the batch is spooled and the breaker stays open for
  ``breaker_cooldown`` seconds (no network attempt at all); then one probe.
- While the spool holds anything, new ops are appended to it (order per run is kept) and the spool is
  replayed, oldest first, in chunks, with the idempotent writes of ``runs.replay_step``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import redis

from lessonbank.core import runs
from lessonbank.core.constants import DISTILL_TASK, OPEN_RUNS_KEY, RUN_OPEN, run_key, run_steps_key
from lessonbank.core.publish import task_message
from lessonbank.recorder.ops import Op
from lessonbank.recorder.spool import Spool

logger = logging.getLogger(__name__)

SPILL_AFTER = 0.04  # seconds after its oldest record was handed over that an unanswered batch is spooled
POLL = 0.005  # seconds between checks while waiting for a reply
REPLAY_CHUNK = 64  # spooled ops replayed per round trip pair
_CLOSE_SCRIPT = runs._CLOSE  # the close of runs.close_run, run by its SHA
_CLOSE_SHA = hashlib.sha1(_CLOSE_SCRIPT.encode("utf-8")).hexdigest()
_OPEN_STATES = (None, RUN_OPEN, RUN_OPEN.encode())  # bytes, or str from a client that decodes

Command = tuple[Any, ...]


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

    def wait(self) -> float | None:
        """Seconds until the next probe is allowed (None when closed)."""
        return None if self._open_until is None else max(self._open_until - self._clock(), 0.0)

    def trip(self) -> None:
        self._open_until = self._clock() + self.cooldown

    def reset(self) -> None:
        self._open_until = None


class RedisSink:
    """Applies one op at a time through ``lessonbank.core.runs`` (``lessonbank spool replay`` uses it).
    Every op is idempotent, so ops can be replayed."""

    def __init__(self, client: redis.Redis, queue: str) -> None:
        self.client = client
        self.queue = queue

    def apply(self, op: Op, replay: bool = False) -> None:
        """Deliver ``op`` (a close also queues the run's distillation, once). Raises redis errors."""
        ref = runs.RunRef(op.bank, op.run_id, op.agent, op.task, extra=dict(op.extra))
        if op.op == "close":
            runs.close_run(self.client, ref, op.seq, op.record, op.outcome, op.at, self.queue)
        elif replay:
            runs.replay_step(self.client, ref, op.seq, op.record, op.at)
        else:
            runs.record_step(self.client, ref, op.seq, op.record, op.at)


# -- the commands of a batch: runs.record_step / replay_step / close_run, pipelined ---------------------


def _step_command(op: Op) -> Command:
    return ("HSETNX", run_steps_key(op.run_id), op.seq, op.record)


def _open_commands(first: Op, last: Op) -> list[Command]:
    """``record_step``'s writes to the run's hash and the open-runs set, for the steps first..last of a run."""
    fields: dict[str, Any] = {**last.extra, "bank": last.bank, "agent": last.agent, "task": last.task,
                              "state": RUN_OPEN, "updated_at": last.at}
    pairs = [item for pair in fields.items() for item in pair]
    return [("HSET", run_key(last.run_id), *pairs), ("HSETNX", run_key(last.run_id), "started_at", first.at),
            ("ZADD", OPEN_RUNS_KEY, last.at, last.run_id)]


def _close_command(op: Op, queue: str) -> Command:
    message = task_message(DISTILL_TASK, [op.bank, op.run_id], queue)
    keys = (run_key(op.run_id), run_steps_key(op.run_id), OPEN_RUNS_KEY, queue)
    return ("EVALSHA", _CLOSE_SHA, len(keys), *keys, op.run_id, op.seq, op.record, op.bank, op.agent, op.task,
            op.outcome, op.at, message, json.dumps(op.extra))


def _by_run(ops: list[Op]) -> list[list[Op]]:
    groups: dict[str, list[Op]] = {}
    for op in ops:
        groups.setdefault(op.run_id, []).append(op)
    return list(groups.values())


def live_commands(ops: list[Op], queue: str) -> list[Command]:
    """One pipeline for ``ops`` of open runs: per run its step records, its hash, then its close (if any)."""
    commands: list[Command] = []
    for group in _by_run(ops):
        steps = [op for op in group if op.op == "step"]
        commands += [_step_command(op) for op in steps]
        closes = [op for op in group if op.op == "close"]
        if steps and closes:  # the close writes the hash itself; only the start time is the first step's
            commands.append(("HSETNX", run_key(steps[0].run_id), "started_at", steps[0].at))
        elif steps:
            commands += _open_commands(steps[0], steps[-1])
        commands += [_close_command(op, queue) for op in closes]
    return commands


def replay_chunk(ops: list[Op]) -> list[Op]:
    """The ops replayed together: up to REPLAY_CHUNK, ending at the first close (a close goes after the
    hash writes of the steps before it)."""
    chunk: list[Op] = []
    for op in ops[:REPLAY_CHUNK]:
        chunk.append(op)
        if op.op == "close":
            break
    return chunk


class Transport:
    """Never raises: delivers batches to Redis when it answers, spools when it does not, catches up later.

    Not thread-safe: the recorder's writer calls it under its own lock.
    """

    def __init__(
        self,
        client_factory: Callable[[], redis.Redis],
        spool: Spool,
        cooldown: float,
        timeout: float,
        queue: str,
        own_client: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client_factory = client_factory
        self._client: redis.Redis | None = None
        self._own_client = own_client
        self.spool = spool
        self.breaker = CircuitBreaker(cooldown, clock)
        self.timeout = timeout
        self.queue = queue
        self._script_ready = False
        self._outage_logged = False
        self._spool_error_logged = False
        self.delivered = 0
        self.spooled = 0

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    @property
    def backlog(self) -> int:
        """Ops waiting in the spool."""
        return len(self.spool)

    def deliver(self, ops: list[Op], spill: Callable[[], list[Op]]) -> None:
        """Push ``ops`` to Redis, or to the spool when Redis does not take them (or the spool is not empty).

        ``spill()`` returns the ops handed over since; they are spooled too when Redis is slow to answer.
        """
        if not ops:
            return
        if len(self.spool) or not self.breaker.allow():
            self._spool(ops)
            return
        spilled = False

        def slow() -> None:
            nonlocal spilled
            if not spilled:
                spilled = self._spool(ops, counted=False)
            if spilled:  # what was handed over since goes behind the batch, never before it
                self._spool(spill())

        try:
            self._execute(live_commands(ops, self.queue), slow, min(op.at for op in ops) + SPILL_AFTER)
        except Exception as e:  # redis and socket errors; anything else is logged the same way
            self._outage(e)
            if spilled:
                self.spooled += len(ops)
            else:
                self._spool(ops)
            return
        self._recovered()
        self.delivered += len(ops)
        if spilled:
            self.spool.delivered(len(ops))  # they were at the head of an empty spool

    def pump(self, spill: Callable[[], list[Op]], budget: float, force: bool = False) -> bool:
        """Replay spooled ops for up to ``budget`` seconds (``force``: even while the breaker is open).
        True when the spool is empty."""
        started = time.monotonic()
        while len(self.spool) and (force or self.breaker.allow()):
            try:
                self._replay(replay_chunk(self.spool.head(REPLAY_CHUNK)), spill)
            except Exception as e:  # as in deliver()
                self._outage(e)
                return False
            self._recovered()
            if time.monotonic() - started >= budget:
                break
        return not len(self.spool)

    def _replay(self, chunk: list[Op], spill: Callable[[], list[Op]]) -> None:
        """``runs.replay_step`` for the steps of ``chunk`` (a run closed meanwhile stays closed), then its close."""
        def slow() -> None:
            self._spool(spill())

        steps = [op for op in chunk if op.op == "step"]
        open_runs: dict[str, list[Op]] = {}
        if steps:
            first: list[Command] = []
            for op in steps:
                first += [_step_command(op), ("HSETNX", run_key(op.run_id), "started_at", op.at),
                          ("HGET", run_key(op.run_id), "state")]
            states = self._execute(first, slow, 0.0)[2::3]
            for op, state in zip(steps, states, strict=True):
                if state in _OPEN_STATES:
                    open_runs.setdefault(op.run_id, []).append(op)
        second = [command for group in open_runs.values() for command in _open_commands(group[0], group[-1])]
        second += [_close_command(op, self.queue) for op in chunk if op.op == "close"]
        if second:
            self._execute(second, slow, 0.0)
        self.spool.delivered(len(chunk))
        self.delivered += len(chunk)

    def _execute(self, commands: list[Command], slow: Callable[[], None], slow_at: float) -> list[Any]:
        """Send ``commands`` as one pipeline; while no reply came, call ``slow()`` every POLL from the unix
        time ``slow_at`` on. Raises redis errors (the first error reply too, after every reply was read)."""
        if not self._script_ready and any(command[0] == "EVALSHA" for command in commands):
            commands = [("SCRIPT", "LOAD", _CLOSE_SCRIPT), *commands]
        pool = self.client.connection_pool
        try:
            connection = pool.get_connection()
        except TypeError:  # redis-py < 5.3 wants a command name
            connection = pool.get_connection("PIPELINE")
        try:
            connection.send_packed_command(connection.pack_commands(commands))
            sent = time.monotonic()
            while not connection.can_read(timeout=POLL):
                if time.monotonic() - sent >= self.timeout:
                    raise redis.TimeoutError(f"no reply from Redis in {self.timeout}s")
                if time.time() >= slow_at:
                    slow()
            replies = []
            for _ in commands:
                try:
                    replies.append(connection.read_response())
                except redis.ResponseError as e:
                    replies.append(e)
        except BaseException:
            connection.disconnect()
            raise
        finally:
            pool.release(connection)
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                raise reply
        if commands[0][0] == "SCRIPT":
            self._script_ready = True
            replies = replies[1:]
        return replies

    def _spool(self, ops: list[Op], counted: bool = True) -> bool:
        if not ops:
            return True
        try:
            self.spool.append_many(ops)
        except OSError:
            if not self._spool_error_logged:
                self._spool_error_logged = True
                logger.exception("could not write the spool in %s; step records are lost until it can",
                                 self.spool.directory)
            return False
        if counted:
            self.spooled += len(ops)
        self._spool_error_logged = False
        return True

    def _outage(self, error: Exception) -> None:
        self.breaker.trip()
        self._script_ready = False  # a restarted Redis has no scripts
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

    def after_fork(self) -> None:
        """In a forked child: a spool of its own, a closed breaker, counters from zero, scripts loaded again."""
        len(self.spool)  # the spool notices the new process and drops the parent's file and queue
        self.breaker.reset()
        self.delivered = self.spooled = 0
        self._script_ready = False
        self._outage_logged = False

    def close(self) -> None:
        """Release the spool file (kept on disk if anything is left in it) and a client of our own."""
        self.spool.release()
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None
