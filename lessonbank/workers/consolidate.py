"""Consolidation: a run's new lessons join one bank, by the decisions of ``lessonbank.learn.consolidate``.

The ``Consolidator`` reads what each decision needs (the lesson with the draft's id and the lessons its merges
led to, the nearest lessons, whether a user purged an id), asks the decision, and writes it; the LLM's decision
call for related drafts is asked before the bank's lock is taken (``plan``) and reused under it. Every write
remembers the contributing run id; the caller also keeps which of the run's lessons were written, so
distilling the same run twice changes nothing. Recipes and observed facts (``lessonbank.learn.fixes``,
``lessonbank.learn.shapes``) are kept by fingerprint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Literal

from lessonbank.core.exceptions import PermanentDistillError
from lessonbank.core.models import Lesson, LessonOrigin, Recipe, Taint, lesson_id, recipe_id
from lessonbank.core.redact import Redactor
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.learn import consolidate as decisions
from lessonbank.learn.consolidate import HELD_BACK, Observed, Thresholds, kept_out
from lessonbank.learn.decide import Decider, Decision
from lessonbank.learn.distill import DraftLesson
from lessonbank.learn.trust import Testimony, attested

logger = logging.getLogger(__name__)

NEIGHBOURS = 5

__all__ = ["ConsolidationStats", "Consolidator", "Thresholds"]


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
        testimony: Testimony | None = None,
    ) -> None:
        self.store = store
        self.testimony = testimony
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
        neighbours, close = self._neighbours(draft) if exact is None and not kept_out(stored) else ([], [])
        placement, target = decisions.place(exact, stored, neighbours, close, self.thresholds)
        if placement == "reinforce" and target is not None:
            self._reinforce(target, draft)
        elif placement == "held_back":
            self._held_back(stored)
        elif placement == "add":
            self._add(draft)
        return close if placement == "related" else []

    def _neighbours(self, draft: DraftLesson) -> tuple[list[tuple[Lesson, float]], list[Lesson]]:
        """The draft's nearest active lessons, and those close enough for the decision call."""
        similar = self.store.similar(self.bank, draft.text, limit=NEIGHBOURS)
        return decisions.neighbours_of(similar, self.run_id, self.thresholds)

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
            if kept_out(stored) or self._follow(stored) is not None:
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
        """``lesson`` if active, else where its merges led; None if kept out."""
        return decisions.follow(lesson, self._stored)

    def _reinforced(self, lesson: Lesson, draft: DraftLesson) -> Lesson:
        return decisions.reinforced(lesson, self.run_id, draft.tags, self.now, draft.steps, self.verified,
                                    self.failed)

    def _reinforce(self, lesson: Lesson, draft: DraftLesson) -> None:
        outcome = decisions.reinforcement(lesson, self.run_id, self.given)
        if outcome == "echo":  # the run was told this: its repeating it is no evidence
            self.stats.echoes += 1
            logger.info("bank %s run %s: lesson %s repeated by a run that was given it; not reinforced",
                        self.bank, self.run_id, lesson.id)
            return
        if outcome == "skip":
            self.stats.skipped += 1
            return
        self.store.upsert([self._attested(self._reinforced(lesson, draft), draft)])
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
        if lesson is None or not kept_out(lesson):
            return False
        self.stats.skipped += 1
        why = f" ({lesson.status_reason})" if lesson.status_reason else ""
        logger.info("bank %s run %s: lesson %s is %s%s; a run's same text does not revive it", self.bank,
                    self.run_id, lesson.id, lesson.status, why)
        return True

    def _rewords_held_back(self, draft: DraftLesson) -> bool:
        """The draft says again, in other words, what a user forgot or outcomes retired: not learnt anew."""
        similar = self.store.similar(self.bank, draft.text, limit=1, statuses=sorted(HELD_BACK))
        found = decisions.rewording(similar, self.thresholds)
        if found is None:
            return False
        lesson, score = found
        self.stats.skipped += 1
        logger.info("bank %s run %s: a new lesson rewords %s lesson %s (similarity %.2f); not learnt again",
                    self.bank, self.run_id, lesson.status, lesson.id, score)
        return True

    def _add(self, draft: DraftLesson) -> bool:
        """Write the draft as a new lesson; False when it was refused (purged, held back, a rewording)."""
        new_id = lesson_id(self.bank, draft.text)
        if self._tombstoned(new_id) or self._held_back(self._stored(new_id)) or self._rewords_held_back(draft):
            return False
        lesson = decisions.new_lesson(self.bank, draft, self.run_id, self.origin, self.verified, self.failed,
                                      self.now)
        if draft.quarantine:
            self.stats.quarantined += 1
            logger.warning("bank %s run %s: lesson %s quarantined (%s)", self.bank, self.run_id, lesson.id,
                           draft.quarantine)
        self.store.upsert([self._attested(lesson, draft)])
        self.stats.added += 1
        self.stats.lesson_ids.append(lesson.id)
        return True

    # -- related drafts: one decision for the run -----------------------------------------------

    def _decide_related(self, pending: list[tuple[DraftLesson, list[Lesson]]]) -> None:
        existing = _existing(pending)
        drafts = [draft for draft, _ in pending]
        said: list[Decision] = []
        planned = self._planned.get(_plan_key(drafts, existing))
        if planned is not None:
            said = planned
        elif self.decide is not None:
            try:
                said = self.decide(drafts, existing)
            except PermanentDistillError as e:
                logger.warning("bank %s run %s: no consolidation decision (%s); adding related lessons",
                               self.bank, self.run_id, e)
        for draft, (action, target, text) in zip(drafts, decisions.resolve(said, drafts, existing), strict=True):
            if action == "skip":
                self.stats.skipped += 1
            elif action == "replace" and target is not None:
                self._replace(draft, target)
            elif action == "merge" and target is not None:
                self._merge(draft, target, text)
            else:
                self._add_unless_present(draft)

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
        outcome = decisions.merge(target, text, self.run_id, self.given, self.bank,
                                  bool(text) and self.scrubber.has_secret(text))
        if outcome == "echo":
            self.stats.echoes += 1
            return
        if outcome == "skip":
            self.stats.skipped += 1
            return
        if outcome == "reinforce":
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
        merged = decisions.merged(target, draft, text, self.bank, self.run_id, self.now, self.verified, self.failed)
        self.store.upsert([self._attested(merged)])
        self.store.set_status(self.bank, [target.id], "superseded", superseded_by=merged.id, cause="merged")
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
        if not decisions.replaces(target, draft, self.verified, self.given):
            self.stats.skipped += 1
            logger.info("bank %s run %s: a new lesson contradicts %s, which stays (better backed)",
                        self.bank, self.run_id, target.id)
            return
        new_id = lesson_id(self.bank, draft.text)
        if self._tombstoned(new_id) or self._held_back(self._stored(new_id)):
            return
        if self._exact(draft.text) is None and not self._add(draft):
            return
        reason = decisions.contradicted_reason(self.run_id, self.verified)
        self.store.set_status(self.bank, [target.id], "superseded", superseded_by=new_id, reason=reason,
                              cause="contradicted", cause_run=self.run_id)
        self.stats.replaced += 1
        logger.info("bank %s: lesson %s superseded by %s (%s)", self.bank, target.id, new_id, reason)

    # -- recipes --------------------------------------------------------------------------------

    def _fingerprinted(self, rid: str, kind: str, steps: list[int]) -> Literal["new", "kept", "refused"]:
        """``new`` if the recipe or fix ``rid`` is not stored yet, ``kept`` if it is (and is reinforced),
        ``refused`` if a user purged it or it is no longer active."""
        if self._tombstoned(rid):
            return "refused"
        found = self.store.get(self.bank, [rid])
        if found and found[0].status == "stale" and self.verified:  # the same code works with the tool as it is now
            self.store.set_status(self.bank, [rid], "active", reason=f"verified again by run {self.run_id}",
                                  cause="reverified", cause_run=self.run_id)
            logger.info("bank %s: stale %s %s verified again by run %s", self.bank, kind, rid, self.run_id)
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

    def add_observed(self, fact: Observed) -> str | None:
        """Store an observed fix, shape or failure, or reinforce the same one; returns its id (None if a user
        purged it or it is held back). One held (``fact.hold``) is stored quarantined, and never reinforces one
        that runs are given."""
        fid = recipe_id(self.bank, fact.fingerprint, kind=fact.tag)
        if fact.hold:
            if self._tombstoned(fid) or self.store.get(self.bank, [fid]):
                return None
            self.store.upsert([self._attested(decisions.observed_lesson(self.bank, fact, self.run_id, self.verified,
                                                                        self.now))])
            self.stats.quarantined += 1
            self.stats.lesson_ids.append(fid)
            logger.warning("bank %s run %s: observed %s %s quarantined (%s)", self.bank, self.run_id, fact.tag, fid,
                           fact.hold)
            return fid
        stored = self._stored(fid)
        what = decisions.observed_update(stored, fact)
        if what == "adds_nothing" and stored is not None:
            return fid if stored.status == "active" and not self._tombstoned(fid) else None
        if what in ("now_tried", "now_with_task") and stored is not None:
            self.store.upsert([decisions.updated(stored, fact, what)])
            if what == "now_tried":
                logger.info("bank %s run %s: fix %s, asked for by an error, was observed to work", self.bank,
                            self.run_id, fid)
            else:
                logger.info("bank %s run %s: %s %s kept without a task now has this run's", self.bank, self.run_id,
                            fact.tag, fid)
        known = self._fingerprinted(fid, fact.tag, list(fact.steps))
        if known != "new":
            return fid if known == "kept" else None
        self.store.upsert([self._attested(decisions.observed_lesson(self.bank, fact, self.run_id, self.verified))])
        self.stats.added += 1
        self.stats.lesson_ids.append(fid)
        return fid

    def add_recipe(self, recipe: Recipe, steps: list[int], taint: list[Taint] | None = None,
                   hold: str = "") -> str | None:
        """Store the recipe (or reinforce the same code's recipe); returns its id (None if refused). A recipe
        held (``hold``: why) is stored quarantined, and never reinforces one that runs are given."""
        rid = recipe_id(self.bank, recipe.fingerprint)
        if hold:  # held code neither reinforces nor revives a stored recipe
            known = "refused" if self._tombstoned(rid) or self.store.get(self.bank, [rid]) else "new"
        else:
            known = self._fingerprinted(rid, "recipe", steps)
        if known != "new":
            return rid if known == "kept" else None
        said = self.testimony.for_recipe() if self.testimony is not None else None
        lesson = decisions.recipe_lesson(self.bank, recipe, self.run_id, steps, said.vouched if said else self.verified,
                                         taint, hold, self.now)
        self.store.upsert([attested(lesson, self.run_id, said)])
        self.stats.recipes += 1
        self.stats.lesson_ids.append(rid)
        if hold:  # it supersedes nothing runs are given
            self.stats.quarantined += 1
            logger.warning("bank %s run %s: recipe %s quarantined (%s)", self.bank, self.run_id, rid, hold)
            return rid
        text = lesson.text
        similar = self.store.similar(self.bank, text, limit=NEIGHBOURS, statuses=["active", "stale"])
        for older in decisions.outdated_recipes(similar, rid, self.thresholds, recipe.tools):
            reason = decisions.outdated_reason(self.run_id, older)
            self.store.set_status(self.bank, [older.id], "superseded", superseded_by=rid, reason=reason,
                                  cause="outdated", cause_run=self.run_id)
            self.stats.replaced += 1
        return rid

    def _attested(self, lesson: Lesson, draft: DraftLesson | None = None) -> Lesson:
        """``lesson`` with what the run says for it; for the draft's own text a tool's error states, what the run
        says for that (``Testimony.for_attested``)."""
        said = self.testimony
        if said is not None and draft is not None and draft.attested and lesson.text == draft.text:
            said = said.for_attested()
            lesson = lesson.model_copy(update={"verified": lesson.verified or said.vouched})
        return attested(lesson, self.run_id, said)


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
