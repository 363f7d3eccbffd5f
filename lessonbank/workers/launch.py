"""A worker of one's own: ``celery -A lessonbank.workers worker`` as a child process, for the length of a block.

For programs that bring their own worker on the embedded store (the demo, the benchmarks): a solo pool on one
queue, its output appended to a log file, ready once that log says the worker is ready and whether it serves the
lesson store (a worker given ``LESSONBANK_QDRANT_URL`` logs no line about it: this launcher is not for it),
stopped (terminate, then kill) when the block ends.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from lessonbank.core.exceptions import ServiceUnavailable

logger = logging.getLogger(__name__)

# Celery's "<node> ready." and the store owner's line (serving the store, or not serving it because another
# process does): both come after the worker's signal handlers ran.
READY_MARKERS = ("ready.", "serving the lesson store")
POLL_SECONDS = 0.2


def worker_command(queue: str, name: str) -> list[str]:
    """The command line of a solo-pool worker consuming ``queue``, its node named ``<name>-<our pid>@<host>``."""
    return [sys.executable, "-m", "celery", "-A", "lessonbank.workers", "worker", "--pool", "solo", "-Q", queue,
            "-n", f"{name}-{os.getpid()}@%h", "--loglevel", "INFO", "--without-gossip", "--without-mingle"]


@contextmanager
def worker_process(env: Mapping[str, str], log: Path, queue: str, name: str, ready_timeout: float = 180.0,
                   stop_timeout: float = 60.0) -> Iterator[subprocess.Popen[bytes]]:
    """A worker process with environment ``env`` from when it is ready until the block ends.

    Raises ServiceUnavailable (one line naming ``log``) when the worker exits, or is not ready within
    ``ready_timeout`` seconds; only what this worker appends to ``log`` counts, not an earlier worker's lines.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    start = log.stat().st_size if log.exists() else 0
    with log.open("ab") as out:
        process = subprocess.Popen(worker_command(queue, name), env=dict(env), stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_ready(process, log, start, ready_timeout)
        yield process
    finally:
        stop(process, stop_timeout)


def _wait_ready(process: subprocess.Popen[bytes], log: Path, start: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with log.open("rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        if all(marker in text for marker in READY_MARKERS):
            return
        if process.poll() is not None:
            raise ServiceUnavailable(f"the worker exited with code {process.returncode} before it was ready; "
                                     f"see {log}")
        if time.monotonic() > deadline:
            raise ServiceUnavailable(f"the worker was not ready after {timeout:.0f} s; see {log}")
        time.sleep(POLL_SECONDS)


def stop(process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Warm shutdown (SIGTERM: the task in hand finishes); SIGKILL when it takes longer than ``timeout``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        logger.warning("the worker (pid %d) did not stop in %.0f s; killing it", process.pid, timeout)
        process.kill()
        process.wait()
