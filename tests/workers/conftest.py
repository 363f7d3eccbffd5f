"""Fixtures shared by the worker tests: an in-memory store with the real embedder, and the worker's dependencies
on the test Redis and the scripted OpenAI-protocol server. A module that needs other settings defines its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import redis
from qdrant_client import QdrantClient

from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.base import LessonStoreBase
from lessonbank.core.store.edge import EdgeLessonStore
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.workers.deps import Deps
from lessonbank.workers.llm import ChatLLM
from tests.fixtures.openai_server import FakeOpenAI


@pytest.fixture
def store(embedder: FastEmbedEmbedder) -> Iterator[LessonStore]:
    s = LessonStore(QdrantClient(":memory:"), embedder, collection=f"c{uuid.uuid4().hex[:6]}")
    yield s
    s.close()


@pytest.fixture
def deps(settings: Settings, redis_client: redis.Redis, store: LessonStore, openai_server: FakeOpenAI) -> Deps:
    """The worker's dependencies; a run's distill lock is waited for 1 s."""
    client = openai.OpenAI(base_url=openai_server.url, api_key="k", max_retries=0, timeout=5)
    settings = settings.model_copy(update={"distill_lock_timeout": 1})
    return Deps(settings=settings, redis=redis_client, store=store, llm=ChatLLM(client, "fake"), scrubber=Redactor())


@pytest.fixture(params=["edge", "qdrant_local"])
def embedded_store(request: pytest.FixtureRequest, tmp_path: Path, embedder: FastEmbedEmbedder
                   ) -> Iterator[LessonStoreBase]:
    """A fresh embedded store of each kind: qdrant-edge, and qdrant-client's local path mode."""
    if request.param == "edge":
        edge = EdgeLessonStore(tmp_path / "edge", embedder)
        edge.open()
        yield edge
        edge.close()
    else:
        local = LessonStore(QdrantClient(path=str(tmp_path / "qdrant_local")), embedder)
        local.ensure_collection()
        yield local
        local.close()
