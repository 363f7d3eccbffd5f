"""A run's verdict applied to the bank: credit for the lessons it was given (and its summary for reports), and
what a verdict given after its distillation changes in what it taught.

A verdict that arrives after distillation (``lessonbank.feedback``) queues ``credit_one`` for the run,
which replaces the run's earlier credit by its difference; judged a failure, the run's recipe and the fixes
whose corrected line gave its answer are retired when they rest on that run alone. Judged a success by a user
or a check after distillation went by another verdict, the run keeps what a success keeps (its recipe, the
fixes a failure refused), and what a late failure retired for it is active again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from lessonbank.core import runs, summary
from lessonbank.core.constants import RUN_DISTILLED, run_key
from lessonbank.core.models import Lesson
from lessonbank.core.models import recipe_id as fact_id
from lessonbank.learn import credit as rules
from lessonbank.learn import evidence, framing, recipes, trust
from lessonbank.learn.consolidate import Observed, provenance_vouched, vouched_by_another
from lessonbank.learn.verdicts import RECIPE_SOURCES, judged_failed
from lessonbank.learn.view import RunView
from lessonbank.workers import credit, managed, observe
from lessonbank.workers.causal import measure_run
from lessonbank.workers.consolidate import ConsolidationStats
from lessonbank.workers.deps import Deps, NotYetDistilled, bank_lock, refreshed, taught, view_of
from lessonbank.workers.observed import answer_fixes, as_observed, consolidate, keepable, recipe_held, recipe_of
from lessonbank.workers.summaries import summarize_run

logger = logging.getLogger(__name__)


@observe.traced("lessonbank credit")
def credit_one(deps: Deps, bank: str, run_id: str) -> credit.CreditReport | None:
    """Credit the lessons the run was given with its verdict (replacing an earlier credit of the run).

    Raises NotYetDistilled while the run's distillation has not finished.
    """
    run = runs.load_run(deps.redis, run_id)
    if not run.meta:
        logger.info("bank %s run %s: the run is gone (its bank deleted?); no credit", bank, run_id)
        return None
    if runs.FORGOTTEN_FIELD in run.meta:
        logger.info("bank %s run %s: forgotten by a user; no credit", bank, run_id)
        return None
    if run.state != RUN_DISTILLED:
        raise NotYetDistilled(f"run {run_id} is not distilled yet ({run.state or 'unknown'})")
    return credit_run(deps, bank, keep_late_success(deps, run))


def credit_run(deps: Deps, bank: str, run: runs.Run) -> credit.CreditReport | None:
    """Credit the given lessons of a distilled run (or one about to be marked so) and keep its summary."""
    run_id = run.run_id
    given = run.given
    with bank_lock(deps.redis, bank, deps.settings.distill_lock_timeout):
        if not deps.redis.exists(run_key(run_id)) or runs.is_forgotten(deps.redis, run_id):
            return None
        # read under the lock: a verdict given since the run was read is the one credited, and another credit of
        # the run (one whose lease lapsed under a stalled worker) may have held the lock: crediting from what it
        # replaced would count the change twice
        run = refreshed(deps, run)
        verdict, source = run.verdict
        if verdict == "unknown":
            verdict, source = run.judged.get("verdict", "unknown"), run.judged.get("source", "none")
        previous = runs.load_credit(deps.redis, run_id)
        lessons = deps.store.get(bank, given) if given else []
        altered: set[str] = set()
        if run.steps:
            view = view_of(run)
            atoms = rules.run_atoms(view)
            applied = {lesson.id for lesson in lessons if rules.applied(lesson, atoms, run.task)}
            altered = {lesson.id for lesson in lessons if lesson.id in applied and (
                rules.altered(lesson, atoms, run.task) or rules.blameless(lesson, view)
                or rules.unfollowed(lesson, view))}
        else:  # the steps expired: what the run applied was decided when they were there
            applied = {lid for lid, flags in (previous or {}).get("lessons", {}).items() if flags.get("applied")}
            altered = {lid for lid in applied if not previous or not previous["lessons"][lid].get("harmful")}
        report = credit.apply_credit(deps.store, bank, given, applied, verdict, previous, altered)
        _retract_recipe(deps, run, verdict, source)
        _retract_fixes(deps, run, verdict, source)
        if previous and previous.get("verdict") == "failure":  # credited as a failure: it may have retracted some
            _restore_retracted(deps, run, verdict, source)
        _recount_taught(deps, run, verdict, source)
        runs.save_credit(deps.redis, run_id, report.record(verdict))
    _summarize(deps, run, sorted(applied), verdict, source, sorted(altered))
    measure_run(deps, bank, run.meta, run_id)
    managed.pass_down(deps, run)
    if given:
        logger.info("bank %s run %s: credited %d given lesson(s), %d applied, verdict %s (%s), %d retired",
                    bank, run_id, len(given), len(applied), verdict, source, len(report.retired))
    return report


def _summarize(deps: Deps, run: runs.Run, applied: list[str], verdict: str, source: str,
               altered: list[str]) -> None:
    """Keep the run's summary for ``lessonbank report`` (just its verdict once its steps have expired)."""
    if not deps.redis.exists(run_key(run.run_id)):
        return  # deleted with its bank
    known = verdict if verdict in ("success", "failure") else "unknown"
    trusted = source if source in ("user", "check", "signals", "llm") else "none"
    if run.steps:
        summary.save_summary(deps.redis, summarize_run(run, applied, known, trusted,  # type: ignore[arg-type]
                                                       altered))
    else:
        summary.update_verdict(deps.redis, run.bank, run.run_id, known, trusted)  # type: ignore[arg-type]


