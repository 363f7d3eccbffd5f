"""Consolidation decisions: what a run's new lesson does to the bank, given the lessons the worker read for it.

For each new lesson, in order (``lessonbank.workers.consolidate`` reads the bank, asks these, and writes):

1. the same text (same deterministic id) already in the bank, or an active lesson more similar than
   ``duplicate_similarity``: the existing lesson is reinforced (evidence + 1, last seen, the run and the
   steps it rests on) — unless the run was GIVEN that lesson: a run repeating what it was told is an
   echo, not evidence (it earns credit through its outcome instead). A run judged a failure counts in
   ``failed_runs`` too: its "what worked" lessons need two other runs before runs get them;
2. active lessons more similar than ``related_similarity``: the lesson waits for the one decision call
   of the run (``lessonbank.learn.decide``), where the LLM says, for each new lesson, add / merge into an
   existing one (optionally with a rewritten text) / replace an existing one it contradicts / skip. A
   contradiction is settled by evidence: the new lesson supersedes the old one when its run ended well or it
   rests on direct observation, unless the old one has earned more helpful than harmful credit; otherwise
   the new one is dropped;
3. nothing related: the lesson is added.

A merge with rewritten text writes a new lesson that carries the old one's evidence and history and
marks the old one ``superseded`` with a pointer to it; nothing is deleted. A run writing a merged-away
text reinforces the lesson it was merged into.

What was taken out of the bank stays out: a run writing the text of a lesson a user forgot, outcomes
retired, or a contradiction replaced, or a rewording of a forgotten or retired one (at least
``duplicate_similarity``), neither revives it nor reinforces its replacement.

Every write remembers the contributing run id, and a lesson that already lists the run is never
reinforced again. Provenance is kept through merges too (a merged lesson carries every run behind the lesson it
replaces): forgetting a run (``lessonbank.learn.forget``) must find what it taught. It is capped (``capped``): a
lesson confirmed by thousands of runs lists the first, what trust reads and the latest, and counts the rest; its
evidence, failures and credit are counts of their own, never read from the list. Recipes and
observed facts (fixes, shapes) are kept by the fingerprint of what they hold:
the same code or correction from another run reinforces one lesson; a new recipe supersedes older recipes
for similar tasks whose harmful credit outweighs their helpful credit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from lessonbank.core.models import (
    FailurePayload,
    FixPayload,
    Lesson,
    LessonOrigin,
    LessonStatus,
    Provenance,
    Recipe,
    ShapePayload,
    Taint,
    lesson_id,
    recipe_id,
)
from lessonbank.learn import render, said, walk
from lessonbank.learn.decide import Decision
from lessonbank.learn.distill import DraftLesson
from lessonbank.learn.provenance import capped

CODE_ORIGINS = frozenset({"recipe", "observed"})  # kept from the run's code, by fingerprint, never by the LLM
MAX_TAGS = 8
# Statuses a run's same text (or a rewording of it) does not revive: a user's forget, the outcomes' retirement.
HELD_BACK: frozenset[LessonStatus] = frozenset({"forgotten", "retired"})
# The reason a contradicted lesson is superseded with, in words (its cause is ``contradicted``).
CONTRADICTED = "contradicted by run"
RECIPE_SIMILARITY_SLACK = 0.1  # an older recipe this much less similar than a duplicate is for a similar task


@dataclass
class Thresholds:
    duplicate: float = 0.9
    related: float = 0.6


@dataclass(frozen=True)
class Observed:
    """A fact the run observed, kept without an LLM: a fix (``fixes``, tag ``fix``), a tool result's shape
    (``shapes``, tag ``shape``) or a call that failed (``failures``, tag ``failure``: what to avoid), with the
    fingerprint that makes the same fact from several runs one lesson, the steps it rests on and, for a fix or a
    shape naming its call, the run's task (redacted, capped) whose values its lines took. A failure quotes what a
    tool said: ``hold`` says why it waits for a user ("" when it need not), ``taint`` what in it the run observed."""

    tag: str
    fingerprint: str
    steps: tuple[int, ...]
    fix: FixPayload | None = None
    shape: ShapePayload | None = None
    task: str = ""
    failure: FailurePayload | None = None
    hold: str = ""
    taint: tuple[Taint, ...] = ()

    @property
    def text(self) -> str:
        if self.fix is not None:
            return render.fix(self.fix)
        if self.failure is not None:
            return render.failed_call(self.failure)
        return render.shape(self.shape) if self.shape is not None else ""

    @property
    def untried(self) -> bool:
        """A fix the error asked for, which no step ran."""
        return self.fix is not None and not self.fix.tried


Placement = Literal["reinforce", "held_back", "add", "related"]
ObservedUpdate = Literal["adds_nothing", "now_tried", "now_with_task", "none"]
Reinforcement = Literal["echo", "skip", "reinforce"]
Merge = Literal["add", "echo", "skip", "reinforce", "merge"]


def merge_tags(old: list[str], new: list[str]) -> list[str]:
    return list(dict.fromkeys([*old, *new]))[:MAX_TAGS]


def provenance_vouched(lesson: Lesson, run_id: str, vouched: bool) -> list[Provenance]:
    """`lesson`'s provenance with the entry of `run_id` marked as vouching for it or not."""
    return [p.model_copy(update={"vouched": vouched}) if p.run_id == run_id else p for p in lesson.provenance]


