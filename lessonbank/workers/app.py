"""The Celery application of the worker service and its configuration, built from `Settings`.

Configured for at-least-once delivery without loss: late acks, redelivery when a pool process dies,
one message prefetched per process. Each task runs under a lease on its job that every worker's
main process watches (``lessonbank.workers.jobs``, started here as a worker bootstep): a worker that
dies gives its tasks back when their leases lapse, within ``LESSONBANK_LEASE_TIMEOUT``, and retries
wait as due times in Redis, so no message stays unacknowledged longer than the hard time limit. The
broker's visibility timeout (longer than the hard time limit plus the longest backoff) is only a
backstop; a message it hands out again finds its job done or held, and changes nothing.

The sweeper's schedule runs once per cluster: beat uses RedBeat's scheduler, which keeps the schedule in
Redis and takes a lock there before it sends anything, so a second beat (``worker -B`` on another host,
a second ``beat`` service) waits for the lock instead of sending every task twice, and takes over
within ``BEAT_LOCK_TIMEOUT`` seconds when the first one dies.

The app is built from the environment at import; settings that cannot work end the import with one
line naming the variable (``SystemExit``), which is all ``celery -A lessonbank.workers`` then prints.
"""

from __future__ import annotations

from datetime import timedelta

from celery import Celery

from lessonbank.core.constants import BEAT_KEY_PREFIX, BEAT_LOCK_KEY, SWEEP_TASK
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import Settings
from lessonbank.workers import broker as _broker  # noqa: F401  (the redis:// transport)
from lessonbank.workers import flower_auth
from lessonbank.workers.jobs import KeeperStep

BEAT_LOCK_TIMEOUT = 60  # seconds a dead beat's lock lasts before another beat takes over
BEAT_LOOP = 10  # seconds at most between two ticks of beat (each renews the lock)


class LessonbankCelery(Celery):
    """A Celery app that carries the `Settings` it was built from."""

    settings: Settings


def celery_config(settings: Settings) -> dict[str, object]:
    """The Celery configuration for `settings`; raises ConfigurationError for limits that cannot work."""
    settings.check_worker_limits()
    return {
        "broker_url": settings.redis_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {"visibility_timeout": settings.visibility_timeout},
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_soft_time_limit": settings.task_soft_time_limit,
        "task_time_limit": settings.task_time_limit,
        "task_ignore_result": True,
        "result_backend": None,
        "task_default_queue": settings.queue,
        "task_serializer": "json",
        "accept_content": ["json"],
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        # A task in hand when the broker connection drops goes on: every task is idempotent and holds its job's
        # lease in Redis (not the broker's channel), so finishing it beats redoing its LLM call.
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        # A cold shutdown (SIGQUIT; SIGTERM under REMAP_SIGTERM=SIGQUIT) first lets the task in hand run
        # this long, then requeues it, instead of leaving it to the broker's visibility timeout.
        "worker_soft_shutdown_timeout": settings.soft_shutdown_timeout,
        "worker_hijack_root_logger": True,
        "beat_scheduler": "redbeat.RedBeatScheduler",
        "beat_max_loop_interval": BEAT_LOOP,
        "redbeat_redis_url": settings.redis_url,
        "redbeat_key_prefix": BEAT_KEY_PREFIX,
        "redbeat_lock_key": BEAT_LOCK_KEY,
        "redbeat_lock_timeout": BEAT_LOCK_TIMEOUT,
        "redbeat_redis_options": {"retry_period": BEAT_LOCK_TIMEOUT, "socket_timeout": 30.0,
                                  "socket_connect_timeout": 5.0, "health_check_interval": 30},
        "beat_schedule": {
            "sweep-runs": {
                "task": SWEEP_TASK,
                "schedule": timedelta(seconds=settings.sweep_interval),
                "options": {"queue": settings.queue, "expires": settings.sweep_interval},
            },
        },
    }


def create_app(settings: Settings | None = None) -> LessonbankCelery:
    """A Celery app configured from `settings` (default: the environment)."""
    settings = settings or Settings()
    app = LessonbankCelery("lessonbank", include=["lessonbank.workers.tasks"])
    app.steps["worker"].add(KeeperStep)
    configure(app, settings)
    return app


def configure(app: LessonbankCelery, settings: Settings) -> None:
    """(Re)apply `settings` to `app`."""
    config = celery_config(settings)
    app.settings = settings
    app.conf.update(config)


def _app_from_environment() -> LessonbankCelery:
    try:
        return create_app()
    except ConfigurationError as e:
        # One line instead of the traceback `celery -A lessonbank.workers` prints for any error raised by its import.
        raise SystemExit(f"lessonbank: {e}") from None


app = _app_from_environment()
if flower_auth.running_flower():
    flower_auth.guard_metrics()