def _retracted_recipe(run_id: str) -> str:
    """The start of the reason ``_retract_recipe`` gives (the judge follows)."""
    return f"its run {run_id} was judged a failure by "


def _retracted_fix(run_id: str) -> str:
    """The start of the reason ``_retract_fixes`` gives (the judge follows)."""
    return f"its corrected line gave the answer of run {run_id}, judged a failure by "


def _retract_recipe(deps: Deps, run: runs.Run, verdict: str, source: str) -> None:
    """A recipe kept from a run later judged a failure (by a user or a check) is retired if it rests on
    that run alone."""
    recipe_id = run.judged.get("recipe")
    if not recipe_id or verdict != "failure" or source not in ("user", "check"):
        return
    for lesson in deps.store.get(run.bank, [recipe_id]):
        if lesson.status == "active" and lesson.source_run_ids == [run.run_id]:
            deps.store.set_status(run.bank, [recipe_id], "retired", reason=_retracted_recipe(run.run_id) + source,
                                  cause="retracted", cause_run=run.run_id)


def _retract_fixes(deps: Deps, run: runs.Run, verdict: str, source: str) -> None:
    """A fix kept from a run later judged a failure (by a user or a check) is retired if it rests on that run
    alone and its corrected line gave the run's answer: the rule distillation applies to a run already judged
    wrong (``observed.observed``), applied when the verdict comes after it (not once the run's steps have expired: the
    lines are read from them)."""
    if verdict != "failure" or source not in ("user", "check") or not run.steps or not deps.settings.keep_observed:
        return
    judged = run.judged
    if judged_failed(judged.get("verdict", "unknown"), judged.get("source", "none")) and not judged.get("late"):
        return  # distillation knew: it kept no such fix (nor did a later success, ``keep_late_success``)
    for fix in answer_fixes(deps, run):
        fid = fact_id(run.bank, fix.fingerprint, kind="fix")
        for lesson in deps.store.get(run.bank, [fid]):
            if lesson.status != "active" or lesson.source_run_ids != [run.run_id]:
                continue
            deps.store.set_status(run.bank, [fid], "retired", reason=_retracted_fix(run.run_id) + source,
                                  cause="retracted", cause_run=run.run_id)
            logger.info("bank %s run %s: retired the fix whose corrected line `%s` gave the run's wrong answer "
                        "(judged by %s after distillation)", run.bank, run.run_id, evidence.one_line(fix.fixed, 200),
                        source)


def keep_late_success(deps: Deps, run: runs.Run) -> runs.Run:
    """A run judged a success by a user or a check after distillation went by another verdict keeps what a
    success keeps (the run as credited from now on: its ``judged`` names the recipe, its ``taught`` has it).

    A run distilled as anything but a trusted success had no recipe extracted, and, judged wrong, kept no fix
    whose corrected line gave its answer: both are kept now, once (``judged["late"]``), while the run's steps
    are there to read them from. (What a late failure retired is brought back by the credit,
    ``_restore_retracted``.)"""
    verdict, source = run.verdict
    if verdict != "success" or source not in ("user", "check") or not deps.settings.keep_observed:
        return run
    judged = run.judged
    if not run.steps or judged.get("late") or (judged.get("verdict") == "success"
                                                and judged.get("source") in RECIPE_SOURCES):
        return run  # a recipe was kept then: the recount of its vouching (``_recount_taught``) vouches for it now
    view = view_of(run)
    recipe = recipe_of(deps, run, view, source)
    refused: list[Observed] = []
    if judged_failed(judged.get("verdict", "unknown"), judged.get("source", "none")):
        task = recipes.kept_task(run.task, deps.scrubber)
        refused = keepable(deps, run, as_observed(answer_fixes(deps, run), task), view)
    stats, recipe_id = ConsolidationStats(), None
    if recipe is not None or refused:
        said = trust.testimony(run.task, view.final_answer, run.outcome, verdict, source)
        stats, recipe_id = consolidate(deps, run, [], recipe, verified=said.vouched, facts=refused, said=said,
                                       held=recipe_held(run, view, recipe))
    judged = {**judged, "recipe": recipe_id or judged.get("recipe", ""), "late": source}
    now_taught = taught(run, stats.lesson_ids)
    if not runs.set_fields(deps.redis, run.run_id, {"judged": json.dumps(judged), "taught": json.dumps(now_taught)}):
        return run  # deleted with its bank meanwhile
    logger.info("bank %s run %s: judged a success by %s after distillation: %s, %d fix(es) it had refused kept",
                run.bank, run.run_id, source, f"recipe {recipe_id} kept" if recipe_id else "no recipe",
                stats.added)
    return dataclasses.replace(run, meta={**run.meta, "judged": json.dumps(judged),
                                          "taught": json.dumps(now_taught)})


