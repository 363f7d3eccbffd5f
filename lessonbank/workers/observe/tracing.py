"""OpenTelemetry spans of the worker service (``pip install 'lessonbank[otel]'``).

``distillation`` and ``traced`` wrap the pipeline's functions, ``llm_call`` each chat completion, with
OpenInference attributes (span kind, model, token counts) and the bank and run id; a distillation links to
the agent's run span when the run's hash carries its ``traceparent``. They also feed the metrics (latency,
tokens, errors by kind) and time the store calls of the pipeline (``counters.TimedStore``). With
``OTEL_EXPORTER_OTLP_ENDPOINT`` set the worker exports over OTLP/HTTP, unless the process already has a
tracer provider (``opentelemetry-instrument``). Spans carry ids, counts and timings, never prompt or
transcript text. Without OpenTelemetry there are no spans; the metrics still count.

Within such a scope a line logged by any ``lessonbank`` module that knows no bank and no run (``lessonbank.learn``:
"recipe not kept: ...", ``lessonbank.core``: "secret detection failed ...", the LLM client) reads
``bank <bank> run <run_id>: ...``, as the worker's own lines do; a line that names the run already, or starts with
its bank, is left as it is. A log record factory (``logging.setLogRecordFactory``, over the one in place) that the
first scope of a process installs does it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import openai
import redis

from lessonbank.core.connections import masked_url
from lessonbank.core.constants import run_key
from lessonbank.core.settings import Settings
from lessonbank.workers.observe.counters import TimedStore, metrics

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
SPAN_KIND = "openinference.span.kind"
SCOPED_LOGGERS = "lessonbank"  # whose lines logged within a scope get its bank and run, unless they name them


@dataclasses.dataclass
class Scope:
    """The run a span stack works on (``what``: a run, or a remembered lesson), and the LLM tokens spent on it so
    far."""

    bank: str = ""
    run_id: str = ""
    tokens: int = 0
    what: str = "run"

    def prefix(self) -> str:
        """What a line logged within the scope starts with: ``bank <bank> run <run_id>: ``."""
        said = " ".join(part for part in (f"bank {self.bank}" if self.bank else "",
                                          f"{self.what} {self.run_id}" if self.run_id else "") if part)
        return f"{said}: " if said else ""

    def named_in(self, message: str) -> bool:
        """Whether a line says already what it is about: it names the scope's run, or starts with its bank."""
        if self.run_id and self.run_id in message:
            return True
        return bool(self.bank) and message.startswith((f"bank {self.bank} ", f"bank {self.bank}:"))


_scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("lessonbank_scope", default=None)
_factory_lock = threading.Lock()
_factory_installed = False


def _scoped_records() -> None:
    """Install, once per process, the log record factory that prefixes a ``lessonbank`` line logged within a scope
    with the scope's bank and run, unless the line names them."""
    global _factory_installed
    with _factory_lock:
        if _factory_installed:
            return
        previous = logging.getLogRecordFactory()

        def record(*args: Any, **kwargs: Any) -> logging.LogRecord:
            made = previous(*args, **kwargs)
            scope = _scope.get()
            name = made.name if isinstance(made.name, str) else ""  # logging.makeLogRecord makes one without
            if scope is not None and (name == SCOPED_LOGGERS or name.startswith(SCOPED_LOGGERS + ".")) \
                    and not scope.named_in(_message(made)):
                prefix = scope.prefix()
                # the message is a %-format only when it has arguments: a bank's '%' must stay one then
                made.msg = (prefix.replace("%", "%%") if made.args else prefix) + str(made.msg)
            return made

        logging.setLogRecordFactory(record)
        _factory_installed = True


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # arguments that do not fit the format: logging reports it when a handler formats the line
        return ""


def _tracer() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace.get_tracer("lessonbank.workers")


