"""Producer-only Celery app: publishes the distill task by name, never imports worker code.

Celery is imported on the first enqueue, so an agent process that never closes a run pays nothing.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from lessonbank.constants import DISTILL_TASK
from lessonbank.exceptions import ServiceUnavailable
from lessonbank.settings import Settings

logger = logging.getLogger(__name__)


class DistillEnqueuer:
    """Publishes ``DISTILL_TASK(bank, run_id)`` to ``settings.queue`` with short timeouts and no retries.

    ``app`` may be an already configured Celery app (tests, users with their own broker settings).
    """

    def __init__(self, settings: Settings, app: Any = None) -> None:
        self._settings = settings
        self._app = app
        self._lock = threading.Lock()
        self._connection: Any = None
        self._producer: Any = None

    def enqueue_distill(self, bank: str, run_id: str) -> None:
        """Publish one distill task carrying only ``[bank, run_id]``.

        Raises ServiceUnavailable when the broker does not take the message in time.
        """
        with self._lock:
            try:
                if self._app is None:
                    self._app = build_producer_app(self._settings)
                if self._producer is None:
                    # Our own connection, not Celery's process-wide pools (shared with any other app).
                    self._connection = self._app.connection_for_write()
                    self._producer = self._app.amqp.Producer(self._connection)
                self._app.send_task(
                    DISTILL_TASK, args=[bank, run_id], queue=self._settings.queue, retry=False, producer=self._producer
                )
            except Exception as e:  # kombu and redis raise many unrelated types; all mean "not published"
                self._release()
                raise ServiceUnavailable(f"could not publish {DISTILL_TASK} for run {run_id}: {e}") from e

    def close(self) -> None:
        """Release the broker connection, if one was made."""
        with self._lock:
            self._release()

    def _release(self) -> None:
        connection, self._connection, self._producer = self._connection, None, None
        if connection is not None:
            try:
                connection.release()
            except Exception:  # releasing a dead broker connection may raise anything
                logger.debug("releasing the broker connection failed", exc_info=True)


def build_producer_app(settings: Settings) -> Any:
    """A Celery app that only publishes: short socket timeouts, no connection or publish retries."""
    from celery import Celery

    timeout = settings.redis_timeout
    app = Celery("lessonbank-recorder", broker=settings.redis_url, set_as_current=False)
    app.conf.update(
        broker_connection_retry=False,
        broker_connection_retry_on_startup=False,
        broker_connection_max_retries=0,
        broker_connection_timeout=timeout,
        broker_pool_limit=2,
        broker_transport_options={
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "max_retries": 0,
            "interval_start": 0,
            "interval_step": 0,
            "interval_max": 0,
            "retry_on_timeout": False,
        },
        task_publish_retry=False,
        task_default_queue=settings.queue,
        task_serializer="json",
        accept_content=["json"],
        result_backend=None,
        task_ignore_result=True,
    )
    return app
