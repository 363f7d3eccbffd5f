"""Consolidation: new lessons join the bank without filling it with rewordings or echoes.

For each new lesson, in order:

1. the same text (same deterministic id) already in the bank, or an active lesson more similar than
   ``duplicate_similarity``: the existing lesson is reinforced (evidence + 1, last seen, the run and the
   steps it rests on) — unless the run was GIVEN that lesson: a run repeating what it was told is an
   echo, not evidence (it earns credit through its outcome instead). A run judged a failure counts in
   ``failed_runs`` too: its "what worked" lessons need two other runs before runs get them;
2. active lessons more similar than ``related_similarity``: the lesson waits for the one decision call
   of the run, where the LLM sees the related lessons under small integer ids and says, for each new
   lesson, add / merge into an existing one (optionally with a rewritten text) / replace an existing
   one it contradicts / skip. A contradiction is settled by evidence: the new lesson supersedes the old
   one when its run ended well or it rests on direct observation, unless the old one has earned more
   helpful than harmful credit; otherwise the new one is dropped;
3. nothing related: the lesson is added.

A merge with rewritten text writes a new lesson that carries the old one's evidence and history and
marks the old one ``superseded`` with a pointer to it; nothing is deleted. A run writing a merged-away
text reinforces the lesson it was merged into.

What was taken out of the bank stays out: a run writing the text of a lesson a user forgot, outcomes
retired, or a contradiction replaced, or a rewording of a forgotten or retired one (at least
``duplicate_similarity``), neither revives it nor reinforces its replacement.

Every write remembers the contributing run id, and a lesson that already lists the run is never
reinforced again; the caller also keeps which of the run's lessons were written, so distilling the same
run twice changes nothing.

Recipes are consolidated by the fingerprint of their normalised code (``add_recipe``): the same code
from another run reinforces one recipe; a new recipe supersedes older recipes for similar tasks whose
harmful credit outweighs their helpful credit. Observed fixes (``workers/fixes.py``) are kept the same
way, by fingerprint: the same correction from several runs is one fact with more evidence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Literal

from lessonbank.core import fixtext
from lessonbank.core.exceptions import PermanentDistillError
from lessonbank.core.models import Lesson, LessonOrigin, LessonStatus, Provenance, Recipe, lesson_id, recipe_id
from lessonbank.core.redact import Redactor
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.workers.decide import Decider, Decision
from lessonbank.workers.distiller import DraftLesson

logger = logging.getLogger(__name__)

MAX_SOURCE_RUNS = 200
CODE_ORIGINS = frozenset({"recipe", "observed"})  # kept from the run's code, by fingerprint, never by the LLM
MAX_TAGS = 8
NEIGHBOURS = 5
# Statuses a run's same text (or a rewording of it) does not revive: a user's forget, the outcomes' retirement.
HELD_BACK: frozenset[LessonStatus] = frozenset({"forgotten", "retired"})
# The reason a contradicted lesson is superseded with (a merge leaves the reason empty).
CONTRADICTED = "contradicted by run"


@dataclass
class ConsolidationStats:
    added: int = 0
    reinforced: int = 0
    merged: int = 0
    skipped: int = 0
    echoes: int = 0
    replaced: int = 0
    dropped_secret: int = 0
    recipes: int = 0
    quarantined: int = 0
    purged: int = 0
    lesson_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {
            "added": self.added,
            "reinforced": self.reinforced,
            "merged": self.merged,
            "replaced": self.replaced,
            "skipped": self.skipped,
            "echoes": self.echoes,
            "dropped_secret": self.dropped_secret,
            "recipes": self.recipes,
            "quarantined": self.quarantined,
            "purged": self.purged,
        }


@dataclass
class Thresholds:
    duplicate: float = 0.9
    related: float = 0.6


def _merge_tags(old: list[str], new: list[str]) -> list[str]:
    return list(dict.fromkeys([*old, *new]))[:MAX_TAGS]


def provenance_vouched(lesson: Lesson, run_id: str, vouched: bool) -> list[Provenance]:
    """`lesson`'s provenance with the entry of `run_id` marked as vouching for it or not."""
    return [p.model_copy(update={"vouched": vouched}) if p.run_id == run_id else p for p in lesson.provenance]


