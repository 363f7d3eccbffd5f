"""The agent-side recorder: every step of a smolagents run goes to Redis (or, when Redis is away, a local spool).

``from lessonbank.recorder import StepRecorder``. It imports only ``lessonbank.core`` (and smolagents):
never Celery, Qdrant or an embedding model. ``StepRecorder`` loads on first use, so that tools reading
the spool do not import smolagents.
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
