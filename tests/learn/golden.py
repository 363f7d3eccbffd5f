"""The characterisation corpus of the learning code: recorded runs and the outputs they must keep giving.

``corpus.json.gz`` holds step records of real CodeAgent runs (the runs the learning tests build, replays of
learning-benchmark runs through a real agent and recorder, ``bench/data/realistic_run.jsonl``) and the
lessons, gate contexts and blocks those tests handed the learning code. ``outputs`` runs all of it through
evidence mining, fixes, shapes, recipes, the gate, credit and the instructions block; ``expected.json.gz`` is
what it gave when written. Regenerate (only when a change of behaviour is meant) with
``python -m tests.learn.golden``.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lessonbank.core.models import Lesson, StepRecord
from lessonbank.core.redact import Redactor
from lessonbank.instructions import format_lessons
from lessonbank.learn import (
    credit,
    evidence,
    fixes,
    gate,
    needs,
    quarantine,
    recipes,
    render,
    shapes,
    transcript,
    usage,
)
from lessonbank.learn.adapters import read_run
from lessonbank.learn.consolidate import Observed, observed_lesson, recipe_lesson
from lessonbank.learn.view import RunView

HERE = Path(__file__).resolve().parent / "golden"
CORPUS = HERE / "corpus.json.gz"
EXPECTED = HERE / "expected.json.gz"
BANK = "golden"
JUDGED = (("success", "check"), ("failure", "user"), ("unknown", "none"))
_WORDS = re.compile(r"[A-Za-z]+")


def read(path: Path) -> Any:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write(path: Path, data: Any) -> None:
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(json.dumps(data, sort_keys=True, indent=1).encode())


def _view(raw: list[dict[str, Any]], task: str, tools: list[str] | None = None) -> RunView:
    return read_run([StepRecord.model_validate(step) for step in raw], task, tools=tools)


def guarded(work: Callable[[], Any]) -> Any:
    """``work()``, or the name of the exception it raised: a crash is an output too."""
    try:
        return work()
    except Exception as e:  # the corpus holds hostile output; what the code does with it is what is pinned
        return {"raised": type(e).__name__}


def _family(task: str) -> str:
    """Runs of one recurring task (other values): the words of the task without its values."""
    return " ".join(_WORDS.findall(task)[:8])


def _fix_out(fix: fixes.Fix, view: RunView) -> dict[str, Any]:
    return {"failed": fix.failed, "fixed": fix.fixed, "error": fix.error, "steps": list(fix.steps),
            "fingerprint": fix.fingerprint, "tried": fix.tried, "text": fix.text,
            "gave_the_answer": fixes.gave_the_answer(fix, view)}


def _lessons_of(found_fixes: list[fixes.Fix], found_shapes: list[shapes.Shape], recipe: Any,
                task: str, run_id: str) -> list[Lesson]:
    """The lessons the pipeline keeps of what a run observed (as ``Consolidator.add_observed`` / ``add_recipe``)."""
    kept_task = recipes.kept_task(task, Redactor())
    facts = [Observed("fix", fix.fingerprint, fix.steps, fix=fix.payload, task=kept_task) for fix in found_fixes]
    facts += [Observed("shape", shape.fingerprint, shape.steps, shape=shape.payload,
                       task=kept_task if shape.call else "") for shape in found_shapes]
    lessons = [observed_lesson(BANK, fact, run_id, False) for fact in facts]
    if recipe is not None:
        lessons.append(recipe_lesson(BANK, recipe, run_id, []))
    return lessons


def _credit(lesson: Lesson, view: RunView) -> dict[str, Any]:
    atoms, task = credit.run_atoms(view), view.task
    return {"applied": credit.applied(lesson, atoms, task), "blameless": credit.blameless(lesson, view),
            "altered": credit.altered(lesson, atoms, task), "unfollowed": credit.unfollowed(lesson, view),
            "needed_tools": sorted(needs.needed_tools(lesson) or [])}


def _block(lessons: list[Lesson], task: str, max_chars: int = 2000) -> dict[str, Any]:
    block, given = format_lessons(lessons, max_chars=max_chars, task=task)
    return {"block": block, "given": [lesson.id for lesson in given]}


def run_outputs(run: dict[str, Any]) -> tuple[dict[str, Any], list[Lesson]]:
    """What the learning code makes of one recorded run, and the lessons it would keep of it."""
    task = run["task"]
    view = _view(run["steps"], task, run["tools"])
    out: dict[str, Any] = {
        "evidence": {f"{verdict}/{source}": guarded(lambda v=verdict, s=source: [
            [e.id, e.kind, e.steps, e.text] for e in evidence.mine(view, v, s)])
            for verdict, source in JUDGED},
        "final_answer": view.final_answer,
        "observed": evidence.observed_text(view),
        "call_results": [list(pair) for pair in evidence.call_results(view)],
        "tool_stats": {name: stats.model_dump() for name, stats in usage.tool_stats(view).items()},
        "transcript": transcript.build_transcript(view, 6000, max_tokens=1500),
        "transcript_small": transcript.build_transcript(view, 1500, compact=False),
    }
    found_fixes = fixes.extract(view, Redactor())
    out["fixes"] = [_fix_out(fix, view) for fix in found_fixes]
    found_shapes = shapes.extract(view, task)
    out["shapes"] = [{"tool": s.tool, "shape": s.shape, "path": list(s.path) if s.path is not None else None,
                      "steps": list(s.steps),
                      "call": s.call, "text": s.text, "fingerprint": s.fingerprint} for s in found_shapes]
    recipe = None
    out["recipes"] = {}
    for judge in ("check", "signals"):
        found = recipes.extract(view, Redactor(), judge)
        out["recipes"][judge] = found.model_dump(exclude={"tools"}) if found is not None else None
        if found is not None:
            out["recipes"][judge]["text"] = render.recipe(found)
            recipe = recipe or found
    lessons = _lessons_of(found_fixes, found_shapes, recipe, task, view.run_id or "r")
    return out, lessons


def _siblings(runs: list[dict[str, Any]]) -> Iterator[tuple[int, int]]:
    """(run, the next run of the same recurring task with another task text) pairs."""
    by_family: dict[str, list[int]] = {}
    for index, run in enumerate(runs):
        by_family.setdefault(_family(run["task"]), []).append(index)
    for members in by_family.values():
        for position, index in enumerate(members):
            later = next((other for other in members[position + 1:] if runs[other]["task"] != runs[index]["task"]),
                         None)
            if later is not None:
                yield index, later


def outputs(corpus: dict[str, Any]) -> dict[str, Any]:
    """Every output of the learning code on the corpus (see the module)."""
    runs = corpus["runs"]
    per_run: list[dict[str, Any]] = []
    kept: list[list[Lesson]] = []
    for run in runs:
        out, lessons = run_outputs(run)
        view = _view(run["steps"], run["task"], run["tools"])
        out["own_lessons"] = [{"id": lesson.id, "text": lesson.text, **_credit(lesson, view)}
                              for lesson in lessons]
        out["own_block"] = _block(lessons, run["task"])
        per_run.append(out)
        kept.append(lessons)
    for index, later in _siblings(runs):
        lessons, run = kept[index], runs[later]
        view = _view(run["steps"], run["task"], run["tools"])
        per_run[later].setdefault("given", []).append({
            "from": index,
            "block": _block(lessons, run["task"]),
            "small_block": _block(lessons, run["task"], max_chars=700),
            "credit": [_credit(lesson, view) for lesson in lessons],
        })
    result: dict[str, Any] = {"runs": per_run}
    result["gate"] = [
        {"reason": gate.reason_to_drop(case["text"], gate.GateContext(
            task=case["task"], final_answer=case["final_answer"], observed=case["observed"], given=case["given"],
            results=[tuple(pair) for pair in case["results"]]), case["rules"]),
         "quarantine": quarantine.reason(case["text"])}
        for case in corpus["gate"]]
    result["credit"] = [_credit(Lesson.model_validate(case["lesson"]), _view(case["steps"], case["task"]))
                        for case in corpus["credit"]]
    result["blocks"] = [_block([Lesson.model_validate(lesson) for lesson in case["lessons"]], case["task"],
                               case["max_chars"]) for case in corpus["block"]]
    return result


if __name__ == "__main__":
    write(EXPECTED, outputs(read(CORPUS)))
    print(f"wrote {EXPECTED}")
