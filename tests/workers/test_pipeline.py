"""The distill pipeline as plain functions, without Celery: real Redis, a real in-memory Qdrant store with
the real embedder, and a real HTTP server speaking the OpenAI protocol."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import redis
from qdrant_client import QdrantClient

from lessonbank.core.constants import bank_lock_key, pending_lesson_key
from lessonbank.core.exceptions import PermanentDistillError, StoreError, TransientDistillError
from lessonbank.core.models import Lesson
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.workers.llm import ChatLLM
from lessonbank.workers.pipeline import Deps, distill_one, remember_one
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.runs import run_state, write_run

CSV = ("fact", "The sales CSV files are separated by ';': read them with pandas.read_csv(path, sep=';').")
TIMEOUT = ("failure", "The billing API hangs without a timeout: always pass timeout=10 to requests.get.")


class FlakyStore:
    """The real store, whose first ``failures`` upserts fail as an unavailable store would."""

    def __init__(self, store: LessonStore, failures: int) -> None:
        self.store, self.failures = store, failures

    def upsert(self, lessons: list[Lesson]) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreError("store refused the write")
        self.store.upsert(lessons)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.fixture
def store(embedder) -> Iterator[LessonStore]:  # type: ignore[no-untyped-def]
    s = LessonStore(QdrantClient(":memory:"), embedder, collection=f"c{uuid.uuid4().hex[:6]}")
    yield s
    s.close()


@pytest.fixture
def deps(settings: Settings, redis_client: redis.Redis, store: LessonStore, openai_server: FakeOpenAI) -> Deps:
    client = openai.OpenAI(base_url=openai_server.url, api_key="k", max_retries=0, timeout=5)
    settings = settings.model_copy(update={"distill_lock_timeout": 1})
    return Deps(settings=settings, redis=redis_client, store=store, llm=ChatLLM(client, "fake"), scrubber=Redactor())


def test_a_run_is_distilled_once(deps: Deps, openai_server: FakeOpenAI, store: LessonStore) -> None:
    openai_server.script(Reply(content=lessons_json(CSV, TIMEOUT)))
    run_id = write_run(deps.redis, "b")
    stats = distill_one(deps, "b", run_id)
    assert stats is not None and stats.added == 2
    assert sorted(lesson.text for lesson in store.list("b")) == sorted([CSV[1], TIMEOUT[1]])
    state = run_state(deps.redis, run_id)
    assert state["state"] == "distilled" and '"added": 2' in state["lessons"] and "distill_output" not in state
    assert distill_one(deps, "b", run_id) is None  # redelivered after success: nothing happens
    assert len(openai_server.chat_requests()) == 1


def test_a_retry_after_a_store_failure_reuses_the_llm_output(deps: Deps, openai_server: FakeOpenAI,
                                                             store: LessonStore) -> None:
    openai_server.script(Reply(content=lessons_json(CSV, TIMEOUT)))
    run_id = write_run(deps.redis, "b")
    flaky = Deps(deps.settings, deps.redis, FlakyStore(store, failures=1), deps.llm, deps.scrubber)  # type: ignore[arg-type]
    with pytest.raises(StoreError):
        distill_one(flaky, "b", run_id)
    assert run_state(deps.redis, run_id)["state"] == "closed" and "distill_output" in run_state(deps.redis, run_id)
    stats = distill_one(flaky, "b", run_id)
    assert stats is not None and stats.added == 2 and len(openai_server.chat_requests()) == 1
    assert run_state(deps.redis, run_id)["distill_attempts"] == "2"


def test_runs_that_cannot_be_distilled_are_permanent(deps: Deps, openai_server: FakeOpenAI) -> None:
    other = write_run(deps.redis, "a")
    with pytest.raises(PermanentDistillError, match="belongs to bank 'a'"):
        distill_one(deps, "b", other)
    empty = write_run(deps.redis, "b", steps=[])
    with pytest.raises(PermanentDistillError, match="no step records"):
        distill_one(deps, "b", empty)
    assert openai_server.chat_requests() == []


def test_a_held_bank_lock_is_transient(deps: Deps, openai_server: FakeOpenAI) -> None:
    openai_server.script(Reply(content=lessons_json(CSV)))
    run_id = write_run(deps.redis, "b")
    deps.redis.set(bank_lock_key("b"), "another worker", ex=30)
    with pytest.raises(TransientDistillError, match="stayed locked"):
        distill_one(deps, "b", run_id)


def test_a_remembered_lesson_is_consolidated_once(deps: Deps, store: LessonStore) -> None:
    lesson = Lesson.new("b", "fact", CSV[1], origin="remembered")
    deps.redis.set(pending_lesson_key("p1"), lesson.to_json())
    stats = remember_one(deps, "b", "p1")
    assert stats is not None and stats.added == 1
    assert [(stored.text, stored.origin) for stored in store.list("b")] == [(CSV[1], "remembered")]
    assert deps.redis.get(pending_lesson_key("p1")) is None
    assert remember_one(deps, "b", "p1") is None
    deps.redis.set(pending_lesson_key("p2"), lesson.to_json())
    with pytest.raises(PermanentDistillError, match="another bank"):
        remember_one(deps, "other", "p2")
