"""Which versions of its tools a bank's lessons were learnt on, kept up to date by each run the worker distills, by
the rules of ``lessonbank.learn.fingerprint`` (the caller holds the bank's lock).

``review``, before a run's lessons are written: a tool the run had in another version than the bank's last
distilled run (``bank_tools_key``) makes every active lesson whose code calls it as it was ``stale``, with the
reason ("get_user's signature changed: user_id -> id"); and each lesson the run was given notes a result
structure other than the one it was learnt on (a warning, or the new structure once a run ends well with it).
``stamp``, after: the lessons the run wrote or reinforced take the fingerprints of the tools they involve as the
run had them; a stale recipe or fix the run verified again is active again (``workers.consolidate``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from lessonbank.core import runs
from lessonbank.core.connections import redis_text
from lessonbank.core.constants import bank_tools_key
from lessonbank.core.models import ToolFingerprint
from lessonbank.learn import fingerprint
from lessonbank.learn.view import RunView
from lessonbank.workers.deps import Deps

logger = logging.getLogger(__name__)

EVERY_LESSON = 1_000_000


def run_versions(run: runs.Run) -> dict[str, ToolFingerprint]:
    """The fingerprints of the tools the run's agent had ({} when not recorded)."""
    return fingerprint.decode(run.meta.get("tool_versions"))


def _recorded(fingerprint_: ToolFingerprint) -> str:
    return fingerprint_.model_dump_json(include={"name", "signature", "doc"})


def review(deps: Deps, run: runs.Run, view: RunView, ended_well: bool) -> int:
    """Mark stale the lessons calling a tool the run has in another version, and note what the run's tools returned
    in the lessons it was given (``ended_well``: the run vouches for what it did); how many went stale."""
    versions = run_versions(run)
    if not versions:
        return 0
    key = bank_tools_key(run.bank)
    known = {redis_text(name): redis_text(value) for name, value in deps.redis.hgetall(key).items()}
    changed = {name: version for name, version in versions.items() if known.get(name) != _recorded(version)}
    stale = _mark_stale(deps, run, changed) if changed else 0
    if changed:
        deps.redis.hset(key, mapping={name: _recorded(version) for name, version in changed.items()})
    _shapes_seen(deps, run, view, ended_well)
    return stale


def _mark_stale(deps: Deps, run: runs.Run, changed: dict[str, ToolFingerprint]) -> int:
    count = 0
    for lesson in deps.store.list(run.bank, limit=EVERY_LESSON):
        if not changed.keys() & {learnt.name for learnt in lesson.tool_versions}:
            continue
        reason = fingerprint.stale_reason(lesson, changed)
        if reason is None:
            continue
        deps.store.set_status(run.bank, [lesson.id], "stale", reason=reason, cause="tool_changed",
                              cause_run=run.run_id)
        logger.info("bank %s run %s: lesson %s is stale: %s", run.bank, run.run_id, lesson.id, reason)
        count += 1
    return count


def _shapes_seen(deps: Deps, run: runs.Run, view: RunView, ended_well: bool) -> None:
    shapes = fingerprint.shapes_of(view)
    if not shapes or not run.given:
        return
    noted = [updated for lesson in deps.store.get(run.bank, run.given)
             if (updated := fingerprint.shape_seen(lesson, shapes, ended_well)) is not None]
    if noted:
        deps.store.upsert(noted)
        logger.info("bank %s run %s: %d given lesson(s) saw their tool return another structure", run.bank,
                    run.run_id, len(noted))


def stamp(deps: Deps, run: runs.Run, view: RunView, lesson_ids: Sequence[str]) -> int:
    """Stamp the lessons the run wrote or reinforced with the fingerprints of the tools they involve; how many
    changed."""
    versions = run_versions(run)
    if not versions or not lesson_ids:
        return 0
    shapes = fingerprint.shapes_of(view)
    changed = [updated for lesson in deps.store.get(run.bank, list(dict.fromkeys(lesson_ids)))
               if (updated := fingerprint.stamped(lesson, versions, shapes)) is not None]
    deps.store.upsert(changed)
    return len(changed)
