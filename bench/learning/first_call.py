"""What a real 1.5B agent writes first when it is given a date fix: how the fix is given, paired.

    python bench/learning/first_call.py [--seeds 1-8] [--per-seed 3] [--forms stored,shown,only,task,...]
                                        [--context] [--steps 1] [--out DIR] [--name first_call]

The learning benchmark's date_format runs given a fix with their own date often wrote the task's ISO date in
their first call all the same (seed 10: every memory run 2-4 that was handed the rewritten date). This probe
isolates that step. For each date_format variant (runs 1.. of each seed set), the fix another run of the task
would have left (the previous variant's city and date, carried over to this task by the instructions builder)
is given in two kinds: observed (keyword arguments, "the corrected line ... worked") and asked (positional
arguments, "written as asked ... (not tried yet)"). Each is given in the ``--forms``, with the same sampling
seed (who goes first turns from pair to pair):

- ``stored``: the lessons block in the system prompt (the agent's instructions), the fix as it is kept: the
  failing line first, the corrected line last;
- ``shown``: the same, the line to write first and the failing line after it;
- ``only``: the same, the line to write and no failing value at all;
- ``task``: the ``stored`` block after the task, in the run's first message (where ``remember`` puts it);
- ``task-only``: the ``only`` block after the task (what ``remember`` gives now);
- ``task-recipe`` (with ``--context``): the block after the task without the fix, whose line the recipe holds;
- ``task-fixlast`` (with ``--context``): ``task-only`` with the fix after the shape fact, the block's last line;
- ``task-args``: ``task-only`` in a run given ``additional_args``, whose note smolagents appends after the block
  (what ``remember`` gives such a run);
- ``task-args-last``: the same arguments, the block after smolagents' note;
- ``task-inrecipe`` (with ``--context``): ``task-only`` with the fix pointing at the recipe, whose call passes the
  value, instead of giving a line to write (``the code above passes `date` like "15.09.2024" ...``);
- ``task-runrecipe`` (with ``--context``): ``task-only`` with the line to write followed by "and the rest of the
  code above";
- ``task-then``: ``task-only`` followed by "After this call, answer from what it returned." (the line is a first
  step, not the whole answer);
- ``task-loop``: ``task-only`` followed by the shape's loop on the line's own variable ("Then use its records: `for
  record in weather_data['records']:`"): what the builder gives with ``--shape`` (``instructions._then_loop``),
  where ``task-only`` gives the line alone;
- ``task-alone``: ``task-only`` followed by "Write that line alone as your first step, without print: what it
  returns then shows as the step's last output." (after ``print`` smolagents shows ``None`` as the last output,
  which the agent read as no result);
- ``task-logs``: ``task-only`` followed by where a printed result shows, and what that ``None`` is.

With ``--context`` the block also holds what seed 10's date_format runs were given next to the fix: the
recipe of the solved run (its code with this task's values put in, ahead of the fix) and the observed shape
of ``get_weather``'s result (after it). With ``--shape`` it holds the shape alone, after the fix: what a bank
holds when no run solved the task yet (held-out seeds 14, 17 and 18, whose memory runs made the right call and
then printed its result again to the step limit). ``--kinds asked`` gives the asked fix only.

The agent runs one step (``--steps N``: up to N, until it answers); the probe reads which date its first
``get_weather`` call passed (the task's date as the tool wants it, the task's ISO date, something else, or no
call), whether the tool answered the record in step 1, and with ``--steps`` whether the run answered right.
Results (bench/README.md): right first call 11-12/48 ``stored``, 3/48 ``shown``, 19/48 ``only``, 44/48 ``task``;
with ``--context``, 36/48 ``task`` and 46/48 ``task-only`` (paired 12 vs 2); with ``--context --steps 3``, right
answer 14/18 ``task-only``, 10/18 ``task-recipe``, 14/18 ``task-fixlast``; with ``--context``, right first call
48/48 ``task-args`` and 46/48 ``task-args-last``; with ``--context --steps 3``, right answer 27/36 ``task-inrecipe``
(right date first 29) and 27/36 ``task-runrecipe`` (35), against 26-27/36 ``task-only`` (34-35); with ``--seeds 1-6
--per-seed 2 --kinds asked --shape --steps 4``, right answer 2/12 ``task-then`` and 7/12 ``task-loop`` against 3/12
``task-only`` (paired 1 to 2 and 4 to 0); with ``--seeds 1-12 --per-seed 2 --kinds asked --steps 4``, right
answer 8/24 ``task-alone`` against 6/24 ``task-only`` (paired 5 to 3), and on seeds 1-6 4/12 ``task-logs`` against
3/12 (3 to 2): neither kept.

Starts its own llama.cpp server on the cached 1.5B model (``lessonbank llm setup --model 1.5b``).
Writes ``<out>/<name>.json`` (``<name>.partial.json`` after each probe while it runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import AgentConfig, evict_prompt_cache, make_agent, run_seed  # noqa: E402
from services import llama  # noqa: E402
from smolagents import ActionStep  # noqa: E402
from trap_tasks import TASKS, Variant  # noqa: E402

from lessonbank.agent import join_task  # noqa: E402
from lessonbank.core import migrate  # noqa: E402
from lessonbank.core.models import FixPayload, Lesson, Recipe, ShapePayload  # noqa: E402
from lessonbank.instructions import format_lessons  # noqa: E402
from lessonbank.learn import adapt, fixtext, render  # noqa: E402

logger = logging.getLogger("bench.first_call")
# stored: the fix's text as kept (failing line first); shown: the line to write first; only: the line to write and no
# failing value at all (``render.to_write``); task / task-only: stored / only after the task, in the run's first
# message
FORMATS = ("stored", "shown", "only", "task", "task-only", "task-recipe", "task-fixlast", "task-args", "task-args-last",
           "task-inrecipe", "task-runrecipe", "task-then", "task-loop", "task-alone", "task-logs")
AFTER_TASK = tuple(form for form in FORMATS if form.startswith("task"))  # the rest: in the system prompt
WITH_CONTEXT = ("task-recipe", "task-fixlast", "task-inrecipe", "task-runrecipe")  # forms that need --context
# ``additional_args`` of the ``task-args*`` forms, and smolagents' note on them (``MultiStepAgent.run``, 1.26)
ARGS = {"requested_by": "ops-team"}
NOTE = ("\nYou have been provided with these additional arguments, that you can access directly using the keys as "
        f"variables:\n{ARGS}.")
SHAPE = ("`get_weather(...)` returns {'city': str, 'date': str, 'records': [{'station': str, 'max_c': float, "
         "'min_c': float}, ...]}: its records are `result['records']`.")
KINDS = ("observed", "asked")
OUTCOMES = ("right date", "ISO date", "other", "no call")
CALL = re.compile(r"get_weather\(([^()\n]*)\)")


def dotted(iso: str) -> str:
    year, month, day = iso.split("-")
    return f"{day}.{month}.{year}"


def fix_lesson(solved: Variant, kind: str) -> Lesson:
    """The fix a run of ``solved`` leaves: observed (keywords, tried) or asked by the error (by position)."""
    city, iso = solved.world["city"], solved.world["iso"]
    if kind == "observed":
        failed = f'weather_data = get_weather(city="{city}", date="{iso}")'
        fixed = f'weather_data = get_weather(city="{city}", date="{dotted(iso)}")'
        fix = fixtext.payload(failed, "ValueError", fixed)
    else:
        failed = f'weather_data = get_weather("{city}", "{iso}")'
        fixed = f'weather_data = get_weather("{city}", "{dotted(iso)}")'
        fix = fixtext.payload(failed, "ValueError", fixed).model_copy(update={"tried": False})
    lesson = Lesson.new("learning-probe", "fact", render.fix(fix), tags=["fix"], origin="observed", fix=fix)
    # judged right: only then is a line of the same question given whole, as the line to write
    return lesson.model_copy(update={"task": solved.prompt, "verified": True})


def context_lessons(solved: Variant) -> list[Lesson]:
    """The recipe of the run that solved ``solved`` and the shape fact of its tool's result (seed 10's block)."""
    city, dotted_date = solved.world["city"], dotted(solved.world["iso"])
    code = (f'weather_data = get_weather("{city}", "{dotted_date}")\n'
            "temperature_data = max(record['max_c'] for record in weather_data['records'])\n"
            "final_answer(temperature_data)")
    recipe = Recipe(code=code, task=solved.prompt, params=[city, dotted_date], checks=["syntax", "outcome:check"])
    working = Lesson.new("learning-probe", "approach", f"Working code for a task like: {solved.prompt}",
                         origin="recipe").model_copy(update={"recipe": recipe, "verified": True})
    return [working, shape_lesson(SHAPE)]


def shape_lesson(text: str) -> Lesson:
    """The shape fact ``text`` as the worker keeps it (its payload read from the text, as of a lesson of schema 1)."""
    shape = ShapePayload.model_validate(migrate.read_shape(text))
    return Lesson.new("learning-probe", "fact", render.shape(shape), tags=["shape"], origin="observed", shape=shape)


def shown(fix: FixPayload) -> str:
    """The fix with the line to write first and the line that failed after it (tried, and worse)."""
    lead, failure = render.lead(fix), render.failure(fix)
    write = "write" if lead else "Write"
    if fix.tried:
        return f"{lead}{write} `{fix.fixed}`: it worked, where `{fix.failed}` {failure}."
    return f"{lead}{write} `{fix.fixed}`, as the error asked (not tried yet): `{fix.failed}` {failure}."


def _write_parts(fix: FixPayload) -> tuple[str, str]:
    """``render.to_write``'s text split at its value: ``Write `line``` (with an asked fix's note) and what
    follows ``: pass `` (`` `date` like "15.09.2024" (DD.MM.YYYY); written any other way ...``)."""
    found = re.fullmatch(r"(Write `[^`]*`(?: \([^()]*\))?): pass (.+)", render.to_write(fix))
    assert found is not None, "the fix is not given as one value to pass"
    return found.group(1), found.group(2)


def in_recipe(fix: FixPayload) -> str:
    """``render.to_write``'s text pointing at the recipe above it instead of a line to write: ``the code above
    passes `date` like "15.09.2024" (DD.MM.YYYY); written any other way it failed with ValueError.`` (an asked
    fix's "not tried yet" is left out: the recipe's code ran)."""
    return f"the code above passes {_write_parts(fix)[1]}"


def run_recipe(fix: FixPayload) -> str:
    """``render.to_write``'s text with the line to write followed by the rest of the recipe above it:
    ``Write `w = get_weather(...)` and the rest of the code above: pass `date` like ...``."""
    head, rest = _write_parts(fix)
    return f"{head} and the rest of the code above: pass {rest}"


def then_answer(fix: FixPayload) -> str:
    """``render.to_write``'s text followed by what comes after the line: the result to answer from."""
    return f"{render.to_write(fix)} After this call, answer from what it returned."


