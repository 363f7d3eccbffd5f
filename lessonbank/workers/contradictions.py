"""Active lessons that contradict each other, settled by what the runs observed (``lessonbank.learn.claims``).

After a run's lessons are written (under the bank's lock), each lesson the run wrote or reinforced that claims
something about a tool's result (a field there or not, a call getting nothing back, the type of what it returned) is
set against the bank's other active lessons that claim the opposite. The steps of this run and of the runs each
lesson cites (while Redis still holds them) decide: the lesson they support stays, the other is superseded (cause
``contradicted``, naming the run), and counted for ``lessonbank status``. When they support neither, both stay.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

import redis

from lessonbank.core import runs
from lessonbank.core.constants import SUPERSEDED_KEY
from lessonbank.core.models import Lesson
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.learn import claims, evidence
from lessonbank.learn.claims import Results
from lessonbank.workers.deps import view_of

logger = logging.getLogger(__name__)

MAX_CITED_RUNS = 5  # the runs of one lesson whose steps are read
BANK_LIMIT = 1000
CAUSE = "contradicted_by_observations"  # the count's name in ``lessonbank status``


def cited_results(client: redis.Redis) -> Callable[[str], Results]:
    """What each step of a run (by id) got back, read once per run; nothing for a run Redis no longer holds."""
    cache: dict[str, Results] = {}

    def read(run_id: str) -> Results:
        if run_id not in cache:
            run = runs.load_run(client, run_id)
            cache[run_id] = evidence.call_results(view_of(run)) if run.steps else []
        return cache[run_id]

    return read


def reason(run_id: str, verdict: claims.Verdict) -> str:
    return f"contradicted by what the runs observed ({verdict.why}), settled by run {run_id}"


def settle(store: LessonStoreProtocol, bank: str, run_id: str, written: Collection[str], results: Results,
           cited: Callable[[str], Results]) -> int:
    """Supersede, among the lessons ``written`` by run ``run_id`` and the bank's active lessons, each one that
    contradicts another the observations support (``results``: this run's steps; ``cited``: another run's);
    returns how many were superseded."""
    written_ids = list(dict.fromkeys(written))
    new = [lesson for lesson in store.get(bank, written_ids) if lesson.status == "active" and claims.claims_of(lesson)]
    if not new:
        return 0
    said = {lesson.id: (lesson, found) for lesson in store.list(bank, limit=BANK_LIMIT)
            if (found := claims.claims_of(lesson))}
    bank_lessons = [lesson for lesson, _ in said.values()]
    gone: set[str] = set()
    seen: set[frozenset[str]] = set()
    for lesson in new:
        mine = claims.claims_of(lesson)
        for other in bank_lessons:
            pair = frozenset((lesson.id, other.id))
            if lesson.id in gone:
                break
            if other.id in gone or len(pair) == 1 or pair in seen:
                continue
            seen.add(pair)
            if not any(claims.conflict(a, b) for a in mine for b in said[other.id][1]):
                continue
            observations = [*results, *_cited(lesson, run_id, cited), *_cited(other, run_id, cited)]
            verdict = claims.settle(lesson, other, observations)
            if verdict.winner is None:
                continue
            winner, loser = (lesson, other) if verdict.winner == "new" else (other, lesson)
            why = reason(run_id, verdict)
            store.set_status(bank, [loser.id], "superseded", superseded_by=winner.id, reason=why,
                             cause="contradicted", cause_run=run_id)
            gone.add(loser.id)
            logger.info("bank %s: lesson %s superseded by %s (%s)", bank, loser.id, winner.id, why)
    return len(gone)


def _cited(lesson: Lesson, run_id: str, cited: Callable[[str], Results]) -> Results:
    runs_ = [rid for rid in dict.fromkeys(lesson.source_run_ids) if rid != run_id][-MAX_CITED_RUNS:]
    return [result for rid in runs_ for result in cited(rid)]


def count(client: redis.Redis, superseded: int) -> None:
    """Count (``lessonbank status``) the lessons superseded because the observations contradict them."""
    if superseded:
        client.hincrby(SUPERSEDED_KEY, CAUSE, superseded)
