"""What the worker shows of itself: spans and metrics of a distillation (in process, with the SDK's in-memory
exporter), the heartbeat, and a real worker subprocess whose /metrics endpoint and OTLP export are read."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest
import redis
from click.testing import CliRunner
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from lessonbank.cli.main import cli
from lessonbank.core.constants import DEAD_LETTERS_KEY, STORE_OWNER_KEY, run_key, worker_key
from lessonbank.core.exceptions import TransientDistillError
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.workers import observe
from lessonbank.workers.deps import Deps
from lessonbank.workers.llm import ChatLLM
from lessonbank.workers.observe import counters, tracing
from lessonbank.workers.pipeline import distill_one
from tests.fixtures.celery_worker import CeleryWorker, enqueue, producer, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply, error, lessons_json
from tests.fixtures.redis_server import free_port
from tests.fixtures.runs import run_state, write_run

CSV = ("fact", "The sales CSV files are separated by ';': read them with pandas.read_csv(path, sep=';').")
TIMEOUT = ("failure", "The billing API hangs without a timeout: always pass timeout=10 to requests.get.")
AGENT_SPAN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def deps(settings: Settings, redis_client: redis.Redis, store: LessonStore, openai_server: FakeOpenAI) -> Deps:
    client = openai.OpenAI(base_url=openai_server.url, api_key="k", max_retries=0, timeout=5)
    return Deps(settings=settings, redis=redis_client, store=store, llm=ChatLLM(client, "fake"), scrubber=Redactor())


def value(name: str, **labels: str) -> float:
    m = observe.metrics()
    assert m is not None
    return m.registry.get_sample_value(name, labels) or 0.0


def one(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    [span] = [s for s in exporter.get_finished_spans() if s.name == name]
    return span


def test_a_distillation_is_traced_and_counted(deps: Deps, openai_server: FakeOpenAI, spans: InMemorySpanExporter
                                              ) -> None:
    before = {"added": value("lessonbank_lessons_total", outcome="added"),
              "prompt": value("lessonbank_llm_tokens_total", type="prompt"),
              "runs": value("lessonbank_distill_seconds_count"), "tokens": value("lessonbank_distill_tokens_sum"),
              "store": value("lessonbank_store_seconds_count", method="upsert")}
    openai_server.script(Reply(content=lessons_json(CSV, TIMEOUT), prompt_tokens=321, completion_tokens=45))
    run_id = write_run(deps.redis, "b")
    deps.redis.hset(run_key(run_id), "traceparent", AGENT_SPAN)  # what remember() keeps with a traced run
    stats = distill_one(deps, "b", run_id)
    assert stats is not None and stats.added == 2

    distill, llm, consolidate = (one(spans, n) for n in ("lessonbank distill", "lessonbank llm",
                                                          "lessonbank consolidate"))
    assert distill.attributes is not None and distill.attributes["lessonbank.run_id"] == run_id
    assert distill.attributes["lessonbank.bank"] == "b"
    assert [link.context.trace_id for link in distill.links] == [0x4bf92f3577b34da6a3ce929d0e0e4736]
    assert llm.parent is not None and llm.parent.span_id == distill.context.span_id
    assert consolidate.parent is not None and consolidate.parent.span_id == distill.context.span_id
    found = dict(llm.attributes or {})
    assert found["openinference.span.kind"] == "LLM" and found["llm.model_name"] == "fake"
    assert (found["llm.token_count.prompt"], found["llm.token_count.completion"]) == (321, 45)
    assert found["llm.token_count.total"] == 366 and found["lessonbank.run_id"] == run_id
    assert llm.end_time is not None and llm.start_time is not None and llm.end_time > llm.start_time
    assert not any("pandas" in json.dumps(dict(s.attributes or {})) for s in spans.get_finished_spans())

    assert value("lessonbank_lessons_total", outcome="added") == before["added"] + 2
    assert value("lessonbank_llm_tokens_total", type="prompt") == before["prompt"] + 321
    assert value("lessonbank_distill_seconds_count") == before["runs"] + 1
    assert value("lessonbank_distill_tokens_sum") == before["tokens"] + 366
    assert value("lessonbank_store_seconds_count", method="upsert") > before["store"]


def test_llm_errors_are_counted_by_kind_and_end_the_span_as_failed(
    deps: Deps, openai_server: FakeOpenAI, spans: InMemorySpanExporter
) -> None:
    limited = value("lessonbank_llm_errors_total", kind="rate_limited")
    unreachable = value("lessonbank_llm_errors_total", kind="connection")
    openai_server.script(error(429, "slow down"))
    with pytest.raises(TransientDistillError):
        deps.llm.complete([{"role": "user", "content": "hi"}], "x", {"type": "object"})
    assert value("lessonbank_llm_errors_total", kind="rate_limited") == limited + 1
    assert one(spans, "lessonbank llm").status.status_code == trace.StatusCode.ERROR
    away = ChatLLM(openai.OpenAI(base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="k", max_retries=0), "m")
    with pytest.raises(TransientDistillError):
        away.complete([{"role": "user", "content": "hi"}], "x", {"type": "object"})
    assert value("lessonbank_llm_errors_total", kind="connection") == unreachable + 1


def test_without_the_extras_distilling_works_untraced(deps: Deps, openai_server: FakeOpenAI,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in ("opentelemetry", "prometheus_client")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.setattr(counters, "_metrics", [])
    openai_server.script(Reply(content=lessons_json(CSV)))
    stats = distill_one(deps, "b", write_run(deps.redis, "b"))
    assert stats is not None and stats.added == 1
    assert observe.metrics() is None and tracing._tracer() is None


def test_two_workers_serving_an_embedded_store_over_one_redis_say_so(
    settings: Settings, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    first = observe.Heartbeat(settings, "w1@host-a", serves_store=lambda: True)
    second = observe.Heartbeat(settings, "w2@host-b", serves_store=lambda: True)
    with caplog.at_level(logging.ERROR, logger="lessonbank.workers.observe.heartbeat"):
        first.beat()
        first.beat()  # its own name: nothing to say
        assert not caplog.records
        second.beat()
        first.beat()
        second.beat()  # once per rival
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 2 and "another worker (w1@host-a)" in said[0] and "another worker (w2@host-b)" in said[1]
    assert "LESSONBANK_QDRANT_URL" in said[0] and redis_client.get(STORE_OWNER_KEY) == b"w2@host-b"


def test_a_stopping_owner_leaves_the_key_of_the_worker_that_serves_the_store_since(
        settings: Settings, redis_client: redis.Redis) -> None:
    """A worker stops as its successor starts serving the store: the successor's beat lands between the stopping
    worker's read of the owner's key and its delete. The key keeps naming the successor."""
    successor = observe.Heartbeat(settings, "w2@host", client=redis_client, serves_store=lambda: True)
    stopping: list[bool] = []

    class Racing(redis.Redis):
        def get(self, name):  # type: ignore[no-untyped-def, override]
            seen = super().get(name)
            if stopping and name == STORE_OWNER_KEY:
                successor.beat()  # the successor's beat, after the read
            return seen

        def eval(self, script, numkeys, *keys_and_args):  # type: ignore[no-untyped-def, override]
            if stopping:
                successor.beat()  # ... or just before the delete
            return super().eval(script, numkeys, *keys_and_args)

    leaving = observe.Heartbeat(settings, "w1@host", client=Racing(connection_pool=redis_client.connection_pool),
                                serves_store=lambda: True)
    leaving.beat()
    assert redis_client.get(STORE_OWNER_KEY) == b"w1@host"
    stopping.append(True)
    leaving.stop()
    assert redis_client.get(STORE_OWNER_KEY) == b"w2@host" and redis_client.get(worker_key("w1@host")) is None
    successor.stop()
    assert redis_client.get(STORE_OWNER_KEY) is None


def test_heartbeat_says_which_llm_and_whether_it_answered(settings: Settings, redis_client: redis.Redis,
                                                          openai_server: FakeOpenAI) -> None:
    answering = settings.model_copy(update={"openai_base_url": openai_server.url, "distill_model": "m1"})
    beat = observe.Heartbeat(answering, "w1@host", serves_store=lambda: True, interval=0.2)
    beat.start()
    try:
        deadline = time.monotonic() + 20
        while (info := json.loads(redis_client.get(worker_key("w1@host")) or b"{}"))["llm"].get("reachable") is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert info["llm"]["model"] == "m1" and info["llm"]["reachable"] is True and info["llm"]["status"] == 200
        assert info["llm"]["detail"] == "models: fake-model"
        assert info["store"] == "owner" and redis_client.get(STORE_OWNER_KEY) == b"w1@host"
        assert 0 < redis_client.ttl(worker_key("w1@host")) <= observe.HEARTBEAT_TTL
    finally:
        beat.stop()
    assert redis_client.get(worker_key("w1@host")) is None and redis_client.get(STORE_OWNER_KEY) is None
    away = settings.model_copy(update={"openai_base_url": f"http://user:pw@127.0.0.1:{free_port()}/v1"})
    probe = observe.probe_llm(away)
    assert probe["reachable"] is False and "unreachable" in probe["detail"]
    assert "pw" not in observe.Heartbeat(away, "w2").info["llm"]["base_url"]


class Collector:
    """A real HTTP server standing in for an OTLP/HTTP receiver (Phoenix, Langfuse, a collector)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/v1/traces":
                    collector.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def received(self) -> bytes:
        return b"".join(self.bodies)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


