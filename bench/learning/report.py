"""Figures of a learning-benchmark run: per arm and run index, per task, the banks' lessons; table, JSON, plot.

Every figure of an arm with memory is printed next to the no-memory baseline of the same run
(``none``). A later run (run index 2 and up) where memory does not beat the baseline's success rate
is marked MISSED, per run index and per task: equal is not better.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

BASELINE = "none"


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 1) if values else float("nan")


def aggregate(runs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts and means of a group of runs: success, steps, tokens, wall time."""
    group = list(runs)
    ok = sum(1 for r in group if r["correct"])
    return {
        "runs": len(group), "successes": ok, "success_rate": round(ok / len(group), 3) if group else None,
        "mean_steps": _mean([r["steps"] for r in group]),
        "mean_input_tokens": _mean([r["input_tokens"] for r in group]),
        "mean_output_tokens": _mean([r["output_tokens"] for r in group]),
        "mean_seconds": _mean([r["seconds"] for r in group]),
    }


def summarize(runs: list[dict[str, Any]], arms: list[str], tasks: list[str], runs_per_task: int) -> dict[str, Any]:
    """The figures: by arm and run index, by arm and task, by arm overall, and the MISSED verdicts."""
    def pick(**match: Any) -> list[dict[str, Any]]:
        return [r for r in runs if all(r[k] == v for k, v in match.items())]

    by_index = {arm: {str(i + 1): aggregate(pick(arm=arm, run_index=i)) for i in range(runs_per_task)} for arm in arms}
    by_task = {arm: {task: aggregate(pick(arm=arm, task=task)) for task in tasks} for arm in arms}
    later = {arm: aggregate([r for r in pick(arm=arm) if r["run_index"] >= 1]) for arm in arms}
    marks = {arm: {task: "".join("+" if r["correct"] else "-" for r in sorted(pick(arm=arm, task=task),
                                                                               key=lambda r: r["run_index"]))
                   for task in tasks} for arm in arms}
    verdicts: dict[str, Any] = {}
    if BASELINE in arms:
        for arm in (a for a in arms if a != BASELINE):
            verdicts[arm] = {
                "later_runs": _verdict(later[arm], later[BASELINE]),
                "by_run_index": {i: _verdict(by_index[arm][i], by_index[BASELINE][i])
                                 for i in by_index[arm] if int(i) >= 2},
                "by_task_later_runs": {
                    task: _verdict(aggregate([r for r in pick(arm=arm, task=task) if r["run_index"] >= 1]),
                                   aggregate([r for r in pick(arm=BASELINE, task=task) if r["run_index"] >= 1]))
                    for task in tasks},
            }
    return {"by_run_index": by_index, "by_task": by_task, "later_runs": later,
            "overall": {arm: aggregate(pick(arm=arm)) for arm in arms}, "marks": marks, "verdicts": verdicts}


def _verdict(arm: dict[str, Any], baseline: dict[str, Any]) -> str:
    if not arm["runs"] or not baseline["runs"]:
        return "n/a"
    return "beats baseline" if arm["success_rate"] > baseline["success_rate"] else "MISSED"


def _cell(figures: dict[str, Any]) -> str:
    if not figures["runs"]:
        return "-"
    tokens = f"{figures['mean_input_tokens']:.0f}/{figures['mean_output_tokens']:.0f} tok"
    return f"{figures['successes']}/{figures['runs']} ok, {figures['mean_steps']} steps, {tokens}, " \
        f"{figures['mean_seconds']:.0f} s"


def format_tables(summary: dict[str, Any], arms: list[str], banks: dict[str, Any]) -> str:
    """The text report: each memory arm's figures next to the baseline's, then the marks and the lessons."""
    lines: list[str] = []
    others = [a for a in arms if a != BASELINE]
    has_base = BASELINE in arms
    lines.append("Per run index (success, mean steps, mean tokens in/out, mean wall time):")
    for index, base in summary["by_run_index"].get(BASELINE, {}).items() if has_base else []:
        lines.append(f"  run {index}  {BASELINE:<18} {_cell(base)}")
        for arm in others:
            figures = summary["by_run_index"][arm][index]
            verdict = summary["verdicts"][arm]["by_run_index"].get(index, "")
            lines.append(f"         {arm:<18} {_cell(figures)}  {verdict}")
    if not has_base:
        for arm in arms:
            for index, figures in summary["by_run_index"][arm].items():
                lines.append(f"  run {index}  {arm:<18} {_cell(figures)}")
    lines.append("Per task (all runs; + success, - failure, in run order):")
    for task in next(iter(summary["by_task"].values()), {}):
        for arm in arms:
            verdict = summary["verdicts"].get(arm, {}).get("by_task_later_runs", {}).get(task, "")
            lines.append(f"  {task:<15} {arm:<18} {summary['marks'][arm][task]:<6} "
                         f"{_cell(summary['by_task'][arm][task])}  {verdict}")
    lines.append("Later runs (run index 2 and up), all tasks:")
    for arm in arms:
        verdict = summary["verdicts"].get(arm, {}).get("later_runs", "baseline" if arm == BASELINE else "")
        lines.append(f"  {arm:<18} {_cell(summary['later_runs'][arm])}  {verdict}")
    for bank, info in banks.items():
        lessons = info.get("lessons", [])
        lines.append(f"Bank {bank}: {len(lessons)} lessons, {info.get('retired', 0)} retired"
                     + (f" ({info['error']})" if info.get("error") else ""))
        for lesson in lessons:
            lines.append(f"  [{lesson['kind']}/{lesson['status']}{'/recipe' if lesson.get('recipe') else ''}] "
                         f"evidence {lesson['evidence']} given {lesson['given']} helpful {lesson['helpful']} "
                         f"harmful {lesson['harmful']}: {lesson['text'][:300]}")
    return "\n".join(lines)


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")


def plot(summary: dict[str, Any], arms: list[str], path: Path, title: str) -> bool:
    """Success rate and mean steps by run index, one line per arm; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (rate_ax, steps_ax) = plt.subplots(1, 2, figsize=(10, 4.2))
    for arm in arms:
        series = summary["by_run_index"][arm]
        xs = [int(i) for i in series]
        rate_ax.plot(xs, [series[i]["success_rate"] for i in series], marker="o", label=arm)
        steps_ax.plot(xs, [series[i]["mean_steps"] for i in series], marker="o", label=arm)
    rate_ax.set(xlabel="run of the task (1 = first)", ylabel="success rate (all tasks)", ylim=(-0.05, 1.05),
                title="Success rate by run index")
    steps_ax.set(xlabel="run of the task (1 = first)", ylabel="mean agent steps", title="Steps by run index")
    for ax in (rate_ax, steps_ax):
        ax.set_xticks(range(1, 1 + max(len(summary["by_run_index"][a]) for a in arms)))
        ax.grid(alpha=0.3)
    handles, labels = rate_ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(arms), frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
