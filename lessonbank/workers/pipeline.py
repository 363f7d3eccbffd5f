"""Distilling one run, start to finish, as plain functions the Celery tasks wrap.

read the run -> wait briefly for the user's check -> judge the outcome (user, check, the run's own
signals; the LLM only when nobody else can) -> mine evidence -> ONE LLM call (output checkpointed in
Redis) -> quality gate, taint and quarantine -> consolidate, keep the recipe of a run that ended well and the
fixes the run observed, each with what the run says for it (``trust.Testimony``), under the bank's lock ->
credit the lessons the run was given and applied, keep its summary -> mark the run distilled (so whoever
waits for that state sees the credit and the summary too).

What a run teaches and how it is judged is ``lessonbank.learn``'s, over the run's view; this module reads and
writes around it. A verdict given after distillation is ``lessonbank.workers.verdicts``'.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import Counter

import redis

from lessonbank.core import purge, runs, summary
from lessonbank.core.constants import DROPPED_KEY, LLM_STATS_KEY, RUN_DISTILLED, pending_lesson_key, run_key
from lessonbank.core.exceptions import PermanentDistillError, UnusableOutput
from lessonbank.core.models import Lesson
from lessonbank.core.tokens import tokens
from lessonbank.learn import evidence, framing, gate, quarantine, taint, trust, types_claims
from lessonbank.learn.distill import DistillOutput, DraftLesson
from lessonbank.learn.transcript import build_transcript, transcript_tokens
from lessonbank.learn.verdicts import RECIPE_SOURCES, by_llm, judge, judged_failed
from lessonbank.learn.view import RunView
from lessonbank.workers import managed, observe
from lessonbank.workers.asking import distill, llm_decider
from lessonbank.workers.consolidate import ConsolidationStats, Consolidator, Thresholds
from lessonbank.workers.deps import Deps, bank_lock, best_effort, refreshed, taught, view_of
from lessonbank.workers.observed import consolidate, observed, recipe_held, recipe_of
from lessonbank.workers.verdicts import credit_run, keep_late_success

logger = logging.getLogger(__name__)

CHECK_WAIT = 30.0
CHECK_POLL = 0.2
SIMILAR_TASK = 0.5

__all__ = ["Deps", "bank_lock", "distill_one", "remember_one"]


def wait_for_check(client: redis.Redis, run: runs.Run, wait: float = CHECK_WAIT) -> runs.Run:
    """The run once the user's check on its final answer has reported (or after ``wait`` seconds)."""
    deadline = time.monotonic() + wait
    while run.check_pending and time.monotonic() < deadline:
        time.sleep(CHECK_POLL)
        run = runs.load_run(client, run.run_id)
    if run.check_pending:
        logger.info("run %s: the check on its final answer did not report within %.0fs", run.run_id, wait)
    return run