def then_loop(fix: FixPayload) -> str:
    """``render.to_write``'s text followed by the loop over the records of the variable its line assigns."""
    assert " = " in fix.fixed, "the fix's line assigns no variable"
    name = fix.fixed.split(" = ", 1)[0].strip()
    return f"{render.to_write(fix)} Then use its records: `for record in {name}['records']:`."


def alone(fix: FixPayload) -> str:
    """``render.to_write``'s text followed by how to see what the line returns: the line as a step of its own,
    without ``print`` (smolagents shows a step's last value as its last output, and ``None`` after a print)."""
    return (f"{render.to_write(fix)} Write that line alone as your first step, without print: what it returns "
            "then shows as the step's last output.")


def logs(fix: FixPayload) -> str:
    """``render.to_write``'s text followed by where a printed result shows: under "Execution logs:", while the
    step's "Last output from code snippet: None" is what ``print`` itself returned."""
    return (f"{render.to_write(fix)} If you print its result, it shows under \"Execution logs:\"; the "
            "\"Last output from code snippet: None\" after it is what print returned, not the call.")


def block(lesson: Lesson, task: str, form: str, context: list[Lesson] | None = None) -> str:
    """The lessons block of ``lesson`` (and ``context``) for ``task``, its fix written as ``form`` says: the
    instructions builder gives it as the line to write (``render.to_write``: ``only``, ``task-only``); ``stored``
    and ``task`` give it as kept (the failing line first), ``shown`` with the line to write first."""
    lessons = [*(context or [])[:1], lesson, *(context or [])[1:]]
    if context and context[0].recipe is None:  # --shape: the fix first, then what its call returns
        lessons = [lesson, *context]
    assert (context and context[0].recipe is not None) or form not in WITH_CONTEXT, f"{form} needs --context"
    if form == "task-fixlast":
        lessons = [*(context or []), lesson]
    if form == "task-recipe":
        lessons.remove(lesson)
        text, given = format_lessons(lessons, task=task)
        assert len(given) == len(lessons), "the lessons did not fit the block"
        return text
    text, given = format_lessons(lessons, task=task)
    assert lesson in given and len(given) == len(lessons), "the lessons did not fit the block"
    assert lesson.fix is not None, "the lesson is no fix"
    found = adapt.fix_for(lesson.fix, lesson.task, task)
    assert found is not None and found[1], "the fix was not given with the task's values"
    kept = found[0]
    written = {"stored": render.fix, "task": render.fix, "shown": shown, "task-inrecipe": in_recipe,
               "task-runrecipe": run_recipe, "task-then": then_answer,
               "task-loop": then_loop, "task-alone": alone, "task-logs": logs}.get(form, render.to_write)(kept)
    # the builder's line: the line to write, then (with the shape and no recipe) the loop ``task-loop`` gives
    line = re.compile(re.escape(f"- For this task: {render.to_write(kept)}") + r"[^\n]*? (?=\(seen in )")
    assert line.search(text), "the instructions builder no longer gives the fix as the line to write"
    return line.sub(lambda _: f"- For this task: {written} ", text, count=1)


