"""What a run observed that the worker keeps without an LLM (its fixes, its tools' result shapes, the calls that
failed with the errors they raised, the recipe of a run that ended well, each with its taint), and the write of a
run's lessons into its bank under the bank's lock."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from lessonbank.core import purge, runs
from lessonbank.core.constants import run_key
from lessonbank.core.models import Recipe, Taint
from lessonbank.learn import evidence, failures, fixes, quarantine, recipes, shapes, taint
from lessonbank.learn.consolidate import Observed
from lessonbank.learn.distill import DraftLesson
from lessonbank.learn.trust import Testimony
from lessonbank.learn.view import RunView
from lessonbank.workers import contradictions, observe, versions
from lessonbank.workers.asking import llm_decider
from lessonbank.workers.consolidate import ConsolidationStats, Consolidator, Thresholds
from lessonbank.workers.deps import Deps, bank_lock, best_effort, view_of
from lessonbank.workers.rekeyed import RekeyMarker

logger = logging.getLogger(__name__)


def recipe_of(deps: Deps, run: runs.Run, view: RunView, source: str) -> Recipe | None:
    """The recipe of a run that ended well (``source``: who judged it), or None (also when extracting fails)."""
    return best_effort(run, "a recipe", lambda: recipes.extract(view, deps.scrubber, source), None)


@dataclass(frozen=True)
class Held:
    """A recipe's taint and why it waits for a user ("" when it need not)."""

    taint: list[Taint] = field(default_factory=list)
    reason: str = ""


def recipe_held(run: runs.Run, view: RunView, recipe: Recipe | None,
                judged: list[taint.Judged] | None = None) -> Held:
    """What the recipe of ``view``'s run carries from what the run observed, and why it waits for a user: the
    quarantine of lessons (a URL or an address its task did not give) and taint's held calls. Held whole when
    working that out fails: a recipe nobody can vouch for is not given."""
    if recipe is None:
        return Held()

    def work() -> Held:
        marks = taint.recipe_marks(recipe, view, judged)
        reason = taint.held_reason(marks) or quarantine.reason(f"{recipe.code}\n{recipe.title}", view.task)
        return Held(marks, reason)

    return best_effort(run, "a recipe's taint", work, Held(reason="its taint could not be worked out"))


def observed(deps: Deps, run: runs.Run, view: RunView, failed: bool = False) -> list[Observed]:
    """The fixes and shapes the run observed that may be kept (none with recipes off, none that need a
    user's eye or carry what looks like a secret; in a run judged wrong, no fix whose corrected line gave
    the wrong answer)."""
    if not deps.settings.keep_observed:
        return []
    found_fixes = found(deps, run, view)
    if failed:
        wrong = [fix for fix in found_fixes if gave_the_answer(run, view, fix)]
        for fix in wrong:
            logger.info("bank %s run %s: not keeping the fix whose corrected line `%s` gave the run's wrong answer",
                        run.bank, run.run_id, evidence.one_line(fix.fixed, 200))
        found_fixes = [fix for fix in found_fixes if fix not in wrong]
    task = recipes.kept_task(run.task, deps.scrubber)
    found_shapes: list[shapes.Shape] = best_effort(run, "observed shapes", lambda: shapes.extract(view, task), [])
    facts = as_observed(found_fixes, task)
    # a shape naming the call that got its records back keeps the task whose words that call passed; a call the
    # gate or the secret scan refuses leaves the shape without it
    judged: list[taint.Judged] = best_effort(run, "the run's calls", lambda: taint.run_calls(view), [])
    found_shapes = [shape if not shape.call or may_keep(deps, shape.text, view, judged)
                    else dataclasses.replace(shape, call="") for shape in found_shapes]
    facts += [Observed(shapes.TAG, shape.fingerprint, shape.steps, shape=shape.payload,
                       task=task if shape.call else "") for shape in found_shapes]
    return keepable(deps, run, facts, view, judged) + failed_calls(deps, run, view, judged)


def failed_calls(deps: Deps, run: runs.Run, view: RunView, judged: list[taint.Judged]) -> list[Observed]:
    """The calls of the run that failed, with the errors they raised (``failures``), each held for a user when the
    error carries what a prose lesson may not (``failure_held``); none that carries what looks like a secret."""
    found: list[failures.Failure] = best_effort(run, "observed failures", lambda: failures.extract(view), [])
    kept = []
    for failure in found:
        if deps.scrubber.has_secret(failure.text):
            logger.info("bank %s run %s: not keeping a failed call whose error looks like it holds a secret",
                        run.bank, run.run_id)
            continue
        marks, why = failure_held(run, view, failure, judged)
        kept.append(Observed(failures.TAG, failure.fingerprint, (failure.step,), failure=failure.payload, hold=why,
                             taint=tuple(marks)))
    if kept:
        logger.info("bank %s run %s: %d failed call(s): %s", run.bank, run.run_id, len(kept),
                    "; ".join(f"{evidence.one_line(fact.text, 120)}{' (held)' if fact.hold else ''}" for fact in kept))
    return kept


