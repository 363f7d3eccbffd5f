"""Prometheus metrics of the worker service (``pip install 'lessonbank[metrics]'``).

With ``LESSONBANK_METRICS_PORT`` set, the main worker process switches prometheus_client to its
multiprocess mode at ``worker_init``, before the pool forks (a directory of its own under
``DATA_DIR/metrics``, wiped at start and removed at shutdown), so what every pool process records lands in
memory-mapped files; the main process serves ``/metrics`` from all of them (``MultiProcessCollector``).
Without prometheus_client, ``metrics()`` is None and counting does nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import REMOTE_METHODS

logger = logging.getLogger(__name__)

SECONDS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
TOKENS = (250, 500, 1000, 2000, 4000, 8000, 16000, 32000, 64000)
STORE_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
OUTCOMES = ("added", "reinforced", "merged", "replaced", "skipped", "echoes", "recipes", "quarantined")


class Metrics:
    """The service's metrics, in a registry of their own (in multiprocess mode every process's files count)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.lessons = Counter("lessonbank_lessons", "Lessons by what consolidation did with them.", ["outcome"],
                               registry=reg)
        self.dropped = Counter("lessonbank_lessons_dropped", "Lessons dropped, by reason (quality gate, secret).",
                               ["reason"], registry=reg)
        self.distills = Counter("lessonbank_distills", "Distillations by result.", ["result"], registry=reg)
        self.distill_seconds = Histogram("lessonbank_distill_seconds", "Time to distill one run.", buckets=SECONDS,
                                         registry=reg)
        self.distill_tokens = Histogram("lessonbank_distill_tokens", "LLM tokens (prompt + completion) one "
                                        "distillation used.", buckets=TOKENS, registry=reg)
        self.llm_seconds = Histogram("lessonbank_llm_seconds", "Time of one LLM call.", buckets=SECONDS, registry=reg)
        self.llm_tokens = Counter("lessonbank_llm_tokens", "LLM tokens used, by type.", ["type"], registry=reg)
        self.llm_errors = Counter("lessonbank_llm_errors", "Failed LLM calls, by kind.", ["kind"], registry=reg)
        self.retries = Counter("lessonbank_task_retries", "Task retries, by task.", ["task"], registry=reg)
        self.dead_letters = Counter("lessonbank_dead_letters", "Runs dead-lettered.", registry=reg)
        self.store_seconds = Histogram("lessonbank_store_seconds", "Time of one lesson store call, by method.",
                                       ["method"], buckets=STORE_SECONDS, registry=reg)


_metrics: list[Metrics | None] = []
_metrics_lock = threading.Lock()


def metrics() -> Metrics | None:
    """This process's metrics, made on first use (after the mode is chosen); None without prometheus_client."""
    if not _metrics:
        with _metrics_lock:
            if not _metrics:
                try:
                    _metrics.append(Metrics())
                except ImportError:
                    _metrics.append(None)
    return _metrics[0]


def count_consolidation(result: Any) -> None:
    """Count a ``ConsolidationStats`` (or a tuple whose first item is one) by outcome."""
    stats = result[0] if isinstance(result, tuple) else result
    m = metrics()
    if m is None or stats is None:
        return
    counts = stats.as_dict()
    for outcome in OUTCOMES:
        if counts.get(outcome):
            m.lessons.labels(outcome).inc(counts[outcome])
    if counts.get("dropped_secret"):
        m.dropped.labels("secret").inc(counts["dropped_secret"])


def count_llm_error(kind: str) -> None:
    """An LLM reply that failed after it arrived (``unusable``: invalid after its repair)."""
    m = metrics()
    if m is not None:
        m.llm_errors.labels(kind).inc()


def count_drops(dropped: Mapping[str, int]) -> None:
    m = metrics()
    if m is not None:
        for reason, count in dropped.items():
            m.dropped.labels(reason).inc(count)


def _multiprocess_dir(settings: Settings) -> Path:
    return settings.data_dir / "metrics" / f"worker-{os.getpid()}"


def enable_multiprocess(settings: Settings) -> Path | None:
    """Switch prometheus_client to multiprocess mode in a fresh directory (the main process, before the fork)."""
    try:
        from prometheus_client import values
    except ImportError:
        logger.warning("LESSONBANK_METRICS_PORT is set but prometheus_client is not installed: "
                       "pip install 'lessonbank[metrics]'")
        return None
    path = _multiprocess_dir(settings)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)  # prometheus_client finds its files through it
    values.ValueClass = values.MultiProcessValue()
    _metrics.clear()  # made again, in the new mode, on first use
    return path


def serve_metrics(settings: Settings, path: Path) -> None:
    """Serve ``/metrics`` on ``settings.metrics_port``: every process's files, and the cluster's gauges from
    Redis (``gauges``)."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    from lessonbank.workers.observe.gauges import ClusterGauges

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(path))
    registry.register(ClusterGauges(settings))
    assert settings.metrics_port is not None
    start_http_server(settings.metrics_port, addr=settings.metrics_addr, registry=registry)
    logger.info("metrics at http://%s:%d/metrics", settings.metrics_addr, settings.metrics_port)


class TimedStore:
    """A lesson store whose protocol calls are timed (``lessonbank_store_seconds``); everything else passes."""

    def __init__(self, store: Any) -> None:
        self.wrapped = store

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.wrapped, name)
        if name not in REMOTE_METHODS or not callable(attr):
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                m = metrics()
                if m is not None:
                    m.store_seconds.labels(name).observe(time.perf_counter() - started)

        return timed
