"""The records that cross process boundaries: step records and run summaries (Redis), lessons (Qdrant).

Each has one serializer: ``to_json()`` / ``from_json()`` (pydantic's JSON mode). A lesson kept from what a run
observed holds its content as a structured payload (``fix``, ``shape``, ``recipe``; their types are in
``payloads``, re-exported here); its ``text`` is rendered from it (``lessonbank.learn.render``). A lesson stored
before payloads existed (schema 1) is read into the current schema (``lessonbank.core.migrate``).
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from lessonbank.core.payloads import (
    CausalEstimate,
    CausalVerdict,
    Change,
    FailurePayload,
    FixPayload,
    Provenance,
    Recipe,
    ShapePayload,
    Taint,
    TaintKind,
    ToolFingerprint,
)

# What a lesson carries beside its text (``payloads``), re-exported where the records are
__all__ = ["CausalEstimate", "CausalVerdict", "Change", "FailurePayload", "FixPayload", "Provenance", "Recipe",
           "ShapePayload", "Taint", "TaintKind", "ToolFingerprint"]

STEP_RECORD_VERSION = 1
# 1: text only, fixes and shapes written as prose, status causes in the reason's words; 2: structured payloads
# and status causes.
LESSON_SCHEMA_VERSION = 2

StepKind = Literal["action", "planning", "final", "run_end"]
LessonKind = Literal["fact", "approach", "failure"]
# active: handed to runs; superseded: replaced by a merged or newer lesson (superseded_by); retired: its
# harmful evidence outweighed its helpful evidence, or no run applied it (status_reason), until a user
# releases it; quarantined: held back until a user releases it (it carries URLs, e-mail addresses or
# instructions to send data somewhere, or calls what an observation asked for: ``Lesson.taint``); stale: code
# calling a tool whose signature or description changed since it was learnt (``lessonbank.learn.fingerprint``),
# until a run with the tool as it is now re-verifies or replaces it; forgotten: hidden by a user.
LessonStatus = Literal["active", "superseded", "retired", "quarantined", "stale", "forgotten"]
# Why a lesson has its status (``status_reason`` says it in words): merged into another, contradicted by a run,
# outdated by a newer recipe, retired as harmful or idle or retracted by a late verdict on its run, restored
# when that run was judged a success again (or the run behind its status was forgotten), quarantined, forgotten,
# unforgotten or released by a user; retired because runs given it did worse than runs it was withheld from
# (``hurts``, ``lessonbank.learn.causal``); stale because a tool it calls changed (``tool_changed``), active again
# once a run with the changed tool verified it (``reverified``).
StatusCause = Literal["merged", "contradicted", "outdated", "harmful", "idle", "retracted", "restored",
                      "quarantined", "forgotten", "unforgotten", "released", "hurts", "tool_changed", "reverified"]
# The status reason of a lesson a user released (from quarantine or retirement): they vouch for it.
RELEASED_BY_USER = "released by a user"
LessonOrigin = Literal["distilled", "recipe", "observed", "remembered", "imported", "added"]
# Lessons a user writes into a bank (``lessons add``, ``lessons import``): vouched for by them.
USER_ORIGINS: frozenset[str] = frozenset({"added", "imported"})
# How a run ended, as its recorder saw it.
RunOutcome = Literal["success", "max_steps", "error", "interrupted", "abandoned", "unknown"]
# Whether the run did its job, and who said so (most trusted first).
Verdict = Literal["success", "failure", "unknown"]
VerdictSource = Literal["user", "check", "signals", "llm", "none"]
# Which arm of the comparison a run was in: given lessons, or held out as a control (no lessons).
Arm = Literal["lessons", "control"]

LESSON_KINDS: tuple[LessonKind, ...] = ("fact", "approach", "failure")

# Fixed namespace so lesson ids are the same on every machine.
LESSON_NAMESPACE = uuid.UUID("5b0f3c1e-8f7d-4b8e-9a57-2f1c3e4d5a6b")


class ToolCallRecord(BaseModel):
    """One tool call of an action step; arguments kept as (capped) text."""

    name: str
    arguments: str = ""


class ToolResultRecord(BaseModel):
    """The structure of a tool call's result, no value but its flags' (``lessonbank.core.specimen``): the first
    result of each tool in an action step that fits, whether or not the step's code printed it."""

    name: str
    specimen: Any = None


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
    tool_results: list[ToolResultRecord] = Field(default_factory=list)
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


MAX_BANK_CHARS = 200


def validate_bank(bank: str) -> str:
    """``bank`` if it is a usable bank name, else ConfigurationError in one line (no silent default, no strip)."""
    from lessonbank.core.exceptions import ConfigurationError

    if not isinstance(bank, str) or not bank or bank != bank.strip() or len(bank) > MAX_BANK_CHARS:
        raise ConfigurationError(
            f"a bank name must be 1 to {MAX_BANK_CHARS} characters without surrounding spaces (got {bank!r})"
        )
    return bank


def normalize_lesson_text(text: str) -> str:
    """Case, spacing and trailing punctuation do not make a different lesson."""
    return re.sub(r"\s+", " ", text).strip().rstrip(".!;:").strip().lower()


def lesson_id(bank: str, text: str) -> str:
    """Deterministic lesson id: uuid5 of bank + normalized text, so re-writes never duplicate."""
    return str(uuid.uuid5(LESSON_NAMESPACE, f"{bank}\n{normalize_lesson_text(text)}"))


def recipe_id(bank: str, fingerprint: str, kind: str = "recipe") -> str:
    """Deterministic id of a recipe (or an observed fix): uuid5 of bank + the fingerprint of its normalised code."""
    return str(uuid.uuid5(LESSON_NAMESPACE, f"{bank}\n{kind} {fingerprint}"))


