"""Delivery of step records, run closes and check verdicts to Redis, with a circuit breaker and the local spool.

The recorder's writer hands over batches of ops. A batch costs one round trip: per run, the step script
of ``lessonbank.core.runs`` for its steps, the close script for its close and the verdict script for its
check's verdict (all by SHA), in one pipeline. The scripts keep run state right whatever arrives when (a late
step never reopens a closed run).

- When Redis has not answered a batch ``SPILL_AFTER`` (40 ms) after its oldest record was handed over,
  the batch and every record handed over since go to the fsync'd spool; the wait for the reply goes on
  up to the recorder's timeout (``LESSONBANK_REDIS_TIMEOUT``). A record is thus in Redis or in the
  spool within 100 ms (unless connecting itself hangs: a host that drops packets costs one timeout).
- When Redis refuses, hangs or errs, the batch is spooled and the breaker stays open for
  ``breaker_cooldown`` seconds (no network attempt at all); then one probe, a small chunk under the
  recorder's timeout.
- While the spool holds anything, new ops are appended to it (order per run is kept) and the spool is
  replayed, oldest first, with the same idempotent scripts, in chunks of at most ``replay_bytes`` of
  records: each waits up to ``REPLAY_TIMEOUT`` for its replies (replays run on the writer thread, never
  the agent's), a chunk that took long halves the next one and a quick one doubles it, so a slow link
  drains the backlog instead of sending the same chunk again and again.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import redis

from lessonbank.core import runs
from lessonbank.core.connections import address, checked, exchange
from lessonbank.core.constants import STEP_TTL
from lessonbank.recorder.logs import warn_with_traceback
from lessonbank.recorder.ops import Op
from lessonbank.recorder.spool import Spool

logger = logging.getLogger(__name__)

SPILL_AFTER = 0.04  # seconds after its oldest record was handed over that an unanswered batch is spooled
REPLAY_OPS = 256  # spooled ops looked at for one chunk
REPLAY_BYTES = 64 * 1024  # records in the first replay chunk, in bytes; it adapts between MIN and MAX
MIN_REPLAY_BYTES, MAX_REPLAY_BYTES = 4 * 1024, 1024 * 1024
REPLAY_TIMEOUT = 10.0  # seconds a replayed chunk may wait for its replies
REPLAY_SLOW, REPLAY_QUICK = 0.2, 0.05  # a chunk slower than this halves the next; quicker doubles it
Command = runs.Command
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

    def __init__(self, client: Any, queue: str) -> None:
        self.client = client
        self.queue = queue

    def apply(self, op: Op, replay: bool = False) -> None:
        """Deliver ``op`` (a close also queues the run's distillation, once). Raises the client's errors."""
        ref = _ref(op)
        if op.op == "close":
            runs.close_run(self.client, ref, op.seq, op.record, op.outcome, op.at, self.queue)
        elif op.op == "verdict":
            runs.run_command(self.client, verdict_command(op, self.queue))
        else:
            runs.record_step(self.client, ref, op.seq, op.record, op.at, self.queue)


# -- the commands of a batch: lessonbank.core.runs' scripts, pipelined ------------------------------------


def _ref(op: Op) -> runs.RunRef:
    return runs.RunRef(op.bank, op.run_id, op.agent, op.task, extra=dict(op.extra))


def live_commands(ops: list[Op], queue: str) -> list[Command]:
    """One pipeline for ``ops``: per run, in order, its steps (one script call per stretch of steps), its
    close and its check's verdict."""
    commands: list[Command] = []
    for group in _by_run(ops):
        stretch: list[Op] = []
        for op in [*group, None]:
            if op is not None and op.op == "step":
                stretch.append(op)
                continue
            if stretch:
                last = stretch[-1]
                commands.append(runs.steps_command(_ref(last), [(s.seq, s.record, s.at) for s in stretch], queue))
                stretch = []
            if op is not None:
                commands.append(verdict_command(op, queue) if op.op == "verdict" else
                                runs.close_command(_ref(op), op.seq, op.record, op.outcome, op.at, queue))
    return commands


def verdict_command(op: Op, queue: str) -> Command:
    """The command of a ``verdict`` op: the check's verdict, or (none given) the run's pending check cleared.
    A verdict's details that do not parse (a damaged spool line) fall back to a check's, never stopping a replay."""
    if op.outcome not in ("success", "failure"):
        return runs.clear_check_command(op.run_id)
    try:
        details = json.loads(op.record)
        source, note, ttl = str(details["source"]), str(details.get("note", "")), int(details["ttl"])
    except (ValueError, TypeError, KeyError):
        source, note, ttl = "check", "", STEP_TTL
    return runs.verdict_command(op.bank, op.run_id, op.outcome == "success", source, note, op.at, queue, ttl)


def _by_run(ops: list[Op]) -> list[list[Op]]:
    groups: dict[str, list[Op]] = {}
    for op in ops:
        groups.setdefault(op.run_id, []).append(op)
    return list(groups.values())


def replay_chunk(ops: list[Op], max_bytes: int) -> list[Op]:
    """The ops replayed together: at least one, then while their records fit in ``max_bytes``, ending at the
    first close (a close goes after the hash writes of the steps before it)."""
    chunk: list[Op] = []
    size = 0
    for op in ops:
        size += len(op.record) + len(op.task)
        if chunk and size > max_bytes:
            break
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
        self.replay_bytes = REPLAY_BYTES
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
    def address(self) -> str:
        """Where the client connects: a probe that failed there says the same of every spool bound for it."""
        return address(self.client)

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
            self._execute(live_commands(ops, self.queue), slow, min(op.at for op in ops) + SPILL_AFTER, self.timeout)
        except Exception as e:  # Redis and socket errors; anything else is logged the same way
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

    def hold(self, ops: list[Op]) -> bool:
        """Spool ``ops`` without trying Redis (the interpreter is finalizing). False if the disk refused."""
        return self._spool(ops)

    def pump(self, spill: Callable[[], list[Op]], budget: float, force: bool = False,
             wait: float = REPLAY_TIMEOUT) -> bool:
        """Replay spooled ops for up to ``budget`` seconds (``force``: even while the breaker is open), each chunk
        waiting at most ``wait`` seconds for its replies (a chunk under way is not cut at the budget). True when
        the spool is empty."""
        started = time.monotonic()
        while len(self.spool) and (force or self.breaker.allow()):
            try:
                self._replay(spill, wait)
            except Exception as e:  # as in deliver()
                self._outage(e)
                self.replay_bytes = max(self.replay_bytes // 2, MIN_REPLAY_BYTES)
                return False
            self._recovered()
            if time.monotonic() - started >= budget:
                break
        return not len(self.spool)

    def _replay(self, spill: Callable[[], list[Op]], wait: float) -> None:
        """One chunk of the spool, through the same scripts as live ops (a run closed meanwhile stays closed).
        The first chunk after an outage is a probe: one op, under the recorder's own timeout."""
        probe = self.breaker.tripped
        chunk = replay_chunk(self.spool.head(1 if probe else REPLAY_OPS), self.replay_bytes)

        def slow() -> None:
            self._spool(spill())

        started = time.monotonic()
        timeout = self.timeout if probe else max(min(wait, REPLAY_TIMEOUT), self.timeout)
        self._execute(live_commands(chunk, self.queue), slow, 0.0, timeout)
        took = time.monotonic() - started
        self.spool.delivered(len(chunk))
        self.delivered += len(chunk)
        if not probe and took > REPLAY_SLOW:
            self.replay_bytes = max(self.replay_bytes // 2, MIN_REPLAY_BYTES)
        elif not probe and took < REPLAY_QUICK:
            self.replay_bytes = min(self.replay_bytes * 2, MAX_REPLAY_BYTES)

    def _execute(self, commands: list[Command], slow: Callable[[], None], slow_at: float,
                 timeout: float) -> list[Any]:
        """Send ``commands`` as one pipeline and wait up to ``timeout`` seconds for the first reply; while none
        came, call ``slow()`` every POLL from the unix time ``slow_at`` on. Raises redis errors (the first error
        reply too, after every reply was read)."""
        loads = 0
        if not self._script_ready and any(command[0] == "EVALSHA" for command in commands):
            loads = len(runs.SCRIPT_BODIES)
            commands = [*(("SCRIPT", "LOAD", body) for body in runs.SCRIPT_BODIES), *commands]
        replies = checked(exchange(self.client, commands, timeout, on_wait=slow, wait_from=slow_at))
        if loads:
            self._script_ready = True
            replies = replies[loads:]
        return replies

    def _spool(self, ops: list[Op], counted: bool = True) -> bool:
        if not ops:
            return True
        try:
            self.spool.append_many(ops)
        except (OSError, ValueError):  # the disk refused, or (a bug) text that cannot be written
            if not self._spool_error_logged:
                self._spool_error_logged = True
                warn_with_traceback(logger, "could not write the spool in %s; step records are lost until it can",
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
            warn_with_traceback(
                logger, "Redis did not take step records (%s: %s); spooling to %s, retrying every %.1fs",
                type(error).__name__, error, self.spool.directory, self.breaker.cooldown,
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
