"""What a lesson carries beside its text: where it comes from, what of it a run observed, and its structured
payloads (a recipe, an observed fix, a tool's result shape, a failing call), the tools it was learnt on and what
its holdout measured. ``models`` re-exports every one of them with the ``Lesson`` that holds them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

# What a lesson's per-lesson holdout says of it (``lessonbank.learn.causal``).
CausalVerdict = Literal["helps", "hurts", "no effect yet"]


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


class SaidPayload(BaseModel):
    """What the scalar fields beside a tool's records held after one call of it (``lessonbank.learn.said``): the
    call with its own settings and the task's values masked, each field as ``true``, ``false``, ``null`` or its
    type's name, and how many records it got."""

    call: str = Field(description="The call: ``search(query=..., limit=10)``.")
    fields: dict[str, str] = Field(default_factory=dict, description="``{'truncated': 'true', 'next': 'null'}``.")
    records: int | None = Field(None, description="How many records the result held (None: not known).")


class ShapePayload(BaseModel):
    """What a tool returned, without any value: its structure and types, and where its records are.

    ``structure`` is a JSON tree, in order: a dict is ``{"fields": [[key, tree], ...], "more": bool}`` (``more``:
    it had more keys than shown), a list is ``{"items": tree}`` (the tree of its first element), a leaf is a
    type name (``str``, ``int``, ``float``, ``bool``, ``NoneType``), ``...`` (deeper than shown), or a string
    described (``core.specimen``): ``{"type": "str", "number": true}`` (a number written as text), ``{"type":
    "str", "values": [words]}`` (a few words the records share), ``{"type": "str", "text": {form}}`` (a text's
    form: lines, separator, header, byte-order mark, decimal commas; or that it holds HTML or JSON), ``{"type":
    "str", "like": ["+99:99"]}`` (the written forms its values share, digits and letters masked), or a flag
    with the values it held: ``{"type": "bool", "true": 2, "false": 1}`` (how many results held each, some of
    each for a field of records whose records held both)."""

    tool: str
    structure: Any
    records: list[str] | None = Field(None, description="The keys from the result to its list of records ([]: the "
                                                        "result is one; None: it holds none).")
    call: str = Field("", description="The line that got the result, passing only values of the task.")
    said: list[SaidPayload] = Field(default_factory=list, description="What the fields beside the records held, "
                                                                      "call by call (``learn.said``).")


class FailurePayload(BaseModel):
    """A call of a tool that raised, as a run observed it (``lessonbank.learn.failures``): the failing line with
    each value the call was passed replaced by its role, how each was written, and the error quoted as data."""

    tool: str
    line: str = Field(description="The failing line, its call's values as roles: ``r = fetch_rates(base=<base>)``.")
    forms: dict[str, str] = Field(default_factory=dict, description="How each value was written, by role: "
                                                                    "``{'day': '9999-99-99'}``.")
    error_type: str = Field(description="The exception's name: ``ValueError``.")
    error: str = Field("", description="Its message as observed: one line, capped, the run's values as roles.")
    unset: str = Field("", description="A name the code a code tool ran read without setting it, which its error "
                                       "names (``tickets``): that code sees no result of another call.")


class ToolFingerprint(BaseModel):
    """A tool as a lesson was learnt on it (``lessonbank.learn.fingerprint``): its signature as it reads, a hash of
    its descriptions and, where a run kept one, a hash of the structure of its result."""

    name: str
    signature: str = Field(description="``get_user(user_id: string, fields?: string) -> object``.")
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