def vouched_by_another(lesson: Lesson, run_id: str) -> bool:
    """Whether a run other than ``run_id`` still vouches for ``lesson``. A source run whose vouching was not
    recorded (a lesson written before provenance kept it, or a run past the provenance cap of earlier versions)
    leaves the lesson as verified as it was."""
    others = [p for p in lesson.provenance if p.run_id != run_id]
    recorded = {p.run_id for p in lesson.provenance}
    unknown = (any(p.vouched is None for p in others) or not recorded.issuperset(lesson.source_run_ids)
               or lesson.evidence > len(recorded))
    return any(p.vouched for p in others) or (unknown and lesson.verified)


def vouched_by(lesson: Lesson, run_id: str, vouched: bool) -> Lesson:
    """A new `lesson` of `run_id`, vouched for by that run or not: ``verified`` and the run's provenance entry
    say the same, so that a later verdict on one of its runs can be taken back run by run."""
    return lesson.model_copy(update={"verified": vouched, "provenance": provenance_vouched(lesson, run_id, vouched)})


def counted_failed(lesson: Lesson, run_id: str, failed: bool) -> Lesson:
    """A new ``lesson`` of ``run_id``, counting that run in its ``failed_runs`` or not (and its provenance entry
    saying so, so that forgetting the run takes back exactly what it counted)."""
    provenance = [p.model_copy(update={"failed": failed}) if p.run_id == run_id else p for p in lesson.provenance]
    return lesson.model_copy(update={"failed_runs": int(failed), "provenance": provenance})


def reinforced(lesson: Lesson, run_id: str, tags: list[str], now: float, steps: list[int] | None = None,
               verified: bool = False, failed: bool = False) -> Lesson:
    """`lesson` with one more piece of evidence from `run_id` (resting on `steps` of that run; a run judged
    a failure when ``failed``), its provenance ``capped``."""
    provenance = [*lesson.provenance,
                  Provenance(run_id=run_id, steps=sorted(set(steps or [])), vouched=verified, failed=failed)]
    return capped(lesson.model_copy(
        update={
            "evidence": lesson.evidence + 1,
            "last_seen": now,
            "source_run_ids": [*lesson.source_run_ids, run_id],
            "provenance": provenance,
            "tags": merge_tags(lesson.tags, tags),
            "verified": lesson.verified or verified,
            "failed_runs": lesson.failed_runs + int(failed),
        }
    ))


