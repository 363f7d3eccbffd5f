"""Distilling one run, start to finish, as plain functions the Celery tasks wrap.

read the run -> wait briefly for the user's check -> judge the outcome (user, check, the run's own
signals; the LLM only when nobody else can) -> mine evidence -> ONE LLM call (output checkpointed in
Redis) -> quality gate -> consolidate, keep the recipe of a run that ended well and the fixes the run
observed, under the bank's lock -> credit the lessons the run was given and applied, keep its summary ->
mark the run distilled (so whoever waits for that state sees the credit and the summary too).

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
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
from redis.exceptions import LockError

from lessonbank.core import fixtext, purge, runs, summary
from lessonbank.core.connections import redis_text
from lessonbank.core.constants import (
    BANK_LOCK_POLL,
    DROPPED_KEY,
    LLM_STATS_KEY,
    RUN_DISTILLED,
    bank_lock_key,
    pending_lesson_key,
    run_key,
)
from lessonbank.core.embeddings import tokens
from lessonbank.core.exceptions import PermanentDistillError, TransientDistillError, UnusableOutput
from lessonbank.core.models import Lesson, Recipe
from lessonbank.core.models import recipe_id as fact_id
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.workers import credit, evidence, fixes, gate, observe, recipes, shapes
from lessonbank.workers.consolidate import ConsolidationStats, Consolidator, Thresholds, provenance_vouched
from lessonbank.workers.decide import llm_decider
from lessonbank.workers.distiller import DistillOutput, DraftLesson, distill
from lessonbank.workers.llm import ChatLLM
from lessonbank.workers.transcript import build_transcript, transcript_tokens

logger = logging.getLogger(__name__)
T = TypeVar("T")

CHECK_WAIT = 30.0
CHECK_POLL = 0.2
TRUSTED = ("user", "check", "signals")


class NotYetDistilled(TransientDistillError):
    """A verdict arrived for a run whose distillation has not finished: credit it once it has."""


@dataclass
class Deps:
    """What distilling needs, built once per process."""

    settings: Settings
    redis: redis.Redis
    store: LessonStoreProtocol
    llm: ChatLLM
    scrubber: Redactor


@contextmanager
def bank_lock(client: redis.Redis, bank: str, timeout: int) -> Iterator[None]:
    """Hold the bank's consolidation lock; TransientDistillError if it stays taken for `timeout` seconds."""
    lock = client.lock(bank_lock_key(bank), timeout=timeout, blocking_timeout=timeout, sleep=BANK_LOCK_POLL)
    if not lock.acquire():
        raise TransientDistillError(f"bank {bank} stayed locked for {timeout}s")
    try:
        yield
    finally:
        try:
            lock.release()
        except LockError:
            logger.warning("bank %s: consolidation lock expired before release", bank)


def wait_for_check(client: redis.Redis, run: runs.Run, wait: float = CHECK_WAIT) -> runs.Run:
    """The run once the user's check on its final answer has reported (or after ``wait`` seconds)."""
    deadline = time.monotonic() + wait
    while run.check_pending and time.monotonic() < deadline:
        time.sleep(CHECK_POLL)
        run = runs.load_run(client, run.run_id)
    if run.check_pending:
        logger.info("run %s: the check on its final answer did not report within %.0fs", run.run_id, wait)
    return run


def judged_failed(verdict: str, source: str) -> bool:
    """Whether a user, a check or the run's own ending judged the run a failure: what it did is no evidence
    that it works (counted on the lessons it teaches, ``Lesson.failed_runs``)."""
    return verdict == "failure" and source in TRUSTED


def vouches(run: runs.Run, verdict: str, source: str) -> bool:
    """Whether the run's distilled lessons may be handed out at once: a success a user or a check judged,
    reached by the run itself. A run stopped at its step limit whose forced answer the check found right
    floundered to the end (seen in the learning benchmark: seven steps, then "The task was to find the
    highest temperature in Porto on 2024-09-15." handed to the next two runs); its lessons wait for
    evidence like any others."""
    return verdict == "success" and source in TRUSTED and run.outcome != "max_steps"


