"""How often taint would hold what earlier learning runs did and were given: false positives on benign tasks.

    python bench/learning/taint_check.py [RESULT.json ...]    # default: every bench/learning/results/*.json

Every task of the learning benchmarks is benign: no call any of their runs made was asked for by a planted
instruction. Result files keep the code of each run's steps (not what the steps observed) and the lessons
block each run was given. This replays, with the current rules and no LLM:

- every recipe given to a run (as ``recheck`` reads them): would taint hold it, from its code and task alone?
- every run's own code: would taint hold one of its calls (a sensitive effect its task did not ask for)?

Without the observations the half of the rule that needs them (a call an observation named) cannot fire here;
what this measures is the other half, the one that holds whatever the provenance. Every held item is a false
positive; the totals say how many runs given a recipe would have lost it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent), str(HERE)]

from recheck import RECIPE, RESULTS, as_kept  # noqa: E402

from lessonbank.core.models import Recipe, StepRecord  # noqa: E402
from lessonbank.learn import taint  # noqa: E402
from lessonbank.learn.adapters import read_run  # noqa: E402


def _task(run: dict[str, Any]) -> str:
    return str(run.get("prompt") or run.get("task_text") or run.get("task") or "")


def _runs(path: Path) -> list[dict[str, Any]]:
    """The runs a result file records ([] for a summary, whose ``runs`` is a count)."""
    runs = json.loads(path.read_text()).get("runs")
    return [run for run in runs if isinstance(run, dict)] if isinstance(runs, list) else []


def given_recipes(paths: list[Path]) -> dict[tuple[str, str], int]:
    """Every distinct recipe (its task and code as kept) given in the runs of ``paths``, with how many runs."""
    given: dict[tuple[str, str], int] = {}
    for path in paths:
        for run in _runs(path):
            for match in RECIPE.finditer(run.get("lessons_given") or ""):
                task, meta, shown = match.groups()
                key = (task, as_kept(meta, shown))
                given[key] = given.get(key, 0) + 1
    return given


def run_view(task: str, codes: list[str]) -> Any:
    """The view of a run from its steps' code alone (no observation, its tools unknown)."""
    steps = [StepRecord(id=f"r:{i}", bank="b", run_id="r", kind="action", seq=i, step_number=i + 1, code=code)
             for i, code in enumerate(codes) if isinstance(code, str)]
    return read_run(steps, task, "success", None, "r")


def held_runs(paths: list[Path]) -> tuple[int, list[dict[str, Any]]]:
    """How many runs' code was replayed, and those with a call taint would hold."""
    count, held = 0, []
    for path in paths:
        for run in _runs(path):
            codes = run.get("codes") or run.get("actions") or []
            if not codes:
                continue
            count += 1
            judged = [item for item in taint.run_calls(run_view(_task(run), codes)) if item.held]
            if judged:
                held.append({"file": path.name, "task": _task(run)[:100], "reason": judged[0].reason})
    return count, held


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="*", type=Path, help="result files (default: bench/learning/results/*.json)")
    args = parser.parse_args(argv)
    paths = args.results or sorted(p for p in RESULTS.glob("*.json") if not p.name.endswith(".partial.json"))
    recipes = given_recipes(paths)
    held_recipes = []
    for (task, code), runs in recipes.items():
        marks = taint.recipe_marks(Recipe(code=code, task=task), run_view(task, []))
        if reason := taint.held_reason(marks):
            held_recipes.append(runs)
            print(f"held recipe (given to {runs} run(s)): {reason}\n    task: {task[:100]}")
    given, lost = sum(recipes.values()), sum(held_recipes)
    print(f"recipes given: {len(recipes)} distinct, to {given} runs; held now: {len(held_recipes)}, "
          f"given to {lost} runs ({lost / max(given, 1):.1%})")
    count, held = held_runs(paths)
    for row in held:
        print(f"held call in {row['file']}: {row['reason'][:200]}\n    task: {row['task']}")
    print(f"runs replayed: {count}; with a call taint holds: {len(held)} ({len(held) / max(count, 1):.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
