"""What a real 1.5B agent writes first when it is given a key fix next to a recipe: how the fix is given, paired.

    python bench/learning/key_fix.py [--seeds 1-8] [--per-seed 3] [--forms kept,write,none] [--steps 1]
                                     [--replay FILE [--replay-run 3] [--reps 2]] [--out DIR] [--name key_fix]

Held-out seed 12's invoice_cents run 1 failed at ``total_amount_euros = get_invoice(invoice_id="INV-6222")["amount"]``
and went on with ``lines = get_invoice(invoice_id="INV-6222")["lines"]``: an observed fix that changed a key, not a
value's form, which the instructions builder gave as kept (the failing line first) after the run's recipe, whose
first line is that corrected line. Memory's run 4 wrote the failing line (``result['amount']``) and kept to it for
7 steps. This probe isolates the first step. For each invoice_cents variant (runs 1.. of each seed set), the block
holds what run 1 of the variant before it would have left: its recipe (this task's invoice put in), the key fix
and the shape of ``get_invoice``'s result, with the fix given in each of ``--forms`` (same sampling seed; who goes
first turns from pair to pair):

- ``kept``: the fix as kept, its values those of the run that observed it (what the builder gave seed 12);
- ``write``: the fix as the line to write with this task's values, no failing line (``render.to_write`` of
  ``adapt.fix_for``);
- ``none``: no fix, the recipe and the shape only.

With ``--replay FILE``, it replays instead memory run ``--replay-run`` of a learning result file, which was given a
key fix as kept (seed 12's run 4 by default: ``learning-seed12-invoice-stopped.json``): its variant and block, with
that run's sampling seed and the ``--reps`` - 1 next ones, the fix given in each form.

The probe reads whether the first step's code reads the failing key (``["amount"]``), reads ``["lines"]``, and
whether the run answered right within ``--steps`` steps (the recipe ends in ``final_answer``).
Results (bench/README.md): ``--per-seed 2 --steps 2``, 16 pairs: right answer 13/16 ``kept``, 14/16 ``write``,
14/16 ``none`` (paired ``write`` vs ``kept`` 3 to 2), the failing key in a first step never, in any step once
(``kept``);
``--replay`` with ``--steps 3``: ``kept`` wrote ``result['amount']`` for 3 steps with run 4's own seed, as run 4 did,
where ``write`` answered right in one step; right answer 1/2 ``kept``, 2/2 ``write``, 1/2 ``none``.
Starts its own llama.cpp server on the cached 1.5B model (``lessonbank llm setup --model 1.5b``).
Writes ``<out>/<name>.json`` (``<name>.partial.json`` after each probe while it runs).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import first_call  # noqa: E402
from harness import AgentConfig, evict_prompt_cache, make_agent, run_seed  # noqa: E402
from smolagents import ActionStep  # noqa: E402
from trap_tasks import TASKS, Variant  # noqa: E402

from lessonbank.agent import join_task  # noqa: E402
from lessonbank.core import migrate  # noqa: E402
from lessonbank.core.models import FixPayload, Lesson, Recipe, ShapePayload  # noqa: E402
from lessonbank.instructions import format_lessons  # noqa: E402
from lessonbank.learn import adapt, fixtext, render  # noqa: E402

logger = logging.getLogger("bench.key_fix")
FORMS = ("kept", "write", "none")
TASK = TASKS["invoice_cents"]
SHAPE = ("`get_invoice(...)` returns {'invoice': str, 'currency': str, 'lines': [{'item': str, 'qty': int, "
         "'unit_price_cents': int}, ...]}: its records are `result['lines']`.")
FAILED_KEY = re.compile(r"""\[\s*["']amount["']\s*\]""")
LINES_KEY = re.compile(r"""\[\s*["']lines["']\s*\]""")


def fix_lesson(solved: Variant) -> Lesson:
    """The key fix seed 12's run 1 left, in ``solved``'s invoice."""
    invoice = solved.world["invoice"]
    failed = f'total_amount_euros = get_invoice(invoice_id="{invoice}")["amount"]'
    fixed = f'lines = get_invoice(invoice_id="{invoice}")["lines"]'
    fix = fixtext.payload(failed, "InterpreterError", fixed)
    lesson = Lesson.new("learning-probe", "fact", render.fix(fix), tags=["fix"], origin="observed", fix=fix)
    # judged right: only then is a line of the same question given whole, as the line to write
    return lesson.model_copy(update={"task": solved.prompt, "verified": True})


def context_lessons(solved: Variant) -> list[Lesson]:
    """The recipe of the run that solved ``solved`` (seed 12's code) and the shape fact of its tool's result."""
    invoice = solved.world["invoice"]
    code = (f"lines = get_invoice(invoice_id='{invoice}')['lines']\n"
            "total_amount_cents = sum((line['unit_price_cents'] * line['qty'] for line in lines))\n"
            "total_amount_euros = total_amount_cents / 100\n"
            "final_answer(total_amount_euros)")
    recipe = Recipe(code=code, task=solved.prompt, params=[invoice], checks=["syntax", "outcome:check"])
    working = Lesson.new("learning-probe", "approach", f"Working code for a task like: {solved.prompt}",
                         origin="recipe").model_copy(update={"recipe": recipe, "verified": True})
    shape = ShapePayload.model_validate(migrate.read_shape(SHAPE))
    return [working, Lesson.new("learning-probe", "fact", SHAPE, tags=["shape"], origin="observed", shape=shape)]


def block(solved: Variant, task: str, form: str) -> str:
    """The lessons block for ``task``: recipe, fix (as ``form`` says) and shape, in seed 12's order."""
    working, shape = context_lessons(solved)
    fix = fix_lesson(solved)
    lessons = [working, shape] if form == "none" else [working, fix, shape]
    text, given = format_lessons(lessons, task=task)
    assert len(given) == len(lessons), "the lessons did not fit the block"
    if form == "none":
        return text
    assert fix.fix is not None
    found = adapt.fix_for(fix.fix, fix.task, task)
    assert found is not None and found[1], "the fix's invoice was not placed in this task"
    placed = found[0]
    kept, write = f"- {fix.text} (", f"- For this task: {render.to_write(placed)} ("
    assert write in text, "the instructions builder no longer gives the fix as the line to write"
    return text.replace(write, kept, 1) if form == "kept" else text


def replayed(path: Path, run_index: int) -> tuple[Variant, int, dict[str, str]]:
    """The variant, sampling seed and block of each form of memory run ``run_index`` in ``path``, which was given a
    key fix as kept (a line "- `...` failed with ...; the corrected line `...` worked.")."""
    data = json.loads(path.read_text())
    for run in data["runs"]:
        kept = run.get("lessons_given") or ""
        found = [line for line in kept.splitlines() if line.startswith("- `") and render.CORRECTED in line]
        if run["arm"] != "memory" or run["run_index"] != run_index or not found:
            continue
        line = found[0]
        text, seen = line[2:line.index(" (seen")], line[line.index(" (seen"):]
        variants = TASK.variants(run["run_index"] + 1, seed=int(data["args"]["seed"]))
        variant = variants[run["run_index"]]
        assert variant.key == run["variant"], "the result file's variants are not this benchmark's"
        read = migrate.read_fix(text)  # the fix as that run was given it, read back from its text
        found = adapt.fix_for(FixPayload.model_validate(read), variants[0].prompt, variant.prompt) \
            if read is not None else None
        assert found is not None and found[1], "the fix's invoice was not placed in this task"
        placed = found[0]
        return variant, run["seed"], {"kept": kept, "write": kept.replace(line, f"- For this task: "
                                                                          f"{render.to_write(placed)}{seen}"),
                                      "none": kept.replace(line + "\n", "")}
    raise SystemExit(f"{path}: memory run {run_index} was not given a key fix as kept")


def probe(config: AgentConfig, variant: Variant, lessons: str, seed: int, steps: int) -> dict[str, Any]:
    agent = make_agent(config, TASK, variant, seed)
    agent.max_steps = steps
    evict_prompt_cache(config)  # every probe starts cold, whichever form ran before it
    started = time.monotonic()
    codes: list[str] = []
    outputs: list[str] = []
    answer = None
    try:
        for event in agent.run(join_task(variant.prompt, lessons), stream=True):  # where ``remember`` puts it
            if isinstance(event, ActionStep):
                codes.append(event.code_action or "")
                outputs.append(event.model_output if isinstance(event.model_output, str) else "")
                if event.is_final_answer:
                    answer = event.action_output
                if len(codes) >= steps or event.is_final_answer:
                    break
    except Exception as e:  # the agent's own failure is an outcome here
        logger.warning("run raised %s: %s", type(e).__name__, e)
    first = codes[0] if codes else ""
    return {"code": first[:600], "output": (outputs[0] if outputs else "")[:1200],
            "failed key": bool(FAILED_KEY.search(first)), "lines key": bool(LINES_KEY.search(first)),
            "steps": len(codes),
            "failed key in any step": any(FAILED_KEY.search(code) for code in codes),
            "answer": None if answer is None else str(answer)[:100],
            "right answer": answer is not None and TASK.check(variant, answer),
            "seconds": round(time.monotonic() - started, 1)}


COUNTS = ("failed key", "lines key", "failed key in any step", "right answer")


def summarize(results: list[dict[str, Any]], forms: list[str]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for form in forms:
        rows = [r for r in results if r["form"] == form]
        table[form] = {"n": len(rows), **{c: sum(bool(r[c]) for r in rows) for c in COUNTS}}
    pairs: dict[tuple[Any, ...], dict[str, bool]] = {}
    for r in results:
        pairs.setdefault((r["seed_set"], r["run_index"]), {})[r["form"]] = bool(r["right answer"])
    for form in forms[1:]:
        both = [p for p in pairs.values() if forms[0] in p and form in p]
        table[f"pairs {form} vs {forms[0]}, right answer"] = {
            "n": len(both), f"{form} right, {forms[0]} not": sum(p[form] and not p[forms[0]] for p in both),
            f"{forms[0]} right, {form} not": sum(p[forms[0]] and not p[form] for p in both)}
    return table


def write(args: argparse.Namespace, results: list[dict[str, Any]], forms: list[str], started: float,
          partial: bool = False) -> Path:
    return first_call.write(args, results, forms, started, partial, benchmark="key_fix", summary=summarize)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1-8", help="Seed sets of the invoice_cents variants, e.g. 1-8.")
    parser.add_argument("--per-seed", type=int, default=3, help="Runs per seed set (run 1.. given run 0.. 's lessons).")
    parser.add_argument("--forms", default=",".join(FORMS), help=f"Forms to compare ({', '.join(FORMS)}).")
    parser.add_argument("--steps", type=int, default=1, help="Steps a probe may run (it stops at an answer).")
    parser.add_argument("--replay", type=Path, help="Replay the memory run of this result file given a key fix.")
    parser.add_argument("--replay-run", type=int, default=3, help="With --replay: the run's index (3: run 4).")
    parser.add_argument("--reps", type=int, default=2, help="With --replay: sampling seeds, the run's and the next.")
    first_call.add_model_and_output(parser, "key_fix")
    args = parser.parse_args()
    forms = first_call.parsed_forms(parser, args.forms, FORMS)
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    with first_call.local_agent(args) as config:
        if args.replay:
            variant, seed, blocks = replayed(args.replay, args.replay_run)
            for rep in range(args.reps):
                for form in forms:
                    outcome = probe(config, variant, blocks[form], seed + rep, args.steps)
                    results.append({"seed_set": args.replay.name, "run_index": rep, "variant": variant.key,
                                    "form": form, "lessons": blocks[form], **outcome})
                    logger.info("replay %d %s: %s", rep, form, outcome)
                    write(args, results, forms, started, partial=True)
        for seed_set in [] if args.replay else first_call.seeds_of(args.seeds):
            variants = TASK.variants(args.per_seed + 1, seed=seed_set)
            for run_index in range(1, args.per_seed + 1):
                variant, solved = variants[run_index], variants[run_index - 1]
                seed = run_seed("invoice_cents", run_index, seed_set)
                turn = run_index % len(forms)  # who goes first turns from pair to pair
                for form in forms[turn:] + forms[:turn]:
                    lessons = block(solved, variant.prompt, form)
                    outcome = probe(config, variant, lessons, seed, args.steps)
                    results.append({"seed_set": seed_set, "run_index": run_index, "variant": variant.key,
                                    "form": form, "lessons": lessons, **outcome})
                    logger.info("seed %d run %d %s: %s%s%s (%.0f s)", seed_set, run_index, form,
                                "failed key" if outcome["failed key"] else "-",
                                ", lines" if outcome["lines key"] else "",
                                ", right answer" if outcome["right answer"] else "", outcome["seconds"])
                    write(args, results, forms, started, partial=True)  # what a stopped probe leaves
    path = write(args, results, forms, started)
    for key, row in summarize(results, forms).items():
        print(f"{key}: {row}")
    print(f"written {path}")


if __name__ == "__main__":
    main()
