"""What a real 1.5B agent does with the shape of a tool's result alone, or with the call that returned records too.

    python bench/learning/shape_call.py [--seeds 1-6] [--per-seed 2] [--forms shape,call] [--steps 4]
                                        [--out DIR] [--name shape_call]

When run 1 of nested_catalog fails, the bank holds no recipe, only the shape of ``search_catalog``'s result ("its
records are `result['data']['items']`"). Given that alone, memory's runs answered right 14 times in 32 over the
eighteen held-out seeds, against 18 in 21 given a recipe: some asked the tool for words of their own ("price <
27", "product:chair price:<27") and got no records, some printed what they filtered until the step limit. The
failed run 1 did make the call that returned records (``search_catalog(query="mug")``). This probe gives each
nested_catalog variant (runs 1.. of each seed set) what run 1 of the variant before it would have left, in each of
``--forms`` (same sampling seed; who goes first turns from pair to pair):

- ``shape``: the shape fact as the instructions builder gives it (with the loop over its records);
- ``call``: the same fact naming the call that got the records back (`` Records came back from `result =
  search_catalog(query="mug")`.``), which the builder gives first with this task's word and the loop on its
  variable: ``For this task: write `result = search_catalog(query="chair")`, then use its records: `for record in
  result['data']['items']:`.`` (``learn.handover.call_line``)

The agent runs up to ``--steps`` steps and, at the limit, is asked for its answer (as the learning benchmark's runs
are); the probe reads the query its first call passed (the task's word alone, or other words), whether that call
returned records, and whether the run answered right.

Results (bench/README.md, "No recipe yet: the call that got the records back"): right answer 8/12 ``call`` against
4/12 ``shape`` (seeds 1-6), 7/12 against 4/12 (seeds 7-12), paired 11 to 4; first query the task's word 24/24
``call``, 14/24 ``shape``.

Starts its own llama.cpp server on the cached 1.5B model (``lessonbank llm setup --model 1.5b``).
Writes ``<out>/<name>.json`` (``<name>.partial.json`` after each probe while it runs).
"""

from __future__ import annotations

import argparse
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
from lessonbank.core.models import Lesson, ShapePayload  # noqa: E402
from lessonbank.instructions import format_lessons  # noqa: E402

logger = logging.getLogger("bench.shape_call")
FORMS = ("shape", "call")
TASK = "nested_catalog"
SHAPE = ("`search_catalog(...)` returns {'status': str, 'data': {'items': [{'name': str, 'price': float}, ...], "
         "'total': int}, 'took_ms': int}: its records are `result['data']['items']`.")
QUERY = re.compile(r"search_catalog\(\s*(?:query\s*=\s*)?(['\"])(.*?)\1")


def block(solved: Variant, variant: Variant, form: str) -> str:
    """The lessons block for ``variant`` as the instructions builder gives it: the shape fact that run 1 of
    ``solved`` would have left, naming its call (``call``, with ``solved``'s word: the builder puts ``variant``'s
    in), or not (``shape``)."""
    text = SHAPE if form == "shape" else f'{SHAPE} Records came back from `result = search_catalog(query="' \
                                         f'{solved.world["query"]}")`.'
    payload = ShapePayload.model_validate(migrate.read_shape(text))  # the fact's payload, as from a stored text
    shape = Lesson.new("learning-probe", "fact", text, tags=["shape"], origin="observed", shape=payload)
    shape = shape.model_copy(update={"task": solved.prompt})
    lessons, given = format_lessons([shape], task=variant.prompt)
    assert given == [shape], "the shape fact did not fit the block"
    if form == "call":
        assert f'write `result = search_catalog(query="{variant.world["query"]}")`' in lessons, \
            "the builder no longer gives the call with this task's word"
    return lessons


def query_kind(code: str, variant: Variant) -> str:
    found = QUERY.search(code)
    if found is None:
        return "no call"
    return "task word" if found.group(2).strip().lower() == variant.world["query"] else "other words"


