"""The report document as titled tables of plain strings, shared by the terminal and the HTML page."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lessonbank.report.causal import table_rows as causal_rows

LESSONS_SHOWN = 50
TOOL_ERRORS_SHOWN = 3


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    note: str = ""


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _digits(value: float, digits: int = 2) -> int:
    """Fewer decimals for larger numbers: 1,234 · 462.5 · 2.10."""
    return 0 if abs(value) >= 1000 else 1 if abs(value) >= 100 else digits


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{_digits(value, digits)}f}"


def _signed(value: float | None, percent: bool) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.1f}" if percent else f"{value:+,.{_digits(value)}f}"


def _interval(low: float | None, high: float | None, percent: bool = False, signed: bool = False) -> str:
    if low is None or high is None:
        return ""
    if signed:
        return f" [{_signed(low, percent)}, {_signed(high, percent)}]"
    if percent:
        return f" [{100 * low:.1f}, {100 * high:.1f}]"
    return f" [{_num(low)}, {_num(high)}]"


def _difference(diff: dict[str, Any] | None, name: str, percent: bool = False) -> str:
    if not diff or diff.get(name) is None or diff[name]["estimate"] is None:
        return "-"
    d = diff[name]
    unit = " pts" if percent else ""
    return f"{_signed(d['estimate'], percent)}{unit}{_interval(d['low'], d['high'], percent, signed=True)}"


def _rate_interval(group: dict[str, Any]) -> str:
    low, high = group["success_rate_interval"]
    return _interval(low, high, percent=True)


# (label, metric key) of the mean rows of the comparison table.
MEAN_ROWS: tuple[tuple[str, str], ...] = (
    ("mean steps", "mean_steps"),
    ("mean tokens (in + out)", "mean_tokens"),
    ("mean input tokens", "mean_input_tokens"),
    ("mean output tokens", "mean_output_tokens"),
    ("mean wall time (s)", "mean_wall_s"),
    ("errors per run", "errors_per_run"),
    ("lessons given per run", "lessons_given_per_run"),
    ("lessons applied per run", "lessons_applied_per_run"),
)


def comparison_table(document: dict[str, Any]) -> Table:
    """Success rate and means side by side, with the difference and its 95 % interval."""
    note = document["note"]
    if document["comparison"] == "arms":
        groups = [document["arms"]["lessons"], document["arms"]["control"]]
        headers = ["", "lessons", "control", "lessons − control [95 % CI]"]
        diff = document["difference"]
        title = "Runs by arm"
    else:
        early_late = document["early_late"]
        groups = [document["arms"]["lessons"], early_late["early"], early_late["late"]]
        headers = ["", "all runs given lessons", "early third", "late third", "late − early [95 % CI]"]
        diff = early_late["difference"]
        title = "Early and late runs given lessons (no control arm)"
        if diff is None:  # too few runs for thirds: say so, next to what the runs so far did
            note = f"{early_late['note']} {note}"
    rows = [
        ["runs", *[str(g["runs"]) for g in groups], ""],
        ["runs with a verdict (unknown)", *[f"{g['with_verdict']} ({g['unknown_verdict']})" for g in groups], ""],
        ["success rate [95 % CI]",
         *[_pct(g["success_rate"]) + _rate_interval(g) for g in groups],
         _difference(diff, "success_rate", percent=True)],
    ]
    for label, key in MEAN_ROWS:
        rows.append([label, *[_num(g[key]) for g in groups], _difference(diff, key)])
    rows.append(["tokens saved per run", *[""] * len(groups), _difference(diff, "tokens_saved_per_run")])
    return Table(title, headers, rows, note)


def _code_mark(row: dict[str, Any]) -> str:
    """Lessons kept from a run's code or output, not written by the distiller: recipes, observed fixes
    and observed shapes."""
    if row["recipe"]:
        return " (recipe)"
    if row.get("origin") != "observed":
        return ""
    return " (shape)" if "shape" in row.get("tags", []) else " (fix)"


def lessons_table(document: dict[str, Any]) -> Table:
    counts = document["lesson_counts"]
    by_status = ", ".join(f"{n} {status}" for status, n in counts["by_status"].items() if n)
    by_kind = ", ".join(f"{n} {kind}" for kind, n in sorted(counts["active_by_kind"].items()))
    note = f"{counts['total']} lessons ({by_status or 'none'}); active by kind: {by_kind or 'none'}."
    lessons = document["lessons"]
    if len(lessons) > LESSONS_SHOWN:
        note += f" The {LESSONS_SHOWN} most given are shown; report.json lists all {len(lessons)}."
    headers = ["id", "kind", "status", "given", "applied", "helpful", "harmful", "utility", "evidence",
               "source runs", "text"]
    rows = [
        [row["id"][:8], row["kind"] + _code_mark(row), row["status"], str(row["given"]),
         str(row["applied"]), str(row["helpful"]), str(row["harmful"]), f"{row['utility']:.2f}",
         _evidence(row), str(row["source_runs"]), _text(row)]
        for row in lessons[:LESSONS_SHOWN]
    ]
    return Table("Lessons", headers, rows, note)


def _text(row: dict[str, Any]) -> str:
    """The lesson's text, and under it the first lines of a recipe's code (what a run is handed)."""
    return f"{row['text']}\n{row['code']}" if row.get("code") else row["text"]


def _evidence(row: dict[str, Any]) -> str:
    """The runs that taught the lesson, and how many of them were judged failures."""
    failed = row.get("failed_runs") or 0
    return f"{row['evidence']} ({failed} failed)" if failed else str(row["evidence"])


def tools_table(tools: list[dict[str, Any]]) -> Table:
    headers = ["tool", "runs", "calls", "errors", "error rate", "p50 step time (s)", "most common errors"]
    rows = [
        [row["name"], str(row["runs"]), str(row["calls"]), str(row["errors"]), _pct(row["error_rate"]),
         _num(row["p50_s"], 3),
         "\n".join(f"{e['count']}× {e['message']}" for e in row["top_errors"][:TOOL_ERRORS_SHOWN])]
        for row in tools
    ]
    note = "" if tools else "No tool calls recorded."
    return Table("Tools", headers, rows, note)


def causal_table(part: dict[str, Any]) -> Table:
    """Each lesson drawn for the per-lesson holdout: runs given it against runs it was withheld from."""
    headers, rows = causal_rows(part)
    return Table("Causal credit per lesson", headers, rows, f"{part['note']} Method: {part['method']}.")


def held_table(document: dict[str, Any]) -> Table:
    """The lessons and recipes held for a user (quarantined), with why and the observation they came from."""
    rows = []
    for row in document.get("held", []):
        marks = [f"{mark['value']} (run {mark['run_id'][:8]}, step {mark['step']}: \"{mark['observed'][:80]}\")"
                 if mark["step"] is not None else mark["value"] for mark in row["taint"]]
        rows.append([row["id"][:8], row["kind"] + (" (recipe)" if row["recipe"] else ""), _text(row),
                     row["reason"] + ("\n" + "\n".join(marks[:3]) if marks else "")])
    note = ("Never given to a run until a user releases them: `lessonbank lessons release --bank B ID` (or forget "
            "them: `lessons forget`).") if rows else "Nothing is held."
    return Table("Held for a user", ["id", "kind", "text", "why"], rows, note)


def report_tables(document: dict[str, Any]) -> list[Table]:
    """The comparison of the arms, the causal credit per lesson (once a lesson was drawn), the lessons, those held
    for a user, the tools."""
    causal = [causal_table(document["causal"])] if document.get("causal", {}).get("lessons") else []
    return [comparison_table(document), *causal, lessons_table(document), held_table(document),
            tools_table(document["tools"])]
