"""Lessons a user hands in (``lessons add``, ``lessons import``): checked like distilled ones before any
run sees them.

Users' lessons are handed to runs without waiting for evidence, so each one is

- given its id here, from its bank and text (``lesson_id``; a recipe's from its code fingerprint,
  ``recipe_id``): an id in the input is never used, so no input can name another bank's lesson;
- capped: text at most ``MAX_TEXT_CHARS`` on one line without control characters, at most
  ``MAX_TAGS`` tags, a recipe's code as the distiller caps it, counts and step numbers within 0 to
  ``MAX_COUNT`` (the store keeps larger ones as floats, which no lesson reads back), times not ahead;
- screened by the quality gate's context-free rules and the secret check (``gate.reason_to_drop``):
  a lesson that breaks one is refused with the rule's name. A recipe's text is made from its task
  ("Working code for a task like: ..."), so only the secret check applies to it; its code must parse,
  and no field of it may carry a secret;
- quarantined when it (or a recipe's code, task or title) carries a URL, an e-mail address or an
  instruction to send data somewhere (``quarantine.reason``), or holds what a run's taint held
  (``quarantine.held_reason``): it waits for ``lessons release``.

Import files are JSONL, UTF-8 (a byte-order mark at the start is accepted): full lessons as
``lessons export`` writes them, or plain ``{"kind": ..., "text": ...}`` lines. NaN and Infinity are
refused; a malformed line fails the whole import, naming the line.
"""

from __future__ import annotations

import ast
import codecs
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from lessonbank.cli.context import fail
from lessonbank.cli.provenance import clean
from lessonbank.core.models import Lesson, LessonOrigin, Provenance, Recipe, lesson_id, recipe_id
from lessonbank.core.redact import Redactor
from lessonbank.learn import gate, quarantine
from lessonbank.learn.recipes import MAX_CODE_CHARS, MAX_TASK_CHARS

MAX_TEXT_CHARS = 1200
MAX_TAGS = 8
MAX_TAG_CHARS = 40
MAX_REASON_CHARS = 500
MAX_SOURCES = 200
MAX_COUNT = 10**9
COUNT_FIELDS = ("given", "applied", "helpful", "harmful", "failed_runs", "provenance_dropped")
NULLABLE = frozenset({"status_changed_at", "superseded_by", "recipe"})
# Statuses an import keeps from its file: the lesson stays out of runs, as it was when exported.
HIDDEN_STATUSES = frozenset({"forgotten", "retired", "superseded"})
# The quality gate's context-free rules, said for the user who handed the lesson in.
GATE_REASONS = {
    "secret": "it looks like it carries a secret",
    "nothing_happened": "it says that nothing went wrong",
    "first_person_plan": "it is a plan or a story in the first person",
    "refers_to_transcript": "it points into a transcript or tells a run's story ('step 3', 'the approach was to')",
    "contentless": "it is too short or too generic to say anything",
    "vague": "it points at a value without saying which ('the correct date format')",
    "describes_tool": "it only says what a tool is for (its docstring does)",
    "agent_setup": "it asks to change the agent itself (its tools or settings)",
}
SECRET = f"secret: {GATE_REASONS['secret']}"
_FINGERPRINT = re.compile(r"[0-9a-f]{8,64}")
_OTHER_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"), (codecs.BOM_UTF16_LE, "UTF-16"),
               (codecs.BOM_UTF16_BE, "UTF-16"))


def one_line(text: str) -> str:
    """``text`` on one line: control characters and runs of spaces become one space."""
    return " ".join(clean(text).split())


@dataclass
class Checked:
    """A lesson ready to be written (``lesson``), or why it was refused (``refused``)."""

    lesson: Lesson | None = None
    refused: str = ""
    file_id: str = ""

    @property
    def quarantined(self) -> bool:
        return self.lesson is not None and self.lesson.status == "quarantined"


