"""What a real 1.5B agent writes first when it is given a date fix: how the fix is given, paired.

    python bench/learning/first_call.py [--seeds 1-8] [--per-seed 3] [--forms stored,shown,only,task]
                                        [--out DIR] [--name first_call]

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
- ``task``: the ``stored`` block after the task, in the run's first message (what ``remember`` does).

The agent runs one step; the probe reads which date its first ``get_weather`` call passed (the task's date as
the tool wants it, the task's ISO date, something else, or no call) and whether the tool answered the record.
Results of 2026-12-04 (bench/README.md): right first call 11-12/48 ``stored``, 3/48 ``shown``, 19/48 ``only``,
44/48 ``task``.

Starts its own llama.cpp server on the cached 1.5B model (``lessonbank llm setup --model 1.5b``).
Writes ``<out>/<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import AgentConfig, make_agent, run_seed  # noqa: E402
from services import llama  # noqa: E402
from smolagents import ActionStep  # noqa: E402
from trap_tasks import TASKS, Variant  # noqa: E402

from lessonbank.agent import join_task  # noqa: E402
from lessonbank.core import fixtext  # noqa: E402
from lessonbank.core.instructions import format_lessons  # noqa: E402
from lessonbank.core.models import Lesson  # noqa: E402

logger = logging.getLogger("bench.first_call")
# stored: the fix's text as kept (failing line first); shown: ``fixtext.shown`` (line to write first); only: the line
# to write and no failing value at all; task: the stored block after the task, in the run's first message
FORMATS = ("stored", "shown", "only", "task")
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
        text = fixtext.fix_text(failed, "ValueError", fixed, form="DD.MM.YYYY")
    else:
        failed = f'weather_data = get_weather("{city}", "{iso}")'
        fixed = f'weather_data = get_weather("{city}", "{dotted(iso)}")'
        text = fixtext.fix_text(failed, "ValueError", fixed, form="DD.MM.YYYY", tried=False)
    lesson = Lesson.new("learning-probe", "fact", text, tags=["fix"], origin="observed")
    return lesson.model_copy(update={"task": solved.prompt})


def shown(text: str) -> str:
    """The fix with the line to write first and the line that failed after it (tried, and worse)."""
    found = fixtext.lines(text)
    if found is None:
        return text
    failed, fixed = found
    parts = text.split("`")
    lead, middle = "`".join(parts[:-4]), parts[-3]
    tried = not fixtext.untried(text)
    failure = middle[:-len(fixtext.CORRECTED if tried else fixtext.ASKED)].strip()
    write = "write" if lead else "Write"
    if tried:
        return f"{lead}{write} `{fixed}`: it worked, where `{failed}` {failure}."
    return f"{lead}{write} `{fixed}`, as the error asked (not tried yet): `{failed}` {failure}."


def only(text: str) -> str:
    """The fix with the line to write and no failing value: what the tool wants, and that other forms failed."""
    found = fixtext.lines(text)
    if found is None:
        return text
    failed, fixed = found
    changed = fixtext.changed_keywords(failed, fixed)
    middle = text.split("`")[-3]
    error = middle.split(" failed with ", 1)[1].split(fixtext.ASKING, 1)[0].split(";", 1)[0]
    form = fixtext.form_of(text)
    tried = not fixtext.untried(text)
    head = f"Write `{fixed}`" + ("" if tried else " (as the error asked; not tried yet)")
    if len(changed) != 1:
        return f"{head}; the line before it failed with {error}."
    keyword, _, new = changed[0]
    like = f"like {json.dumps(new)}" + (f" ({form.name})" if form is not None else "")
    return f"{head}: pass {fixtext._named(keyword)} {like}; written any other way it failed with {error}."


def block(lesson: Lesson, task: str, form: str) -> str:
    """The lessons block of ``lesson`` for ``task``, its fix rewritten as ``form`` says."""
    text, given = format_lessons([lesson], "learning-probe", task=task)
    assert given == [lesson], "the fix did not fit the lessons block"
    rewrite = {"shown": shown, "only": only}.get(form)
    if rewrite is None:
        return text
    head, _, line = text.rpartition("\n- For this task: ")
    assert line, "the fix was not given with the task's values"
    fix, seen = line.rsplit(" (seen in ", 1)
    return f"{head}\n- For this task: {rewrite(fix)} (seen in {seen}"


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


def first_step(config: AgentConfig, variant: Variant, lessons: str, seed: int, form: str) -> dict[str, Any]:
    agent = make_agent(config, TASKS["date_format"], variant, seed)
    prompt = variant.prompt
    if form == "task":
        prompt = join_task(prompt, lessons)  # what ``remember`` does
    else:
        agent.instructions = lessons
    started = time.monotonic()
    step: ActionStep | None = None
    try:
        for event in agent.run(prompt, stream=True):
            if isinstance(event, ActionStep):
                step = event
                break
    except Exception as e:  # the agent's own failure is an outcome here
        logger.warning("run raised %s: %s", type(e).__name__, e)
    code = (step.code_action or "") if step is not None else ""
    observed = str(step.observations or "") if step is not None else ""
    return {"code": code[:600], "first_call": classify(code, variant),
            "record": "'max_c'" in observed, "seconds": round(time.monotonic() - started, 1)}


def seeds_of(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def summarize(results: list[dict[str, Any]], forms: list[str]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for kind in KINDS + ("all",):
        for form in forms:
            rows = [r for r in results if r["form"] == form and kind in ("all", r["kind"])]
            counts = {c: sum(r["first_call"] == c for r in rows) for c in OUTCOMES}
            table[f"{kind}/{form}"] = {"n": len(rows), **counts, "record in step 1": sum(r["record"] for r in rows)}
    pairs: dict[tuple[Any, ...], dict[str, str]] = {}
    for r in results:
        pairs.setdefault((r["seed_set"], r["run_index"], r["kind"]), {})[r["form"]] = r["first_call"]
    base = forms[0]
    for form in forms[1:]:
        both = [p for p in pairs.values() if base in p and form in p]
        table[f"pairs {form} vs {base}"] = {
            "n": len(both),
            f"{form} right, {base} not": sum(p[form] == "right date" != p[base] for p in both),
            f"{base} right, {form} not": sum(p[base] == "right date" != p[form] for p in both),
        }
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1-8", help="Seed sets of the date_format variants, e.g. 1-8.")
    parser.add_argument("--per-seed", type=int, default=3, help="Runs per seed set (run 1.. given run 0.. 's fix).")
    parser.add_argument("--forms", default=",".join(FORMATS), help=f"Forms to compare ({', '.join(FORMATS)}).")
    parser.add_argument("--model", default="1.5b", help="Local model key (lessonbank llm setup).")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--name", default="first_call")
    args = parser.parse_args()
    forms = [form.strip() for form in args.forms.split(",")]
    if not forms or any(form not in FORMATS for form in forms):
        parser.error(f"--forms takes some of {', '.join(FORMATS)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, llama(args.model, Path(tmp), args.n_ctx, args.threads) as (url, model):
        config = AgentConfig(url, model)
        for seed_set in seeds_of(args.seeds):
            variants = TASKS["date_format"].variants(args.per_seed + 1, seed=seed_set)
            for run_index in range(1, args.per_seed + 1):
                variant, solved = variants[run_index], variants[run_index - 1]
                seed = run_seed("date_format", run_index, seed_set)
                for kind in KINDS:
                    lesson = fix_lesson(solved, kind)
                    turn = (run_index + len(kind)) % len(forms)  # who goes first turns from pair to pair
                    order = forms[turn:] + forms[:turn]
                    for form in order:
                        lessons = block(lesson, variant.prompt, form)
                        outcome = first_step(config, variant, lessons, seed, form)
                        results.append({"seed_set": seed_set, "run_index": run_index, "variant": variant.key,
                                        "kind": kind, "form": form, "lessons": lessons, **outcome})
                        logger.info("seed %d run %d %s/%s: %s%s (%.0f s)", seed_set, run_index, kind, form,
                                    outcome["first_call"], ", record" if outcome["record"] else "",
                                    outcome["seconds"])
    summary = summarize(results, forms)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.name}.json"
    path.write_text(json.dumps({"benchmark": "first_call", "args": {k: str(v) for k, v in vars(args).items()},
                                "seconds": round(time.monotonic() - started), "summary": summary,
                                "results": results}, indent=1))
    print(f"{'kind/form':18s} {'n':>3s} {'right date':>10s} {'ISO date':>8s} {'other':>5s} {'no call':>7s} "
          f"{'record':>6s}")
    for key, row in summary.items():
        if not key.startswith("pairs"):
            print(f"{key:18s} {row['n']:3d} {row['right date']:10d} {row['ISO date']:8d} {row['other']:5d} "
                  f"{row['no call']:7d} {row['record in step 1']:6d}")
    for key, row in summary.items():
        if key.startswith("pairs"):
            print(f"{key}: {row}")
    print(f"written {path}")


if __name__ == "__main__":
    main()