def kept_out(lesson: Lesson | None) -> bool:
    """Forgotten, retired, or superseded because a contradiction replaced it."""
    if lesson is None:
        return False
    return lesson.status in HELD_BACK or (lesson.status == "superseded" and lesson.status_cause == "contradicted")


def follow(lesson: Lesson | None, read: Callable[[str], Lesson | None]) -> Lesson | None:
    """``lesson`` if active, else where its merges led (``read``: a stored lesson by id); None if kept out (a
    lesson superseded because it was contradicted does not lead to the claim that replaced it)."""
    for _ in range(5):
        if lesson is None or kept_out(lesson):
            return None
        if lesson.status == "active":
            return lesson
        if lesson.status != "superseded" or not lesson.superseded_by:
            return None
        lesson = read(lesson.superseded_by)
    return None


def neighbours_of(similar: list[tuple[Lesson, float]], run_id: str,
                  thresholds: Thresholds) -> tuple[list[tuple[Lesson, float]], list[Lesson]]:
    """A draft's nearest active lessons (``similar``, best first) that it may join, and those close enough for
    the decision call. Recipes and observed facts are not among them: their text is the run's own code, kept
    by fingerprint, and no distilled sentence may reinforce, merge into or replace it; nor are the run's own
    lessons "existing" ones to merge with."""
    neighbours = [(lesson, score) for lesson, score in similar if lesson.origin not in CODE_ORIGINS]
    close = [lesson for lesson, score in neighbours
             if score >= thresholds.related and run_id not in lesson.source_run_ids]
    return neighbours, close


def place(exact: Lesson | None, stored: Lesson | None, neighbours: list[tuple[Lesson, float]],
          close: list[Lesson], thresholds: Thresholds) -> tuple[Placement, Lesson | None]:
    """What a (not quarantined) draft does: reinforce its own text's active lesson (``exact``, merges followed)
    or a duplicate, stay out (its text's stored lesson is kept out), wait for the decision call (related
    lessons), or be added; with the lesson to reinforce."""
    if exact is not None:
        return "reinforce", exact
    if kept_out(stored):
        return "held_back", None
    if neighbours and neighbours[0][1] >= thresholds.duplicate:
        return "reinforce", neighbours[0][0]
    return ("related", None) if close else ("add", None)


def reinforcement(lesson: Lesson, run_id: str, given: set[str]) -> Reinforcement:
    """Whether a run's lesson reinforces ``lesson``: not when the run was given it (an echo), nor twice."""
    if lesson.id in given:
        return "echo"
    if run_id in lesson.source_run_ids:
        return "skip"
    return "reinforce"


def rewording(held_back: list[tuple[Lesson, float]], thresholds: Thresholds) -> tuple[Lesson, float] | None:
    """The forgotten or retired lesson a draft says again in other words, and how similar it is (``held_back``:
    the nearest such)."""
    return next(((lesson, score) for lesson, score in held_back if score >= thresholds.duplicate), None)


def new_lesson(bank: str, draft: DraftLesson, run_id: str, origin: LessonOrigin, verified: bool, failed: bool,
               now: float) -> Lesson:
    """The lesson a draft becomes when it is added (quarantined when it needs a user's eye)."""
    lesson = counted_failed(vouched_by(Lesson.new(bank, draft.kind, draft.text, tags=draft.tags[:MAX_TAGS],
                                                  run_id=run_id, origin=origin, steps=draft.steps), run_id, verified),
                            run_id, failed)
    lesson.taint = list(draft.taint)
    return held(lesson, draft.quarantine, now)


def held(lesson: Lesson, reason: str, now: float) -> Lesson:
    """``lesson`` quarantined for ``reason`` (as it is when the reason is "")."""
    if not reason:
        return lesson
    return lesson.model_copy(update={"status": "quarantined", "status_changed_at": now, "status_cause": "quarantined",
                                     "status_reason": f"{reason}; a user must release it"})


