"""The recorder's writer: a background thread that turns step snapshots into records and delivers them.

The step callback only appends a snapshot to a queue (``put``). The writer thread wakes, redacts and
serializes every waiting snapshot (``StepSerializer``), and hands them to the ``Transport`` as one
batch: one pipeline to Redis, or the fsync'd spool. Snapshots of one run are queued, serialized and
delivered in the order they were handed over, a run's close after its steps.

Durability, as the module ``lessonbank.recorder`` states it: a record handed over is in Redis within
100 ms, or in the spool; ``sync`` (a run's close uses it) and ``flush`` deliver on the caller's thread;
a normal process exit closes every writer (``atexit``): what is left goes to Redis or stays in the
spool for ``lessonbank spool replay``; a step handed over after that (a streamed run's generator closed
while the interpreter finalizes) is delivered or spooled on the caller's thread, never by a new thread.
A SIGKILL loses what was handed over in the last 100 ms. A forked child starts with an empty queue, no
thread, and a spool of its own.

A writer whose recorder is garbage-collected (``retire``) delivers what is queued; what its spool still holds
(Redis is away) goes to the process's ``Survivor``: one thread that replays the spools of gone recorders when
Redis answers again, so that a process building a recorder per request loses nothing while it lives on.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import sys
import threading
import time
import weakref
from collections import deque

from lessonbank.core.models import StepRecord
from lessonbank.recorder.logs import warn_with_traceback
from lessonbank.recorder.ops import Op
from lessonbank.recorder.serialize import StepSerializer
from lessonbank.recorder.snapshot import Snapshot
from lessonbank.recorder.survivor import SURVIVOR
from lessonbank.recorder.transport import Transport

logger = logging.getLogger(__name__)

MAX_BATCH = 256  # snapshots per batch (one pipeline)
LINGER = 0.01  # seconds the awake thread waits for more records, so that the callback rarely pays a wake-up
WORK_BUDGET = 0.025  # seconds of spool replay per turn, so that new records are spooled in between
EXIT_TIMEOUT = 2.0  # seconds a writer may take to flush at process exit

_WRITERS: weakref.WeakSet[Writer] = weakref.WeakSet()
_exiting = False  # set by the exit flush (atexit)


class Writer:
    """The queue of snapshots handed over by one recorder, and the thread that delivers them."""

    def __init__(self, serializer: StepSerializer, transport: Transport) -> None:
        self.serializer = serializer
        self.transport = transport
        self._failure_logged = False
        self._retired = False
        self._orphaned = False  # the spool went to the survivor: this writer touches its transport no more
        self._reset()
        _WRITERS.add(self)

    def _reset(self) -> None:
        self._items: deque[Snapshot] = deque()
        self._wake: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._io = threading.Lock()  # held while snapshots are taken off the queue and delivered
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._idle = True  # the thread waits for a wake-up (or does not run): put() must wake it

    @property
    def pending(self) -> int:
        """Snapshots handed over and not yet delivered or spooled."""
        return len(self._items)

    # -- the agent's side -----------------------------------------------------------------------------

    def put(self, snap: Snapshot) -> None:
        """Hand ``snap`` over (never blocks; wakes the thread only when it waits). Once the process exits
        (the exit flush ran, or the interpreter finalizes) no thread may start: ``Thread.start`` never
        returns while the interpreter finalizes, so the snapshot is delivered (or spooled) on the caller's
        thread instead."""
        self._items.append(snap)
        if self._idle:
            if _exiting or sys.is_finalizing():
                self._deliver_at_exit()
                return
            self._idle = False
            if self._thread is None:
                self._start()
            self._wake.put(True)

    def sync(self, timeout: float) -> bool:
        """Deliver (or spool) everything handed over so far, on the caller's thread. False if the writer
        thread kept the queue longer than ``timeout`` (it delivers the rest itself)."""
        deadline = time.monotonic() + timeout
        if not self._io.acquire(timeout=timeout):
            return False
        try:
            while self._work(0.0, replay=False) and time.monotonic() < deadline:
                pass
            if self.transport.backlog and self._thread is not None:
                self._wake.put(True)  # the writer thread replays the spool
            return not self._items
        finally:
            self._io.release()

    def flush(self, timeout: float) -> bool:
        """``sync``, then replay the spool now, ignoring the breaker's cooldown. True when nothing is left."""
        deadline = time.monotonic() + timeout
        if not self.sync(timeout) or not self._io.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            return False
        try:
            if self._orphaned:
                return False
            left = max(deadline - time.monotonic(), 0.0)
            return self.transport.pump(self._spill, left, force=True, wait=left)
        finally:
            self._io.release()

    def close(self, timeout: float = EXIT_TIMEOUT) -> None:
        """Stop the thread, flush, and release the spool file (kept on disk if anything is left in it)."""
        self._stop(timeout)
        self.flush(timeout)
        if self._io.acquire(timeout=timeout):
            try:
                if not self._orphaned:
                    self.transport.close()
            finally:
                self._io.release()

    def retire(self) -> None:
        """Let the thread deliver what is queued and end (without waiting for it): it hands what the spool still
        holds to the survivor, or releases the spool."""
        self._retired = True
        self._thread = None
        self._wake.put(True)

    def _deliver_at_exit(self) -> None:
        """A snapshot handed over after the exit flush: deliver or spool it now, then release the spool again
        (what stays there waits for ``lessonbank spool replay``). Bounded by EXIT_TIMEOUT; never raises."""
        try:
            if not self._io.acquire(timeout=EXIT_TIMEOUT):
                return
            try:
                if self._orphaned:
                    return
                if sys.is_finalizing():  # no imports any more, so no new connection: straight to the spool
                    self.transport.hold(self._spill())
                else:
                    deadline = time.monotonic() + EXIT_TIMEOUT
                    while self._work(EXIT_TIMEOUT, replay=False) and time.monotonic() < deadline:
                        pass
                self.transport.close()
            finally:
                self._io.release()
        except Exception:  # at exit, the agent's process must end whatever fails here
            self._log_failure("delivering step records at exit failed")

    # -- the writer thread ----------------------------------------------------------------------------

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._retired = False
                thread = threading.Thread(target=self._loop, name="lessonbank-recorder", daemon=True)
                self._thread = thread
                thread.start()

    def _stop(self, timeout: float) -> None:
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            self._wake.put(True)
            thread.join(timeout)
        self._idle = True  # the next put() starts a thread again

    def _loop(self) -> None:
        me = threading.current_thread()
        while self._thread is me:
            self._wait(me)
            more = True
            while more:
                with self._io:
                    more = self._work(WORK_BUDGET)
        if self._retired:
            with self._io:
                self._leave()

    def _leave(self) -> None:
        """The recorder is gone: a spool with ops Redis has not taken goes to the survivor, else it is released."""
        if self.transport.backlog and not self._orphaned and SURVIVOR.adopt(self.transport):
            self._orphaned = True
            _WRITERS.discard(self)
        elif not self._orphaned:
            self.transport.close()

    def _wait(self, me: threading.Thread) -> None:
        """Wait LINGER for more records (they go out as one batch); when none came, sleep until ``put``
        wakes the thread (or the breaker allows the next probe of a spool).

        ``retire`` and ``_stop`` unset ``_thread`` before they send their wake-up: a wake-up taken
        while lingering is seen here, and the thread does not go to sleep for good."""
        try:
            self._wake.get(timeout=LINGER)
        except queue.Empty:
            pass
        if not self._items and self._thread is me:
            self._idle = True
            if not self._items:  # checked after _idle is set: a put() in between sends a wake-up
                try:
                    self._wake.get(timeout=self._idle_wait())
                except queue.Empty:
                    pass
            self._idle = False
        try:
            while True:
                self._wake.get_nowait()
        except queue.Empty:
            pass

    def _idle_wait(self) -> float | None:
        """No timeout while nothing is spooled; else until the breaker allows the next probe."""
        if not self.transport.backlog:
            return None
        wait = self.transport.breaker.wait()
        return 1.0 if wait is None else wait

    def _work(self, budget: float, replay: bool = True) -> bool:
        """Deliver one batch, then (``replay``) replay the spool for up to ``budget`` seconds. True if work is
        left. The agent's thread does not replay: a chunk on a slow link may take seconds."""
        if self._orphaned:
            return False
        try:
            snaps = [self._items.popleft() for _ in range(min(MAX_BATCH, len(self._items)))]
            if snaps:
                self.transport.deliver(self._build(snaps), self._spill)
            replaying = replay and self.transport.backlog and self.transport.breaker.allow()
            if replaying:
                self.transport.pump(self._spill, budget)
            return bool(self._items) or bool(replaying and self.transport.backlog and self.transport.breaker.allow())
        except Exception:  # a bug must not stop the writer; the records of this turn are lost, and logged
            self._log_failure("delivering step records failed")
            return bool(self._items)

    def _spill(self) -> list[Op]:
        """Everything handed over since the batch in flight, as ops (Redis is slow: they go to the spool)."""
        return self._build([self._items.popleft() for _ in range(len(self._items))])

    def _build(self, snaps: list[Snapshot]) -> list[Op]:
        ops = []
        for snap in snaps:
            run = snap.run
            if snap.kind == "verdict":  # the check's verdict: written as it is, after the run's close
                ops.append(Op("verdict", run.bank, run.run_id, run.agent, "", snap.seq, json.dumps(snap.fields),
                              snap.at, snap.outcome))
                continue
            try:
                record = self.serializer.record(snap)
            except Exception:  # the content of a step is foreign; a record that cannot be built is dropped
                self._log_failure("building a step record failed; the record is dropped")
                if snap.kind != "run_end":
                    continue
                record = StepRecord(id=f"{run.run_id}:{snap.seq}", bank=run.bank, run_id=run.run_id,
                                    kind="run_end", seq=snap.seq, outcome=snap.outcome).to_json()  # type: ignore[arg-type]
            task = run.clean_task or ""
            if snap.kind == "run_end":
                ops.append(Op("close", run.bank, run.run_id, run.agent, task, snap.seq, record, snap.at, snap.outcome,
                              f"{run.run_id}:{snap.seq}", run.extra))
            else:
                ops.append(Op("step", run.bank, run.run_id, run.agent, task, snap.seq, record, snap.at,
                              extra=run.extra))
        return ops

    def _log_failure(self, what: str) -> None:
        if not self._failure_logged:
            self._failure_logged = True
            warn_with_traceback(logger, "%s (logged once)", what)

    def _after_fork(self) -> None:
        self._reset()
        self.transport.after_fork()


def _after_fork_in_child() -> None:
    for writer in list(_WRITERS):
        writer._after_fork()


def _close_at_exit() -> None:
    global _exiting
    _exiting = True  # from now on put() delivers on the caller's thread: no thread starts any more
    for writer in list(_WRITERS):
        try:
            writer.close(EXIT_TIMEOUT)
        except Exception:  # at exit, a failing writer must not keep the others from flushing
            logger.warning("flushing step records at exit failed", exc_info=True)
    try:
        SURVIVOR.close(EXIT_TIMEOUT)  # the spools of gone recorders, after the writers (none is handed over now)
    except Exception:  # as above
        logger.warning("flushing the spools of gone recorders at exit failed", exc_info=True)


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_at_exit)
