"""The records that cross process boundaries: step records and run summaries (Redis), lessons (Qdrant).

Each has one serializer: ``to_json()`` / ``from_json()`` (pydantic's JSON mode). A lesson kept from what a run
observed holds its content as a structured payload (``fix``, ``shape``, ``recipe``); its ``text`` is rendered
from it (``lessonbank.learn.render``). A lesson stored before payloads existed (schema 1) is read into the
current schema (``lessonbank.core.migrate``).
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

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
# What a lesson's per-lesson holdout says of it (``lessonbank.learn.causal``).
CausalVerdict = Literal["helps", "hurts", "no effect yet"]
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
    """The structure of a tool call's result, no value (``lessonbank.core.specimen``): the first result of
    each tool in an action step that fits, whether or not the step's code printed it."""

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


class Provenance(BaseModel):
    """Where a lesson comes from: one run and the step numbers (record ``seq``) it rests on."""

    run_id: str
    steps: list[int] = Field(default_factory=list)
    vouched: bool | None = Field(None, description="Whether the run's verdict vouched for the lesson when it "
                                                   "taught it (None: lessons written before this was kept).")
    failed: bool | None = Field(None, description="Whether the run counts in the lesson's failed_runs (None: "
                                                  "lessons written before this was kept).")
    witness: bool | None = Field(None, description="Whether the run, not given the lesson, ended well by its own "
                                                   "signals with an answer it computed: one of the two agreeing runs "
                                                   "that make a lesson eligible without a user or a check (None: not "
                                                   "kept, as of lessons written before this was).")
    question: str = Field("", description="A hash of the run's task: witnesses of one question must agree.")
    answer: str = Field("", description="A hash of the run's answer, compared between witnesses of one question.")


TaintKind = Literal["call", "name", "literal", "url", "host", "email", "env", "path"]


class Taint(BaseModel):
    """Something in a lesson that first appeared in what a run observed (tool output, a page, a file, an error)
    rather than in its task or its agent's tools, or an effect the task did not ask for; ``held`` when it keeps
    the lesson from runs until a user releases it."""

    value: str = Field(description="The call, name, literal, URL, e-mail address, variable or path (capped).")
    kind: TaintKind
    run_id: str = ""
    step: int | None = Field(None, description="The record seq of the step whose observation held it first (None: "
                                               "no observation did; a sensitive effect the task did not ask for).")
    observed: str = Field("", description="The observation around it, as the run recorded it (capped).")
    held: bool = False
    reason: str = Field("", description="Why it holds the lesson, in words.")


class Recipe(BaseModel):
    """The working code (or tool-call sequence) of a run whose outcome verified it, extracted without an LLM."""

    language: Literal["python", "tool_calls"] = "python"
    code: str = Field(description="Python code, or a JSON list of {name, arguments} tool calls.")
    task: str = Field("", description="The task the run solved (redacted, capped).")
    title: str = ""
    params: list[str] = Field(default_factory=list, description="Task-specific literals the next run must adapt.")
    checks: list[str] = Field(default_factory=list, description="What it passed, e.g. 'syntax', 'outcome:user'.")
    fingerprint: str = Field("", description="Hash of the normalised code: the same recipe from several runs.")
    tools: list[str] | None = Field(None, description="The tools the code calls (None: not worked out yet, as of "
                                                      "a recipe stored before this was kept).")


class Change(BaseModel):
    """One thing a fix's correction changed: an argument's value (``argument``: its keyword, ``callee#N`` for the
    N-th passed by position), a key (``argument``: what it indexes) or a conversion it added (``argument``: the
    function, ``after``: the call); the value that failed and the value that worked."""

    kind: Literal["argument", "key", "conversion"] = "argument"
    argument: str
    before: str
    after: str


class FixPayload(BaseModel):
    """An observed fix: the line a step failed at, the exception's name, the corrected line, what changed."""

    failed: str
    error: str
    fixed: str = Field(description="The corrected line that worked (or, not tried, the line the error asked for).")
    changed: list[Change] | None = Field(None, description="What the correction changed (None: not worked out yet, "
                                                           "as of a fix read from schema 1).")
    tried: bool = Field(True, description="False for a fix an earlier release wrote from an error alone, which no "
                                          "step ran (none is written now).")


class ShapePayload(BaseModel):
    """What a tool returned, without any value: its structure and types, and where its records are.

    ``structure`` is a JSON tree, in order: a dict is ``{"fields": [[key, tree], ...], "more": bool}`` (``more``:
    it had more keys than shown), a list is ``{"items": tree}`` (the tree of its first element), a leaf is a
    type name (``str``, ``int``, ``float``, ``bool``, ``NoneType``), ``...`` (deeper than shown), or a string
    described (``core.specimen``): ``{"type": "str", "number": true}`` (a number written as text), ``{"type":
    "str", "values": [words]}`` (a few words the records share), ``{"type": "str", "text": {form}}`` (a text's
    form: lines, separator, header, byte-order mark, decimal commas; or that it holds HTML or JSON)."""

    tool: str
    structure: Any
    records: list[str] | None = Field(None, description="The keys from the result to its list of records ([]: the "
                                                        "result is one; None: it holds none).")
    call: str = Field("", description="The line that got the result, passing only values of the task.")


class FailurePayload(BaseModel):
    """A call of a tool that raised, as a run observed it (``lessonbank.learn.failures``): the failing line with
    each value the call was passed replaced by its role, how each was written, and the error quoted as data."""

    tool: str
    line: str = Field(description="The failing line, its call's values as roles: ``w = get_weather(city=<city>)``.")
    forms: dict[str, str] = Field(default_factory=dict, description="How each value was written, by role: "
                                                                    "``{'date': '9999-99-99'}``.")
    error_type: str = Field(description="The exception's name: ``ValueError``.")
    error: str = Field("", description="Its message as observed: one line, capped, the run's values as roles.")


class ToolFingerprint(BaseModel):
    """A tool as a lesson was learnt on it (``lessonbank.learn.fingerprint``): its signature as it reads, a hash of
    its descriptions and, where a run kept one, a hash of the structure of its result."""

    name: str
    signature: str = Field(description="``get_invoice(invoice_id: string, currency?: string) -> object``.")
    doc: str = Field("", description="Hash of the tool's description and its arguments' descriptions.")
    shape: str = Field("", description="Hash of the structure of its result as a run observed it (\"\": none kept).")
    later_shape: str = Field("", description="The structure a later run given the lesson observed instead, that run "
                                             "not ending well with it: the lesson is given with a warning.")


class CausalEstimate(BaseModel):
    """What a lesson did, measured by its per-lesson holdout (``lessonbank.learn.causal``): the runs given it
    against the runs it was eligible for and withheld from, success rate and tokens."""

    given_runs: int = 0
    given_known: int = Field(0, description="Runs given it with a known verdict.")
    given_successes: int = 0
    withheld_runs: int = 0
    withheld_known: int = 0
    withheld_successes: int = 0
    uplift: float | None = Field(None, description="Success rate given minus withheld.")
    low: float | None = None
    high: float | None = None
    tokens_given: float | None = None
    tokens_withheld: float | None = None
    tokens_difference: float | None = Field(None, description="Mean tokens per run, given minus withheld.")
    tokens_low: float | None = None
    tokens_high: float | None = None
    verdict: CausalVerdict = "no effect yet"
    at: float = 0.0


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
