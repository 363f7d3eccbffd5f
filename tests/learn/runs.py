"""Run views for the learn package's unit tests, built from step records in the test (no services)."""

from __future__ import annotations

from collections.abc import Sequence

from lessonbank.core.models import StepRecord
from lessonbank.learn.adapters import read_run
from lessonbank.learn.view import RunView


def view(steps: Sequence[StepRecord], task: str | None = None, tools: Sequence[str] | None = None,
         outcome: str | None = None) -> RunView:
    """The view of a run of ``steps`` (``task``: else the records'; ``tools``: the agent's, when known)."""
    return read_run(steps, task, outcome, tools)
