"""The agent-side recorder: every step of a smolagents run goes to Redis (or, when Redis is away, a local spool).

``from recorder import StepRecorder``. Submodules load on first use, so that importing this package is
cheap and never pulls in Celery, Qdrant or embedding models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recorder.callback import StepRecorder

_LAZY = {"StepRecorder": "recorder.callback"}

__all__ = ["StepRecorder"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'recorder' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
