"""A finished run's summary for ``lessonbank report``: its hash and records, its tool use from its view."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, get_args

from lessonbank.core.models import Arm, RunOutcome, RunSummary, Verdict, VerdictSource
from lessonbank.core.runs import Run
from lessonbank.learn import usage
from lessonbank.learn.adapters import read_run


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _choice(value: Any, allowed: Any, default: str) -> Any:
    return value if value in get_args(allowed) else default


def json_names(value: str | None) -> list[str] | None:
    """A JSON list of strings from a run hash field (None when absent or malformed: not known)."""
    try:
        loaded = json.loads(value) if value else None
    except ValueError:
        return None
    return [str(item) for item in loaded] if isinstance(loaded, list) else None


def _times(run: Run) -> tuple[float, float]:
    starts = [s.started_at for s in run.steps if s.started_at is not None]
    ends = [t for s in run.steps for t in (s.ended_at, s.recorded_at) if t is not None]
    candidates = [t for t in (_float(run.meta.get("started_at")), min(starts, default=None)) if t is not None]
    started = min(candidates, default=0.0)
    ended = _float(run.meta.get("closed_at")) or max(ends, default=started)
    return started, max(ended, started)


def summarize_run(
    run: Run, applied: Sequence[str] = (), verdict: Verdict | None = None, verdict_source: VerdictSource | None = None,
    altered: Sequence[str] = (),
) -> RunSummary:
    """The summary of one run from its hash and step records; ``applied`` and ``altered`` come from the credit."""
    meta = run.meta
    view = read_run(run.steps, run.task, run.outcome, json_names(meta.get("tools")), run.run_id)
    actions = view.actions
    usage_ = [s.token_usage for s in run.steps if s.token_usage is not None]
    started, ended = _times(run)
    return RunSummary(
        run_id=run.run_id,
        bank=meta.get("bank") or next((s.bank for s in run.steps), ""),
        task=run.task,
        agent=meta.get("agent") or next((s.agent for s in run.steps if s.agent), ""),
        arm=_choice(meta.get("arm"), Arm, "lessons"),
        outcome=_choice(run.outcome, RunOutcome, "unknown"),
        verdict=verdict or _choice(meta.get("verdict"), Verdict, "unknown"),
        verdict_source=verdict_source or _choice(meta.get("verdict_source"), VerdictSource, "none"),
        started_at=started,
        ended_at=ended,
        wall_s=round(ended - started, 6),
        steps=len(actions),
        errors=sum(1 for s in actions if s.failed),
        input_tokens=sum(u.input_tokens for u in usage_),
        output_tokens=sum(u.output_tokens for u in usage_),
        given=json_names(meta.get("given")) or [],
        applied=list(applied),
        altered=sorted(altered),
        drawn=json_names(meta.get("drawn")) or [],
        withheld=json_names(meta.get("withheld")) or [],
        tools=usage.tool_stats(view),
    )
