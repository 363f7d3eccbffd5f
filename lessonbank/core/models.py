"""The records that cross process boundaries: step records (Redis) and lessons (Qdrant).

Each has one serializer: ``to_json()`` / ``from_json()`` (pydantic's JSON mode).
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Literal

from pydantic import BaseModel, Field

STEP_RECORD_VERSION = 1

StepKind = Literal["action", "planning", "final", "run_end"]
LessonKind = Literal["fact", "approach", "failure"]
LessonStatus = Literal["active", "superseded", "forgotten"]
RunOutcome = Literal["success", "max_steps", "error", "interrupted", "abandoned", "unknown"]

LESSON_KINDS: tuple[LessonKind, ...] = ("fact", "approach", "failure")

# Fixed namespace so lesson ids are the same on every machine.
LESSON_NAMESPACE = uuid.UUID("5b0f3c1e-8f7d-4b8e-9a57-2f1c3e4d5a6b")


class ToolCallRecord(BaseModel):
    """One tool call of an action step; arguments kept as (capped) text."""

    name: str
    arguments: str = ""


class TokenUsageRecord(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0


class StepRecord(BaseModel):
    """One captured step of one run, as pushed to Redis. Text fields are capped and redacted."""

    v: int = STEP_RECORD_VERSION
    id: str = Field(description="Record id, '{run_id}:{seq}': replaying a record never duplicates it.")
    bank: str
    run_id: str
    agent: str = ""
    task: str = ""
    kind: StepKind
    seq: int = Field(description="Order of the record within its run, from 0.")
    step_number: int | None = None
    model_output: str = ""
    code: str = ""
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    observations: str = ""
    error_type: str = ""
    error_message: str = ""
    action_output: str = ""
    plan: str = ""
    token_usage: TokenUsageRecord | None = None
    started_at: float | None = None
    ended_at: float | None = None
    duration: float | None = None
    images: int = 0
    is_final: bool = False
    outcome: RunOutcome | None = None
    truncated: list[str] = Field(default_factory=list, description="Names of the fields that were cut.")
    recorded_at: float = Field(default_factory=time.time)

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=True)

    @classmethod
    def from_json(cls, data: str | bytes) -> StepRecord:
        return cls.model_validate_json(data)


def normalize_lesson_text(text: str) -> str:
    """Case, spacing and trailing punctuation do not make a different lesson."""
    return re.sub(r"\s+", " ", text).strip().rstrip(".!;:").strip().lower()


def lesson_id(bank: str, text: str) -> str:
    """Deterministic lesson id: uuid5 of bank + normalized text, so re-writes never duplicate."""
    return str(uuid.uuid5(LESSON_NAMESPACE, f"{bank}\n{normalize_lesson_text(text)}"))


class Lesson(BaseModel):
    """A short, self-contained lesson learnt by one or more runs of a bank."""

    id: str
    bank: str
    kind: LessonKind
    text: str
    tags: list[str] = Field(default_factory=list)
    evidence: int = 1
    first_seen: float = Field(default_factory=time.time)
    last_seen: float = Field(default_factory=time.time)
    source_run_ids: list[str] = Field(default_factory=list)
    status: LessonStatus = "active"
    superseded_by: str | None = None
    origin: Literal["distilled", "remembered", "imported"] = "distilled"
    injected: int = 0
    used: int = 0

    @classmethod
    def new(
        cls,
        bank: str,
        kind: LessonKind,
        text: str,
        tags: list[str] | None = None,
        run_id: str | None = None,
        origin: Literal["distilled", "remembered", "imported"] = "distilled",
    ) -> Lesson:
        """A fresh lesson with its deterministic id and evidence 1."""
        now = time.time()
        return cls(
            id=lesson_id(bank, text),
            bank=bank,
            kind=kind,
            text=text.strip(),
            tags=list(tags or []),
            first_seen=now,
            last_seen=now,
            source_run_ids=[run_id] if run_id else [],
            origin=origin,
        )

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, data: str | bytes) -> Lesson:
        return cls.model_validate_json(data)