def resolve(decisions: list[Decision], drafts: list[DraftLesson],
            existing: list[Lesson]) -> list[tuple[str, Lesson | None, str]]:
    """For each draft (in order), what the decision call said: (``add`` | ``skip`` | ``replace`` | ``merge``,
    the existing lesson it names, the merged text). No decision, or one naming no shown lesson, adds."""
    by_number = {d.new: d for d in decisions}
    resolved: list[tuple[str, Lesson | None, str]] = []
    for number in range(1, len(drafts) + 1):
        decision = by_number.get(number)
        if decision is None or decision.action in ("add", "skip"):
            resolved.append((decision.action if decision is not None else "add", None, ""))
            continue
        known = decision.existing and 0 < decision.existing <= len(existing)
        target = existing[decision.existing - 1] if known and decision.existing else None
        resolved.append((decision.action, target, decision.text) if target is not None else ("add", None, ""))
    return resolved


def merge(target: Lesson, text: str, run_id: str, given: set[str], bank: str, secret: bool) -> Merge:
    """What merging a draft into the active ``target`` with ``text`` does: an echo or nothing new (the run was
    given it, or taught it already), a reinforcement (no new text, the same text, or a text with a secret),
    else a merged lesson."""
    if target.id in given:
        return "echo"
    if run_id in target.source_run_ids:
        return "skip"
    if not text or lesson_id(bank, text) == target.id or secret:
        return "reinforce"
    return "merge"


def merged(target: Lesson, draft: DraftLesson, text: str, bank: str, run_id: str, now: float, verified: bool,
           failed: bool) -> Lesson:
    """The lesson a merge writes: ``target``'s evidence and history, one more run, the merged ``text``."""
    return reinforced(target, run_id, draft.tags, now, draft.steps, verified, failed).model_copy(
        update={"id": lesson_id(bank, text), "text": text, "status": "active", "superseded_by": None})


def replaces(target: Lesson, draft: DraftLesson, verified: bool, given: set[str]) -> bool:
    """Whether a draft that contradicts ``target`` replaces it: the draft is backed (its run ended well, or it
    rests on steps) and ``target`` earned no more helpful than harmful credit and was not given to the run."""
    backed = verified or bool(draft.steps)
    return backed and not target.helpful > target.harmful and target.id not in given


def contradicted_reason(run_id: str, verified: bool) -> str:
    return f"{CONTRADICTED} {run_id}" + (" (judged a success)" if verified else "")


def outdated_recipes(similar: list[tuple[Lesson, float]], recipe_id: str, thresholds: Thresholds,
                     tools: list[str] | None = None) -> list[Lesson]:
    """Older recipes for similar tasks (``similar``: the nearest lessons) that a new recipe supersedes: their
    harmful credit outweighs their helpful credit, or they are stale and call a tool the new one calls (``tools``)
    as it is now."""
    return [older for older, score in similar
            if older.recipe is not None and older.id != recipe_id
            and score >= thresholds.duplicate - RECIPE_SIMILARITY_SLACK
            and (older.status == "stale" and bool(set(older.recipe.tools or ()) & set(tools or ()))
                 or older.status == "active" and older.harmful > older.helpful)]


def outdated_reason(run_id: str, older: Lesson | None = None) -> str:
    if older is not None and older.status == "stale":
        return f"replaced by a recipe for the tool as it is now (run {run_id}); {older.status_reason}"
    return f"a newer recipe (run {run_id}) succeeded where this one failed"


def _untried(lesson: Lesson) -> bool:
    return lesson.fix is not None and not lesson.fix.tried


