"""lessonbank: memory across runs for smolagents agents.

The public API is what the README documents, and only that (``__all__``). The pieces load on first
use, so ``import lessonbank`` stays cheap.

Layers (each imports only what is below it; ``tests/test_layers.py`` checks it with import-linter):

- face: this package's root modules (``agent``, ``source``, ``tools``, ``cli``, ``demo``, ``local_llm``, ...);
- ``lessonbank.recorder`` (inside the agent process) and ``lessonbank.workers`` (the Celery service);
- ``lessonbank.core``: settings, models, the Redis layout, run state, the store, redaction.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from lessonbank.core.exceptions import LessonbankError
from lessonbank.core.models import Lesson, StepRecord
from lessonbank.core.settings import Settings

if TYPE_CHECKING:
    from lessonbank.agent import build_instructions, feedback, remember
    from lessonbank.recorder.callback import StepRecorder
    from lessonbank.tools import memory_tools

try:
    __version__ = version("lessonbank")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Lesson",
    "LessonbankError",
    "Settings",
    "StepRecord",
    "StepRecorder",
    "build_instructions",
    "feedback",
    "memory_tools",
    "remember",
]


def __getattr__(name: str) -> Any:
    if name in ("remember", "build_instructions", "feedback"):
        from lessonbank import agent

        return getattr(agent, name)
    if name == "memory_tools":
        from lessonbank.tools import memory_tools

        return memory_tools
    if name == "StepRecorder":
        from lessonbank.recorder.callback import StepRecorder

        return StepRecorder
    raise AttributeError(f"module 'lessonbank' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