def _lessons_of(deps: Deps, run: runs.Run, view: RunView, mined: list[evidence.Evidence], verdict: str,
                source: str) -> DistillOutput:
    """The LLM's lessons for the run: from the checkpoint of an earlier attempt, else one LLM call."""
    saved = runs.load_checkpoint(deps.redis, run.run_id)
    if saved is not None:
        try:
            output = DistillOutput.model_validate_json(saved)
            logger.info("bank %s run %s: reusing the LLM output of an earlier attempt", run.bank, run.run_id)
            return output
        except ValueError:
            logger.warning("bank %s run %s: unreadable checkpoint, asking the LLM again", run.bank, run.run_id)
    budget = max(deps.settings.transcript_budget_chars - sum(len(e.text) for e in mined), 1500)
    tokens = transcript_tokens(e.text for e in mined)  # the prompt stays under ~3,000 tokens
    transcript = build_transcript(view, budget, max_tokens=tokens, repeat_task=False)
    try:
        result = distill(deps.llm, run.task, mined, transcript, deps.settings.distill_max_lessons, verdict, source,
                         deps.scrubber)
    except UnusableOutput as e:
        # a model that loops on this run would loop again: the run is distilled without its lessons, so that
        # its credit, summary, observed fixes and recipe are not lost with them (a failed run's most of all)
        logger.warning("bank %s run %s: %s; distilling the run without the LLM's lessons", run.bank, run.run_id, e)
        observe.count_llm_error("unusable")
        if runs.save_checkpoint(deps.redis, run.run_id, DistillOutput().model_dump_json(), llm_error=str(e)[:300]):
            deps.redis.hincrby(LLM_STATS_KEY, "unusable", 1)  # `lessonbank status`
        return DistillOutput()
    prompt_tokens, completion_tokens = result.tokens
    logger.info(
        "bank %s run %s: LLM answered in %.2fs (%d call(s), %d+%d tokens, %d lessons, %d malformed, judged %s)",
        run.bank, run.run_id, result.latency, len(result.replies), prompt_tokens, completion_tokens,
        len(result.output.lessons), result.output.malformed, result.output.outcome,
    )
    runs.save_checkpoint(deps.redis, run.run_id, result.output.model_dump_json())
    return result.output


def _screen(deps: Deps, run: runs.Run, view: RunView, drafts: list[DraftLesson], given: list[Lesson],
            judged: list[taint.Judged]) -> list[DraftLesson]:
    """The drafts the gate lets through, each with its taint and why it waits for a user ("" when it need not)."""
    context = gate.GateContext(task=run.task, final_answer=view.final_answer, observed=evidence.observed_text(view),
                               given=[g.text for g in given], results=evidence.call_results(view),
                               types=types_claims.seen_in(view), redactor=deps.scrubber)
    kept, dropped, salvaged = framing.screen([draft.text for draft in drafts], context, view)
    count_drops(deps.redis, run.bank, f"run {run.run_id}", dropped)
    if salvaged:
        logger.info("bank %s run %s: kept the fact of %d story-framed lesson(s)", run.bank, run.run_id, salvaged)
    return [_held(run, view, drafts[i].model_copy(update={"text": text}), judged) for i, text in kept]


def _held(run: runs.Run, view: RunView, draft: DraftLesson, judged: list[taint.Judged]) -> DraftLesson:
    """``draft`` with its taint, why it waits for a user, and the tool whose error states it: held whole when
    working that out fails."""
    def work() -> DraftLesson:
        marks = taint.text_marks(draft.text, view, judged)
        tool, asked = framing.attested_by(draft.text, view)
        named = taint.error_asked(asked[0], view, f"it names `{asked[0]}(...)`, which an error of `{tool}` asked for "
                                  "and the task did not") if asked else None
        why = taint.held_reason(marks) or quarantine.reason(draft.text, view.task) or (named.reason if named else "")
        marks = taint.ordered([*marks, named]) if named else marks
        return draft.model_copy(update={"quarantine": why, "taint": marks, "attested": tool})

    return best_effort(run, "a lesson's taint", work,
                       draft.model_copy(update={"quarantine": "its taint could not be worked out"}))


def count_drops(client: redis.Redis, bank: str, label: str, dropped: Counter[str]) -> None:
    """Log and count (``lessonbank status``) the lessons the gate dropped, by reason."""
    if not dropped:
        return
    observe.count_drops(dropped)
    logger.info("bank %s %s: gate dropped %s", bank, label, ", ".join(f"{n} {r}" for r, n in sorted(dropped.items())))
    pipe = client.pipeline(transaction=False)
    for reason, count in dropped.items():
        pipe.hincrby(DROPPED_KEY, reason, count)
    pipe.execute()