def one_run(config: AgentConfig, variant: Variant, lessons: str, seed: int, steps: int) -> dict[str, Any]:
    agent = make_agent(config, TASKS[TASK], variant, seed)
    agent.max_steps = steps
    evict_prompt_cache(config)  # every probe starts cold, whichever form ran before it
    started = time.monotonic()
    answer: Any = None
    try:
        answer = agent.run(join_task(variant.prompt, lessons))  # what ``remember`` does; at the limit it asks
    except Exception as e:  # the agent's own failure is an outcome here
        logger.warning("run raised %s: %s", type(e).__name__, e)
    actions = [step for step in agent.memory.steps if isinstance(step, ActionStep)]
    first = actions[0] if actions else None
    code = (first.code_action or "") if first is not None else ""
    observed = str(first.observations or "") if first is not None else ""
    return {"code": code[:600], "first_query": query_kind(code, variant), "records in step 1": "'name'" in observed,
            "steps": len(actions), "answer": None if answer is None else str(answer)[:100],
            "right answer": answer is not None and TASKS[TASK].check(variant, answer),
            "codes": [(step.code_action or "")[:400] for step in actions],
            "seconds": round(time.monotonic() - started, 1)}


def summarize(results: list[dict[str, Any]], forms: list[str]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for form in forms:
        rows = [r for r in results if r["form"] == form]
        table[form] = {"n": len(rows), **{kind: sum(r["first_query"] == kind for r in rows)
                                         for kind in ("task word", "other words", "no call")},
                       "records in step 1": sum(r["records in step 1"] for r in rows),
                       "right answer": sum(bool(r["right answer"]) for r in rows),
                       "mean steps": round(sum(r["steps"] for r in rows) / max(1, len(rows)), 2)}
    answers: dict[tuple[Any, ...], dict[str, bool]] = {}
    for r in results:
        answers.setdefault((r["seed_set"], r["run_index"]), {})[r["form"]] = bool(r["right answer"])
    base = forms[0]
    for form in forms[1:]:
        both = [p for p in answers.values() if base in p and form in p]
        table[f"pairs {form} vs {base}, right answer"] = {
            "n": len(both), f"{form} right, {base} not": sum(p[form] and not p[base] for p in both),
            f"{base} right, {form} not": sum(p[base] and not p[form] for p in both)}
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1-6", help="Seed sets of the nested_catalog variants, e.g. 1-6.")
    parser.add_argument("--per-seed", type=int, default=2, help="Runs per seed set (run 1.. given run 0.. 's call).")
    parser.add_argument("--forms", default=",".join(FORMS), help=f"Forms to compare ({', '.join(FORMS)}).")
    parser.add_argument("--steps", type=int, default=4, help="Steps a run may take before it is asked to answer.")
    first_call.add_model_and_output(parser, "shape_call")
    args = parser.parse_args()
    forms = first_call.parsed_forms(parser, args.forms, FORMS)
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    with first_call.local_agent(args) as config:
        for seed_set in first_call.seeds_of(args.seeds):
            variants = TASKS[TASK].variants(args.per_seed + 1, seed=seed_set)
            for run_index in range(1, args.per_seed + 1):
                variant, solved = variants[run_index], variants[run_index - 1]
                seed = run_seed(TASK, run_index, seed_set)
                turn = (run_index + seed_set) % len(forms)  # who goes first turns from pair to pair
                for form in forms[turn:] + forms[:turn]:
                    lessons = block(solved, variant, form)
                    outcome = one_run(config, variant, lessons, seed, args.steps)
                    results.append({"seed_set": seed_set, "run_index": run_index, "variant": variant.key,
                                    "form": form, "lessons": lessons, **outcome})
                    logger.info("seed %d run %d %s: %s%s%s in %d steps (%.0f s)", seed_set, run_index, form,
                                outcome["first_query"], ", records" if outcome["records in step 1"] else "",
                                ", right answer" if outcome["right answer"] else "", outcome["steps"],
                                outcome["seconds"])
                    first_call.write(args, results, forms, started, partial=True, benchmark="shape_call",
                                     summary=summarize)
    path = first_call.write(args, results, forms, started, benchmark="shape_call", summary=summarize)
    for key, row in summarize(results, forms).items():
        print(f"{key}: {row}")
    print(f"written {path}")


if __name__ == "__main__":
    main()
