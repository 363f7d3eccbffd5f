"""lessonbank: memory across runs for smolagents agents.

Public API. Heavy pieces (Qdrant, embeddings, Celery) load on first use, so that importing
``lessonbank`` -- which the recorder does inside the agent process -- stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from lessonbank.exceptions import (
    ConfigurationError,
    DistillError,
    LessonbankError,
    PermanentDistillError,
    ServiceUnavailable,
    StoreError,
    TransientDistillError,
)
from lessonbank.models import Lesson, StepRecord
from lessonbank.settings import Settings

_LAZY = {
    "StepRecorder": "recorder",
    "build_instructions": "lessonbank.instructions",
    "remember": "lessonbank.memory",
    "memory_tools": "lessonbank.tools",
    "RecallLessonsTool": "lessonbank.tools",
    "RememberLessonTool": "lessonbank.tools",
    "LessonStore": "lessonbank.store",
    "RemoteLessonStore": "lessonbank.store_service",
    "StoreOwner": "lessonbank.store_service",
    "connect_store": "lessonbank.store_service",
    "open_local_store": "lessonbank.store_service",
    "Embedder": "lessonbank.embeddings",
    "FastEmbedEmbedder": "lessonbank.embeddings",
    "OpenAIEmbedder": "lessonbank.embeddings",
    "embedder_from_settings": "lessonbank.embeddings",
    "LlamaServer": "lessonbank.local_llm",
    "ensure_model": "lessonbank.local_llm",
}

__all__ = [
    "ConfigurationError",
    "DistillError",
    "Lesson",
    "LessonbankError",
    "PermanentDistillError",
    "ServiceUnavailable",
    "Settings",
    "StepRecord",
    "StepRecorder",
    "StoreError",
    "TransientDistillError",
    "build_instructions",
    "remember",
    "memory_tools",
    "RecallLessonsTool",
    "RememberLessonTool",
    "LessonStore",
    "RemoteLessonStore",
    "StoreOwner",
    "connect_store",
    "open_local_store",
    "Embedder",
    "FastEmbedEmbedder",
    "OpenAIEmbedder",
    "embedder_from_settings",
    "LlamaServer",
    "ensure_model",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lessonbank' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
