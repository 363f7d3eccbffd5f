"""Run views for the learn package's unit tests, built from step records in the test (no services)."""

from __future__ import annotations

from collections.abc import Sequence

from lessonbank.core.models import FixPayload, Lesson, ShapePayload, StepRecord
from lessonbank.learn import render, walk
from lessonbank.learn.adapters import read_run
from lessonbank.learn.view import RunView


def view(steps: Sequence[StepRecord], task: str | None = None, tools: Sequence[str] | None = None,
         outcome: str | None = None) -> RunView:
    """The view of a run of ``steps`` (``task``: else the records'; ``tools``: the agent's, when known)."""
    return read_run(steps, task, outcome, tools)


def fix_lesson(fix: FixPayload, task: str = "", bank: str = "b") -> Lesson:
    """An observed fix as the worker keeps it: its text rendered from its payload, with the run's ``task``."""
    lesson = Lesson.new(bank, "fact", render.fix(fix), tags=["fix"], origin="observed", fix=fix)
    return lesson.model_copy(update={"task": task})


def shape_lesson(tool: str, value: object, records: Sequence[str], call: str = "", task: str = "",
                 bank: str = "b") -> Lesson:
    """An observed shape of ``tool``'s result ``value`` (its records under ``records``) as the worker keeps it."""
    shape = ShapePayload(tool=tool, structure=walk.structure(value), records=list(records), call=call)
    lesson = Lesson.new(bank, "fact", render.shape(shape), tags=["shape"], origin="observed", shape=shape)
    return lesson.model_copy(update={"task": task})


def written_observed(bank: str, kind: str, text: str, **fields: object) -> Lesson:
    """An observed lesson written as its text, read into its payload as a lesson stored by schema 1 is (the way
    a store of the previous release gives it)."""
    lesson = Lesson.new(bank, kind, text).model_copy(update={"origin": "observed", **fields})  # type: ignore[arg-type]
    return Lesson.model_validate(lesson.model_dump(exclude={"schema_version"}))