@observe.distillation
def distill_one(deps: Deps, bank: str, run_id: str) -> ConsolidationStats | None:
    """Distill the run into the bank, then credit what it was given; None if it was already distilled.

    Raises TransientDistillError / ServiceUnavailable / StoreError (retry) or PermanentDistillError.
    """
    started = time.monotonic()
    run = runs.load_run(deps.redis, run_id)
    if not run.meta and not run.steps:  # deleted with its bank (or never recorded): nothing to keep
        logger.info("bank %s run %s: the run is gone (its bank deleted?); nothing to do", bank, run_id)
        return None
    if runs.FORGOTTEN_FIELD in run.meta:
        logger.info("bank %s run %s: forgotten by a user; nothing to do", bank, run_id)
        return None
    if run.state == RUN_DISTILLED:
        if run.followup:
            return follow_up(deps, bank, run)
        logger.info("bank %s run %s: already distilled, nothing to do", bank, run_id)
        return None
    if run.bank and run.bank != bank:
        raise PermanentDistillError(f"run {run_id} belongs to bank {run.bank!r}, not {bank!r}")
    if not run.steps:
        raise PermanentDistillError(f"run {run_id} has no step records (never recorded, or expired)")
    run.meta.setdefault("bank", bank)
    attempt = runs.count_attempt(deps.redis, run_id)
    if not attempt:
        logger.info("bank %s run %s: the run is gone (its bank deleted?); nothing to do", bank, run_id)
        return None
    run = managed.inherit(deps, wait_for_check(deps.redis, run))
    view = view_of(run)
    verdict, source = _judged(run, view)
    logger.info("bank %s run %s: attempt %d, %d step records (%d malformed skipped), outcome %s, verdict %s (%s)",
                bank, run_id, attempt, len(run.steps), run.malformed, run.outcome, verdict, source)
    mined = evidence.mine(view, verdict, source, contrast(deps, run, verdict))
    output = _lessons_of(deps, run, view, mined, verdict, source)
    verdict, source = by_llm((verdict, source), output.outcome, view)
    given = deps.store.get(bank, run.given) if run.given else []
    calls: list[taint.Judged] = best_effort(run, "the run's calls", lambda: taint.run_calls(view), [])
    drafts = _screen(deps, run, view, output.lessons, given, calls)
    recipe = None
    if verdict == "success" and source in RECIPE_SOURCES and deps.settings.keep_observed:
        recipe = recipe_of(deps, run, view, source)
    failed = judged_failed(verdict, source)
    facts = observed(deps, run, view, failed)
    said = trust.testimony(run.task, view.final_answer, run.outcome, verdict, source)
    stats, recipe_id = consolidate(deps, run, drafts, recipe, verified=said.vouched, facts=facts, failed=failed,
                                   said=said, held=recipe_held(run, view, recipe, calls))
    if _gone(deps, bank, run_id):
        return stats
    judged = {"verdict": verdict, "source": source, "recipe": recipe_id or ""}
    # credited (and its summary kept for `lessonbank report`) before it is marked distilled: whoever waits for
    # "distilled" (the next run's instructions, a report, the demo) sees the run's credit and summary too
    distilled = keep_late_success(deps, _as_distilled(deps, run, judged, taught(run, stats.lesson_ids)))
    credit_run(deps, bank, distilled)
    _mark_distilled(deps, run, stats, distilled.judged, distilled.taught)
    logger.info(
        "bank %s run %s: distilled in %.2fs: %d added, %d reinforced, %d merged, %d replaced, %d echoes, "
        "%d skipped, %d recipe(s)", bank, run_id, time.monotonic() - started, stats.added, stats.reinforced,
        stats.merged, stats.replaced, stats.echoes, stats.skipped, stats.recipes,
    )
    return stats


def _gone(deps: Deps, bank: str, run_id: str) -> bool:
    """Whether the run went while it was distilled (forgotten by a user, deleted with its bank, or lost by Redis):
    nothing more is written for it then."""
    if runs.is_forgotten(deps.redis, run_id):
        logger.info("bank %s run %s: forgotten by a user while it was distilled; nothing more is written", bank,
                    run_id)
        return True
    if deps.redis.exists(run_key(run_id)):
        return False
    if purge.bank_deleted(deps.redis, bank):
        logger.info("bank %s run %s: deleted while it was distilled; nothing more is written", bank, run_id)
    else:
        logger.warning("bank %s run %s: the run vanished from Redis while it was distilled (a restart of a Redis "
                       "that keeps nothing on disk?); its lessons are kept, nothing more is written", bank, run_id)
    return True


