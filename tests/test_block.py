"""``lessons_block``: the block and the ids of the lessons in it, which a run built piece by piece records."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from qdrant_client import QdrantClient

import lessonbank
from lessonbank.block import LessonsBlock, lessons_block
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson
from lessonbank.core.settings import Settings
from lessonbank.core.store.qdrant import LessonStore

CSV = "CSV files in the data folder use ';' as separator: read them with pd.read_csv(path, sep=';')."
YAML = "The project configuration lives in config/settings.yaml and is YAML, not JSON."
TASK = "Load data/sales.csv with pandas and sum the revenue"


@pytest.fixture
def store(embedder: FastEmbedEmbedder) -> Iterator[LessonStore]:
    client = QdrantClient(":memory:")
    store = LessonStore(client, embedder)
    store.upsert([Lesson.new("team", "fact", text).model_copy(update={"verified": True}) for text in (CSV, YAML)])
    yield store
    client.close()


def test_the_block_carries_the_ids_of_the_lessons_in_it(store: LessonStore, settings: Settings) -> None:
    block = lessons_block(TASK, "team", store=store, settings=settings)
    csv = next(lesson for lesson in store.list("team") if lesson.text == CSV)
    assert CSV in block.text and YAML not in block.text and block.lesson_ids == (csv.id,)
    assert block.after(TASK) == f"{TASK}\n\n{block.text}" and str(block) == block.text and block
    assert block.run_fields == {"arm": "lessons", "given": json.dumps([csv.id])}
    empty = lessons_block("Write a haiku about autumn leaves.", "team", store=store, settings=settings)
    assert empty == LessonsBlock() and not empty and empty.after("task") == "task"


def test_build_instructions_is_a_deprecated_alias_giving_the_text(store: LessonStore, settings: Settings) -> None:
    with pytest.warns(DeprecationWarning, match="lessons_block"):
        text = lessonbank.build_instructions(TASK, "team", store=store, settings=settings)
    assert text == lessons_block(TASK, "team", store=store, settings=settings).text and CSV in text