def observed_update(stored: Lesson | None, fact: Observed) -> ObservedUpdate:
    """What a run's observed fact does to the same fact stored (``stored``, found by fingerprint) before it is
    reinforced: an error asking for a fix that runs already made work adds nothing to it; the fix an error asked
    for, now seen to work, takes the new text (and the task whose values its lines took); a fix or shape kept
    without a task (before fixes kept one, or a shape kept without the call that got its records back) takes
    this run's, with its own text."""
    if stored is None:
        return "none"
    if fact.untried and not _untried(stored):
        return "adds_nothing"
    if stored.status != "active":
        return "none"
    if _untried(stored) and not fact.untried:
        return "now_tried"
    if fact.task and not stored.task and not fact.untried:
        return "now_with_task"
    return "none"


def updated(stored: Lesson, fact: Observed, what: ObservedUpdate, run_id: str = "") -> Lesson:
    """``stored`` as ``observed_update`` says: the fact's payload and text (a shape with the values its flags held
    in the runs before: ``recounted``), and its task."""
    task = fact.task or stored.task if what == "now_tried" else fact.task
    shape = fact.shape
    if shape is not None and stored.shape is not None:
        counted = run_id in stored.source_run_ids  # this run's values are in the stored counts already
        shape = shape.model_copy(update={"structure": stored.shape.structure if counted else walk.merged(
            stored.shape.structure, shape.structure), "said": said.merged(stored.shape.said, shape.said)})
    text = render.shape(shape) if shape is not None else fact.text
    return stored.model_copy(update={"text": text, "fix": fact.fix, "shape": shape, "task": task,
                                     "failure": fact.failure})


def recounted(stored: Lesson, fact: Observed, run_id: str) -> Lesson | None:
    """``stored`` (an active shape) with the values its flags held in run ``run_id``'s same result added to its
    own (``walk.merged``: "true in 2 of 3 results seen"), its text rendered again; None when that changes nothing
    or the run is counted already (a task run again adds nothing twice)."""
    if stored.shape is None or fact.shape is None or stored.status != "active" or run_id in stored.source_run_ids:
        return None
    both = walk.merged(stored.shape.structure, fact.shape.structure)
    told = said.merged(stored.shape.said, fact.shape.said)
    if both == stored.shape.structure and told == stored.shape.said:
        return None
    shape = stored.shape.model_copy(update={"structure": both, "said": told})
    return stored.model_copy(update={"shape": shape, "text": render.shape(shape)})


def observed_lesson(bank: str, fact: Observed, run_id: str, verified: bool, now: float = 0.0) -> Lesson:
    """The lesson a new observed fact becomes: its id from its fingerprint, its text rendered from its payload (a
    failing call is what to avoid), with its taint, quarantined when it waits for a user."""
    lesson = Lesson.new(bank, "failure" if fact.failure is not None else "fact", fact.text, tags=[fact.tag],
                        run_id=run_id, origin="observed", steps=list(fact.steps), fix=fact.fix, shape=fact.shape,
                        failure=fact.failure)
    lesson = counted_failed(vouched_by(lesson, run_id, verified), run_id, False).model_copy(
        update={"id": recipe_id(bank, fact.fingerprint, kind=fact.tag), "task": fact.task, "taint": list(fact.taint)})
    return held(lesson, fact.hold, now or lesson.first_seen)


def recipe_lesson(bank: str, recipe: Recipe, run_id: str, steps: list[int], vouched: bool = True,
                  taint: list[Taint] | None = None, hold: str = "", now: float = 0.0) -> Lesson:
    """The lesson a recipe becomes: its id from its fingerprint, its text rendered from it, vouched for by the
    run whose outcome verified it when a user or a check judged it (else waiting for a second run), with its
    taint, quarantined for ``hold`` when that is not ""."""
    lesson = Lesson.new(bank, "approach", render.recipe(recipe), tags=["recipe"], run_id=run_id, origin="recipe",
                        steps=steps, recipe=recipe)
    lesson = counted_failed(vouched_by(lesson, run_id, vouched), run_id, False).model_copy(
        update={"id": recipe_id(bank, recipe.fingerprint), "taint": list(taint or [])})
    return held(lesson, hold, now or lesson.first_seen)
