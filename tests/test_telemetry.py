"""A run's trace: real CodeAgents under ``remember``, a real store and Redis, the OpenTelemetry SDK's in-memory
exporter, and OpenInference's smolagents instrumentation."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from qdrant_client import QdrantClient
from smolagents import CodeAgent

from lessonbank import remember
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.telemetry import start_run
from tests.fixtures.recorded import run_hash
from tests.fixtures.scripted_model import ScriptedModel, final_code
from tests.fixtures.spans import provider

CSV = "CSV files in the data folder use ';' as separator: read them with pd.read_csv(path, sep=';')."
TASK = "Load data/sales.csv and compute the total revenue per region"
SECRET_TASK = TASK + " with token=abcdef0123456789abcdef"


@pytest.fixture
def store(embedder: FastEmbedEmbedder) -> Iterator[LessonStore]:
    client = QdrantClient(":memory:")
    store = LessonStore(client, embedder)
    store.upsert([Lesson.new("team", "approach", CSV).model_copy(update={"verified": True})])
    yield store
    client.close()


def agent() -> CodeAgent:
    return CodeAgent(tools=[], model=ScriptedModel([], then=final_code("ok")), verbosity_level=0)


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_the_runs_span_carries_bank_run_arm_and_lessons(
    settings: Settings, store: LessonStore, spans: InMemorySpanExporter, redis_client: redis.Redis
) -> None:
    worker = agent()
    recorder = remember(worker, bank="team", settings=settings, store=store)
    try:
        assert worker.run(SECRET_TASK) == "ok"
    finally:
        recorder.close()
    run_id = recorder.run_id(worker)
    lesson_id = Lesson.new("team", "approach", CSV).id
    [run] = named(spans, "lessonbank run")
    found = attrs(run)
    assert found["lessonbank.bank"] == "team" and found["lessonbank.run_id"] == run_id
    assert found["lessonbank.arm"] == "lessons" and list(found["lessonbank.lesson_ids"]) == [lesson_id]
    assert found["openinference.span.kind"] == "CHAIN" and found["lessonbank.lessons_given"] == 1
    assert "abcdef0123456789abcdef" not in found["input.value"] and "sales.csv" in found["input.value"]
    assert run.status.status_code == trace.StatusCode.OK
    [retrieved] = named(spans, "lessonbank lessons")
    docs = attrs(retrieved)
    assert retrieved.parent is not None and retrieved.parent.span_id == run.context.span_id
    assert docs["openinference.span.kind"] == "RETRIEVER"
    assert docs["retrieval.documents.0.document.id"] == lesson_id
    assert docs["retrieval.documents.0.document.content"] == CSV
    parent = run_hash(redis_client, run_id or "")["traceparent"]  # the worker links its spans to this one
    assert parent.startswith(f"00-{run.context.trace_id:032x}-{run.context.span_id:016x}-")


def test_smolagents_spans_carry_the_lessons_as_openinference_metadata(
    settings: Settings, store: LessonStore, spans: InMemorySpanExporter
) -> None:
    worker = agent()
    recorder = remember(worker, bank="team", settings=settings, store=store)
    with_instrumentation = pytest.importorskip("openinference.instrumentation.smolagents").SmolagentsInstrumentor()
    with_instrumentation.instrument(tracer_provider=provider())  # after remember(): it still sees the runs
    try:
        worker.run(TASK)
    finally:
        with_instrumentation.uninstrument()
        recorder.close()
    [ours] = named(spans, "lessonbank run")
    [theirs] = named(spans, "CodeAgent.run")
    assert theirs.context.trace_id == ours.context.trace_id and theirs.parent.span_id == ours.context.span_id
    metadata = json.loads(attrs(theirs)["metadata"])
    assert metadata["lessonbank.run_id"] == recorder.run_id(worker)
    assert metadata["lessonbank.lesson_ids"] == [Lesson.new("team", "approach", CSV).id]
    steps = [s for s in spans.get_finished_spans() if s.name.startswith("Step ")]
    assert steps and all(json.loads(attrs(s)["metadata"])["lessonbank.bank"] == "team" for s in steps)


def test_a_current_smolagents_agent_span_is_annotated_instead(
    settings: Settings, store: LessonStore, spans: InMemorySpanExporter
) -> None:
    worker = agent()
    recorder = remember(worker, bank="team", settings=settings, store=store)
    tracer = provider().get_tracer("test")
    try:
        with tracer.start_as_current_span("MyAgent.run", attributes={"openinference.span.kind": "AGENT"}):
            worker.run(TASK)
    finally:
        recorder.close()
    assert named(spans, "lessonbank run") == []
    [outer] = named(spans, "MyAgent.run")
    assert attrs(outer)["lessonbank.run_id"] == recorder.run_id(worker)
    assert list(attrs(outer)["lessonbank.lesson_ids"]) == [Lesson.new("team", "approach", CSV).id]


def test_a_failed_run_ends_its_span_as_an_error(settings: Settings, store: LessonStore,
                                                spans: InMemorySpanExporter) -> None:
    worker = CodeAgent(tools=[], model=ScriptedModel([]), verbosity_level=0)
    recorder = remember(worker, bank="team", settings=settings, store=store)
    try:
        with pytest.raises(Exception, match="scripted model"):
            worker.run(TASK)
    finally:
        recorder.close()
    [run] = named(spans, "lessonbank run")
    assert run.status.status_code == trace.StatusCode.ERROR and run.end_time is not None
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left attached


def test_without_opentelemetry_it_is_a_no_op(settings: Settings, store: LessonStore,
                                             monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis) -> None:
    for name in [m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry.")]:
        monkeypatch.setitem(sys.modules, name, None)  # import opentelemetry... now raises ImportError
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    assert not start_run(agent(), TASK, Redactor()).active
    worker = agent()
    recorder = remember(worker, bank="team", settings=settings, store=store)
    try:
        assert worker.run(TASK) == "ok"
    finally:
        recorder.close()
    state = run_hash(redis_client, recorder.run_id(worker) or "")
    assert "traceparent" not in state and json.loads(state["given"]) == [Lesson.new("team", "approach", CSV).id]
