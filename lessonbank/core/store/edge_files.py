"""The embedded store's files: the path's lock, finishing an interrupted purge, payloads that read back exactly.

- ``lock_path``: ``<path>/lessonbank.lock``, held with ``flock`` while a store has the shard open (one
  process per path, and one open store per process);
- a purge writes the live points into ``<shard>.rebuild``, marks it ``COMPLETE``, renames the old shard
  to ``<shard>.retired`` and the fresh one into place, then removes the old one; ``recover`` finishes or
  rolls back those steps after a crash, so a deleted lesson never survives in a leftover folder;
- ``<shard>.purge``, written before points are deleted and removed once the purge is done: a purge that a
  crash or an error left undone (the deleted points gone from the index but their text still in the
  shard's files) is done again when the store opens, and retried while it runs;
- ``exact_payload``: floats stored as their repr, because the engine parses JSON floats only to within
  one unit in the last place (qdrant-edge 0.9).
"""

from __future__ import annotations

import fcntl
import shutil
from pathlib import Path
from typing import IO, Any

from lessonbank.core.exceptions import ServiceUnavailable

LOCK_FILE = "lessonbank.lock"
REBUILD, RETIRED, PURGE, COMPLETE = ".rebuild", ".retired", ".purge", "COMPLETE"
SUFFIXES = (REBUILD, RETIRED, PURGE)  # what a purge puts next to a shard: no collection's name ends so


def lock_path(path: Path) -> IO[str]:
    """The open, locked lock file of ``path`` (closing it releases the lock); ServiceUnavailable if held."""
    handle = (path / LOCK_FILE).open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ServiceUnavailable(
            f"the embedded lesson store at {path} is held by another process (a running worker?); "
            "go through the worker (connect_store) or set LESSONBANK_QDRANT_URL to a Qdrant server"
        ) from None
    return handle


def sibling(shard_dir: Path, suffix: str) -> Path:
    return shard_dir.with_name(shard_dir.name + suffix)


def recover(shard_dir: Path) -> None:
    """Finish a purge that a crash interrupted: keep the fresh shard if it was complete, drop the rest."""
    fresh, old = sibling(shard_dir, REBUILD), sibling(shard_dir, RETIRED)
    if (fresh / COMPLETE).is_file() and not shard_dir.exists():
        fresh.rename(shard_dir)
        (shard_dir / COMPLETE).unlink()
    if shard_dir.exists():
        shutil.rmtree(old, ignore_errors=True)
    elif old.exists():
        old.rename(shard_dir)  # the fresh shard was not complete: the old one (delete not done) stays
    shutil.rmtree(fresh, ignore_errors=True)


def exact_payload(value: Any) -> Any:
    """``value`` with every float written as its shortest repr string, so a lesson read back equals the one
    written (``Lesson`` reads such strings back as the same floats)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {key: exact_payload(item) for key, item in value.items()}
    if isinstance(value, list):
        return [exact_payload(item) for item in value]
    return value
