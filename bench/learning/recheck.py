"""Re-check the recipes that earlier learning runs were given against the recipe rules of the current code.

    python bench/learning/recheck.py [RESULT.json ...]    # default: every bench/learning/results/*.json

Every run of a result file records the lessons block it was given. A recipe in that block is shown with the
task it came from and its code, sometimes with the run's own values put in; the block names each swap
("'Ghent' for 'Porto'", or "'INV-1471' -> 'INV-4449'"), which is undone here to get the recipe as it was kept.
For each distinct recipe this prints whether the current rules would still keep it (the code parses; it holds
each value its task gives: ``lessonbank.learn.recipes.ignored_values``) and how the runs given it did. A rule
change that refuses recipes whose runs went right refuses good recipes: the two totals at the end say so,
the runs given a refused recipe next to the runs given a kept one. No LLM, no services.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent)]

from lessonbank.learn import recipes  # noqa: E402

RESULTS = HERE / "results"
# the block's header of one recipe: the task it came from, what follows up to the colon, then the code
RECIPE = re.compile(r'Code that solved a similar task before \(task: "(.*?)";([^\n]*?):\n```python\n(.*?)```', re.S)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
SWAPS = (re.compile(r"'([^'\n]*)' for '([^'\n]*)'"), re.compile(r"'([^'\n]*)' -> '([^'\n]*)'"))


@dataclass
class Given:
    """One distinct recipe (its task and code as kept) and the runs that were given it."""

    task: str
    code: str
    runs: list[dict[str, Any]] = field(default_factory=list)

    @cached_property
    def verdict(self) -> str:
        """``kept``, or why the current rules refuse the recipe."""
        try:
            tree = ast.parse(self.code).body
        except SyntaxError:
            return "refused: does not parse"
        if ignored := recipes.ignored_values(self.code, recipes.params_of(tree, self.task), self.task):
            return "refused: ignores " + ", ".join(repr(v) for v in ignored[:3])
        return "kept"


def as_kept(meta: str, code: str) -> str:
    """The code with the run's values put back to the recipe's own (``meta`` names each swap)."""
    for pattern, (new, old) in ((SWAPS[0], (1, 2)), (SWAPS[1], (2, 1))):
        for match in pattern.finditer(meta):
            value, own = match.group(new), match.group(old)
            for quote in "'\"":
                code = code.replace(quote + value + quote, quote + own + quote)
            if NUMBER.fullmatch(value):  # a number put in as a constant of its own
                code = re.sub(rf"(?<![\w.]){re.escape(value)}(?![\w.])", own, code)
    return code


def collect(paths: list[Path]) -> list[Given]:
    """Every distinct recipe given in the runs of ``paths``, in the order first given."""
    given: dict[tuple[str, str], Given] = {}
    for path in paths:
        for run in json.loads(path.read_text()).get("runs", []):
            for match in RECIPE.finditer(run.get("lessons_given") or ""):
                task, meta, shown = match.groups()
                code = as_kept(meta, shown)
                item = given.setdefault((task, code), Given(task, code))
                item.runs.append({"file": path.name, "task": run["task"], "arm": run["arm"],
                                  "run": run["run_index"] + 1, "correct": bool(run["correct"])})
    return list(given.values())


def totals(items: list[Given]) -> dict[str, dict[str, int]]:
    """Recipes and the runs given them, kept against refused."""
    out = {"kept": {"recipes": 0, "runs": 0, "right": 0}, "refused": {"recipes": 0, "runs": 0, "right": 0}}
    for item in items:
        side = out["kept" if item.verdict == "kept" else "refused"]
        side["recipes"] += 1
        side["runs"] += len(item.runs)
        side["right"] += sum(r["correct"] for r in item.runs)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="*", type=Path, help="result files (default: bench/learning/results/*.json)")
    parser.add_argument("--json", type=Path, help="also write every recipe, its verdict and its runs here")
    args = parser.parse_args(argv)
    paths = args.results or sorted(p for p in RESULTS.glob("*.json") if not p.name.endswith(".partial.json"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no such result file: {', '.join(missing)}")
    items = collect(paths)
    for item in items:
        right = sum(r["correct"] for r in item.runs)
        print(f"{item.verdict:<44} runs given it right {right}/{len(item.runs)}  task: {item.task[:80]}")
        if item.verdict != "kept":
            print("    " + item.code.strip().replace("\n", "\n    "))
            print("    given to: " + ", ".join(f"{r['file']} {r['task']} run {r['run']} "
                                              f"{'right' if r['correct'] else 'wrong'}" for r in item.runs))
    result = totals(items)
    for side in ("kept", "refused"):
        t = result[side]
        print(f"{side}: {t['recipes']} recipes; the runs given them were right {t['right']}/{t['runs']}")
    if args.json:
        args.json.write_text(json.dumps({"totals": result, "recipes": [
            {"task": i.task, "code": i.code, "verdict": i.verdict, "runs": i.runs} for i in items]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
