"""The agent-side recorder: every step of a smolagents run goes to Redis (or, when Redis is away, a local spool).

``from lessonbank.recorder import StepRecorder``. It imports only ``lessonbank.core`` (and smolagents):
never Celery, Qdrant or an embedding model. ``StepRecorder`` loads on first use, so that tools reading
the spool do not import smolagents.

How a step travels: the step callback takes a snapshot of the step (its values as text) and hands it to
the recorder's writer thread (``writer.py``); the writer redacts and caps every text field, serializes
the record (``serialize.py``) and delivers what was handed over as one pipeline (``transport.py``).
Redaction happens before a record leaves the process, on the writer's thread: secrets reach neither
Redis nor the spool.

Durability:

- A record handed over is in Redis within 100 ms, or in the fsync'd spool (``LESSONBANK_SPOOL_DIR``):
  when Redis has not answered 40 ms after a record was handed over, the records waiting go to the spool.
  The 100 ms are counted while the interpreter runs: a pause of the whole process (a long garbage
  collection, a C extension holding the GIL) delays the writer too, and connecting to a host that drops
  packets costs one ``LESSONBANK_REDIS_TIMEOUT`` before the spool.
- A run's close waits (at most ``2 * LESSONBANK_REDIS_TIMEOUT + 0.5`` s) until the run's records and the
  close are in Redis or in the spool: when ``agent.run`` returns, its run is recorded.
- A normal process exit (``atexit``) delivers what is left, or leaves it in the spool for
  ``lessonbank spool replay``. ``recorder.flush()`` delivers the queue and the spool on demand.
- A recorder garbage-collected while Redis is away hands what its spool holds to one thread of the process
  (``survivor.py``), which replays it when Redis answers: the process need not exit for it to be delivered.
- A SIGKILL of the agent process loses at most what was handed over in its last 100 ms.
- A forked child starts with an empty queue, a writer thread and a spool file of its own, and records
  its runs under run ids of its own; the parent's queue and spool stay the parent's.
- Records of one run reach Redis in order, its close after its steps; every write is idempotent (HSETNX
  per sequence number, the close's distill task published once), so a replay never duplicates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lessonbank.recorder.callback import StepRecorder

__all__ = ["StepRecorder"]


def __getattr__(name: str) -> Any:
    if name == "StepRecorder":
        from lessonbank.recorder.callback import StepRecorder

        return StepRecorder
    raise AttributeError(f"module 'lessonbank.recorder' has no attribute {name!r}")
