"""What the worker service shows of itself: Prometheus metrics, OpenTelemetry spans and a heartbeat.

- ``counters``: the metrics (``lessonbank[metrics]``, ``LESSONBANK_METRICS_PORT``), multiprocess-safe for
  prefork pools, served by the main process;
- ``tracing``: spans with OpenInference attributes (``lessonbank[otel]``, ``OTEL_EXPORTER_OTLP_ENDPOINT``),
  and the decorators the pipeline wears;
- ``heartbeat``: which workers are alive, their LLM and whether it answered its last probe (at start-up, then
  every minute);
- ``service``: the Celery signal handlers that start and stop all of it (connected by ``lessonbank.workers``,
  which imports it: importing this package connects nothing).

Without the extras everything here is a no-op, and nothing here ever fails a task.
"""

from lessonbank.workers.observe.counters import (
    TimedStore,
    count_consolidation,
    count_drops,
    count_llm_error,
    metrics,
)
from lessonbank.workers.observe.heartbeat import HEARTBEAT_TTL, Heartbeat, probe_llm
from lessonbank.workers.observe.tracing import distillation, error_kind, llm_call, setup_tracing, traced

__all__ = [
    "HEARTBEAT_TTL",
    "Heartbeat",
    "TimedStore",
    "count_consolidation",
    "count_drops",
    "count_llm_error",
    "distillation",
    "error_kind",
    "llm_call",
    "metrics",
    "probe_llm",
    "setup_tracing",
    "traced",
]
