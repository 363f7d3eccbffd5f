"""The Celery tasks: thin, idempotent, and taking ids only.

Each task runs under a lease on its job (``lessonbank.workers.jobs``): a delivery whose job a live worker
holds is not run, so a run is never distilled by two workers at once; the distillation or credit of a run
runs once more after the holder's instead (steps or a verdict may have come since the holder read the run),
the remembering of a lesson is dropped. The job of a worker that died is sent again when its lease lapses
(``LESSONBANK_LEASE_TIMEOUT``). Transient failures (LLM timeouts, 429 — after its ``Retry-After`` —, 5xx,
the store or Redis away, Redis refusing writes because it is full or a read-only replica, the soft time limit)
are retried with exponential backoff and jitter, kept as due times in Redis rather than as messages a worker
holds unacknowledged. Anything else, or retries exhausted, lands a run in the dead letters (``on_failure``),
but never for Redis's own trouble: the run's job, or the sweeper, sends it again. Every delivery of a run's
distillation is counted in its hash (``deliveries``).

The first writes of a delivery (counting it, taking its job) cannot keep a retry in Redis when Redis refuses
writes: they are tried again in the task, with the same backoff, the delivery held (its message stays in the
worker's hands); at the soft time limit the delivery ends and the run waits for the sweeper
(``LESSONBANK_RESEND_AFTER``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from celery import Task
from celery.exceptions import Reject, Retry, SoftTimeLimitExceeded
from celery.utils.time import get_exponential_backoff_interval

from lessonbank.core import runs
from lessonbank.core.connections import REDIS_AWAY, WRITES_REFUSED, create_redis
from lessonbank.core.constants import CREDIT_TASK, DISTILL_TASK, REMEMBER_TASK, SWEEP_TASK
from lessonbank.core.exceptions import PermanentDistillError, ServiceUnavailable, StoreError, TransientDistillError
from lessonbank.core.redact import Redactor
from lessonbank.core.runs import mark_dead
from lessonbank.core.store.remote import connect_store
from lessonbank.workers import deadletters, jobs
from lessonbank.workers.app import app
from lessonbank.workers.deps import Deps
from lessonbank.workers.llm import ChatLLM, retry_after
from lessonbank.workers.pipeline import distill_one, remember_one
from lessonbank.workers.sweeper import sweep
from lessonbank.workers.verdicts import credit_one

logger = logging.getLogger(__name__)

settings = app.settings

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    TransientDistillError,
    ServiceUnavailable,
    StoreError,
    *REDIS_AWAY,
    *WRITES_REFUSED,
    SoftTimeLimitExceeded,
)
T = TypeVar("T")

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
            llm=ChatLLM.from_settings(settings),
            scrubber=Redactor(settings.redact_patterns),
        )
    return _deps[pid]


def _reason(exc: BaseException, retries: int) -> str:
    if isinstance(exc, TRANSIENT_ERRORS):
        return f"retries exhausted ({retries}); last error {type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def retry_delay(exc: BaseException, retries: int) -> float:
    """Seconds before retry ``retries + 1``: what a 429 asked for (``Retry-After``), else exponential backoff
    with full jitter; never more than ``LESSONBANK_RETRY_BACKOFF_MAX``."""
    asked = retry_after(exc)
    if asked is not None:
        return min(asked, float(settings.retry_backoff_max))
    return float(get_exponential_backoff_interval(settings.retry_backoff, retries, settings.retry_backoff_max,
                                                  full_jitter=True))


def requeue(job: jobs.Job, error: BaseException) -> Reject:
    """A delivery that could not reach Redis to take its job goes back to the queue, untouched."""
    logger.warning("job %s: Redis did not answer (%s); the delivery goes back to the queue", job.id,
                   type(error).__name__)
    return Reject(str(error), requeue=True)


def first_write(job: jobs.Job, write: Callable[[], T]) -> T:
    """``write()``, one of a delivery's first writes: Redis away sends the delivery back to the queue; Redis
    refusing writes is waited for here (see the module docstring)."""
    attempt = 0
    while True:
        try:
            return write()
        except REDIS_AWAY as e:
            raise requeue(job, e) from e
        except WRITES_REFUSED as e:
            delay = max(retry_delay(e, attempt), settings.retry_backoff / 2)
            attempt += 1
            logger.warning("job %s: Redis refuses writes (%s); trying again in %.1fs", job.id, e, delay)
            try:
                time.sleep(delay)
            except SoftTimeLimitExceeded:
                logger.warning("job %s: Redis still refuses writes; the run waits for the sweeper", job.id)
                raise Retry(exc=e, when=delay) from e


def job_of(task: Task, kind: str, key: str, args: list[str], again_if_held: bool = False) -> jobs.Job:
    queue = (task.request.delivery_info or {}).get("routing_key") or settings.queue
    return jobs.Job(jobs.job_id(kind, key), task.name, args, queue, task.request.id or "", again_if_held)


def in_hand(task: Task, job: jobs.Job, work: Callable[[], object]) -> bool:
    """Run ``work`` holding ``job``'s lease; False when another live delivery holds it (this one is not run; a
    job ``again_if_held`` runs once more when that one is done).

    A transient error schedules the retry in Redis and ends this delivery as retried (``Retry``); retries
    exhausted or any other error end the job and are raised. A process stopped mid-task (``SystemExit``
    from a terminated pool process) hands the job back, due at once, for another worker to take.
    """
    lease, holder = first_write(job, lambda: jobs.acquire(deps().redis, job, settings.lease_timeout,
                                                          task.request.retries or 0))
    if lease is None:
        logger.info("job %s: delivery %s dropped, %s holds it%s", job.id, task.request.id, holder,
                    "; it runs once more after that" if job.again_if_held else "")
        return False
    task.request.retries = lease.retries
    if lease.retries > settings.max_retries:
        lease.finish(done=False)
        raise PermanentDistillError(f"retries exhausted ({lease.retries}): the workers running it were lost")
    try:
        with jobs.renewing(lease, settings.lease_timeout / 3):
            work()
    except TRANSIENT_ERRORS as e:
        if lease.retries >= settings.max_retries:
            lease.finish(done=False)
            raise
        delay = retry_delay(e, lease.retries)
        try:
            lease.retry(delay)
        except redis.RedisError as unsaved:  # the job keeps its holder: it is sent again when the lease lapses
            logger.warning("job %s: its retry could not be kept in Redis (%s); sent again when its lease lapses",
                           job.id, unsaved)
        logger.warning("job %s: %s: %s; retry %d of %d in %.1fs", job.id, type(e).__name__, e, lease.retries + 1,
                       settings.max_retries, delay)
        raise Retry(exc=e, when=delay) from e
    except Exception:
        lease.finish(done=False)
        raise
    except BaseException:
        lease.retry(0)
        raise
    lease.finish()
    return True


class DistillTask(Task):
    """Dead-letters a run whose distillation failed for good."""

    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        bank, run_id = (list(args) + [kwargs.get("bank"), kwargs.get("run_id")])[:2] if args else (
            kwargs.get("bank"), kwargs.get("run_id"))
        if not run_id:
            logger.error("distill task %s failed without a run id: %s", task_id, type(exc).__name__)
            return
        retries = self.request.retries or 0
        if isinstance(exc, REDIS_AWAY + WRITES_REFUSED):  # Redis's trouble, not the run's
            logger.warning("run %s: not dead-lettered for %s (%s): its job or the sweeper sends it again", run_id,
                           type(exc).__name__, exc)
            return
        try:
            client = deps().redis
            deadletters.add(client, str(run_id), str(bank), _reason(exc, retries), retries + 1)
            mark_dead(client, str(run_id), settings.step_ttl)
        except redis.RedisError:
            logger.exception("run %s: cannot record its dead letter", run_id)


@app.task(bind=True, base=DistillTask, name=DISTILL_TASK)
def distill_run(self: Task, bank: str, run_id: str) -> None:
    """Distill one finished run of `bank` into lessons (idempotent; one delivery at a time per run)."""
    # a delivery while another worker distills the run (the follow-up of steps that came meanwhile, queued as
    # that one marks the run distilled) runs once more after it: dropped, those steps were never distilled
    job = job_of(self, "distill", run_id, [bank, run_id], again_if_held=True)
    delivery = first_write(job, lambda: runs.count_delivery(deps().redis, run_id))
    logger.info("bank %s run %s: delivery %d (task %s)", bank, run_id, delivery, self.request.id)
    if self.request.retries:
        logger.info("bank %s run %s: retry %d of %d", bank, run_id, self.request.retries, settings.max_retries)
    in_hand(self, job, lambda: distill_one(deps(), bank, run_id))


@app.task(name=SWEEP_TASK, ignore_result=True)
def sweep_runs() -> None:
    """Close abandoned runs (and send them to distillation); send due jobs again; expire data of finished runs."""
    sweep(deps().redis, settings)


@app.task(bind=True, name=REMEMBER_TASK)
def remember_lesson(self: Task, bank: str, pending_id: str) -> None:
    """Consolidate one lesson an agent handed in with `remember_lesson` (idempotent)."""
    job = job_of(self, "remember", pending_id, [bank, pending_id])
    in_hand(self, job, lambda: remember_one(deps(), bank, pending_id))


@app.task(bind=True, name=CREDIT_TASK)
def credit_run(self: Task, bank: str, run_id: str) -> None:
    """Credit the lessons a distilled run was given with the verdict that arrived after it (idempotent)."""
    # a verdict given while the run's credit runs queues a delivery that finds it held: it runs once more then
    job = job_of(self, "credit", run_id, [bank, run_id], again_if_held=True)
    in_hand(self, job, lambda: credit_one(deps(), bank, run_id))