def signals(run: runs.Run) -> str:
    """What the run's own ending says: ``failure`` (exception, max steps, no final answer), ``success``
    (a final answer and no error in the last action step) or ``unknown``."""
    outcome = run.outcome
    if outcome in ("error", "max_steps", "interrupted", "abandoned"):
        return "failure"
    if outcome != "success":
        return "unknown"
    actions = [step for step in run.steps if step.kind == "action"]
    last = actions[-1] if actions else None
    return "failure" if last is not None and evidence.failed(last) else "success"


def judge(run: runs.Run) -> tuple[str, str]:
    """(verdict, source), most trusted source first: the user or the check, then the run's signals."""
    verdict, source = run.verdict
    if verdict != "unknown":
        return verdict, source
    by_signals = signals(run)
    return (by_signals, "signals") if by_signals != "unknown" else ("unknown", "none")


def _lessons_of(deps: Deps, run: runs.Run, mined: list[evidence.Evidence], verdict: str,
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
    transcript = build_transcript(run.task, run.outcome, run.steps, budget, max_tokens=tokens, repeat_task=False)
    try:
        result = distill(deps.llm, run.task, mined, transcript, deps.settings.max_lessons, verdict, source)
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


def _screen(deps: Deps, run: runs.Run, drafts: list[DraftLesson], given: list[Lesson]) -> list[DraftLesson]:
    context = gate.GateContext(task=run.task, final_answer=evidence.final_answer(run.steps),
                               observed=evidence.observed_text(run.steps), given=[g.text for g in given],
                               results=evidence.call_results(run.steps), redactor=deps.scrubber)
    kept, dropped = gate.screen([draft.text for draft in drafts], context)
    count_drops(deps.redis, run.bank, f"run {run.run_id}", dropped)
    return [drafts[i].model_copy(update={"quarantine": gate.quarantine_reason(drafts[i].text)}) for i in kept]


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
    run = wait_for_check(deps.redis, run)
    verdict, source = judge(run)
    logger.info("bank %s run %s: attempt %d, %d step records (%d malformed skipped), outcome %s, verdict %s (%s)",
                bank, run_id, attempt, len(run.steps), run.malformed, run.outcome, verdict, source)
    mined = evidence.mine(run.steps, run.outcome, verdict, source, contrast(deps, run, verdict))
    output = _lessons_of(deps, run, mined, verdict, source)
    if source == "none" and output.outcome in ("success", "failure"):
        verdict, source = output.outcome, "llm"
    given = deps.store.get(bank, run.given) if run.given else []
    drafts = _screen(deps, run, output.lessons, given)
    recipe = None
    if verdict == "success" and source in TRUSTED and deps.settings.recipes:
        recipe = _best_effort(run, "a recipe", lambda: recipes.extract(
            run.steps, run.task, runs.json_list(run.meta.get("tools")), deps.scrubber, source), None)
    failed = judged_failed(verdict, source)
    observed = _observed(deps, run, given, failed)
    stats, recipe_id = _consolidate(deps, run, drafts, recipe, verified=vouches(run, verdict, source),
                                    observed=observed, failed=failed)
    if not deps.redis.exists(run_key(run_id)):
        if purge.bank_deleted(deps.redis, bank):
            logger.info("bank %s run %s: deleted while it was distilled; nothing more is written", bank, run_id)
        else:
            logger.warning("bank %s run %s: the run vanished from Redis while it was distilled (a restart of a Redis "
                           "that keeps nothing on disk?); its lessons are kept, nothing more is written", bank, run_id)
        return stats
    judged = {"verdict": verdict, "source": source, "recipe": recipe_id or ""}
    # credited (and its summary kept for `lessonbank report`) before it is marked distilled: whoever waits for
    # "distilled" (the next run's instructions, a report, the demo) sees the run's credit and summary too
    distilled = _keep_late_success(deps, _as_distilled(deps, run, judged, _taught(run, stats)))
    _credit(deps, bank, distilled)
    _mark_distilled(deps, run, stats, distilled.judged, distilled.taught)
    logger.info(
        "bank %s run %s: distilled in %.2fs: %d added, %d reinforced, %d merged, %d replaced, %d echoes, "
        "%d skipped, %d recipe(s)", bank, run_id, time.monotonic() - started, stats.added, stats.reinforced,
        stats.merged, stats.replaced, stats.echoes, stats.skipped, stats.recipes,
    )
    return stats


def _taught(run: runs.Run, stats: ConsolidationStats) -> list[str]:
    """The ids of the lessons the run's distillations wrote or reinforced, this one included."""
    return list(dict.fromkeys([*run.taught, *stats.lesson_ids]))


def _as_distilled(deps: Deps, run: runs.Run, judged: dict[str, str], taught: list[str]) -> runs.Run:
    """The run as its credit reads it once distilled: what distillation judged and taught, and the verdict a
    user or a check gave meanwhile (one given after the credit's read is credited by a credit task of its own:
    queued by ``set_verdict`` once the run is marked distilled, or, before that, by the marking,
    ``runs.credit_if_changed``)."""
    return _refreshed(deps, dataclasses.replace(run, meta={**run.meta, "judged": json.dumps(judged),
                                                            "taught": json.dumps(taught)}))


# What a verdict, or another credit of the run, changes in its hash while a worker holds the run
_CHANGING = ("verdict", "verdict_source", runs.RECOUNT_FIELD, "judged", "taught")


def _refreshed(deps: Deps, run: runs.Run) -> runs.Run:
    """The run with the fields of ``_CHANGING`` as its hash holds them now (those it holds)."""
    values = deps.redis.hmget(run_key(run.run_id), list(_CHANGING))
    meta = dict(run.meta)
    for key, value in zip(_CHANGING, values, strict=True):
        if value is not None:
            meta[key] = redis_text(value)
    return dataclasses.replace(run, meta=meta)


def _mark_distilled(deps: Deps, run: runs.Run, stats: ConsolidationStats, judged: dict[str, str] | None,
                    taught: list[str] | None = None) -> None:
    """Mark the run distilled up to the last record read; steps that arrived meanwhile get a follow-up."""
    upto = max((step.seq for step in run.steps), default=-1)
    runs.mark_distilled(deps.redis, run.run_id, deps.settings.step_ttl, stats.as_dict(), judged, upto,
                        _taught(run, stats) if taught is None else taught)
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
    output = _lessons_of(deps, partial, evidence.mine(late, run.outcome, verdict, source), verdict, source)
    given = deps.store.get(bank, run.given) if run.given else []
    drafts = _screen(deps, partial, output.lessons, given)
    stats, _ = _consolidate(deps, run, drafts, None, verified=vouches(run, verdict, source),
                            failed=judged_failed(verdict, source))
    _mark_distilled(deps, run, stats, None)
    return stats


@dataclasses.dataclass(frozen=True)
class Observed:
    """A fact the run observed, kept without an LLM: a fix (``fixes``) or a tool result's shape (``shapes``)."""

    text: str
    fingerprint: str
    steps: tuple[int, ...]
    tag: str
    # a fix's, or a shape's that names its call: the run's task (redacted, capped), to put the next task's values
    # in its lines
    task: str = ""


def _best_effort(run: runs.Run, what: str, work: Callable[[], T], default: T) -> T:
    """``work()``, or ``default`` when it raises: recipes, fixes and shapes read the agent's own code and
    output, and a case they do not handle must cost the run that extra, not its distilled lessons."""
    try:
        return work()
    except Exception:  # foreign code and data: any failure is the extractor's, logged, never the run's
        logger.warning("bank %s run %s: extracting %s failed; the run is distilled without them", run.bank,
                       run.run_id, what, exc_info=True)
        return default


def _observed(deps: Deps, run: runs.Run, given: list[Lesson], failed: bool = False) -> list[Observed]:
    """The fixes and shapes the run observed that may be kept (none with recipes off, none that need a
    user's eye or carry what looks like a secret; in a run judged wrong, no fix whose corrected line gave
    the wrong answer); ``given``: the lessons the run was given, read from the store."""
    if not deps.settings.recipes:
        return []
    found_fixes = _found_fixes(deps, run, given)
    if failed:
        wrong = [fix for fix in found_fixes if _gave_the_answer(run, fix)]
        for fix in wrong:
            logger.info("bank %s run %s: not keeping the fix whose corrected line `%s` gave the run's wrong answer",
                        run.bank, run.run_id, _corrected_line(fix.text))
        found_fixes = [fix for fix in found_fixes if fix not in wrong]
    task = recipes.kept_task(run.task, deps.scrubber)
    found_shapes: list[shapes.Shape] = _best_effort(
        run, "observed shapes", lambda: shapes.extract(run.steps, runs.json_list(run.meta.get("tools")), task), [])
    found = _as_observed(run, found_fixes, task)
    # a shape naming the call that got its records back keeps the task whose words that call passed; a call the
    # gate or the secret scan refuses leaves the shape without it
    found_shapes = [shape if not shape.call or _may_keep(deps, shape.text) else dataclasses.replace(shape, call="")
                    for shape in found_shapes]
    found += [Observed(shape.text, shape.fingerprint, shape.steps, shapes.TAG, task if shape.call else "")
              for shape in found_shapes]
    return _keepable(deps, run, found)


def _may_keep(deps: Deps, text: str) -> bool:
    """Whether an observed fact's text may be kept: it needs no user's eye and carries nothing like a secret."""
    return not gate.quarantine_reason(text) and not deps.scrubber.has_secret(text)


def _as_observed(run: runs.Run, found_fixes: list[fixes.Fix], task: str) -> list[Observed]:
    """The run's fixes as facts to keep, each with ``task``: the run's (``recipes.kept_task``: redacted, capped)."""
    return [Observed(fix.text, fix.fingerprint, fix.steps, "fix", task) for fix in found_fixes]


def _keepable(deps: Deps, run: runs.Run, found: list[Observed]) -> list[Observed]:
    """The observed facts that may be kept: none that needs a user's eye or carries what looks like a secret."""
    found = [fact for fact in found if _may_keep(deps, fact.text)]
    if found:
        logger.info("bank %s run %s: %d observed fact(s): %s", run.bank, run.run_id, len(found),
                    "; ".join(f"{fact.tag} {evidence.one_line(fact.text, 100)}" for fact in found))
    return found


def _found_fixes(deps: Deps, run: runs.Run, given: list[Lesson] | None = None) -> list[fixes.Fix]:
    """The fixes the run observed (``fixes.extract``), then the asked fixes it was given and ran
    (``fixes.confirmed``); none when extracting them fails. ``given``: the lessons the run was given, when the
    caller has read them already (else read here; the store away is retried, as elsewhere)."""
    if given is None:
        given = deps.store.get(run.bank, run.given) if run.given else []

    def found() -> list[fixes.Fix]:
        observed = fixes.extract(run.steps, run.task, deps.scrubber)
        known = {fix.fingerprint for fix in observed}
        return observed + [fix for fix in fixes.confirmed(given, run.steps, run.task) if fix.fingerprint not in known]

    return _best_effort(run, "observed fixes", found, [])


def _answer_fixes(deps: Deps, run: runs.Run) -> list[fixes.Fix]:
    """The run's fixes whose corrected line gave its answer: the ones its verdict decides on."""
    return [fix for fix in _found_fixes(deps, run) if _gave_the_answer(run, fix)]


def _corrected_line(text: str) -> str:
    """A fix's corrected line (its whole text if it has none), on one line, for a log line."""
    pair = fixtext.lines(text)
    return evidence.one_line(pair[1] if pair else text, 200)


def _gave_the_answer(run: runs.Run, fix: fixes.Fix) -> bool:
    """``fixes.gave_the_answer``; True (the fix is not kept) when checking it fails, as when extracting it does."""
    return _best_effort(run, "observed fixes", lambda: fixes.gave_the_answer(fix, run.steps), True)


@observe.traced("lessonbank consolidate", on_result=observe.count_consolidation)
def _consolidate(deps: Deps, run: runs.Run, drafts: list[DraftLesson], recipe: Recipe | None,
                 verified: bool, observed: list[Observed] | None = None,
                 failed: bool = False) -> tuple[ConsolidationStats, str | None]:
    settings = deps.settings
    thresholds = Thresholds(duplicate=settings.duplicate_similarity, related=settings.related_similarity)
    consolidator = Consolidator(deps.store, run.bank, run.run_id, thresholds, decide=llm_decider(deps.llm),
                                scrubber=deps.scrubber, given=run.given, verified=verified,
                                purged=lambda ids: purge.purged_ids(deps.redis, run.bank, ids), failed=failed)
    done = runs.load_progress(deps.redis, run.run_id)
    deps.store.warm([draft.text for draft in drafts if not draft.quarantine])  # one batch, one model call
    consolidator.plan(drafts, done)  # the LLM's decision call, before the lock
    with bank_lock(deps.redis, run.bank, settings.distill_lock_timeout):
        if not deps.redis.exists(run_key(run.run_id)) and purge.bank_deleted(deps.redis, run.bank):
            return ConsolidationStats(), None  # its bank was deleted while the LLM answered

        def written(indices: list[int]) -> None:
            done.update(indices)
            runs.save_progress(deps.redis, run.run_id, done)

        stats = consolidator.run(drafts, done=set(done), on_done=written)
        for fact in observed or []:
            consolidator.add_observed(fact.text, fact.fingerprint, list(fact.steps), tag=fact.tag, task=fact.task)
        recipe_id = None
        if recipe is not None:
            steps = [s.seq for s in run.steps if s.kind == "action" and not evidence.failed(s)]
            recipe_id = consolidator.add_recipe(recipe, recipes.recipe_text(recipe), steps)
    return stats, recipe_id


@observe.traced("lessonbank credit")
def credit_one(deps: Deps, bank: str, run_id: str) -> credit.CreditReport | None:
    """Credit the lessons the run was given with its verdict (replacing an earlier credit of the run).

    Raises NotYetDistilled while the run's distillation has not finished.
    """
    run = runs.load_run(deps.redis, run_id)
    if not run.meta:
        logger.info("bank %s run %s: the run is gone (its bank deleted?); no credit", bank, run_id)
        return None
    if run.state != RUN_DISTILLED:
        raise NotYetDistilled(f"run {run_id} is not distilled yet ({run.state or 'unknown'})")
    return _credit(deps, bank, _keep_late_success(deps, run))


def _credit(deps: Deps, bank: str, run: runs.Run) -> credit.CreditReport | None:
    """Credit the given lessons of a distilled run (or one about to be marked so) and keep its summary."""
    run_id = run.run_id
    given = run.given
    with bank_lock(deps.redis, bank, deps.settings.distill_lock_timeout):
        if not deps.redis.exists(run_key(run_id)):
            return None
        # read under the lock: a verdict given since the run was read is the one credited, and another credit of
        # the run (one whose lease lapsed under a stalled worker) may have held the lock: crediting from what it
        # replaced would count the change twice
        run = _refreshed(deps, run)
        verdict, source = run.verdict
        if verdict == "unknown":
            verdict, source = run.judged.get("verdict", "unknown"), run.judged.get("source", "none")
        previous = runs.load_credit(deps.redis, run_id)
        lessons = deps.store.get(bank, given) if given else []
        altered: set[str] = set()
        if run.steps:
            atoms = credit.run_atoms(run.steps)
            applied = {lesson.id for lesson in lessons if credit.applied(lesson, atoms, run.task)}
            altered = {lesson.id for lesson in lessons if lesson.id in applied and (
                credit.altered(lesson, atoms, run.task) or credit.blameless(lesson, run.steps, run.task)
                or credit.unfollowed(lesson, run.steps))}
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
    _summarize(deps, run, sorted(applied), verdict, source)
    if given:
        logger.info("bank %s run %s: credited %d given lesson(s), %d applied, verdict %s (%s), %d retired",
                    bank, run_id, len(given), len(applied), verdict, source, len(report.retired))
    return report


def _summarize(deps: Deps, run: runs.Run, applied: list[str], verdict: str, source: str) -> None:
    """Keep the run's summary for ``lessonbank report`` (just its verdict once its steps have expired)."""
    if not deps.redis.exists(run_key(run.run_id)):
        return  # deleted with its bank
    known = verdict if verdict in ("success", "failure") else "unknown"
    trusted = source if source in ("user", "check", "signals", "llm") else "none"
    if run.steps:
        summary.save_summary(deps.redis, summary.summarize_run(run, applied, known, trusted))  # type: ignore[arg-type]
    else:
        summary.update_verdict(deps.redis, run.bank, run.run_id, known, trusted)  # type: ignore[arg-type]


SIMILAR_TASK = 0.5


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
        failed = runs.load_run(deps.redis, other.run_id)
        first = next((s for s in failed.steps if s.kind == "action" and evidence.failed(s)), None)
        if first is not None:
            error = evidence.one_line(f"{first.error_type}: {first.error_message}", 200)
            code = evidence.one_line(first.code, 160)
            return evidence.Evidence("C", "contrast", [], f"a run of a similar task that failed ran `{code}` and "
                                     f"got {error}")
    return None


def eligible_recipe(lesson: Lesson) -> bool:
    return lesson.status == "active" and lesson.harmful <= lesson.helpful


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
            deps.store.set_status(run.bank, [recipe_id], "retired", reason=_retracted_recipe(run.run_id) + source)


def _retract_fixes(deps: Deps, run: runs.Run, verdict: str, source: str) -> None:
    """A fix kept from a run later judged a failure (by a user or a check) is retired if it rests on that run
    alone and its corrected line gave the run's answer: the rule distillation applies to a run already judged
    wrong (``_observed``), applied when the verdict comes after it (not once the run's steps have expired: the
    lines are read from them)."""
    if verdict != "failure" or source not in ("user", "check") or not run.steps or not deps.settings.recipes:
        return
    judged = run.judged
    if judged_failed(judged.get("verdict", "unknown"), judged.get("source", "none")) and not judged.get("late"):
        return  # distillation knew: it kept no such fix (nor did a later success, ``_keep_late_success``)
    for fix in _answer_fixes(deps, run):
        fid = fact_id(run.bank, fix.fingerprint, kind="fix")
        for lesson in deps.store.get(run.bank, [fid]):
            if lesson.status != "active" or lesson.source_run_ids != [run.run_id]:
                continue
            deps.store.set_status(run.bank, [fid], "retired", reason=_retracted_fix(run.run_id) + source)
            logger.info("bank %s run %s: retired the fix whose corrected line `%s` gave the run's wrong answer "
                        "(judged by %s after distillation)", run.bank, run.run_id, _corrected_line(lesson.text),
                        source)


def _keep_late_success(deps: Deps, run: runs.Run) -> runs.Run:
    """A run judged a success by a user or a check after distillation went by another verdict keeps what a
    success keeps (the run as credited from now on: its ``judged`` names the recipe, its ``taught`` has it).

    A run distilled as anything but a trusted success had no recipe extracted, and, judged wrong, kept no fix
    whose corrected line gave its answer: both are kept now, once (``judged["late"]``), while the run's steps
    are there to read them from. (What a late failure retired is brought back by the credit,
    ``_restore_retracted``.)"""
    verdict, source = run.verdict
    if verdict != "success" or source not in ("user", "check") or not deps.settings.recipes:
        return run
    judged = run.judged
    if not run.steps or judged.get("late") or (judged.get("verdict") == "success" and judged.get("source") in TRUSTED):
        return run
    recipe = _best_effort(run, "a recipe", lambda: recipes.extract(
        run.steps, run.task, runs.json_list(run.meta.get("tools")), deps.scrubber, source), None)
    refused: list[Observed] = []
    if judged_failed(judged.get("verdict", "unknown"), judged.get("source", "none")):
        task = recipes.kept_task(run.task, deps.scrubber)
        refused = _keepable(deps, run, _as_observed(run, _answer_fixes(deps, run), task))
    stats, recipe_id = ConsolidationStats(), None
    if recipe is not None or refused:
        stats, recipe_id = _consolidate(deps, run, [], recipe, verified=vouches(run, verdict, source),
                                        observed=refused)
    judged = {**judged, "recipe": recipe_id or judged.get("recipe", ""), "late": source}
    taught = _taught(run, stats)
    if not runs.set_fields(deps.redis, run.run_id, {"judged": json.dumps(judged), "taught": json.dumps(taught)}):
        return run  # deleted with its bank meanwhile
    logger.info("bank %s run %s: judged a success by %s after distillation: %s, %d fix(es) it had refused kept",
                run.bank, run.run_id, source, f"recipe {recipe_id} kept" if recipe_id else "no recipe",
                stats.added)
    return dataclasses.replace(run, meta={**run.meta, "judged": json.dumps(judged), "taught": json.dumps(taught)})


def _restore_retracted(deps: Deps, run: runs.Run, verdict: str, source: str) -> None:
    """Bring back the recipe and the fixes that a late failure of this run retired (``_retract_recipe``,
    ``_retract_fixes``) when a user or a check judges it a success again."""
    if verdict != "success" or source not in ("user", "check") or not deps.settings.recipes:
        return
    recipe_id = run.judged.get("recipe")
    wanted = {recipe_id: _retracted_recipe(run.run_id)} if recipe_id else {}
    for fix in _answer_fixes(deps, run) if run.steps else []:
        wanted[fact_id(run.bank, fix.fingerprint, kind="fix")] = _retracted_fix(run.run_id)
    for lesson in deps.store.get(run.bank, list(wanted)) if wanted else []:
        if lesson.status == "retired" and lesson.status_reason.startswith(wanted[lesson.id]):
            deps.store.set_status(run.bank, [lesson.id], "active",
                                  reason=f"its run {run.run_id} was judged a success by {source} again")
            logger.info("bank %s run %s: judged a success by %s again: %s %s is active again", run.bank,
                        run.run_id, source, "recipe" if lesson.id == recipe_id else "fix", lesson.id)


def _vouched_by_another(lesson: Lesson, run_id: str) -> bool:
    """Whether a run other than ``run_id`` still vouches for ``lesson``. A source run whose vouching was not
    recorded (a lesson written before provenance kept it, or a run past the provenance cap) leaves the lesson
    as verified as it was."""
    others = [p for p in lesson.provenance if p.run_id != run_id]
    recorded = {p.run_id for p in lesson.provenance}
    unknown = (any(p.vouched is None for p in others) or not recorded.issuperset(lesson.source_run_ids)
               or lesson.evidence > len(recorded))
    return any(p.vouched for p in others) or (unknown and lesson.verified)


def _recount_taught(deps: Deps, run: runs.Run, verdict: str, source: str) -> int:
    """A verdict that came after the run's lessons were written corrects what they hold of the run: judged a
    failure (by a user or a check), the run counts in their ``failed_runs`` and no longer vouches for them (a
    lesson stays verified only while another of its runs does); judged a success again, the reverse. Returns
    how many lessons changed."""
    judged = run.judged
    if not judged or not run.taught:
        return 0
    verdict_then, source_then = judged.get("verdict", "unknown"), judged.get("source", "none")
    was = run.recounted or {"failed": judged_failed(verdict_then, source_then),
                            "vouched": vouches(run, verdict_then, source_then)}
    now = {"failed": judged_failed(verdict, source), "vouched": vouches(run, verdict, source)}
    if now == was:
        return 0
    changed = []
    for lesson in deps.store.get(run.bank, run.taught):
        if run.run_id not in lesson.source_run_ids or lesson.origin not in ("distilled", "observed"):
            continue
        update: dict[str, Any] = {}
        if now["failed"] != was["failed"]:
            update["failed_runs"] = max(lesson.failed_runs + (1 if now["failed"] else -1), 0)
        if now["vouched"] != was["vouched"]:
            update["provenance"] = provenance_vouched(lesson, run.run_id, now["vouched"])
            update["verified"] = now["vouched"] or _vouched_by_another(lesson, run.run_id)
        if update:
            changed.append(lesson.model_copy(update=update))
    if changed:
        deps.store.upsert(changed)
    runs.save_recount(deps.redis, run.run_id, now)
    logger.info("bank %s run %s: judged %s by %s after its lessons were written; %d of them recounted",
                run.bank, run.run_id, verdict, source, len(changed))
    return len(changed)


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
        deps.redis.delete(key)
        return ConsolidationStats()
    draft = DraftLesson(kind=lesson.kind, text=lesson.text, tags=lesson.tags,
                        quarantine=gate.quarantine_reason(lesson.text))
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
