"""The report as one JSON-ready document, built from a bank's run summaries and lessons (no I/O).

``arms`` compares the runs handed lessons with the control runs held out without them; a bank without
control runs can only compare its early and late runs (``early_late``: first and last thirds of the
lessons-arm runs), which says nothing about the lessons alone. ``series`` holds the rolling values the
plots draw, so every plot can be redrawn from ``report.json``. ``causal`` measures each lesson by its own holdout
(``lessonbank.report.causal``).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, get_args

from lessonbank.core.models import LESSON_KINDS, Lesson, LessonStatus, RunSummary
from lessonbank.core.summary import tool_table
from lessonbank.learn import render, stats, trust
from lessonbank.report.causal import causal_part

REPORT_VERSION = 1
DEFAULT_WINDOW = 10
SERIES_POINTS = 500
TIMELINE_POINTS = 60
LESSON_TEXT_CHARS = 300
RECIPE_LINES_SHOWN = 12
SOURCE_RUNS_SHOWN = 5
STATUSES: tuple[str, ...] = get_args(LessonStatus)

NO_CONTROL = (
    "No control runs: without runs held out from the lessons this report can only compare early and late "
    "runs (the first and last thirds of the runs given lessons). Tasks, models and prompts change over time "
    "too, so a difference does not show that the lessons caused it; hold out a share of runs as a control "
    "(remember(..., holdout=0.2)) to measure that."
)
WITH_CONTROL = "Runs given lessons against control runs held out without them (differences: lessons minus control)."

# metric name -> value of one run; the means the report compares.
METRICS: dict[str, Callable[[RunSummary], float]] = {
    "mean_steps": lambda r: r.steps,
    "mean_tokens": lambda r: r.input_tokens + r.output_tokens,
    "mean_input_tokens": lambda r: r.input_tokens,
    "mean_output_tokens": lambda r: r.output_tokens,
    "mean_wall_s": lambda r: r.wall_s,
    "errors_per_run": lambda r: r.errors,
    "lessons_given_per_run": lambda r: len(r.given),
    "lessons_applied_per_run": lambda r: len(r.applied),
}


def human_time(ts: float | None) -> str:
    """``2024-05-01 12:03:04 UTC`` for a unix time; ``-`` for none."""
    if not ts:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _verdicts(runs: Sequence[RunSummary]) -> tuple[int, int]:
    """(successes, runs with a known verdict)."""
    known = [r for r in runs if r.verdict != "unknown"]
    return sum(1 for r in known if r.verdict == "success"), len(known)


def arm_stats(runs: Sequence[RunSummary]) -> dict[str, Any]:
    """Counts, success rate (Wilson interval) and means (Student's t intervals) of one group of runs."""
    successes, known = _verdicts(runs)
    rate = stats.wilson(successes, known)
    data: dict[str, Any] = {
        "runs": len(runs),
        "with_verdict": known,
        "unknown_verdict": len(runs) - known,
        "successes": successes,
        "success_rate": rate.estimate,
        "success_rate_interval": [rate.low, rate.high],
    }
    intervals: dict[str, list[float | None]] = {}
    for name, value in METRICS.items():
        estimate = stats.mean([value(r) for r in runs])
        data[name] = estimate.estimate
        intervals[name] = [estimate.low, estimate.high]
    data["intervals"] = intervals
    return data


def differences(a: Sequence[RunSummary], b: Sequence[RunSummary]) -> dict[str, Any]:
    """``a`` minus ``b``: success rate (Newcombe) and means (Welch), plus tokens saved per run (b minus a)."""
    result: dict[str, Any] = {"success_rate": stats.newcombe(*_verdicts(a), *_verdicts(b)).to_dict()}
    for name, value in METRICS.items():
        result[name] = stats.mean_difference([value(r) for r in a], [value(r) for r in b]).to_dict()
    tokens = METRICS["mean_tokens"]
    saved = stats.mean_difference([tokens(r) for r in a], [tokens(r) for r in b]).negated()
    result["tokens_saved_per_run"] = saved.to_dict()
    return result


def compare(summaries: Sequence[RunSummary]) -> dict[str, Any]:
    """The ``arms`` part, and ``early_late`` when there is no control arm."""
    lessons = [s for s in summaries if s.arm == "lessons"]
    control = [s for s in summaries if s.arm == "control"]
    part: dict[str, Any] = {"arms": {"lessons": arm_stats(lessons), "control": arm_stats(control)}}
    if control:
        part.update(comparison="arms", note=WITH_CONTROL, difference=differences(lessons, control))
        return part
    part.update(comparison="early_late", note=NO_CONTROL, difference=None)
    ordered = sorted(lessons, key=lambda s: s.started_at)
    third = len(ordered) // 3
    early, late = (ordered[:third], ordered[-third:]) if third else ([], [])
    part["early_late"] = {
        "early": arm_stats(early),
        "late": arm_stats(late),
        "difference": differences(late, early) if third else None,
        "note": "late minus early" if third else (
            f"{len(ordered)} run{'' if len(ordered) == 1 else 's'} given lessons so far: the thirds stay empty "
            "until there are 3."),
    }
    return part


def rolling(runs: Sequence[RunSummary], window: int) -> list[dict[str, Any]]:
    """Per run (oldest first): the success rate and mean tokens of the last ``window`` runs, thinned."""
    ordered = sorted(runs, key=lambda s: s.started_at)
    points: list[dict[str, Any]] = []
    for i, run in enumerate(ordered):
        recent = ordered[max(0, i + 1 - window): i + 1]
        successes, known = _verdicts(recent)
        points.append({
            "t": run.started_at,
            "success_rate": successes / known if known else None,
            "tokens": sum(r.input_tokens + r.output_tokens for r in recent) / len(recent),
        })
    stride = max(1, -(-len(points) // SERIES_POINTS))
    thinned = points[::stride]
    if points and thinned[-1] is not points[-1]:
        thinned.append(points[-1])
    return thinned


def _status_at(lesson: Lesson, t: float) -> str | None:
    """A lesson's status at time ``t`` (before its last status change it counts as active)."""
    if lesson.first_seen > t:
        return None
    if lesson.status != "active" and lesson.status_changed_at is not None and t < lesson.status_changed_at:
        return "active"
    return lesson.status


def timeline(lessons: Sequence[Lesson], start: float, end: float) -> list[dict[str, Any]]:
    """Lessons in the bank at evenly spaced times from ``start`` to ``end``: active ones by kind, all by status."""
    if not lessons:
        return []
    count = TIMELINE_POINTS if end > start else 1
    points = []
    for i in range(count):
        t = start + (end - start) * i / max(count - 1, 1)
        by_status: Counter[str] = Counter()
        by_kind: Counter[str] = Counter()
        for lesson in lessons:
            status = _status_at(lesson, t)
            if status is None:
                continue
            by_status[status] += 1
            if status == "active":
                by_kind[lesson.kind] += 1
        points.append({
            "t": t,
            "active_by_kind": {kind: by_kind[kind] for kind in LESSON_KINDS},
            "by_status": {status: by_status[status] for status in STATUSES},
        })
    return points


def lesson_row(lesson: Lesson) -> dict[str, Any]:
    """A lesson in the report (one whose stored payload could not be read says so, and why, under ``unreadable``)."""
    text = " ".join(render.shown(lesson).split())
    unreadable = render.readable(lesson)[1]
    row = {
        "id": lesson.id,
        "kind": lesson.kind,
        "status": lesson.status,
        "origin": lesson.origin,
        "tags": lesson.tags,
        "text": text if len(text) <= LESSON_TEXT_CHARS else text[: LESSON_TEXT_CHARS - 1] + "…",
        "given": lesson.given,
        "applied": lesson.applied,
        "helpful": lesson.helpful,
        "harmful": lesson.harmful,
        "utility": round(lesson.utility, 4),
        "evidence": lesson.evidence,
        "failed_runs": lesson.failed_runs,
        "source_runs": len(lesson.source_run_ids) + lesson.provenance_dropped,
        "source_run_ids": lesson.source_run_ids[:SOURCE_RUNS_SHOWN],
        "recipe": lesson.recipe is not None,
        "code": _code_shown(lesson),
        "first_seen": human_time(lesson.first_seen),
        "status_changed_at": human_time(lesson.status_changed_at),
        "given_to_runs": trust.eligible(lesson),
    }
    return row | ({"unreadable": unreadable} if unreadable else {})


def held_row(lesson: Lesson) -> dict[str, Any]:
    """A lesson or recipe held for a user: what it is, why, and what in it came from which observation."""
    row = lesson_row(lesson)
    return {"id": lesson.id, "kind": lesson.kind, "recipe": row["recipe"], "text": row["text"], "code": row["code"],
            "reason": lesson.status_reason,
            "taint": [mark.model_dump(mode="json") for mark in lesson.taint if mark.held]}


def _code_shown(lesson: Lesson) -> str | None:
    """The first lines of a recipe's code (what a run is handed), or None for a lesson without one."""
    if lesson.recipe is None:
        return None
    lines = lesson.recipe.code.splitlines()
    shown = "\n".join(line if len(line) <= LESSON_TEXT_CHARS else line[: LESSON_TEXT_CHARS - 1] + "…"
                      for line in lines[:RECIPE_LINES_SHOWN])
    more = len(lines) - RECIPE_LINES_SHOWN
    return shown + (f"\n… ({more} more line{'' if more == 1 else 's'})" if more > 0 else "")


def _lesson_order(lesson: Lesson) -> tuple[bool, int, float, str]:
    return (lesson.status != "active", -lesson.given, -lesson.utility, lesson.id)


def _start(summaries: Sequence[RunSummary], lessons: Sequence[Lesson], since: float | None) -> float:
    """Where the lessons' timeline starts: ``since``, else the first run or lesson."""
    if since is not None:
        return since
    return min([s.started_at for s in summaries] + [lesson.first_seen for lesson in lessons], default=0.0)


def build_report(
    bank: str,
    summaries: Sequence[RunSummary],
    lessons: Sequence[Lesson],
    since: float | None = None,
    now: float | None = None,
    window: int = DEFAULT_WINDOW,
) -> dict[str, Any]:
    """The whole report of one bank as JSON-ready data."""
    now = time.time() if now is None else now
    window = max(1, window)
    document: dict[str, Any] = {
        "v": REPORT_VERSION,
        "bank": bank,
        "generated_at": human_time(now),
        "since": human_time(since) if since else None,
        "runs": len(summaries),
        "window": window,
    }
    document.update(compare(summaries))
    document["lesson_counts"] = {
        "total": len(lessons),
        "active_by_kind": dict(Counter(lesson.kind for lesson in lessons if lesson.status == "active")),
        "by_status": {status: sum(1 for lesson in lessons if lesson.status == status) for status in STATUSES},
    }
    document["lessons"] = [lesson_row(lesson) for lesson in sorted(lessons, key=_lesson_order)]
    document["unreadable"] = [{"id": row["id"], "why": row["unreadable"]} for row in document["lessons"]
                              if "unreadable" in row]
    document["held"] = [held_row(lesson) for lesson in sorted(lessons, key=_lesson_order)
                        if lesson.status == "quarantined"]
    document["tools"] = [row.to_dict() for row in tool_table(summaries)]
    document["causal"] = causal_part(summaries, lessons, now)
    document["series"] = {
        "runs": {arm: rolling([s for s in summaries if s.arm == arm], window) for arm in ("lessons", "control")},
        "lessons": timeline(lessons, _start(summaries, lessons, since), now),
    }
    return document
