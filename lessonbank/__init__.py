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
    from lessonbank.agent import feedback, remember
    from lessonbank.bank import Bank
    from lessonbank.block import LessonsBlock, lessons_block
    from lessonbank.recorder.callback import StepRecorder
    from lessonbank.tools import memory_tools

try:
    __version__ = version("lessonbank")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Bank",
    "Lesson",
    "LessonbankError",
    "LessonsBlock",
    "Settings",
    "StepRecord",
    "StepRecorder",
    "feedback",
    "lessons_block",
    "memory_tools",
    "remember",
]

# name -> module, imported on first use (``build_instructions``: deprecated, not in ``__all__``)
_LAZY = {
    "remember": "lessonbank.agent", "feedback": "lessonbank.agent", "Bank": "lessonbank.bank",
    "lessons_block": "lessonbank.block",
    "LessonsBlock": "lessonbank.block", "build_instructions": "lessonbank.block",
    "memory_tools": "lessonbank.tools", "StepRecorder": "lessonbank.recorder.callback",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'lessonbank' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