def _judged(run: runs.Run, view: RunView) -> tuple[str, str]:
    """The run's verdict and its source before the LLM's (``judge``), saying why a run that ended well by its
    signals is no success."""
    verdict, source = judge(run.verdict, view)
    if source in ("signals", "none") and (problem := trust.answer_problem(view)):
        logger.info("bank %s run %s: not a success whatever its signals: %s", run.bank, run.run_id, problem)
    return verdict, source


def _as_distilled(deps: Deps, run: runs.Run, judged: dict[str, str], lesson_ids: list[str]) -> runs.Run:
    """The run as its credit reads it once distilled: what distillation judged and taught, and the verdict a
    user or a check gave meanwhile (one given after the credit's read is credited by a credit task of its own:
    queued by ``set_verdict`` once the run is marked distilled, or, before that, by the marking,
    ``runs.credit_if_changed``)."""
    return refreshed(deps, dataclasses.replace(run, meta={**run.meta, "judged": json.dumps(judged),
                                                           "taught": json.dumps(lesson_ids)}))


def _mark_distilled(deps: Deps, run: runs.Run, stats: ConsolidationStats, judged: dict[str, str] | None,
                    lesson_ids: list[str] | None = None) -> None:
    """Mark the run distilled up to the last record read; steps that arrived meanwhile get a follow-up."""
    upto = max((step.seq for step in run.steps), default=-1)
    runs.mark_distilled(deps.redis, run.run_id, deps.settings.step_ttl, stats.as_dict(), judged, upto,
                        taught(run, stats.lesson_ids) if lesson_ids is None else lesson_ids)
    if runs.credit_if_changed(deps.redis, run.bank, run.run_id, deps.settings.queue):
        logger.info("bank %s run %s: a verdict came as the run was credited; it is credited again", run.bank,
                    run.run_id)
    if runs.step_count(deps.redis, run.run_id) > len(run.steps) + run.malformed:
        runs.queue_followup(deps.redis, run.bank, run.run_id, deps.settings.queue)


def follow_up(deps: Deps, bank: str, run: runs.Run) -> ConsolidationStats | None:
    """Distill the steps a distilled run got after its distillation (a long step, a late spool), alone."""
    late = [step for step in run.steps if step.seq > run.distilled_upto]
    if not late:
        _mark_distilled(deps, run, ConsolidationStats(), None)
        return None
    verdict, source = run.judged.get("verdict", "unknown"), run.judged.get("source", "none")
    logger.info("bank %s run %s: follow-up distillation of %d late step record(s)", bank, run.run_id, len(late))
    partial = dataclasses.replace(run, steps=late)
    whole = view_of(run)
    view = whole.only([step for step in whole.steps if step.seq > run.distilled_upto])
    output = _lessons_of(deps, partial, view, evidence.mine(view, verdict, source), verdict, source)
    given = deps.store.get(bank, run.given) if run.given else []
    drafts = _screen(deps, partial, view, output.lessons, given,
                     best_effort(run, "the run's calls", lambda: taint.run_calls(whole), []))
    said = trust.testimony(run.task, whole.final_answer, run.outcome, verdict, source)
    stats, _ = consolidate(deps, run, drafts, None, verified=said.vouched, failed=judged_failed(verdict, source),
                           said=said)
    _mark_distilled(deps, run, stats, None)
    return stats


