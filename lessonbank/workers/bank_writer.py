"""A run's writes into one bank, beside the decisions that need the LLM: reinforcing a lesson (not when the run
was given it), refusing what a user purged, and keeping recipes and observed fixes, shapes and failures by the
fingerprint of their code, without any decision (``Consolidator``, which adds those, builds on ``BankWriter``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from lessonbank.core.models import Lesson, LessonOrigin, Recipe, Taint, recipe_id
from lessonbank.core.redact import Redactor
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.learn import consolidate as decisions
from lessonbank.learn import render, upgrade
from lessonbank.learn.consolidate import Observed, Thresholds
from lessonbank.learn.decide import Decider, Decision
from lessonbank.learn.distill import DraftLesson
from lessonbank.learn.trust import Testimony, attested

if TYPE_CHECKING:
    from lessonbank.workers.rekeyed import RekeyMarker

logger = logging.getLogger(__name__)

NEIGHBOURS = 5
EVERY_LESSON = 1_000_000


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


class BankWriter:
    """One run's writes into one bank (the caller holds the bank's lock): what it reinforces, what a user purged,
    and the recipes and observed facts kept by fingerprint."""

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
        rekeyed: RekeyMarker | None = None,
    ) -> None:
        self.store = store
        self.rekeyed = rekeyed
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
        self._earlier: list[tuple[Lesson, str]] | None = None  # facts keyed by an earlier rule, their ids now

    def _stored(self, lesson_id_: str) -> Lesson | None:
        found = self.store.get(self.bank, [lesson_id_])
        return found[0] if found else None

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
        if fact.shape is not None or fact.failure is not None:
            self._move_earlier(fid)
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
        if stored is not None and not self._update(stored, fact, what):
            return None
        known = self._fingerprinted(fid, fact.tag, list(fact.steps))
        if known != "new":
            return fid if known == "kept" else None
        self.store.upsert([self._attested(decisions.observed_lesson(self.bank, fact, self.run_id, self.verified))])
        self.stats.added += 1
        self.stats.lesson_ids.append(fid)
        return fid

    def _update(self, stored: Lesson, fact: Observed, what: decisions.ObservedUpdate) -> bool:
        """Update ``stored`` with the run's ``fact`` as ``observed_update`` said (``what``); False when its stored
        payload is not one that can take the run's (``render.MALFORMED``): it stays as it was."""
        try:
            if what in ("now_tried", "now_with_task"):
                self.store.upsert([decisions.updated(stored, fact, what, self.run_id)])
                if what == "now_tried":
                    logger.info("bank %s run %s: fix %s, asked for by an error, was observed to work", self.bank,
                                self.run_id, stored.id)
                else:
                    logger.info("bank %s run %s: %s %s kept without a task now has this run's", self.bank,
                                self.run_id, fact.tag, stored.id)
            elif (counted := decisions.recounted(stored, fact, self.run_id)) is not None:
                self.store.upsert([counted])  # the values its flags held in this run's result too
        except render.MALFORMED as e:
            logger.warning("bank %s run %s: observed %s %s left as it was, not reinforced: %s", self.bank,
                           self.run_id, fact.tag, stored.id, render.unreadable(e))
            return False
        return True

    def _move_earlier(self, fid: str) -> None:
        """Move the shapes or failures stored under an earlier fingerprint rule whose id is now ``fid`` there
        (``upgrade``), when nothing is stored there yet: a bank written before the rule changed keeps one lesson per
        fact. The bank is read for them at most once per run, only for a fact not found by its id, and not at all
        once a read found none left (``rekeyed``)."""
        if self._earlier is None and self.rekeyed is not None and self.rekeyed.current():
            self._earlier = []  # the bank's marker: nothing left to move, no read of the store for it
        if self._earlier is not None and not self._earlier:
            return
        if self.store.get(self.bank, [fid]):
            return
        if self._earlier is None:
            self._earlier = self._left_to_move()
        found = upgrade.rekeyed([lesson for lesson, now in self._earlier if now == fid], fid)
        if found is None:
            return
        moved, taken = found
        self.store.upsert([moved])
        self.store.set_status(self.bank, [lesson.id for lesson in taken], "superseded", superseded_by=fid,
                              reason=upgrade.REKEYED, cause="merged")
        self._earlier = [(lesson, now) for lesson, now in self._earlier if now != fid]
        logger.info("bank %s: %d observed fact(s) stored under an earlier fingerprint moved to %s", self.bank,
                    len(taken), fid)
        if not self._earlier and self.rekeyed is not None:
            self.rekeyed.mark()

    def _left_to_move(self) -> list[tuple[Lesson, str]]:
        """The bank's observed facts stored under an earlier rule, each with its id now, but those whose id now holds
        a lesson already (what the next run observing them finds there; they stay where they are); the bank's marker
        set when a read finds none."""
        lessons = self.store.list(self.bank, limit=EVERY_LESSON, include_inactive=True)
        earlier = [(lesson, now) for lesson in lessons if lesson.status != "superseded"
                   and (now := upgrade.observed_id(lesson)) is not None and now != lesson.id]
        there = {lesson.id for lesson in self.store.get(self.bank, sorted({now for _, now in earlier}))} if earlier \
            else set()
        earlier = [(lesson, now) for lesson, now in earlier if now not in there]
        if not earlier and self.rekeyed is not None:
            self.rekeyed.mark()
        return earlier

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