def classify(code: str, variant: Variant) -> str:
    """Which date the first ``get_weather`` call of ``code`` passed."""
    call = CALL.search(code)
    if call is None:
        return "no call"
    args = call.group(1)
    if dotted(variant.world["iso"]) in args:
        return "right date"
    if variant.world["iso"] in args:
        return "ISO date"
    return "other"


def first_step(config: AgentConfig, variant: Variant, lessons: str, seed: int, form: str,
               steps: int = 1) -> dict[str, Any]:
    agent = make_agent(config, TASKS["date_format"], variant, seed)
    agent.max_steps = steps
    prompt, extra = variant.prompt, None
    if form == "task-args":  # what ``remember`` does when the run has additional_args: smolagents' note last
        prompt, extra = join_task(prompt, lessons), ARGS
    elif form == "task-args-last":  # the same arguments, the lessons after smolagents' note
        agent.state.update(ARGS)
        prompt = join_task(prompt + NOTE, lessons)
    elif form in AFTER_TASK:
        prompt = join_task(prompt, lessons)  # what ``remember`` does
    else:
        agent.instructions = lessons
    evict_prompt_cache(config)  # every probe starts cold, whichever form ran before it (as run.py's runs)
    started = time.monotonic()
    step: ActionStep | None = None
    taken, answer, codes = 0, None, []
    try:
        for event in agent.run(prompt, stream=True, additional_args=extra):
            if isinstance(event, ActionStep):
                step = step or event
                taken += 1
                codes.append((event.code_action or "")[:400])
                if event.is_final_answer:
                    answer = event.action_output
                if taken >= steps or event.is_final_answer:
                    break
    except Exception as e:  # the agent's own failure is an outcome here
        logger.warning("run raised %s: %s", type(e).__name__, e)
    if form == "task-args":
        assert agent.task == prompt + NOTE, "smolagents' note on additional_args is no longer NOTE"
    code = (step.code_action or "") if step is not None else ""
    observed = str(step.observations or "") if step is not None else ""
    return {"code": code[:600], "first_call": classify(code, variant), "record": "'max_c'" in observed,
            "steps": taken, "answer": None if answer is None else str(answer)[:100],
            "right answer": answer is not None and TASKS["date_format"].check(variant, answer),
            "codes": codes, "seconds": round(time.monotonic() - started, 1)}