def contrast(deps: Deps, run: runs.Run, verdict: str) -> evidence.Evidence | None:
    """What a run of a similar task with the opposite verdict did: a recipe that worked for a failed run,
    the first error of a failed run for a run that ended well (None when there is none)."""
    if verdict == "failure":
        for lesson, score in deps.store.similar(run.bank, f"Working code for a task like: {run.task}", limit=3):
            if lesson.recipe is not None and score >= SIMILAR_TASK and eligible_recipe(lesson):
                lines = " / ".join(evidence.one_line(line, 100) for line in lesson.recipe.code.splitlines()[:8])
                return evidence.Evidence("C", "contrast", [], f"a run of a similar task that ended well ran: `{lines}`")
        return None
    if verdict != "success":
        return None
    mine = set(tokens(run.task))
    for other in reversed(summary.load_summaries(deps.redis, run.bank)[-50:]):
        theirs = set(tokens(other.task))
        similar = len(mine & theirs) / len(mine | theirs) if mine and theirs else 0.0
        if other.run_id == run.run_id or other.verdict != "failure" or similar < SIMILAR_TASK:
            continue
        failed = view_of(runs.load_run(deps.redis, other.run_id))
        first = next((s for s in failed.actions if s.failed), None)
        if first is not None:
            error = evidence.one_line(f"{first.error_type}: {first.error_message}", 200)
            code = evidence.one_line(first.code, 160)
            return evidence.Evidence("C", "contrast", [], f"a run of a similar task that failed ran `{code}` and "
                                     f"got {error}")
    return None


def eligible_recipe(lesson: Lesson) -> bool:
    return lesson.status == "active" and lesson.harmful <= lesson.helpful


@observe.traced("lessonbank remember", on_result=observe.count_consolidation)
def remember_one(deps: Deps, bank: str, pending_id: str) -> ConsolidationStats | None:
    """Consolidate a lesson an agent handed in (parked at ``pending_lesson_key``); None if already done."""
    key = pending_lesson_key(pending_id)
    raw = deps.redis.get(key)
    if raw is None:
        logger.info("bank %s: remembered lesson %s already consolidated or expired", bank, pending_id)
        return None
    try:
        lesson = Lesson.from_json(raw)
    except ValueError as e:
        raise PermanentDistillError(f"remembered lesson {pending_id} is not a valid lesson") from e
    if lesson.bank != bank:
        raise PermanentDistillError(f"remembered lesson {pending_id} belongs to another bank")
    reason = gate.reason_to_drop(lesson.text, gate.GateContext(redactor=deps.scrubber), gate.CONTEXT_FREE)
    if reason is not None:
        count_drops(deps.redis, bank, f"remembered lesson {pending_id}", Counter({reason: 1}))
        if logger.isEnabledFor(logging.DEBUG):  # the text's secret scan only when it is logged
            logger.debug("bank %s remembered lesson %s: gate dropped it (%s): %s", bank, pending_id, reason,
                         deps.scrubber.loggable(lesson.text))
        deps.redis.delete(key)
        return ConsolidationStats()
    draft = DraftLesson(kind=lesson.kind, text=lesson.text, tags=lesson.tags,
                        quarantine=quarantine.reason(lesson.text))
    settings = deps.settings
    thresholds = Thresholds(duplicate=settings.duplicate_similarity, related=settings.related_similarity)
    with bank_lock(deps.redis, bank, settings.distill_lock_timeout):
        if not deps.redis.exists(key):  # its bank was deleted meanwhile
            return None
        stats = Consolidator(deps.store, bank, f"remembered:{pending_id}", thresholds, decide=llm_decider(deps.llm),
                             scrubber=deps.scrubber, origin="remembered",
                             purged=lambda ids: purge.purged_ids(deps.redis, bank, ids)).run([draft])
    deps.redis.delete(key)
    logger.info("bank %s: remembered lesson %s: %d added, %d reinforced, %d merged, %d skipped, %d dropped",
                bank, pending_id, stats.added, stats.reinforced, stats.merged, stats.skipped, stats.dropped_secret)
    return stats
