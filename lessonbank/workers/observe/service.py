"""The worker's Celery signal handlers: metrics mode and tracing before the pool forks, /metrics and the
heartbeat once it is ready, spans sent after each task, retries and dead letters counted."""

from __future__ import annotations

import logging
import shutil
import socket
from typing import Any

from celery import signals

from lessonbank.core.constants import DISTILL_TASK
from lessonbank.workers import lifecycle
from lessonbank.workers.app import app
from lessonbank.workers.observe.counters import enable_multiprocess, metrics, serve_metrics
from lessonbank.workers.observe.heartbeat import Heartbeat
from lessonbank.workers.observe.tracing import setup_tracing

logger = logging.getLogger(__name__)

FLUSH_MILLIS = 2000


_service: dict[str, Any] = {}


def _ours(sender: Any) -> bool:
    return getattr(sender, "app", None) is app


@signals.worker_init.connect
def _on_worker_init(sender: Any = None, **_: Any) -> None:
    """Main process, before the pool forks: metrics mode and the tracer provider (inherited by the children)."""
    if not _ours(sender):
        return
    settings = app.settings
    if settings.metrics_port:
        path = enable_multiprocess(settings)
        if path is not None:
            _service["metrics_dir"] = path
    provider = setup_tracing(settings)
    if provider is not None:
        _service["tracer_provider"] = provider


@signals.worker_ready.connect
def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    """Main process, pool and store owner up: serve /metrics and start the heartbeat."""
    if not _ours(sender):
        return
    settings = app.settings
    path = _service.get("metrics_dir")
    if path is not None:
        try:
            serve_metrics(settings, path)
        except OSError as e:
            logger.error("cannot serve metrics on %s:%s: %s", settings.metrics_addr, settings.metrics_port, e)
    metrics_url = f"http://{settings.metrics_addr}:{settings.metrics_port}/metrics" if path is not None else None
    heartbeat = Heartbeat(settings, str(getattr(sender, "hostname", socket.gethostname())),
                          serves_store=lifecycle.serving_store, extra={"metrics": metrics_url})
    heartbeat.start()
    _service["heartbeat"] = heartbeat


@signals.worker_shutdown.connect
def _on_worker_shutdown(sender: Any = None, **_: Any) -> None:
    heartbeat = _service.pop("heartbeat", None)
    if heartbeat is not None:
        heartbeat.stop()
    provider = _service.pop("tracer_provider", None)
    if provider is not None:
        provider.shutdown()
    path = _service.pop("metrics_dir", None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


@signals.task_postrun.connect
def _on_task_done(**_: Any) -> None:
    """Send a task's spans when it ends: a pool process may be ended without running its exit handlers."""
    provider = _service.get("tracer_provider")
    if provider is not None:
        provider.force_flush(FLUSH_MILLIS)


@signals.task_retry.connect
def _on_retry(sender: Any = None, **_: Any) -> None:
    m = metrics()
    if m is not None:
        m.retries.labels(str(getattr(sender, "name", "unknown"))).inc()


@signals.task_failure.connect
def _on_failure(sender: Any = None, **_: Any) -> None:
    if getattr(sender, "name", None) == DISTILL_TASK:
        m = metrics()
        if m is not None:
            m.dead_letters.inc()