@dataclass
class Intake:
    """Turns lessons a user hands in into lessons of ``bank`` (see the module docstring)."""

    bank: str
    redactor: Redactor = field(default_factory=Redactor)
    origin: LessonOrigin = "imported"
    now: float = field(default_factory=time.time)

    def _gate(self, text: str) -> str:
        reason = gate.reason_to_drop(text, gate.GateContext(redactor=self.redactor), gate.CONTEXT_FREE)
        return f"{reason}: {GATE_REASONS.get(reason, 'refused by the quality gate')}" if reason else ""

    def _recipe(self, recipe: Recipe) -> tuple[Recipe | None, str]:
        code, task = recipe.code.strip(), one_line(recipe.task)[:MAX_TASK_CHARS]
        if not code or len(code) > MAX_CODE_CHARS:
            return None, f"a recipe's code must be 1 to {MAX_CODE_CHARS} characters"
        if not _parses(code, recipe.language):
            return None, f"the recipe's code is not valid {'Python' if recipe.language == 'python' else 'JSON'}"
        fields = [code, task, recipe.title, *recipe.params, *recipe.checks]
        if any(self.redactor.has_secret(value) for value in fields):
            return None, SECRET
        fingerprint = recipe.fingerprint if _FINGERPRINT.fullmatch(recipe.fingerprint) else ""
        return recipe.model_copy(update={
            "code": code, "task": task, "title": one_line(recipe.title)[:MAX_TASK_CHARS], "fingerprint": fingerprint,
            "params": [one_line(p)[:MAX_TAG_CHARS] for p in recipe.params][:MAX_TAGS],
            "checks": [one_line(c)[:MAX_TAG_CHARS] for c in recipe.checks][:MAX_TAGS],
        }), ""

    def check(self, lesson: Lesson, file_id: str = "") -> Checked:
        """``lesson`` made a lesson of this bank (id derived, capped, screened, maybe quarantined)."""
        text = one_line(lesson.text)
        if not text:
            return Checked(refused="its text is empty", file_id=file_id)
        if len(text) > MAX_TEXT_CHARS:
            return Checked(refused=f"its text is {len(text)} characters long (at most {MAX_TEXT_CHARS})",
                           file_id=file_id)
        recipe = None
        if lesson.recipe is not None:
            recipe, refused = self._recipe(lesson.recipe)
            refused = refused or (SECRET if self.redactor.has_secret(text) else "")
        else:
            refused = self._gate(text)
        tags = [tag for tag in dict.fromkeys(one_line(t)[:MAX_TAG_CHARS] for t in lesson.tags) if tag][:MAX_TAGS]
        if not refused and any(self.redactor.has_secret(tag) for tag in tags):
            refused = f"{SECRET} (in a tag)"
        if refused:
            return Checked(refused=refused, file_id=file_id)
        by_code = recipe is not None and recipe.fingerprint
        new_id = recipe_id(self.bank, recipe.fingerprint) if recipe and by_code else lesson_id(self.bank, text)
        update: dict[str, Any] = {
            "id": new_id, "bank": self.bank, "text": text, "tags": tags, "recipe": recipe, "origin": self.origin,
            "evidence": _count(lesson.evidence, 1), "first_seen": min(max(lesson.first_seen, 0.0), self.now),
            "last_seen": min(max(lesson.last_seen, lesson.first_seen, 0.0), self.now),
            "source_run_ids": lesson.source_run_ids[-MAX_SOURCES:], "provenance": _provenance(lesson),
            "task": "",  # an observed fix's own task is read only for lessons of origin "observed", never imported
            "fix": None, "shape": None,  # nor its payload: an imported lesson is its text
            **{name: _count(getattr(lesson, name)) for name in COUNT_FIELDS},
        }
        update.update(self._status(lesson, text, recipe))
        return Checked(lesson=lesson.model_copy(update=update), file_id=file_id)

    def _status(self, lesson: Lesson, text: str, recipe: Recipe | None) -> dict[str, Any]:
        if lesson.status in HIDDEN_STATUSES:
            return {"status": lesson.status, "status_reason": one_line(lesson.status_reason)[:MAX_REASON_CHARS],
                    "status_changed_at": min(lesson.status_changed_at or self.now, self.now),
                    "status_cause": lesson.status_cause, "status_run": ""}
        extra = f"{recipe.code}\n{recipe.task}\n{recipe.title}" if recipe is not None else ""
        reason = quarantine.reason(text) or quarantine.reason(extra) or quarantine.held_reason(lesson)
        if not reason and lesson.status == "quarantined":  # nobody vouched for it yet
            reason = one_line(lesson.status_reason)[:MAX_REASON_CHARS] or "quarantined when it was exported"
        if reason:
            return {"status": "quarantined", "status_reason": reason, "status_changed_at": self.now,
                    "superseded_by": None, "status_cause": "quarantined", "status_run": ""}
        return {"status": "active", "status_reason": "", "status_changed_at": None, "superseded_by": None,
                "status_cause": None, "status_run": ""}