@pytest.mark.slow
def test_a_real_worker_serves_metrics_heartbeats_and_exports_spans(
    redis_url: str, redis_client: redis.Redis, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path
) -> None:
    port, collector = free_port(), Collector()
    env = worker_env(redis_url, "observed", tmp_path / "data", openai_server.url, embed_model_path,
                     metrics_port=port)
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.url
    worker = CeleryWorker(env, "observed", tmp_path / "worker.log").start()
    try:
        openai_server.script(Reply(content=lessons_json(CSV, TIMEOUT), prompt_tokens=300, completion_tokens=40))
        run_id = write_run(redis_client, "b")
        enqueue(producer(redis_url), "observed", "b", run_id)
        empty = write_run(redis_client, "b", steps=[])  # its steps are gone: dead-lettered at once
        enqueue(producer(redis_url), "observed", "b", empty)
        deadline = time.monotonic() + 60
        while run_state(redis_client, run_id).get("state") != "distilled" \
                or not redis_client.hexists(DEAD_LETTERS_KEY, empty):
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.2)
        samples = scrape(port)
        assert samples[("lessonbank_lessons_total", (("outcome", "added"),))] == 2
        assert samples[("lessonbank_llm_tokens_total", (("type", "prompt"),))] == 300
        assert samples[("lessonbank_distills_total", (("result", "distilled"),))] == 1
        assert samples[("lessonbank_distill_seconds_count", ())] == 1
        assert samples[("lessonbank_distill_tokens_sum", ())] == 340
        assert samples[("lessonbank_store_seconds_count", (("method", "upsert"),))] >= 1
        assert samples[("lessonbank_dead_letters_total", ())] == 1
        assert samples[("lessonbank_distills_total", (("result", "error"),))] == 1
        # the cluster's gauges, read from Redis at the scrape
        assert samples[("lessonbank_redis_up", ())] == 1 and samples[("lessonbank_workers_alive", ())] == 1
        assert samples[("lessonbank_dead_letters_stored", ())] == 1 and samples[("lessonbank_runs_waiting", ())] == 0
        assert samples[("lessonbank_queue_depth", (("queue", "observed"),))] == 0

        status_env = {"LESSONBANK_REDIS_URL": redis_url, "LESSONBANK_QUEUE": "observed",
                      "LESSONBANK_DATA_DIR": str(tmp_path / "data"), "LESSONBANK_STORE_TIMEOUT": "15",
                      "LESSONBANK_EMBED_MODEL_PATH": str(embed_model_path), "LESSONBANK_QDRANT_URL": None}
        report = json.loads(CliRunner().invoke(cli, ["status", "--json"], env=status_env).stdout)
        [alive] = report["workers"]
        assert report["workers_alive"] == 1 and alive["alive"] and alive["store"] == "owner"
        assert alive["llm"]["model"] == "fake-model" and alive["llm"]["base_url"] == openai_server.url
        assert alive["metrics"] == f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 60  # the batch processor exports every 5 s: 20 s was four of its rounds
        while b"lessonbank llm" not in collector.received():  # sent when the task ended
            assert time.monotonic() < deadline, "no span reached the OTLP endpoint"
            time.sleep(0.1)
        assert b"lessonbank distill" in collector.received() and run_id.encode() in collector.received()
    finally:
        worker.stop()
        collector.server.shutdown()
    report = json.loads(CliRunner().invoke(cli, ["status", "--json"], env=status_env).stdout)
    assert report["workers_alive"] == 0 and report["workers"][0]["alive"] is False
    assert not (tmp_path / "data" / "metrics").exists() or not any((tmp_path / "data" / "metrics").iterdir())
