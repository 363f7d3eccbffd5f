"""The spools of recorders that are gone, kept delivered while the process lives on.

A recorder garbage-collected while Redis is away leaves ops in its spool (a service that builds an agent and
``remember`` per request drops one recorder per request). Its writer hands that spool, with its transport, to
the process's one ``Survivor``: a daemon thread that replays each spool when its breaker allows a probe (one
probe per Redis address and cooldown, however many spools wait for it), releases it once delivered (the file
goes with its last op) and ends when none is left. At process exit it tries each address once more and leaves
what Redis does not take in the files, for ``lessonbank spool replay``. A forked child starts without them.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from lessonbank.recorder.ops import Op
from lessonbank.recorder.transport import Transport

logger = logging.getLogger(__name__)

TURN_BUDGET = 1.0  # seconds of replay of one spool per turn
IDLE_WAIT = 1.0  # longest sleep between turns


def _nothing() -> list[Op]:
    return []  # nobody hands a gone recorder's writer anything more


class Survivor:
    """The transports of gone recorders whose spools still hold ops, and the thread that replays them."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._transports: list[Transport] = []
        self._lock = threading.Lock()  # guards the list, the thread and ``_closed``
        self._busy = threading.Lock()  # held while the transports are worked on
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def waiting(self) -> int:
        """Spools handed over and not yet delivered."""
        return len(self._transports)

    def adopt(self, transport: Transport) -> bool:
        """Take over ``transport`` and its spool (the caller touches it no more). False at process exit."""
        with self._lock:
            if self._closed:
                return False
            self._transports.append(transport)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="lessonbank-recorder-survivor", daemon=True)
                self._thread.start()
        self._wake.set()
        return True

    def close(self, timeout: float) -> None:
        """At process exit: stop the thread, try once more to deliver (one attempt per address, within
        ``timeout``), and release every spool (what is left stays on disk)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if not self._busy.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            return  # the thread is stuck on Redis: the files stay for ``lessonbank spool replay``
        try:
            failed: set[str] = set()
            for transport in self._take_all():
                left = deadline - time.monotonic()
                address = transport.address
                if left > 0 and address not in failed and not transport.pump(_nothing, left, force=True, wait=left):
                    failed.add(address)
                transport.close()
        finally:
            self._busy.release()

    def _take_all(self) -> list[Transport]:
        with self._lock:
            transports, self._transports = self._transports, []
        return transports

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._closed or not self._transports:
                    self._thread = None
                    return
                transports = list(self._transports)
            self._wake.clear()
            try:
                with self._busy:
                    wait = self._turn(transports)
            except Exception:  # a bug must not end the thread with spools in its hands
                logger.warning("replaying the spool of a gone recorder failed", exc_info=True)
                wait = IDLE_WAIT
            self._wake.wait(wait)

    def _turn(self, transports: list[Transport]) -> float:
        """Replay what each breaker allows; release the spools that are empty. Seconds until the next turn."""
        failed: set[str] = set()
        for transport in transports:
            if transport.backlog and transport.breaker.allow():
                address = transport.address
                if address in failed:
                    transport.breaker.trip()  # Redis there just refused a probe: one probe per cooldown
                elif not transport.pump(_nothing, TURN_BUDGET) and transport.breaker.tripped:
                    failed.add(address)
            if not transport.backlog:
                transport.close()
                with self._lock:
                    if transport in self._transports:
                        self._transports.remove(transport)
        waits = [transport.breaker.wait() for transport in transports if transport.backlog]
        return min([IDLE_WAIT, *(0.0 if wait is None else wait for wait in waits)])

    def _after_fork(self) -> None:
        """In a forked child: the spools are the parent's (their files, locks and queues stay the parent's)."""
        for transport in self._transports:
            len(transport.spool)  # the spool notices the new process and drops the parent's file and queue
        self._reset()


SURVIVOR = Survivor()
os.register_at_fork(after_in_child=SURVIVOR._after_fork)
