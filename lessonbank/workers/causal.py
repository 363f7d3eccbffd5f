"""The per-lesson holdout's measurements, written to the lessons by the rules of ``lessonbank.learn.causal``.

Once a run is credited and its summary kept, each lesson in its draw gets its estimate over the bank's run
summaries (``Lesson.causal``, what ``lessonbank lessons show`` prints and the builder ranks by); a lesson that
hurts is retired with the figures as its reason, and one retired so that no longer does (a run behind the estimate
was forgotten) is active again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import redis

from lessonbank.core import summary
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.learn import causal
from lessonbank.workers.deps import Deps, bank_lock
from lessonbank.workers.summaries import json_names

logger = logging.getLogger(__name__)


def measure(deps: Deps, bank: str, run_id: str, drawn: Sequence[str] | None) -> list[str]:
    """Measure the lessons a run drew (under the bank's lock); the ids of those retired as hurting."""
    if not drawn:
        return []
    with bank_lock(deps.redis, bank, deps.settings.distill_lock_timeout):
        return remeasure(deps.store, deps.redis, bank, drawn, run_id)


def measure_run(deps: Deps, bank: str, meta: dict[str, str], run_id: str) -> list[str]:
    """``measure`` for the lessons a run's hash (``meta``) says it drew."""
    return measure(deps, bank, run_id, json_names(meta.get("drawn")))


def remeasure(store: LessonStoreProtocol, client: redis.Redis, bank: str, lesson_ids: Sequence[str],
              run_id: str) -> list[str]:
    """Write the estimates of these lessons over the bank's summaries, retire those that hurt, bring back those
    retired so that no longer do (the caller holds the bank's lock); the ids of those retired. ``run_id``: the run
    that occasioned it, named as the cause."""
    summaries = summary.load_summaries(client, bank)
    now = time.time()
    changed, retired, restored = [], [], []
    for lesson in store.get(bank, list(dict.fromkeys(lesson_ids))):
        found = causal.estimate(lesson.id, summaries, now)
        if not causal.same(lesson.causal, found):
            lesson = lesson.model_copy(update={"causal": found})
            changed.append(lesson)
        if lesson.status == "active" and causal.hurts(lesson):
            retired.append(lesson)
        elif lesson.status == "retired" and lesson.status_cause == "hurts" and found.verdict != "hurts":
            restored.append(lesson)
    store.upsert(changed)
    for lesson in retired:
        assert lesson.causal is not None
        reason = causal.retire_reason(lesson.causal)
        store.set_status(bank, [lesson.id], "retired", reason=reason, cause="hurts", cause_run=run_id)
        logger.info("bank %s: lesson %s retired: %s", bank, lesson.id, reason)
    if restored:
        store.set_status(bank, [lesson.id for lesson in restored], "active", cause="restored", cause_run=run_id,
                         reason="its holdout no longer shows it hurts")
    return [lesson.id for lesson in retired]
