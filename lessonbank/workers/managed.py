"""A managed agent's run and its manager's: the manager's verdict is the managed run's.

A managed agent does a part of its manager's task; only the manager's answer is checked (``check=``) or judged
by a user. Its run's hash names the manager's run (``parent_run``, written by ``remember``), so its own verdict,
when nobody gave it one, is the manager's: a distillation that finds the manager judged already takes it
(``inherit``), and a verdict the manager gets later is passed down to its managed runs (``pass_down``), each
recorded as the user's or the check's verdict of the manager (``runs.set_verdict``: never over a more trusted
one the managed run has), which queues the managed run's credit when it is distilled already.
"""

from __future__ import annotations

import logging

from lessonbank.core import runs
from lessonbank.core.connections import redis_text
from lessonbank.core.constants import run_key, run_managed_key
from lessonbank.workers.deps import Deps

logger = logging.getLogger(__name__)

INHERITED = ("user", "check")  # the verdicts a managed run takes from its manager's


def _note(parent: str) -> str:
    return f"the verdict of its manager's run {parent}"


def inherit(deps: Deps, run: runs.Run) -> runs.Run:
    """A managed agent's run, registered with its manager's run and given the manager's verdict when it has
    none of its own (the run as it is for a run of its own, or while the manager is not judged)."""
    parent = run.parent_run
    if not parent or ":" in parent:
        return run
    key = run_managed_key(parent)
    pipe = deps.redis.pipeline(transaction=False)
    pipe.sadd(key, run.run_id)
    pipe.expire(key, deps.settings.step_ttl)
    pipe.hmget(run_key(parent), ["verdict", "verdict_source", "verdict_at"])
    *_, (verdict, source, at) = pipe.execute()
    verdict, source = redis_text(verdict or b""), redis_text(source or b"")
    if run.verdict[1] in INHERITED or verdict not in ("success", "failure") or source not in INHERITED:
        return run
    runs.set_verdict(deps.redis, run.bank, run.run_id, verdict == "success", source, _note(parent),
                     deps.settings.queue, deps.settings.step_ttl, _time(at))
    logger.info("bank %s run %s: inherits the %s verdict %s of its manager's run %s", run.bank, run.run_id, source,
                verdict, parent)
    return runs.load_run(deps.redis, run.run_id)


def pass_down(deps: Deps, run: runs.Run) -> int:
    """Give the run's verdict (a user's or a check's) to the managed runs registered with it; how many took it."""
    verdict, source = run.verdict
    if verdict not in ("success", "failure") or source not in INHERITED:
        return 0
    children = sorted(redis_text(child) for child in deps.redis.smembers(run_managed_key(run.run_id)))
    at = _time(deps.redis.hget(run_key(run.run_id), "verdict_at"))
    given = 0
    for child in children:
        bank = deps.redis.hget(run_key(child), "bank")
        if bank is None:
            continue  # expired, or deleted with its bank
        given += runs.set_verdict(deps.redis, redis_text(bank), child, verdict == "success", source, _note(run.run_id),
                                  deps.settings.queue, deps.settings.step_ttl, at) > 0
    if given:
        logger.info("bank %s run %s: its %s verdict %s passed to %d managed run(s)", run.bank, run.run_id, source,
                    verdict, given)
    return given


def _time(raw: bytes | str | None) -> float | None:
    try:
        return float(redis_text(raw)) if raw else None
    except ValueError:
        return None