def seeds_of(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def summarize(results: list[dict[str, Any]], forms: list[str]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for kind in KINDS + ("all",):
        for form in forms:
            rows = [r for r in results if r["form"] == form and kind in ("all", r["kind"])]
            counts = {c: sum(r["first_call"] == c for r in rows) for c in OUTCOMES}
            table[f"{kind}/{form}"] = {"n": len(rows), **counts, "record in step 1": sum(r["record"] for r in rows),
                                       "right answer": sum(bool(r.get("right answer")) for r in rows)}
    pairs: dict[tuple[Any, ...], dict[str, str]] = {}
    answers: dict[tuple[Any, ...], dict[str, bool]] = {}
    for r in results:
        pairs.setdefault((r["seed_set"], r["run_index"], r["kind"]), {})[r["form"]] = r["first_call"]
        answers.setdefault((r["seed_set"], r["run_index"], r["kind"]), {})[r["form"]] = bool(r.get("right answer"))
    base = forms[0]
    for form in forms[1:]:
        both = [p for p in pairs.values() if base in p and form in p]
        table[f"pairs {form} vs {base}"] = {
            "n": len(both),
            f"{form} right, {base} not": sum(p[form] == "right date" != p[base] for p in both),
            f"{base} right, {form} not": sum(p[base] == "right date" != p[form] for p in both),
        }
        answered = [p for p in answers.values() if base in p and form in p]
        table[f"pairs {form} vs {base}, right answer"] = {
            "n": len(answered),
            f"{form} right, {base} not": sum(p[form] and not p[base] for p in answered),
            f"{base} right, {form} not": sum(p[base] and not p[form] for p in answered),
        }
    return table


def write(args: argparse.Namespace, results: list[dict[str, Any]], forms: list[str], started: float,
          partial: bool = False, benchmark: str = "first_call",
          summary: Callable[[list[dict[str, Any]], list[str]], dict[str, Any]] = summarize) -> Path:
    """``<out>/<name>.json`` (``<name>.partial.json`` while the probe runs, removed at the end); another probe
    (``key_fix.py``) passes its name and its ``summary``."""
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.name}{'.partial' if partial else ''}.json"
    path.write_text(json.dumps({"benchmark": benchmark, "args": {k: str(v) for k, v in vars(args).items()},
                                "seconds": round(time.monotonic() - started), "summary": summary(results, forms),
                                "results": results}, indent=1))
    if not partial:
        path.with_name(f"{args.name}.partial.json").unlink(missing_ok=True)
    return path


def add_model_and_output(parser: argparse.ArgumentParser, name: str) -> None:
    """The options every probe shares: the local model it starts, and where it writes ``<name>.json``."""
    parser.add_argument("--model", default="1.5b", help="Local model key (lessonbank llm setup).")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--name", default=name)


@contextlib.contextmanager
def local_agent(args: argparse.Namespace) -> Iterator[AgentConfig]:
    """Logging set up, and the agents' settings on a llama.cpp server of ``args.model`` for as long as the block
    runs: what every probe starts with."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory() as tmp, llama(args.model, Path(tmp), args.n_ctx, args.threads) as (url, model):
        yield AgentConfig(url, model)


def parsed_forms(parser: argparse.ArgumentParser, text: str, known: tuple[str, ...]) -> list[str]:
    """``--forms`` as a list, each one of ``known`` (else the parser's error); every probe takes it."""
    forms = [form.strip() for form in text.split(",")]
    if not forms or any(form not in known for form in forms):
        parser.error(f"--forms takes some of {', '.join(known)}")
    return forms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1-8", help="Seed sets of the date_format variants, e.g. 1-8.")
    parser.add_argument("--per-seed", type=int, default=3, help="Runs per seed set (run 1.. given run 0.. 's fix).")
    parser.add_argument("--forms", default=",".join(FORMATS), help=f"Forms to compare ({', '.join(FORMATS)}).")
    parser.add_argument("--context", action="store_true",
                        help="Give the fix with the solved run's recipe (before it) and the result's shape (after).")
    parser.add_argument("--shape", action="store_true",
                        help="Give the fix with the result's shape alone (after it), as a bank no run solved yet.")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"Fix kinds to give ({', '.join(KINDS)}).")
    parser.add_argument("--steps", type=int, default=1, help="Steps a probe may run (it stops at an answer).")
    add_model_and_output(parser, "first_call")
    args = parser.parse_args()
    forms = parsed_forms(parser, args.forms, FORMATS)
    kinds = [kind.strip() for kind in args.kinds.split(",")]
    if not kinds or any(kind not in KINDS for kind in kinds):
        parser.error(f"--kinds takes some of {', '.join(KINDS)}")
    if args.context and args.shape:
        parser.error("--context already gives the shape: give one of --context and --shape")
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    with local_agent(args) as config:
        for seed_set in seeds_of(args.seeds):
            variants = TASKS["date_format"].variants(args.per_seed + 1, seed=seed_set)
            for run_index in range(1, args.per_seed + 1):
                variant, solved = variants[run_index], variants[run_index - 1]
                seed = run_seed("date_format", run_index, seed_set)
                for kind in kinds:
                    lesson = fix_lesson(solved, kind)
                    turn = (run_index + len(kind)) % len(forms)  # who goes first turns from pair to pair
                    order = forms[turn:] + forms[:turn]
                    for form in order:
                        context = (context_lessons(solved) if args.context
                                   else context_lessons(solved)[1:] if args.shape else None)
                        lessons = block(lesson, variant.prompt, form, context)
                        outcome = first_step(config, variant, lessons, seed, form, args.steps)
                        results.append({"seed_set": seed_set, "run_index": run_index, "variant": variant.key,
                                        "kind": kind, "form": form, "lessons": lessons, **outcome})
                        logger.info("seed %d run %d %s/%s: %s%s%s (%.0f s)", seed_set, run_index, kind, form,
                                    outcome["first_call"], ", record" if outcome["record"] else "",
                                    ", right answer" if outcome["right answer"] else "", outcome["seconds"])
                        write(args, results, forms, started, partial=True)  # what a stopped probe leaves
    path = write(args, results, forms, started)
    summary = summarize(results, forms)
    print(f"{'kind/form':18s} {'n':>3s} {'right date':>10s} {'ISO date':>8s} {'other':>5s} {'no call':>7s} "
          f"{'record':>6s} {'right answer':>12s}")
    for key, row in summary.items():
        if not key.startswith("pairs"):
            print(f"{key:18s} {row['n']:3d} {row['right date']:10d} {row['ISO date']:8d} {row['other']:5d} "
                  f"{row['no call']:7d} {row['record in step 1']:6d} {row['right answer']:12d}")
    for key, row in summary.items():
        if key.startswith("pairs"):
            print(f"{key}: {row}")
    print(f"written {path}")


if __name__ == "__main__":
    main()
