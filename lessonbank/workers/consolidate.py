"""Consolidation: a run's new lessons join one bank, by the decisions of ``lessonbank.learn.consolidate``.

The ``Consolidator`` reads what each decision needs (the lesson with the draft's id and the lessons its merges
led to, the nearest lessons, whether a user purged an id), asks the decision, and writes it; the LLM's decision
call for related drafts is asked before the bank's lock is taken (``plan``) and reused under it. Every write
remembers the contributing run id; the caller also keeps which of the run's lessons were written, so
distilling the same run twice changes nothing. Recipes and observed facts (``lessonbank.learn.fixes``,
``lessonbank.learn.shapes``) are kept by fingerprint, by the ``bank_writer.BankWriter`` it builds on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from lessonbank.core.exceptions import PermanentDistillError
from lessonbank.core.models import Lesson, lesson_id
from lessonbank.learn import consolidate as decisions
from lessonbank.learn.consolidate import HELD_BACK, Thresholds, kept_out
from lessonbank.learn.decide import Decision
from lessonbank.learn.distill import DraftLesson
from lessonbank.workers.bank_writer import NEIGHBOURS, BankWriter, ConsolidationStats

logger = logging.getLogger(__name__)

__all__ = ["ConsolidationStats", "Consolidator", "Thresholds"]


class Consolidator(BankWriter):
    """Writes one run's new lessons into one bank by ``lessonbank.learn.consolidate``'s decisions (the caller holds
    the bank's lock)."""

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

    def _exact(self, text: str) -> Lesson | None:
        """The active lesson with this text's id, following the pointers of merges; None if absent or kept out."""
        return self._follow(self._stored(lesson_id(self.bank, text)))

    def _follow(self, lesson: Lesson | None) -> Lesson | None:
        """``lesson`` if active, else where its merges led; None if kept out."""
        return decisions.follow(lesson, self._stored)

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
