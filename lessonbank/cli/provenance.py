"""What ``lessonbank lessons show`` tells about a lesson beyond its fields: the runs it comes from, the
steps it rests on with one-line excerpts (while the runs' steps are kept in Redis, LESSONBANK_STEP_TTL),
each run's task, and a recipe's code. Step text and run ids come from runs or imports: they are printed
without control characters, run ids at most ``RUN_ID_CHARS`` long."""

from __future__ import annotations

import unicodedata
from typing import Any

import click
import redis

from lessonbank.cli.context import CliContext
from lessonbank.core.models import Lesson, Provenance, StepRecord, Taint
from lessonbank.core.runs import load_run
from lessonbank.learn import render, trust
from lessonbank.report.data import human_time

MAX_RUNS = 10
EXCERPT_CHARS = 80
TASK_CHARS = 200
RECIPE_CHARS = 4000
RUN_ID_CHARS = 80
TIME_FIELDS = ("first_seen", "last_seen", "status_changed_at")
# Printed in their own sections below the plain fields.
SECTION_FIELDS = ("provenance", "source_run_ids", "recipe", "causal", "tool_versions", "taint")


def clean(text: str, keep_newlines: bool = False) -> str:
    """``text`` without control characters (tabs and, if asked, newlines kept)."""
    keep = "\t\n" if keep_newlines else "\t"
    return "".join(ch if ch in keep or unicodedata.category(ch)[0] != "C" else " " for ch in text)


def one_line(text: str, cap: int) -> str:
    """``text`` on one line, at most ``cap`` characters."""
    line = " ".join(clean(text).split())
    return line if len(line) <= cap else line[: cap - 1] + "…"


def step_excerpt(step: StepRecord) -> str:
    """One line: the step's plan, code or tool calls, observation, error, answer or outcome."""
    parts: list[tuple[str, str]] = [("plan", step.plan), ("code", step.code)]
    parts += [("call", f"{call.name}({call.arguments})") for call in step.tool_calls]
    parts.append(("observation", step.observations))
    if step.error_type or step.error_message:
        parts.append(("error", f"{step.error_type}: {step.error_message}".strip(": ")))
    if step.kind == "final" or step.is_final:
        parts.append(("answer", step.action_output))
    parts.append(("outcome", step.outcome or ""))
    return " | ".join(f"{label}: {one_line(text, EXCERPT_CHARS)}" for label, text in parts if text.strip())


def source_refs(lesson: Lesson) -> list[Provenance]:
    """One entry per source run: its provenance steps merged, runs without provenance added with none."""
    steps: dict[str, set[int]] = {}
    for ref in lesson.provenance:
        steps.setdefault(ref.run_id, set()).update(ref.steps)
    for run_id in lesson.source_run_ids:
        steps.setdefault(run_id, set())
    return [Provenance(run_id=run_id, steps=sorted(seqs)) for run_id, seqs in steps.items()]


def run_source(client: redis.Redis | None, ref: Provenance, bank: str) -> dict[str, Any]:
    """What Redis still holds of one source run of ``bank``, and excerpts of the steps the lesson rests on
    (nothing of a run of another bank: an imported lesson may name any run id)."""
    data: dict[str, Any] = {"run_id": ref.run_id, "steps": ref.steps, "checked": client is not None, "kept": False,
                            "task": "", "outcome": "", "verdict": "", "started_at": None, "excerpts": []}
    if client is None:
        return data
    run = load_run(client, ref.run_id)
    if (not run.meta and not run.steps) or any(step.bank != bank for step in run.steps) or run.bank not in ("", bank):
        return data
    started = run.meta.get("started_at")
    verdict, source = run.verdict
    data.update(kept=bool(run.steps), task=one_line(run.task, TASK_CHARS), outcome=run.outcome,
                verdict=f"{verdict} ({source})" if verdict != "unknown" else "",
                started_at=human_time(float(started)) if started else None)
    wanted = set(ref.steps)
    data["excerpts"] = [
        {"seq": s.seq, "kind": s.kind, "step_number": s.step_number, "excerpt": step_excerpt(s)}
        for s in run.steps if s.seq in wanted
    ]
    return data


def lesson_sources(cli: CliContext, lessons: list[Lesson]) -> dict[str, dict[str, Any]]:
    """Lesson id -> its source runs (at most MAX_RUNS, newest provenance last) as JSON-ready data."""
    try:
        client: redis.Redis | None = cli.redis()
        problem = None
    except click.ClickException as e:
        client, problem = None, e.message
    result: dict[str, dict[str, Any]] = {}
    for lesson in lessons:
        refs = source_refs(lesson)
        shown = refs[-MAX_RUNS:]
        try:
            runs = [run_source(client, ref, lesson.bank) for ref in shown]
        except redis.RedisError as e:
            client, problem = None, f"Redis error: {e}"
            runs = [run_source(None, ref, lesson.bank) for ref in shown]
        more = len(refs) - len(shown) + lesson.provenance_dropped  # and those past the provenance cap
        result[lesson.id] = {"runs": runs, "more_runs": more, "steps_unavailable": problem}
    return result