def vouched_by(lesson: Lesson, run_id: str, vouched: bool) -> Lesson:
    """A new `lesson` of `run_id`, vouched for by that run or not: ``verified`` and the run's provenance entry
    say the same, so that a later verdict on one of its runs can be taken back run by run."""
    return lesson.model_copy(update={"verified": vouched, "provenance": provenance_vouched(lesson, run_id, vouched)})


def reinforced(lesson: Lesson, run_id: str, tags: list[str], now: float, steps: list[int] | None = None,
               verified: bool = False, failed: bool = False) -> Lesson:
    """`lesson` with one more piece of evidence from `run_id` (resting on `steps` of that run; a run judged
    a failure when ``failed``)."""
    provenance = [*lesson.provenance, Provenance(run_id=run_id, steps=sorted(set(steps or [])), vouched=verified)]
    return lesson.model_copy(
        update={
            "evidence": lesson.evidence + 1,
            "last_seen": now,
            "source_run_ids": [*lesson.source_run_ids, run_id][-MAX_SOURCE_RUNS:],
            "provenance": provenance[-MAX_SOURCE_RUNS:],
            "tags": _merge_tags(lesson.tags, tags),
            "verified": lesson.verified or verified,
            "failed_runs": lesson.failed_runs + int(failed),
        }
    )


