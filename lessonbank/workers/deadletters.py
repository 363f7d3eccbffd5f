"""Dead letters: runs that could not be distilled, kept with the reason until someone retries them."""

from __future__ import annotations

import logging
import time

import redis
from pydantic import BaseModel

from lessonbank.core.constants import DEAD_LETTERS_KEY
from lessonbank.core.exceptions import NotFound
from lessonbank.core.runs import reopen_for_retry
from lessonbank.workers import jobs

MAX_REASON_CHARS = 500  # of a dead letter's reason, as kept

logger = logging.getLogger(__name__)


class DeadLetter(BaseModel):
    run_id: str
    bank: str
    reason: str
    attempts: int
    at: float


def add(client: redis.Redis, run_id: str, bank: str, reason: str, attempts: int) -> DeadLetter:
    """Record that the run failed for good (replaces an older dead letter of the same run)."""
    letter = DeadLetter(run_id=run_id, bank=bank, reason=reason[:MAX_REASON_CHARS], attempts=attempts, at=time.time())
    client.hset(DEAD_LETTERS_KEY, run_id, letter.model_dump_json())
    logger.warning("run %s of bank %s dead-lettered after %d attempt(s): %s", run_id, bank, attempts, letter.reason)
    return letter


def get(client: redis.Redis, run_id: str) -> DeadLetter | None:
    raw = client.hget(DEAD_LETTERS_KEY, run_id)
    return DeadLetter.model_validate_json(raw) if raw else None


def list_all(client: redis.Redis) -> list[DeadLetter]:
    """Every dead letter, oldest first (malformed entries are logged and left out)."""
    letters = []
    for run_id, raw in client.hgetall(DEAD_LETTERS_KEY).items():
        try:
            letters.append(DeadLetter.model_validate_json(raw))
        except ValueError:
            logger.warning("malformed dead letter for run %r", run_id)
    return sorted(letters, key=lambda letter: letter.at)


def remove(client: redis.Redis, run_id: str) -> bool:
    return bool(client.hdel(DEAD_LETTERS_KEY, run_id))


class StepsExpired(NotFound):
    """The run's steps are gone, so it cannot be distilled again."""


def retry(client: redis.Redis, run_id: str, queue: str) -> DeadLetter:
    """Send a dead-lettered run to the workers again (reopen, queue, drop the letter and whatever is left of its
    job, so that it gets every retry again: one script, which finds the letter still there first).

    Raises NotFound if the run has no dead letter (or another retry took it meanwhile), StepsExpired if its steps
    are gone, redis errors as they come (the dead letter then stays).
    """
    letter = get(client, run_id)
    if letter is None:
        raise NotFound(f"run {run_id} has no dead letter")
    outcome = reopen_for_retry(client, run_id, letter.bank, queue, jobs.job_id("distill", run_id))
    if outcome == "no-letter":
        raise NotFound(f"run {run_id} has no dead letter (another retry took it)")
    if outcome == "no-steps":
        raise StepsExpired(run_id)
    logger.info("run %s of bank %s sent to the workers again", run_id, letter.bank)
    return letter