def failure_held(run: runs.Run, view: RunView, failure: failures.Failure,
                 judged: list[taint.Judged]) -> tuple[list[Taint], str]:
    """A failure's taint and why it waits for a user: what holds a prose lesson (``taint``, ``quarantine``), or a
    call its error names that the task did not ask for (``failures.named_calls``). Held when that fails."""
    def work() -> tuple[list[Taint], str]:
        marks = taint.text_marks(failure.text, view, judged)
        named = failures.named_calls(failure.payload, view.task, view.tools or ())
        asked = taint.error_asked(named[0], view, f"its error names `{named[0]}(...)`, which the task did not ask "
                                  "for") if named else None
        why = taint.held_reason(marks) or quarantine.reason(failure.text, view.task) or (asked.reason if asked else "")
        return (taint.ordered([*marks, asked]) if asked else marks), why

    unknown: tuple[list[Taint], str] = ([], "its taint could not be worked out")
    return best_effort(run, "a failure's taint", work, unknown)


def may_keep(deps: Deps, text: str, view: RunView | None = None, judged: list[taint.Judged] | None = None) -> bool:
    """Whether an observed fact's text may be kept: it needs no user's eye (nor holds what ``view``'s run was
    told to do by an observation) and carries nothing like a secret."""
    if quarantine.reason(text) or deps.scrubber.has_secret(text):
        return False
    return view is None or not taint.held_reason(taint.text_marks(text, view, judged))


def as_observed(found_fixes: list[fixes.Fix], task: str) -> list[Observed]:
    """The run's fixes as facts to keep, each with ``task``: the run's (``recipes.kept_task``: redacted, capped)."""
    return [Observed("fix", fix.fingerprint, fix.steps, fix=fix.payload, task=task) for fix in found_fixes]


def keepable(deps: Deps, run: runs.Run, facts: list[Observed], view: RunView | None = None,
             judged: list[taint.Judged] | None = None) -> list[Observed]:
    """The observed facts that may be kept: none that needs a user's eye or carries what looks like a secret."""
    facts = [fact for fact in facts if may_keep(deps, fact.text, view, judged)]
    if facts:
        logger.info("bank %s run %s: %d observed fact(s): %s", run.bank, run.run_id, len(facts),
                    "; ".join(f"{fact.tag} {evidence.one_line(fact.text, 100)}" for fact in facts))
    return facts


def found(deps: Deps, run: runs.Run, view: RunView) -> list[fixes.Fix]:
    """The fixes the run observed (``fixes.extract``); none when extracting them fails."""
    return best_effort(run, "observed fixes", lambda: fixes.extract(view, deps.scrubber), [])


def answer_fixes(deps: Deps, run: runs.Run) -> list[fixes.Fix]:
    """The run's fixes whose corrected line gave its answer: the ones its verdict decides on."""
    view = view_of(run)
    return [fix for fix in found(deps, run, view) if gave_the_answer(run, view, fix)]


def gave_the_answer(run: runs.Run, view: RunView, fix: fixes.Fix) -> bool:
    """``fixes.gave_the_answer``; True (the fix is not kept) when checking it fails, as when extracting it does."""
    return best_effort(run, "observed fixes", lambda: fixes.gave_the_answer(fix, view), True)


@observe.traced("lessonbank consolidate", on_result=observe.count_consolidation)
def consolidate(deps: Deps, run: runs.Run, drafts: list[DraftLesson], recipe: Recipe | None,
                verified: bool, facts: list[Observed] | None = None, failed: bool = False,
                said: Testimony | None = None, held: Held | None = None) -> tuple[ConsolidationStats, str | None]:
    """Write the run's drafts, observed facts and recipe (``held``: its taint) into its bank (the decision call
    asked before the bank's lock, the writes under it), each with what the run ``said`` for them; the stats
    and the recipe's id."""
    settings = deps.settings
    thresholds = Thresholds(duplicate=settings.duplicate_similarity, related=settings.related_similarity)
    consolidator = Consolidator(deps.store, run.bank, run.run_id, thresholds, decide=llm_decider(deps.llm),
                                scrubber=deps.scrubber, given=run.given, verified=verified,
                                purged=lambda ids: purge.purged_ids(deps.redis, run.bank, ids), failed=failed,
                                testimony=said, rekeyed=RekeyMarker(deps.redis, run.bank))
    done = runs.load_progress(deps.redis, run.run_id)
    deps.store.warm([draft.text for draft in drafts if not draft.quarantine])  # one batch, one model call
    consolidator.plan(drafts, done)  # the LLM's decision call, before the lock
    with bank_lock(deps.redis, run.bank, settings.distill_lock_timeout):
        if not deps.redis.exists(run_key(run.run_id)) and purge.bank_deleted(deps.redis, run.bank):
            return ConsolidationStats(), None  # its bank was deleted while the LLM answered
        if runs.is_forgotten(deps.redis, run.run_id):
            return ConsolidationStats(), None  # a user forgot the run while the LLM answered
        view = view_of(run)
        versions.review(deps, run, view, verified)  # lessons calling a tool the run has changed go stale first

        def written(indices: list[int]) -> None:
            done.update(indices)
            runs.save_progress(deps.redis, run.run_id, done)

        stats = consolidator.run(drafts, done=set(done), on_done=written)
        for fact in facts or []:
            consolidator.add_observed(fact)
        recipe_id = None
        if recipe is not None:
            steps = [s.seq for s in view.actions if not s.failed]
            held = held or Held()
            recipe_id = consolidator.add_recipe(recipe, steps, held.taint, held.reason)
        versions.stamp(deps, run, view, stats.lesson_ids)
        settled = best_effort(run, "contradictions", lambda: contradictions.settle(
            deps.store, run.bank, run.run_id, stats.lesson_ids, evidence.call_results(view),
            contradictions.cited_results(deps.redis)), 0)
        contradictions.count(deps.redis, settled)
        stats.replaced += settled
    return stats, recipe_id
