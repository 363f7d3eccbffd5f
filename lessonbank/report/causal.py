"""The report's per-lesson causal credit: each lesson drawn for the per-lesson holdout, its runs given it against
the runs it was withheld from (``lessonbank.learn.causal``), as the document's ``causal`` key, a table, and a
forest plot (the uplift and its interval per lesson).

``report.json``'s ``causal``: ``{"method": str, "note": str, "lessons": [row, ...]}``, a row per lesson any
reported run drew, most helpful first: ``id``, ``text``, ``status``, ``verdict`` (``helps`` | ``hurts`` |
``no effect yet``), ``label`` (the verdict, with the runs it rests on while it says nothing yet), ``given`` and
``withheld`` (``runs``, ``with_verdict``, ``successes``, ``success_rate``, ``mean_tokens``), ``uplift`` (success
rate given minus withheld: ``estimate``, ``low``, ``high``, a 99 % interval) and ``tokens_difference`` (the same
for mean tokens per run).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lessonbank.core.models import CausalEstimate, Lesson, RunSummary
from lessonbank.learn import causal, render

TEXT_CHARS = 120
PLOTTED = 30
NOTE = ("Each lesson a run would get is withheld from it at random (LESSONBANK_LESSON_HOLDOUT): the runs given it "
        "and the runs it was withheld from differ, on average, by that lesson alone. A verdict needs "
        f"{causal.MIN_KNOWN} runs with a verdict on each side and a 99 % interval that excludes zero (the estimate is "
        "looked at again after every run).")


def _side(runs: int, known: int, successes: int, tokens: float | None) -> dict[str, Any]:
    return {"runs": runs, "with_verdict": known, "successes": successes,
            "success_rate": successes / known if known else None, "mean_tokens": tokens}


def _row(lesson_id: str, found: CausalEstimate, lesson: Lesson | None) -> dict[str, Any]:
    text = " ".join(render.shown(lesson).split()) if lesson is not None else "(no longer in the bank)"
    return {
        "id": lesson_id,
        "text": text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…",
        "status": lesson.status if lesson is not None else "purged",
        "verdict": found.verdict,
        "label": causal.label(found),
        "given": _side(found.given_runs, found.given_known, found.given_successes, found.tokens_given),
        "withheld": _side(found.withheld_runs, found.withheld_known, found.withheld_successes, found.tokens_withheld),
        "uplift": {"estimate": found.uplift, "low": found.low, "high": found.high},
        "tokens_difference": {"estimate": found.tokens_difference, "low": found.tokens_low,
                              "high": found.tokens_high},
    }


def causal_part(summaries: Sequence[RunSummary], lessons: Sequence[Lesson], now: float) -> dict[str, Any]:
    """The ``causal`` key of the report (see the module)."""
    by_id = {lesson.id: lesson for lesson in lessons}
    drawn = list(dict.fromkeys(lesson_id for summary in summaries for lesson_id in summary.drawn))
    rows = [_row(lesson_id, causal.estimate(lesson_id, summaries, now), by_id.get(lesson_id)) for lesson_id in drawn]
    rows.sort(key=lambda row: (row["uplift"]["estimate"] is None, -(row["uplift"]["estimate"] or 0.0), row["id"]))
    return {"method": causal.METHOD, "note": NOTE, "lessons": rows}


def _points(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}"


def _rate(side: dict[str, Any]) -> str:
    rate = side["success_rate"]
    return f"{'-' if rate is None else f'{100 * rate:.1f} %'} ({side['successes']}/{side['with_verdict']})"


def table_rows(part: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the causal table."""
    headers = ["id", "verdict", "given: success", "withheld: success", "uplift pts [99 % CI]",
               "tokens given − withheld", "text"]
    rows = []
    for row in part["lessons"]:
        uplift, tokens = row["uplift"], row["tokens_difference"]
        interval = f" [{_points(uplift['low'])}, {_points(uplift['high'])}]" if uplift["low"] is not None else ""
        rows.append([row["id"][:8], row["label"], _rate(row["given"]), _rate(row["withheld"]),
                     _points(uplift["estimate"]) + interval,
                     "-" if tokens["estimate"] is None else f"{tokens['estimate']:+,.0f}", row["text"]])
    return headers, rows


def forest_png(part: dict[str, Any], figure: Any) -> bool:
    """Draw the forest plot of ``part`` on ``figure`` (matplotlib); False when no lesson has an interval."""
    rows = [row for row in part["lessons"] if row["uplift"]["low"] is not None][:PLOTTED]
    if not rows:
        return False
    rows.reverse()  # most helpful at the top
    figure.set_size_inches(figure.get_size_inches()[0], max(2.0, 0.35 * len(rows) + 1.2))
    axes = figure.add_subplot()
    colours = {"helps": "#2ca02c", "hurts": "#d62728"}
    for y, row in enumerate(rows):
        uplift = row["uplift"]
        colour = colours.get(row["verdict"], "#7f7f7f")
        axes.plot([100 * uplift["low"], 100 * uplift["high"]], [y, y], color=colour, linewidth=2)
        axes.plot([100 * uplift["estimate"]], [y], marker="o", color=colour)
    axes.axvline(0, color="black", linewidth=0.8)
    axes.set_yticks(range(len(rows)), [f"{row['id'][:8]} {row['label']}" for row in rows], fontsize=8)
    axes.set_xlabel("success rate given minus withheld (points, 99 % interval)")
    axes.set_title("Per-lesson causal credit: uplift per lesson", fontsize=10)
    axes.grid(True, axis="x", alpha=0.3)
    return True