def _print_run(run: dict[str, Any]) -> None:
    run_id = one_line(run["run_id"], RUN_ID_CHARS)
    if not run["checked"]:
        click.echo(f"  run {run_id} (steps {run['steps'] or 'not recorded'})")
        return
    if not run["task"] and not run["kept"]:
        click.echo(f"  run {run_id}: no longer kept in Redis (steps {run['steps'] or 'not recorded'})")
        return
    outcome = one_line(run["outcome"] or "-", TASK_CHARS)
    # the run's own end, and what a user or a check said of it: "outcome success" alone read as a good run
    verdict = f", verdict {one_line(run['verdict'], TASK_CHARS)}" if run["verdict"] else ""
    click.echo(f"  run {run_id}: started {run['started_at'] or '-'}, outcome {outcome}{verdict}")
    if run["task"]:
        click.echo(f"    task: {run['task']}")
    if not run["kept"]:
        click.echo(f"    steps {run['steps']}: no longer kept in Redis")
        return
    found = {item["seq"] for item in run["excerpts"]}
    for item in run["excerpts"]:
        number = f", step {item['step_number']}" if item["step_number"] is not None else ""
        click.echo(f"    #{item['seq']} ({clean(item['kind'])}{number}): {item['excerpt'] or '(empty)'}")
    for seq in run["steps"]:
        if seq not in found:
            click.echo(f"    #{seq}: not among the run's kept steps")


def _print_measures(lesson: Lesson) -> None:
    """What its per-lesson holdout measured, and the tools it was learnt on."""
    from lessonbank.learn import causal, fingerprint

    measured = lesson.causal
    click.echo("causal: " + (causal.describe(measured) if measured is not None and causal.label(measured)
                             else "never withheld from a run yet"))
    for learnt in lesson.tool_versions:
        click.echo(f"learnt on: {clean(learnt.signature)}")
    if (warning := fingerprint.warning(lesson)):
        click.echo(f"  warning: {clean(warning)}")


def given_to_runs(lesson: Lesson) -> str:
    """Whether runs are given the lesson, and who vouches for it or what it waits for, in words."""
    if trust.eligible(lesson):
        return f"yes (vouched for by {trust.voucher(lesson)})"
    if lesson.status == "quarantined" or any(mark.held for mark in lesson.taint):
        return "no: held until a user releases it (lessons release)"
    if lesson.status != "active":
        return f"no: {lesson.status}"
    return "no: waiting for a user, a check or a second run that agrees"


def print_taint(mark: Taint) -> None:
    """One taint mark: what came from which observation (by run and step), held or not, and why."""
    where = (f" first observed by run {one_line(mark.run_id, RUN_ID_CHARS)} at step {mark.step}: "
             f"\"{one_line(mark.observed, TASK_CHARS)}\"") if mark.step is not None else ""
    why = f" ({one_line(mark.reason, 2 * TASK_CHARS)})" if mark.held else ""
    click.echo(f"{'held' if mark.held else 'taint'}: {mark.kind} `{one_line(mark.value, TASK_CHARS)}`{where}{why}")


def print_lesson(lesson: Lesson, sources: dict[str, Any]) -> None:
    """The lesson's fields (times readable; a payload that could not be read said so, with why), its source runs
    with step excerpts, and its recipe."""
    said, unreadable = render.readable(lesson)
    for name, value in lesson.model_dump(mode="json").items():
        if name in SECTION_FIELDS:
            continue
        shown = said if name == "text" else human_time(value) if name in TIME_FIELDS else value
        click.echo(f"{name}: {clean(shown) if isinstance(shown, str) else shown}")
        if name == "text" and unreadable:
            click.echo(f"unreadable: {clean(unreadable)} (the text above is as stored)")
    click.echo(f"utility: {lesson.utility:.3f}")
    click.echo(f"given to runs: {given_to_runs(lesson)}")
    for mark in lesson.taint:
        print_taint(mark)
    _print_measures(lesson)
    runs = sources["runs"]
    click.echo(f"sources: {len(runs) + sources['more_runs']} run(s)" + (":" if runs else ""))
    if sources["steps_unavailable"]:
        click.echo(f"  (steps unavailable: {sources['steps_unavailable']})")
    for run in runs:
        _print_run(run)
    if sources["more_runs"]:
        click.echo(f"  … and {sources['more_runs']} older run(s)")
    recipe = lesson.recipe
    if recipe is not None:
        checks = one_line(", ".join(recipe.checks), TASK_CHARS) or "none"
        title = f": {one_line(recipe.title, TASK_CHARS)}" if recipe.title else ""
        click.echo(f"recipe ({recipe.language}; checks: {checks}){title}")
        if recipe.task:
            click.echo(f"  task: {one_line(recipe.task, TASK_CHARS)}")
        code = clean(recipe.code, keep_newlines=True)
        code = code if len(code) <= RECIPE_CHARS else code[:RECIPE_CHARS] + "\n…"
        click.echo("\n".join("    " + line for line in code.splitlines()))