class Consolidator:
    """Writes one run's new lessons into one bank (the caller holds the bank's lock)."""

    def __init__(
        self,
        store: LessonStoreProtocol,
        bank: str,
        run_id: str,
        thresholds: Thresholds | None = None,
        decide: Decider | None = None,
        scrubber: Redactor | None = None,
        origin: LessonOrigin = "distilled",
        given: Collection[str] = (),
        verified: bool = False,
        purged: Callable[[list[str]], set[str]] | None = None,
        failed: bool = False,
    ) -> None:
        self.store = store
        self.failed = failed
        self.purged = purged or (lambda ids: set())
        self.origin = origin
        self.given = set(given)
        self.verified = verified
        self.bank = bank
        self.run_id = run_id
        self.thresholds = thresholds or Thresholds()
        self.decide = decide
        self.scrubber = scrubber or Redactor()
        self.stats = ConsolidationStats()
        self.now = time.time()
        self._planned: dict[tuple[tuple[str, ...], tuple[str, ...]], list[Decision]] = {}

    def run(self, drafts: list[DraftLesson], done: Collection[int] = (),
            on_done: Callable[[list[int]], None] | None = None) -> ConsolidationStats:
        """Consolidate `drafts`; returns what happened to them.

        `done` lists the indices of drafts an earlier attempt already wrote (they are skipped);
        `on_done` is told the indices each time drafts have been written.
        """
        report = on_done or (lambda indices: None)
        pending: list[tuple[DraftLesson, list[Lesson]]] = []
        pending_indices: list[int] = []
        for index, draft in enumerate(drafts):
            if index in done:
                self.stats.skipped += 1
                continue
            if self.scrubber.has_secret(draft.text):
                self.stats.dropped_secret += 1
                report([index])
                continue
            related = self._place(draft)
            if related:
                pending.append((draft, related))
                pending_indices.append(index)
            else:
                report([index])
        if pending:
            self._decide_related(pending)
            report(pending_indices)
        return self.stats

    # -- one draft ------------------------------------------------------------------------------

    def _place(self, draft: DraftLesson) -> list[Lesson]:
        """Reinforce or add `draft` when the answer is clear; else return the related lessons."""
        if draft.quarantine:  # never merged into or reinforcing what runs are given
            if not self.store.get(self.bank, [lesson_id(self.bank, draft.text)]):
                self._add(draft)
            return []
        stored = self._stored(lesson_id(self.bank, draft.text))
        exact = self._follow(stored)
        if exact is not None:
            self._reinforce(exact, draft)
            return []
        if self._held_back(stored):
            return []
        neighbours, close = self._neighbours(draft)
        if neighbours and neighbours[0][1] >= self.thresholds.duplicate:
            self._reinforce(neighbours[0][0], draft)
            return []
        if not close:
            self._add(draft)
        return close

    def _neighbours(self, draft: DraftLesson) -> tuple[list[tuple[Lesson, float]], list[Lesson]]:
        """The draft's nearest active lessons, and those close enough for the decision call. Recipes and
        observed fixes are not among them: their text is the run's own code, kept by fingerprint, and no
        distilled sentence may reinforce, merge into or replace it."""
        neighbours = [(lesson, score) for lesson, score in self.store.similar(self.bank, draft.text, limit=NEIGHBOURS)
                      if lesson.origin not in CODE_ORIGINS]
        close = [  # the run's own lessons are not "existing" ones to merge with
            lesson for lesson, score in neighbours
            if score >= self.thresholds.related and self.run_id not in lesson.source_run_ids
        ]
        return neighbours, close

    def plan(self, drafts: list[DraftLesson], done: Collection[int] = ()) -> None:
        """Before the bank's lock is taken: ask the LLM now for the decision the drafts will need.

        Read-only. ``run`` (under the lock) reuses the answer when it meets the same drafts related to the
        same lessons, and asks again only if the bank changed meanwhile, so the slow call holds no lock.
        """
        if self.decide is None:
            return
        pending: list[tuple[DraftLesson, list[Lesson]]] = []
        for index, draft in enumerate(drafts):
            if index in done or draft.quarantine or self.scrubber.has_secret(draft.text):
                continue
            stored = self._stored(lesson_id(self.bank, draft.text))
            if _kept_out(stored) or self._follow(stored) is not None:
                continue
            neighbours, close = self._neighbours(draft)
            if close and not neighbours[0][1] >= self.thresholds.duplicate:
                pending.append((draft, close))
        if not pending:
            return
        drafts_, existing = [draft for draft, _ in pending], _existing(pending)
        try:
            self._planned[_plan_key(drafts_, existing)] = self.decide(drafts_, existing)
        except PermanentDistillError as e:
            logger.info("bank %s run %s: no decision before the lock (%s); asking under it", self.bank, self.run_id, e)

    def _stored(self, lesson_id_: str) -> Lesson | None:
        found = self.store.get(self.bank, [lesson_id_])
        return found[0] if found else None

    def _exact(self, text: str) -> Lesson | None:
        """The active lesson with this text's id, following the pointers of merges; None if absent or kept out."""
        return self._follow(self._stored(lesson_id(self.bank, text)))

    def _follow(self, lesson: Lesson | None) -> Lesson | None:
        """``lesson`` if active, else where its merges led; None if kept out (a lesson superseded because it was
        contradicted does not lead to the claim that replaced it)."""
        for _ in range(5):
            if lesson is None or _kept_out(lesson):
                return None
            if lesson.status == "active":
                return lesson
            if lesson.status != "superseded" or not lesson.superseded_by:
                return None
            lesson = self._stored(lesson.superseded_by)
        return None

    def _reinforced(self, lesson: Lesson, draft: DraftLesson) -> Lesson:
        return reinforced(lesson, self.run_id, draft.tags, self.now, draft.steps, self.verified, self.failed)

    def _reinforce(self, lesson: Lesson, draft: DraftLesson) -> None:
        if lesson.id in self.given:  # the run was told this: its repeating it is no evidence
            self.stats.echoes += 1
            logger.info("bank %s run %s: lesson %s repeated by a run that was given it; not reinforced",
                        self.bank, self.run_id, lesson.id)
            return
        if self.run_id in lesson.source_run_ids:
            self.stats.skipped += 1
            return
        self.store.upsert([self._reinforced(lesson, draft)])
        self.stats.reinforced += 1
        self.stats.lesson_ids.append(lesson.id)

    def _tombstoned(self, lesson_id_: str) -> bool:
        """A user purged this lesson for good: the same text is not learnt again behind their back."""
        if lesson_id_ in self.purged([lesson_id_]):
            self.stats.purged += 1
            logger.info("bank %s run %s: lesson %s was purged by a user; not written again", self.bank, self.run_id,
                        lesson_id_)
            return True
        return False

    def _held_back(self, lesson: Lesson | None) -> bool:
        """A user forgot this stored lesson, outcomes retired it or a contradiction replaced it: a run writing
        the same text again does not revive it (with fresh counts) behind their back; ``lessons unforget`` /
        ``release`` do."""
        if lesson is None or not _kept_out(lesson):
            return False
        self.stats.skipped += 1
        why = f" ({lesson.status_reason})" if lesson.status_reason else ""
        logger.info("bank %s run %s: lesson %s is %s%s; a run's same text does not revive it", self.bank,
                    self.run_id, lesson.id, lesson.status, why)
        return True

    def _rewords_held_back(self, draft: DraftLesson) -> bool:
        """The draft says again, in other words, what a user forgot or outcomes retired: not learnt anew."""
        for lesson, score in self.store.similar(self.bank, draft.text, limit=1, statuses=sorted(HELD_BACK)):
            if score >= self.thresholds.duplicate:
                self.stats.skipped += 1
                logger.info("bank %s run %s: a new lesson rewords %s lesson %s (similarity %.2f); not learnt again",
                            self.bank, self.run_id, lesson.status, lesson.id, score)
                return True
        return False

    def _add(self, draft: DraftLesson) -> bool:
        """Write the draft as a new lesson; False when it was refused (purged, held back, a rewording)."""
        new_id = lesson_id(self.bank, draft.text)
        if self._tombstoned(new_id) or self._held_back(self._stored(new_id)) or self._rewords_held_back(draft):
            return False
        lesson = vouched_by(Lesson.new(self.bank, draft.kind, draft.text, tags=draft.tags[:MAX_TAGS],
                                       run_id=self.run_id, origin=self.origin, steps=draft.steps),
                            self.run_id, self.verified)
        lesson.failed_runs = int(self.failed)
        if draft.quarantine:
            lesson = lesson.model_copy(update={"status": "quarantined", "status_changed_at": self.now,
                                               "status_reason": f"{draft.quarantine}; a user must release it"})
            self.stats.quarantined += 1
            logger.warning("bank %s run %s: lesson %s quarantined (%s)", self.bank, self.run_id, lesson.id,
                           draft.quarantine)
        self.store.upsert([lesson])
        self.stats.added += 1
        self.stats.lesson_ids.append(lesson.id)
        return True

    # -- related drafts: one decision for the run -----------------------------------------------

    def _decide_related(self, pending: list[tuple[DraftLesson, list[Lesson]]]) -> None:
        existing = _existing(pending)
        drafts = [draft for draft, _ in pending]
        decisions: dict[int, Decision] = {}
        planned = self._planned.get(_plan_key(drafts, existing))
        if planned is not None:
            decisions = {d.new: d for d in planned}
        elif self.decide is not None:
            try:
                decisions = {d.new: d for d in self.decide(drafts, existing)}
            except PermanentDistillError as e:
                logger.warning("bank %s run %s: no consolidation decision (%s); adding related lessons",
                               self.bank, self.run_id, e)
        for number, draft in enumerate(drafts, start=1):
            decision = decisions.get(number)
            if decision is None or decision.action == "add":
                self._add_unless_present(draft)
            elif decision.action == "skip":
                self.stats.skipped += 1
            else:
                target = existing[decision.existing - 1] if decision.existing and 0 < decision.existing <= len(
                    existing) else None
                if target is None:
                    self._add_unless_present(draft)
                elif decision.action == "replace":
                    self._replace(draft, target)
                else:
                    self._merge(draft, target, decision.text)

    def _add_unless_present(self, draft: DraftLesson) -> None:
        if self._exact(draft.text) is not None:
            self.stats.skipped += 1
            return
        self._add(draft)

    def _merge(self, draft: DraftLesson, target: Lesson, text: str) -> None:
        current = self.store.get(self.bank, [target.id])
        if not current or current[0].status != "active":
            self._add_unless_present(draft)
            return
        target = current[0]
        text = text.strip()
        if target.id in self.given:
            self.stats.echoes += 1
            return
        if self.run_id in target.source_run_ids:
            self.stats.skipped += 1
            return
        if not text or lesson_id(self.bank, text) == target.id or self.scrubber.has_secret(text):
            self._reinforce(target, draft)
            return
        merged_id = lesson_id(self.bank, text)
        stored = self._stored(merged_id)
        same = self._follow(stored)
        if same is not None:  # the merged text is already a lesson of its own
            self._reinforce(same, draft)
            return
        if self._tombstoned(merged_id) or self._held_back(stored):
            return
        merged = self._reinforced(target, draft).model_copy(
            update={"id": merged_id, "text": text, "status": "active", "superseded_by": None}
        )
        self.store.upsert([merged])
        self.store.set_status(self.bank, [target.id], "superseded", superseded_by=merged.id)
        self.stats.merged += 1
        self.stats.lesson_ids.append(merged.id)
        logger.info("bank %s: lesson %s superseded by merged lesson %s", self.bank, target.id, merged.id)


    def _replace(self, draft: DraftLesson, target: Lesson) -> None:
        """``draft`` contradicts ``target``: the better-backed claim stays."""
        current = self.store.get(self.bank, [target.id])
        if not current or current[0].status != "active":
            self._add_unless_present(draft)
            return
        target = current[0]
        backed = self.verified or bool(draft.steps)
        if not backed or target.helpful > target.harmful or target.id in self.given:
            self.stats.skipped += 1
            logger.info("bank %s run %s: a new lesson contradicts %s, which stays (better backed)",
                        self.bank, self.run_id, target.id)
            return
        new_id = lesson_id(self.bank, draft.text)
        if self._tombstoned(new_id) or self._held_back(self._stored(new_id)):
            return
        if self._exact(draft.text) is None and not self._add(draft):
            return
        reason = f"{CONTRADICTED} {self.run_id}" + (" (judged a success)" if self.verified else "")
        self.store.set_status(self.bank, [target.id], "superseded", superseded_by=new_id, reason=reason)
        self.stats.replaced += 1
        logger.info("bank %s: lesson %s superseded by %s (%s)", self.bank, target.id, new_id, reason)

    # -- recipes --------------------------------------------------------------------------------

    def _fingerprinted(self, rid: str, kind: str, steps: list[int]) -> Literal["new", "kept", "refused"]:
        """``new`` if the recipe or fix ``rid`` is not stored yet, ``kept`` if it is (and is reinforced),
        ``refused`` if a user purged it or it is no longer active."""
        if self._tombstoned(rid):
            return "refused"
        found = self.store.get(self.bank, [rid])
        if found and found[0].status != "active":
            logger.info("bank %s: %s %s is %s; a run's same code does not revive it", self.bank, kind, rid,
                        found[0].status)
            return "refused"
        if found:
            existing = found[0]
            draft = DraftLesson(kind=existing.kind, text=existing.text, tags=existing.tags, steps=steps)
            self._reinforce(existing, draft)  # the first run's code stays the lesson
            return "kept"
        return "new"

    def add_observed(self, text: str, fingerprint: str, steps: list[int], tag: str = "fix",
                     task: str = "") -> str | None:
        """Store an observed fix (``workers/fixes.py``, tag ``fix``) or shape (``workers/shapes.py``, tag
        ``shape``) as a fact, or reinforce the same one; returns its id (None if a user purged it or it is
        held back). ``task`` is the run's task (``Lesson.task``) of a fix, or of a shape naming its call: the values
        their lines took from it."""
        fid = recipe_id(self.bank, fingerprint, kind=tag)
        stored = self.store.get(self.bank, [fid])
        if stored and fixtext.untried(text) and not fixtext.untried(stored[0].text):
            # an error asking for a fix that runs already made work adds nothing to it
            return fid if stored[0].status == "active" and not self._tombstoned(fid) else None
        if stored and stored[0].status == "active" and fixtext.untried(stored[0].text) and not fixtext.untried(text):
            # the fix an error asked for, now seen to work: its text says so (then reinforced as any fix), and
            # its task is the one whose values the new text's lines took
            self.store.upsert([stored[0].model_copy(update={"text": text, "task": task or stored[0].task})])
            logger.info("bank %s run %s: fix %s, asked for by an error, was observed to work", self.bank,
                        self.run_id, fid)
        elif stored and stored[0].status == "active" and task and not stored[0].task and not fixtext.untried(text):
            # a fix kept before fixes kept their run's task, or a shape kept without the call that got its records
            # back: the run that observes it again gives it its task, with its own text, whose lines took that
            # task's values (and name the error's form, when it did)
            self.store.upsert([stored[0].model_copy(update={"text": text, "task": task})])
            logger.info("bank %s run %s: %s %s kept without a task now has this run's", self.bank, self.run_id,
                        tag, fid)
        known = self._fingerprinted(fid, tag, steps)
        if known != "new":
            return fid if known == "kept" else None
        lesson = Lesson.new(self.bank, "fact", text, tags=[tag], run_id=self.run_id, origin="observed", steps=steps)
        self.store.upsert([vouched_by(lesson, self.run_id, self.verified).model_copy(update={"id": fid, "task": task})])
        self.stats.added += 1
        self.stats.lesson_ids.append(fid)
        return fid

    def add_recipe(self, recipe: Recipe, text: str, steps: list[int]) -> str | None:
        """Store the recipe (or reinforce the same code's recipe); returns its id (None if refused)."""
        rid = recipe_id(self.bank, recipe.fingerprint)
        known = self._fingerprinted(rid, "recipe", steps)
        if known != "new":
            return rid if known == "kept" else None
        lesson = Lesson.new(self.bank, "approach", text, tags=["recipe"], run_id=self.run_id, origin="recipe",
                            steps=steps, recipe=recipe)
        lesson = vouched_by(lesson, self.run_id, True).model_copy(update={"id": rid})
        self.store.upsert([lesson])
        self.stats.recipes += 1
        self.stats.lesson_ids.append(rid)
        for older, score in self.store.similar(self.bank, text, limit=NEIGHBOURS):
            if (older.recipe is not None and older.id != rid and score >= self.thresholds.duplicate - 0.1
                    and older.harmful > older.helpful):
                reason = f"a newer recipe (run {self.run_id}) succeeded where this one failed"
                self.store.set_status(self.bank, [older.id], "superseded", superseded_by=rid, reason=reason)
                self.stats.replaced += 1
        return rid


def _kept_out(lesson: Lesson | None) -> bool:
    """Forgotten, retired, or superseded because a contradiction replaced it."""
    if lesson is None:
        return False
    return lesson.status in HELD_BACK or (
        lesson.status == "superseded" and lesson.status_reason.startswith(CONTRADICTED))


def _existing(pending: list[tuple[DraftLesson, list[Lesson]]]) -> list[Lesson]:
    """The related lessons of the pending drafts, each once, in order of first appearance."""
    existing: list[Lesson] = []
    for _, related in pending:
        for lesson in related:
            if all(lesson.id != e.id for e in existing):
                existing.append(lesson)
    return existing


def _plan_key(drafts: list[DraftLesson], existing: list[Lesson]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(draft.text for draft in drafts), tuple(lesson.id for lesson in existing)