def _count(value: int, floor: int = 0) -> int:
    return min(max(value, floor), MAX_COUNT)


def _provenance(lesson: Lesson) -> list[Provenance]:
    """The lesson's last ``MAX_SOURCES`` provenance entries, without step numbers out of 0..MAX_COUNT."""
    return [ref.model_copy(update={"steps": [step for step in ref.steps if 0 <= step <= MAX_COUNT]})
            for ref in lesson.provenance[-MAX_SOURCES:]]


def _parses(code: str, language: str) -> bool:
    if language == "tool_calls":
        try:
            calls = json.loads(code)
        except (ValueError, RecursionError):
            return False
        return isinstance(calls, list) and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls)
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


# -- reading an import file -------------------------------------------------------------------------


def decode(data: bytes, name: str) -> str:
    """The UTF-8 text of an import file (a UTF-8 byte-order mark at the start is dropped); a one-line error
    for any other encoding."""
    for bom, encoding in _OTHER_BOMS:
        if data.startswith(bom):
            raise fail(f"{name} is {encoding} (it starts with a byte-order mark); lessons files are UTF-8: "
                       f"re-encode it, e.g. iconv -f {encoding} -t UTF-8")
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise fail(f"{name} is not UTF-8 text: byte 0x{data[e.start]:02x} on line {line} cannot be decoded; "
                   "lessons files are UTF-8") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number lessons accept")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large")
    return value


def parse_line(raw: str, number: int, bank: str) -> tuple[Lesson, str]:
    """(lesson, the id the line gave) from one JSONL line: a full lesson or ``{"kind", "text", ...}``;
    its bank and id are replaced later. One-line error naming the line."""
    try:
        data = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except ValueError as e:
        raise fail(f"line {number} is not a lesson: not JSON ({e})") from None
    except RecursionError:
        raise fail(f"line {number} is not a lesson: its JSON is nested too deeply") from None
    if not isinstance(data, dict):
        raise fail(f"line {number} is not a lesson: expected a JSON object with at least kind and text")
    file_id = str(data["id"]) if isinstance(data.get("id"), str) else ""
    data = {name: value for name, value in data.items() if value is not None or name in NULLABLE}  # null: default
    try:
        lesson = Lesson.model_validate({**data, "id": file_id, "bank": bank})
    except ValidationError as e:
        error = e.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "line"
        raise fail(f"line {number} is not a lesson: {where}: {error['msg']}") from None
    return lesson, file_id


def read_lessons(text: str, intake: Intake) -> list[tuple[int, Checked]]:
    """(line number, checked lesson) for every non-blank line; raises on the first malformed line, so
    nothing is written half-way."""
    checked: list[tuple[int, Checked]] = []
    for number, raw in enumerate(text.split("\n"), 1):
        if not raw.strip():
            continue
        lesson, file_id = parse_line(raw, number, intake.bank)
        checked.append((number, intake.check(lesson, file_id)))
    return checked


def link_superseded(lessons: list[Checked]) -> None:
    """A superseded lesson keeps pointing at its successor when the successor comes in the same file
    (under its new id); otherwise its pointer is dropped."""
    new_ids = {item.file_id: item.lesson.id for item in lessons if item.lesson is not None and item.file_id}
    for item in lessons:
        if item.lesson is not None and item.lesson.superseded_by is not None:
            item.lesson = item.lesson.model_copy(update={"superseded_by": new_ids.get(item.lesson.superseded_by)})