class Lesson(BaseModel):
    """A short, self-contained lesson learnt by one or more runs of a bank.

    Counts: ``given`` runs were handed it, ``applied`` of them used it (its distinctive names or
    literals appear in the run's code or tool arguments), ``helpful`` / ``harmful`` of those ended well
    / badly. ``evidence`` counts independent runs that taught it (never a run that was given it), and
    ``failed_runs`` how many of those were judged failures.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str
    bank: str
    kind: LessonKind
    text: str
    tags: list[str] = Field(default_factory=list)
    evidence: int = 1
    first_seen: float = Field(default_factory=time.time)
    last_seen: float = Field(default_factory=time.time)
    source_run_ids: list[str] = Field(default_factory=list)
    provenance: list[Provenance] = Field(default_factory=list)
    provenance_dropped: int = Field(0, description="Provenance entries (and their runs' ids) past the cap that are no "
                                                   "longer listed; evidence, failures and credit still count them.")
    status: LessonStatus = "active"
    status_reason: str = ""
    status_changed_at: float | None = None
    superseded_by: str | None = None
    origin: LessonOrigin = "distilled"
    verified: bool = Field(False, description="A run that taught it was judged a success.")
    failed_runs: int = Field(0, description="Runs that taught it and were judged a failure (by a user, a check "
                                            "or their own ending): no evidence that what they did worked.")
    given: int = Field(0, validation_alias=AliasChoices("given", "injected"))
    applied: int = 0
    helpful: int = 0
    harmful: int = 0
    recipe: Recipe | None = None
    fix: FixPayload | None = None
    shape: ShapePayload | None = None
    failure: FailurePayload | None = None
    task: str = Field("", description="For an observed fix, or a shape naming the call that got its records: the "
                                      "task of the run that observed it (redacted, capped), whose values the "
                                      "instructions replace with the next task's.")
    taint: list[Taint] = Field(default_factory=list, description="What in it came from what a run observed, or "
                                                               "asks for an effect its task did not (held ones keep "
                                                               "it quarantined).")
    status_cause: StatusCause | None = None
    status_run: str = Field("", description="The run the status cause names (the contradicting run, the run whose "
                                            "verdict retracted or restored it, the newer recipe's run).")
    tool_versions: list[ToolFingerprint] = Field(default_factory=list, description="The tools it involves as they "
                                                 "were in the latest run that taught it.")
    causal: CausalEstimate | None = Field(None, description="What its per-lesson holdout measured, once it was "
                                                            "withheld from runs.")
    schema_version: int = LESSON_SCHEMA_VERSION

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        """A record of an earlier schema (one without ``schema_version``) is read into this one."""
        if isinstance(data, dict) and "schema_version" not in data:
            from lessonbank.core.migrate import upgrade

            return upgrade(data)
        return data

    @property
    def utility(self) -> float:
        """Posterior mean of the chance that applying the lesson ends well: Beta(1 + helpful, 1 + harmful)."""
        return (1 + self.helpful) / (2 + self.helpful + self.harmful)

    @property
    def is_recipe(self) -> bool:
        return self.recipe is not None

    @classmethod
    def new(
        cls,
        bank: str,
        kind: LessonKind,
        text: str,
        tags: list[str] | None = None,
        run_id: str | None = None,
        origin: LessonOrigin = "distilled",
        steps: list[int] | None = None,
        recipe: Recipe | None = None,
        fix: FixPayload | None = None,
        shape: ShapePayload | None = None,
        failure: FailurePayload | None = None,
    ) -> Lesson:
        """A fresh lesson of this schema with its deterministic id and evidence 1 (``text``: rendered from its
        payload, when it has one)."""
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
            provenance=[Provenance(run_id=run_id, steps=sorted(set(steps or [])))] if run_id else [],
            origin=origin,
            recipe=recipe,
            fix=fix,
            shape=shape,
            failure=failure,
            schema_version=LESSON_SCHEMA_VERSION,
        )

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, data: str | bytes) -> Lesson:
        return cls.model_validate_json(data)


class ToolStats(BaseModel):
    """Calls of one tool in one run (or summed over runs)."""

    calls: int = 0
    errors: int = 0
    seconds: list[float] = Field(default_factory=list, description="Duration of the steps that called it.")
    error_messages: list[str] = Field(default_factory=list, description="Normalised, capped, at most a few.")


class RunSummary(BaseModel):
    """What the report needs of one finished run, kept per bank after the run's steps expire."""

    v: int = 1
    run_id: str
    bank: str
    task: str = ""
    agent: str = ""
    arm: Arm = "lessons"
    outcome: RunOutcome = "unknown"
    verdict: Verdict = "unknown"
    verdict_source: VerdictSource = "none"
    started_at: float = 0.0
    ended_at: float = 0.0
    wall_s: float = 0.0
    steps: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    given: list[str] = Field(default_factory=list, description="Ids of the lessons the run was handed.")
    applied: list[str] = Field(default_factory=list, description="Ids of the given lessons the run applied.")
    altered: list[str] = Field(default_factory=list, description="Ids of the applied lessons its failure does not "
                                                                 "blame (the run altered or did not follow them).")
    drawn: list[str] = Field(default_factory=list, description="Ids of the lessons in its per-lesson holdout draw: "
                                                               "given, or eligible and withheld.")
    withheld: list[str] = Field(default_factory=list, description="Ids of the drawn lessons withheld from it.")
    tools: dict[str, ToolStats] = Field(default_factory=dict)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, data: str | bytes) -> RunSummary:
        return cls.model_validate_json(data)
