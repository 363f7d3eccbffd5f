"""OpenTelemetry in the agent process: a run's trace says which bank, run and lessons it had (optional extra).

``remember`` puts each run in a span carrying the bank, the run id, the arm and the ids of the lessons
given (``lessonbank.*`` attributes, OpenInference span kind ``CHAIN``), with a ``RETRIEVER`` child
listing the lessons as OpenInference documents (id, text, kind). When a smolagents agent span
(OpenInference instrumentation) is already current, the attributes go on it instead of a span of our
own. The run's context also carries them as OpenInference ``metadata``, which
``openinference-instrumentation-smolagents`` copies onto every span it opens inside the run (the
agent's run, steps, model and tool calls), so Phoenix and Langfuse show them next to smolagents' own spans.

The span's W3C ``traceparent`` is kept with the run, so the worker's distillation span links to it.

Without ``opentelemetry-api`` (``pip install 'lessonbank[otel]'``) everything here is a no-op; without a
configured tracer provider the spans are OpenTelemetry's non-recording ones. The task shown is redacted.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from lessonbank.core.models import Lesson
from lessonbank.core.redact import Redactor

logger = logging.getLogger(__name__)

SPAN_KIND = "openinference.span.kind"
METADATA = "metadata"  # the OpenInference context key (and span attribute) for free-form metadata
ATTR_BANK = "lessonbank.bank"
ATTR_RUN_ID = "lessonbank.run_id"
ATTR_ARM = "lessonbank.arm"
ATTR_LESSON_IDS = "lessonbank.lesson_ids"
ATTR_LESSONS_GIVEN = "lessonbank.lessons_given"
MAX_INPUT_CHARS = 2000


def _otel() -> Any:
    try:
        from opentelemetry import context, trace
    except ImportError:
        return None
    return trace, context


class RunTrace:
    """The span of one run (ours, or the smolagents agent span it annotates) and the context it attached."""

    def __init__(self, trace: Any = None, context: Any = None, span: Any = None, owned: bool = False) -> None:
        self._trace = trace
        self._context = context
        self.span = span
        self.owned = owned
        self._tokens: list[Any] = []

    @property
    def active(self) -> bool:
        return self.span is not None

    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` of the run's span, or None when nothing is recorded."""
        if self.span is None or not self.span.get_span_context().is_valid:
            return None
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, self._trace.set_span_in_context(self.span))
        return carrier.get("traceparent")

    def record_lessons(self, query: str, lessons: Sequence[Lesson], started_ns: int) -> None:
        """A ``RETRIEVER`` span (child of the run's) listing the lessons given, as OpenInference documents."""
        if self.span is None or not self.span.is_recording():
            return
        tracer = self._trace.get_tracer("lessonbank")
        attributes: dict[str, Any] = {SPAN_KIND: "RETRIEVER", "input.value": query[:MAX_INPUT_CHARS]}
        for i, lesson in enumerate(lessons):
            prefix = f"retrieval.documents.{i}.document"
            attributes[f"{prefix}.id"] = lesson.id
            attributes[f"{prefix}.content"] = lesson.text
            attributes[f"{prefix}.metadata"] = json.dumps({"kind": lesson.kind, "evidence": lesson.evidence})
        context = self._trace.set_span_in_context(self.span)
        tracer.start_span("lessonbank lessons", context=context, attributes=attributes,
                          start_time=started_ns).end()

    def annotate(self, bank: str, run_id: str | None, arm: str, lesson_ids: list[str]) -> None:
        """Put the run's bank, id, arm and lessons on its span and, as metadata, in its context."""
        if self._trace is None:
            return
        values = {ATTR_BANK: bank, ATTR_RUN_ID: run_id or "", ATTR_ARM: arm, ATTR_LESSON_IDS: lesson_ids}
        if self.span is not None:
            self.span.set_attributes({**values, ATTR_LESSON_IDS: tuple(lesson_ids),
                                      ATTR_LESSONS_GIVEN: len(lesson_ids)})
        metadata: dict[str, Any] = {}
        current = self._context.get_value(METADATA)
        if isinstance(current, str):
            try:
                loaded = json.loads(current)
                metadata = loaded if isinstance(loaded, dict) else {}
            except ValueError:
                metadata = {}
        metadata.update(values)
        self._tokens.append(self._context.attach(self._context.set_value(METADATA, json.dumps(metadata))))

    def end(self, error: BaseException | None = None) -> None:
        """Detach what this run attached and end the span it owns (never raises)."""
        if self._context is None:
            return
        try:
            while self._tokens:
                self._context.detach(self._tokens.pop())
            if self.owned and self.span is not None:
                if error is not None:
                    self.span.record_exception(error)
                    self.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, type(error).__name__))
                else:
                    self.span.set_status(self._trace.Status(self._trace.StatusCode.OK))
                self.span.end()
        except Exception:  # OpenTelemetry is foreign code: a tracing problem never surfaces in the run
            logger.debug("ending the run's span failed", exc_info=True)
        self._context = None


def _agent_span(trace: Any) -> Any:
    """The current span if it is a recording smolagents (OpenInference) agent span not yet given a run."""
    span = trace.get_current_span()
    attributes = getattr(span, "attributes", None) or {}
    if span.is_recording() and attributes.get(SPAN_KIND) == "AGENT" and ATTR_RUN_ID not in attributes:
        return span
    return None


def start_run(agent: Any, task: Any, redactor: Redactor) -> RunTrace:
    """The trace of a run about to start: the current smolagents agent span, else a span of our own (current
    until ``end``); a no-op ``RunTrace`` without OpenTelemetry."""
    otel = _otel()
    if otel is None:
        return RunTrace()
    trace, context = otel
    try:
        span = _agent_span(trace)
        if span is not None:
            return RunTrace(trace, context, span, owned=False)
        name = getattr(agent, "name", None) or type(agent).__name__
        attributes = {SPAN_KIND: "CHAIN", "input.value": redactor.redact(str(task))[:MAX_INPUT_CHARS],
                      "lessonbank.agent": name}
        span = trace.get_tracer("lessonbank").start_span("lessonbank run", attributes=attributes)
        run = RunTrace(trace, context, span, owned=True)
        run._tokens.append(context.attach(trace.set_span_in_context(span)))
        return run
    except Exception:  # OpenTelemetry is foreign code: a tracing problem never surfaces in the run
        logger.debug("starting the run's span failed", exc_info=True)
        return RunTrace()


def now_ns() -> int:
    return time.time_ns()