def _restore_retracted(deps: Deps, run: runs.Run, verdict: str, source: str) -> None:
    """Bring back the recipe and the fixes that a late failure of this run retired (``_retract_recipe``,
    ``_retract_fixes``) when a user or a check judges it a success again."""
    if verdict != "success" or source not in ("user", "check") or not deps.settings.keep_observed:
        return
    recipe_id = run.judged.get("recipe")
    wanted = [recipe_id] if recipe_id else []
    wanted += [fact_id(run.bank, fix.fingerprint, kind="fix") for fix in (answer_fixes(deps, run) if run.steps else [])]
    for lesson in deps.store.get(run.bank, list(dict.fromkeys(wanted))) if wanted else []:
        if lesson.status == "retired" and lesson.status_cause == "retracted" and lesson.status_run == run.run_id:
            deps.store.set_status(run.bank, [lesson.id], "active",
                                  reason=f"its run {run.run_id} was judged a success by {source} again",
                                  cause="restored", cause_run=run.run_id)
            logger.info("bank %s run %s: judged a success by %s again: %s %s is active again", run.bank,
                        run.run_id, source, "recipe" if lesson.id == recipe_id else "fix", lesson.id)


def _vouching(run: runs.Run, verdict: str, source: str) -> dict[str, bool]:
    """What a run's verdict makes it for the lessons it taught: judged a failure, vouching, a witness."""
    said = trust.testimony(run.task, "", run.outcome, verdict, source)
    return {"failed": judged_failed(verdict, source), "vouched": said.vouched, "witness": said.witness or said.vouched,
            "judged": said.for_attested().vouched}


def _vouched_for(lesson: Lesson, view: RunView | None, now: dict[str, bool],
                 was: dict[str, bool]) -> tuple[bool, bool]:
    """Whether the run vouches for ``lesson`` now and did before: one that states what a tool of the run raised
    (``framing.attested_by``) is vouched for by any verdict a user or a check gave (``Testimony.for_attested``)."""
    if view is not None and lesson.origin == "distilled" and framing.attested_by(lesson.text, view)[0]:
        return now["judged"], was.get("judged", was["vouched"])
    return now["vouched"], was["vouched"]


def _recount_taught(deps: Deps, run: runs.Run, verdict: str, source: str) -> int:
    """A verdict that came after the run's lessons were written corrects what they hold of the run: judged a
    failure (by a user or a check), the run counts in their ``failed_runs`` and no longer vouches for them (a
    lesson stays verified only while another of its runs does); judged a success again, the reverse. Returns
    how many lessons changed."""
    judged = run.judged
    if not judged or not run.taught:
        return 0
    verdict_then, source_then = judged.get("verdict", "unknown"), judged.get("source", "none")
    was = run.recounted or _vouching(run, verdict_then, source_then)
    now = _vouching(run, verdict, source)
    if now == was:
        return 0
    changed = []
    view = view_of(run) if run.steps else None
    for lesson in deps.store.get(run.bank, run.taught):
        listed = run.run_id in lesson.source_run_ids or lesson.provenance_dropped > 0  # perhaps past its cap
        if not listed or lesson.origin not in ("distilled", "observed", "recipe"):
            continue
        update: dict[str, Any] = {}
        if now["failed"] != was["failed"]:
            update["failed_runs"] = max(lesson.failed_runs + (1 if now["failed"] else -1), 0)
            update["provenance"] = [p.model_copy(update={"failed": now["failed"]}) if p.run_id == run.run_id else p
                                    for p in lesson.provenance]
        vouched, vouched_then = _vouched_for(lesson, view, now, was)
        if vouched != vouched_then or now.get("witness") != was.get("witness"):
            update["provenance"] = trust.restated(
                provenance_vouched(lesson.model_copy(update=update), run.run_id, vouched), run.run_id,
                now["witness"])
            update["verified"] = vouched or vouched_by_another(lesson, run.run_id)
        if update:
            changed.append(lesson.model_copy(update=update))
    if changed:
        deps.store.upsert(changed)
    runs.save_recount(deps.redis, run.run_id, now)
    logger.info("bank %s run %s: judged %s by %s after its lessons were written; %d of them recounted",
                run.bank, run.run_id, verdict, source, len(changed))
    return len(changed)
