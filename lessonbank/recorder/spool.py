"""Local spool: what Redis could not take, appended and fsync'd to one JSONL file per process.

The owning process holds an exclusive ``flock`` on its file for as long as it has one, so a replay
from another process (``lessonbank spool replay``) only ever touches files of processes that died.
The oldest ``IN_MEMORY`` undelivered ops are also kept in memory, ready to send; the ones after them are
on disk only and read back as those go, so a long Redis outage under a busy agent grows its file, not the
agent's memory.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from lessonbank.recorder.ops import Op

logger = logging.getLogger(__name__)

SPOOL_GLOB = "spool-*.jsonl"
REJECTED_SUFFIX = ".rejected"
IN_MEMORY = 512  # undelivered ops kept in memory too; the rest wait on disk only


class Spool:
    """This process's spool file plus the in-memory queue of ops not yet delivered, oldest first.

    Not thread-safe: the recorder's writer uses it under its own lock. A forked child starts a spool of
    its own (the parent's file, lock and queue stay the parent's).
    """

    def __init__(self, directory: Path, in_memory: int = IN_MEMORY) -> None:
        self.directory = Path(directory)
        self.path: Path | None = None
        self.in_memory = max(1, in_memory)
        self._fd: int | None = None
        self._pid = os.getpid()
        self._pending: deque[Op] = deque()
        self._on_disk = 0  # undelivered ops after ``_pending``, in the file only
        self._read_at = 0  # where the first of them starts in the file
        self._keep_file = False  # a line of it could not be read back: replay must see it

    def __len__(self) -> int:
        self._check_fork()
        return len(self._pending) + self._on_disk

    def append(self, op: Op) -> None:
        """Write ``op`` durably (write, fsync) and queue it. Raises OSError if the disk refuses."""
        self.append_many([op])

    def append_many(self, ops: list[Op]) -> None:
        """Write ``ops`` durably with one fsync, then queue them. Raises OSError if the disk refuses."""
        self._check_fork()
        if not ops:
            return
        lines = [_encoded(op) for op in ops]
        ops = [op for op, _ in lines]
        fd = self._open()
        start = os.fstat(fd).st_size  # appends only, under our lock: where these lines begin
        data = b"".join(line for _, line in lines)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        room = 0 if self._on_disk else max(self.in_memory - len(self._pending), 0)
        self._pending.extend(ops[:room])
        if len(ops) > room:
            if not self._on_disk:
                self._read_at = start + sum(len(line) for _, line in lines[:room])
            self._on_disk += len(ops) - room

    def peek(self) -> Op | None:
        """The oldest undelivered op, or None."""
        self._check_fork()
        self._read_back()
        return self._pending[0] if self._pending else None

    def head(self, count: int) -> list[Op]:
        """The ``count`` oldest undelivered ops (at most ``in_memory``)."""
        self._check_fork()
        if len(self._pending) < count:
            self._read_back()
        return [self._pending[i] for i in range(min(count, len(self._pending)))]

    def delivered(self, count: int = 1) -> None:
        """The ``count`` oldest ops reached Redis. The file goes away with the last one."""
        while count > 0:
            if not self._pending:
                self._read_back()
                if not self._pending:
                    break
            done = min(count, len(self._pending))
            for _ in range(done):
                self._pending.popleft()
            count -= done
        if not self._pending and not self._on_disk:
            self.discard()

    def _read_back(self) -> None:
        """Fill the memory again, oldest first, from the ops waiting on disk only. A file that cannot be read is
        left on disk whole for ``lessonbank spool replay`` (replays are idempotent) and a new one is begun."""
        want = min(self._on_disk, self.in_memory - len(self._pending))
        if want <= 0 or self.path is None:
            return
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._read_at)
                for _ in range(want):
                    line = handle.readline()
                    if not line:
                        raise OSError(f"{self._on_disk} spooled ops missing from the file")
                    self._read_at += len(line)
                    self._on_disk -= 1
                    try:
                        self._pending.append(Op.from_line(line.decode("utf-8")))
                    except ValueError:  # a line cut short by a full disk: replay moves it to .rejected
                        logger.warning("a spooled line of %s does not read back; the file stays for `lessonbank "
                                       "spool replay`", self.path)
                        self._keep_file = True
        except OSError as e:
            logger.warning("cannot read %d spooled ops back from %s (%s); the file stays for `lessonbank spool "
                           "replay`", self._on_disk, self.path, e)
            self._on_disk = 0
            self._keep_file = True
            self._let_go()  # what comes next starts a file of its own

    def _let_go(self) -> None:
        """Close the file and release its lock, leaving it on disk (its ops are replayed from it)."""
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self.path, self._keep_file = None, None, False

    def discard(self) -> None:
        """Remove the (fully delivered) spool file and release its lock; a file with a line that did not read
        back stays, for ``lessonbank spool replay``."""
        if self._keep_file:
            self._let_go()
            return
        if self._fd is not None:
            if self.path is not None:
                self.path.unlink(missing_ok=True)
            os.close(self._fd)
        self._fd = None
        self.path = None

    def release(self) -> None:
        """Close the file but keep it on disk (undelivered ops stay there for ``lessonbank spool replay``)."""
        self._check_fork()
        left = len(self)
        path = self.path
        self._let_go()
        if left and path is not None:
            logger.warning("%d step records remain in %s", left, path)
        self._pending.clear()
        self._on_disk = 0

    def _open(self) -> int:
        if self._fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"spool-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise
            _fsync_dir(self.directory)
            self._fd, self.path = fd, path
        return self._fd

    def _check_fork(self) -> None:
        """A forked child starts its own spool: the parent's file, lock and queue remain the parent's."""
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            if self._fd is not None:
                os.close(self._fd)  # the child's copy only: the parent keeps its descriptor and its lock
            self._fd, self.path, self._keep_file = None, None, False
            self._pending = deque()
            self._on_disk = 0


def _encoded(op: Op) -> tuple[Op, bytes]:
    """``op`` and its spool line; when some text of it holds a lone surrogate, a copy with those replaced:
    one op's text must not keep the others of its batch out of the spool, nor fail every replay of it."""
    line = op.to_line() + "\n"
    try:
        return op, line.encode("utf-8")
    except UnicodeEncodeError:
        data = line.encode("utf-8", "replace")
        return Op.from_line(data.decode("utf-8")), data


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass
class SpoolFileInfo:
    """One spool file as ``lessonbank spool list`` shows it."""

    path: Path
    live: bool
    ops: int
    runs: int
    bytes: int
    modified: float