def _attributes(scope: Scope, kind: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {SPAN_KIND: kind}
    if scope.bank:
        attrs["lessonbank.bank"] = scope.bank
    if scope.run_id:
        attrs["lessonbank.run_id"] = scope.run_id
        attrs["metadata"] = json.dumps({"lessonbank.bank": scope.bank, "lessonbank.run_id": scope.run_id})
    return attrs


def _links(deps: Any, run_id: str) -> list[Any]:
    """A link to the agent's run span, when the run's hash carries its W3C ``traceparent``."""
    client = getattr(deps, "redis", None)
    if client is None or not run_id:
        return []
    try:
        parent = client.hget(run_key(run_id), "traceparent")
    except redis.RedisError:
        return []
    if not parent:
        return []
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {"traceparent": parent.decode() if isinstance(parent, bytes) else str(parent)}
    context = trace.get_current_span(TraceContextTextMapPropagator().extract(carrier)).get_span_context()
    return [trace.Link(context)] if context.is_valid else []


@contextmanager
def _span(name: str, scope: Scope, kind: str = "CHAIN", links: list[Any] | None = None) -> Iterator[Any]:
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(name, attributes=_attributes(scope, kind), links=links) as span:
        yield span


def _scope_of(arguments: Mapping[str, Any]) -> Scope:
    run = arguments.get("run")
    if run is not None and hasattr(run, "run_id"):
        return Scope(getattr(run, "bank", "") or "", run.run_id)
    bank = str(arguments.get("bank") or "")
    if not arguments.get("run_id") and arguments.get("pending_id"):
        return Scope(bank, str(arguments["pending_id"]), what="remembered lesson")
    return Scope(bank, str(arguments.get("run_id") or ""))


def _with_timed_store(arguments: dict[str, Any]) -> None:
    deps = arguments.get("deps")
    if dataclasses.is_dataclass(deps) and not isinstance(deps, type) and hasattr(deps, "store") \
            and not isinstance(deps.store, TimedStore):
        arguments["deps"] = dataclasses.replace(deps, store=TimedStore(deps.store))


def traced(name: str, on_result: Callable[[Any], None] | None = None) -> Callable[[F], F]:
    """A pipeline function in a span named ``name`` (bank and run id from its arguments), its store calls timed;
    ``on_result`` sees what it returned."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            _with_timed_store(bound.arguments)
            _scoped_records()
            outer = _scope.get()
            scope = _scope_of(bound.arguments)
            token = _scope.set(scope if outer is None else outer)
            try:
                with _span(name, scope):
                    result = function(*bound.args, **bound.kwargs)
            finally:
                _scope.reset(token)
            if on_result is not None:
                on_result(result)
            return result

        return wrapper  # type: ignore[return-value]

    return decorate


def distillation(function: F) -> F:
    """``distill_one``: a span linked to the agent's run, the distillation's latency, tokens and result."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        _with_timed_store(bound.arguments)
        _scoped_records()
        scope = _scope_of(bound.arguments)
        links = _links(bound.arguments.get("deps"), scope.run_id) if _tracer() is not None else []
        token = _scope.set(scope)
        started = time.monotonic()
        result = "error"
        try:
            with _span("lessonbank distill", scope, links=links):
                value = function(*bound.args, **bound.kwargs)
            result = "skipped" if value is None else "distilled"
            return value
        finally:
            _scope.reset(token)
            m = metrics()
            if m is not None:
                m.distills.labels(result).inc()
                if result == "distilled":
                    m.distill_seconds.observe(time.monotonic() - started)
                    if scope.tokens:
                        m.distill_tokens.observe(scope.tokens)

    return wrapper  # type: ignore[return-value]


def error_kind(error: BaseException | None) -> str:
    """What went wrong with an LLM call, for ``lessonbank_llm_errors_total{kind}``."""
    cause = error.__cause__ if error is not None and error.__cause__ is not None else error
    if isinstance(cause, openai.APITimeoutError):
        return "timeout"
    if isinstance(cause, openai.APIConnectionError):
        return "connection"
    if isinstance(cause, openai.APIStatusError):
        status = cause.status_code
        return "rate_limited" if status == 429 else "server_error" if status >= 500 else "rejected"
    if isinstance(cause, ValueError):
        return "unreadable"
    return "other"


class LLMCall:
    """One chat completion being observed; ``done(reply)`` records its tokens."""

    def __init__(self, span: Any) -> None:
        self.span = span
        self.prompt_tokens = self.completion_tokens = 0
        self.mode = ""

    def done(self, reply: Any) -> None:
        self.prompt_tokens, self.completion_tokens = reply.prompt_tokens, reply.completion_tokens
        self.mode = reply.mode
        if self.span is not None:
            self.span.set_attributes({
                "llm.token_count.prompt": reply.prompt_tokens,
                "llm.token_count.completion": reply.completion_tokens,
                "llm.token_count.total": reply.prompt_tokens + reply.completion_tokens,
                "llm.invocation_parameters": json.dumps({"response_format": reply.mode}),
            })


@contextmanager
def llm_call(model: str, name: str = "") -> Iterator[LLMCall]:
    """Observe one LLM call: an OpenInference LLM span (model, tokens), latency, tokens and errors by kind."""
    scope = _scope.get() or Scope()
    started = time.monotonic()
    with _span("lessonbank llm", scope, kind="LLM") as span:
        if span is not None:
            span.set_attributes({"llm.model_name": model, "llm.system": "openai", "lessonbank.llm.schema": name})
        call = LLMCall(span)
        try:
            yield call
        except BaseException as e:
            m = metrics()
            if m is not None:
                m.llm_errors.labels(error_kind(e)).inc()
            raise
    scope.tokens += call.prompt_tokens + call.completion_tokens
    m = metrics()
    if m is not None:
        m.llm_seconds.observe(time.monotonic() - started)
        m.llm_tokens.labels("prompt").inc(call.prompt_tokens)
        m.llm_tokens.labels("completion").inc(call.completion_tokens)


def setup_tracing(settings: Settings) -> Any:
    """Export spans over OTLP/HTTP to ``settings.otlp_endpoint``; None when not asked, not installed, or a
    tracer provider is already set."""
    if not settings.otlp_endpoint:
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed: "
                       "pip install 'lessonbank[otel]'")
        return None
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return None  # someone (opentelemetry-instrument, the user) configured tracing already
    provider = TracerProvider(resource=Resource.create({"service.name": "lessonbank-worker"}))
    endpoint = settings.otlp_endpoint.rstrip("/") + "/v1/traces"
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    logger.info("tracing to %s", masked_url(endpoint))
    return provider
