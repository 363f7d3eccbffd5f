"""The Celery tasks: thin, idempotent, and taking ids only.

``distill_run(bank, run_id)`` retries transient failures with exponential backoff and jitter;
anything else (or retries exhausted) lands in the dead letters via the task base's ``on_failure``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import redis
from celery import Task
from celery.exceptions import SoftTimeLimitExceeded

from lessonbank.core.connections import create_redis
from lessonbank.core.constants import CREDIT_TASK, DISTILL_TASK, REMEMBER_TASK, SWEEP_TASK
from lessonbank.core.exceptions import ServiceUnavailable, StoreError, TransientDistillError
from lessonbank.core.redact import Redactor
from lessonbank.core.runs import mark_dead
from lessonbank.core.store.remote import connect_store
from lessonbank.workers import deadletters
from lessonbank.workers.app import app
from lessonbank.workers.llm import ChatLLM, make_client
from lessonbank.workers.pipeline import Deps, credit_one, distill_one, remember_one
from lessonbank.workers.sweeper import sweep

logger = logging.getLogger(__name__)

settings = app.settings

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    TransientDistillError,
    ServiceUnavailable,
    StoreError,
    redis.ConnectionError,
    redis.TimeoutError,
    SoftTimeLimitExceeded,
)

_deps: dict[int, Deps] = {}


def deps() -> Deps:
    """This process's clients (built on first use, after the pool forked)."""
    pid = os.getpid()
    if pid not in _deps:
        client = create_redis(settings, "service")
        _deps.clear()
        _deps[pid] = Deps(
            settings=settings,
            redis=client,
            store=connect_store(settings, client),
            llm=ChatLLM(make_client(settings), settings.distill_model, timeout=settings.llm_timeout),
            scrubber=Redactor(settings.redact_patterns),
        )
    return _deps[pid]


def _reason(exc: BaseException, retries: int) -> str:
    if isinstance(exc, TRANSIENT_ERRORS):
        return f"retries exhausted ({retries}); last error {type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {exc}"


# Transient errors (LLM timeouts, 429/5xx, store unavailable) retry with exponential backoff and jitter.
RETRY_TRANSIENT: dict[str, Any] = {
    "autoretry_for": TRANSIENT_ERRORS,
    "retry_backoff": settings.retry_backoff,
    "retry_backoff_max": settings.retry_backoff_max,
    "retry_jitter": True,
    "max_retries": settings.max_retries,
}


class DistillTask(Task):
    """Dead-letters a run whose distillation failed for good."""

    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        bank, run_id = (list(args) + [kwargs.get("bank"), kwargs.get("run_id")])[:2] if args else (
            kwargs.get("bank"), kwargs.get("run_id"))
        if not run_id:
            logger.error("distill task %s failed without a run id: %s", task_id, type(exc).__name__)
            return
        attempts = self.request.retries + 1
        try:
            client = deps().redis
            deadletters.add(client, str(run_id), str(bank), _reason(exc, self.request.retries), attempts)
            mark_dead(client, str(run_id), settings.step_ttl)
        except redis.RedisError:
            logger.exception("run %s: cannot record its dead letter", run_id)


@app.task(
    bind=True,
    base=DistillTask,
    name=DISTILL_TASK,
    **RETRY_TRANSIENT,
)
def distill_run(self: Task, bank: str, run_id: str) -> None:
    """Distill one finished run of `bank` into lessons (idempotent)."""
    if self.request.retries:
        logger.info("bank %s run %s: retry %d of %d", bank, run_id, self.request.retries, settings.max_retries)
    distill_one(deps(), bank, run_id)


@app.task(name=SWEEP_TASK, ignore_result=True)
def sweep_runs() -> None:
    """Close abandoned runs (and send them to distillation); expire data of finished runs."""
    sweep(deps().redis, settings)


@app.task(
    name=REMEMBER_TASK,
    **RETRY_TRANSIENT,
)
def remember_lesson(bank: str, pending_id: str) -> None:
    """Consolidate one lesson an agent handed in with `remember_lesson` (idempotent)."""
    remember_one(deps(), bank, pending_id)


@app.task(
    name=CREDIT_TASK,
    **RETRY_TRANSIENT,
)
def credit_run(bank: str, run_id: str) -> None:
    """Credit the lessons a distilled run was given with the verdict that arrived after it (idempotent)."""
    credit_one(deps(), bank, run_id)