@dataclass
class ReplayReport:
    """What replaying one spool file did."""

    path: Path
    delivered: int = 0
    closes: int = 0
    rejected: int = 0
    skipped_live: bool = False
    error: str = ""
    runs: set[str] = field(default_factory=set)

    @property
    def complete(self) -> bool:
        return not self.skipped_live and not self.error


def spool_files(directory: Path) -> list[Path]:
    """Spool files in ``directory``, oldest first."""
    if not Path(directory).is_dir():
        return []
    return sorted(Path(directory).glob(SPOOL_GLOB), key=lambda p: (p.stat().st_mtime, p.name))


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _read_ops(handle: IO[str]) -> tuple[list[Op], list[str]]:
    ops: list[Op] = []
    bad: list[str] = []
    for line in handle:
        if not line.strip():
            continue
        try:
            ops.append(Op.from_line(line))
        except ValueError:
            bad.append(line if line.endswith("\n") else line + "\n")
    return ops, bad


def describe(path: Path) -> SpoolFileInfo:
    """Size, op count and liveness (is its owner still holding the lock?) of one spool file."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        live = not _try_lock(handle)
        ops, _ = _read_ops(handle)
    stat = path.stat()
    return SpoolFileInfo(path, live, len(ops), len({op.run_id for op in ops}), stat.st_size, stat.st_mtime)


def replay_file(path: Path, apply: Callable[[Op], None]) -> ReplayReport:
    """Deliver every op of a dead process's spool file in order; delete the file once all went through.

    ``apply(op)`` must be idempotent (it is: records are written with HSETNX, closes carry a token).
    Lines that do not parse are moved to ``<file>.rejected`` rather than dropped. On the first
    delivery error the file is kept whole and the error reported; a later replay starts again.
    """
    report = ReplayReport(path)
    with open(path, encoding="utf-8", errors="replace") as handle:
        if not _try_lock(handle):
            report.skipped_live = True
            return report
        ops, bad = _read_ops(handle)
        for op in ops:
            try:
                apply(op)
            except Exception as e:  # the caller's delivery (Redis, Celery) may fail in many ways
                report.error = f"{type(e).__name__}: {e}"
                return report
            report.delivered += 1
            report.closes += op.op == "close"
            report.runs.add(op.run_id)
        if bad:
            rejected = path.with_name(path.name + REJECTED_SUFFIX)
            with open(rejected, "a", encoding="utf-8") as out:
                out.writelines(bad)
                out.flush()
                os.fsync(out.fileno())
            report.rejected = len(bad)
            logger.warning("%d unreadable lines of %s kept in %s", len(bad), path, rejected)
        path.unlink(missing_ok=True)
    return report


def replay_directory(directory: Path, apply: Callable[[Op], None]) -> list[ReplayReport]:
    """Replay every spool file in ``directory`` whose owner is gone, oldest first."""
    reports = []
    for path in spool_files(directory):
        reports.append(replay_file(path, apply))
        if reports[-1].error:
            break
    return reports


def age(info: SpoolFileInfo) -> float:
    return max(time.time() - info.modified, 0.0)
