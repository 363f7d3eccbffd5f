"""A store written by the previous release reads correctly, on read and after ``lessonbank migrate``: lessons of
every origin, payload kind and status (``tests/fixtures/store_d7beb7d``) come back with their payloads and status
causes, the same texts and the same instructions blocks, in both store backends."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from lessonbank.cli.migrate import migrate_bank
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import LESSON_SCHEMA_VERSION, Lesson
from lessonbank.core.store.base import LessonStoreBase
from lessonbank.core.store.edge import EdgeLessonStore
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.instructions import compose_instructions
from lessonbank.learn import needs, render, upgrade

OLD = Path(__file__).resolve().parent / "fixtures" / "store_d7beb7d"
BANK = "old"
EXPECTED: list[dict[str, Any]] = json.loads((OLD / "lessons.json").read_text())
BLOCKS: list[dict[str, Any]] = json.loads((OLD / "blocks.json").read_text())
# The status cause each old reason gives (the reason's words stay as they were).
CAUSES = {
    "": None, "it carries a URL; a user must release it": "quarantined", "released by a user": "released",
    "given to 8 runs, applied by none": "idle", "contradicted by run run-d4 (judged a success)": "contradicted",
    "a newer recipe (run run-r8) succeeded where this one failed": "outdated",
    "its run run-r9 was judged a failure by user": "retracted",
    "its corrected line gave the answer of run run-f5, judged a failure by check": "retracted",
}


def extract_stores(into: Path) -> Path:
    """Both stores of the fixture, extracted (sparse files and all) into ``into``: ``edge/``, ``qdrant_local/``."""
    with tarfile.open(OLD / "stores.tar.gz") as archive:
        archive.extractall(into, filter="data")
    return into


@pytest.fixture
def old_stores(tmp_path: Path) -> Path:
    return extract_stores(tmp_path / "old")


@pytest.fixture(params=["edge", "qdrant_local"])
def store(request: pytest.FixtureRequest, old_stores: Path, embedder: FastEmbedEmbedder) -> Iterator[LessonStoreBase]:
    if request.param == "edge":
        edge = EdgeLessonStore(old_stores / "edge", embedder)
        edge.open()
        yield edge
        edge.close()
    else:
        local = LessonStore(QdrantClient(path=str(old_stores / "qdrant_local")), embedder)
        yield local
        local.close()


def _cause(expected: dict[str, Any]) -> str | None:
    if expected["status"] == "forgotten":
        return "forgotten"
    if expected["status"] == "superseded" and not expected["status_reason"]:
        return "merged"
    if expected["status_reason"].startswith("harmful in 4 of 4 runs that applied it"):
        return "harmful"
    return CAUSES[expected["status_reason"]]


def check_read(lessons: list[Lesson]) -> None:
    """Every old lesson, read back: its payload, the same text rendered from it, its status and cause."""
    by_id = {lesson.id: lesson for lesson in lessons}
    assert sorted(by_id) == sorted(item["id"] for item in EXPECTED)
    for item in EXPECTED:
        lesson = by_id[item["id"]]
        assert lesson.schema_version == LESSON_SCHEMA_VERSION
        # a fix renders from its payload: a lead says what changed (a key too), and a date form an error named is no
        # longer part of it (its lines say it)
        rendered = render.text(lesson)
        old = item["text"].replace(" asking for DD.MM.YYYY", "")
        old = old.replace(" Records came back from ", " It came back from ")
        assert rendered == old or ("fix" in item["tags"] and rendered.endswith(old.split(": `", 1)[-1])), old
        assert (lesson.status, lesson.status_reason, lesson.status_cause) == (
            item["status"], item["status_reason"], _cause(item))
        assert lesson.status_run == {"contradicted": "run-d4", "outdated": "run-r8"}.get(
            lesson.status_cause or "", lesson.status_run)
        for name in ("kind", "origin", "tags", "evidence", "given", "applied", "helpful", "harmful", "task",
                     "source_run_ids", "superseded_by", "verified", "failed_runs"):
            assert getattr(lesson, name) == item[name], (name, item["text"])
        if "fix" in item["tags"]:
            assert lesson.fix is not None and lesson.shape is None
            assert f"`{lesson.fix.failed}` failed with {lesson.fix.error}" in item["text"]
            assert lesson.fix.tried == item["text"].endswith(" worked.")
        elif "shape" in item["tags"]:
            assert lesson.shape is not None and lesson.fix is None and lesson.shape.records
            assert (lesson.shape.call != "") == ("Records came back from" in item["text"])
        else:
            assert lesson.fix is None and lesson.shape is None
        if item["recipe"] is not None:
            assert lesson.recipe is not None and lesson.recipe.code == item["recipe"]["code"]


def check_blocks(store: LessonStoreBase, moved: dict[str, str] | None = None) -> None:
    """The instructions blocks the previous release gave from this store: the same lessons (the words of a fix or a
    recipe given for a task have changed since: values placed by where they flow) or lessons about a tool of the
    agent's, which rank higher now (relevant to any question about it: ``needs.tools_used``), or that release gave
    for the same task in a larger block (a fix handed to another question is shorter now: a lesson more fits).
    ``moved``: the old id of each shape ``lessonbank migrate`` moved, by its new one."""
    for case in BLOCKS:
        block, given = compose_instructions(store, case["task"], BANK, max_chars=case["max_chars"],
                                            tools=case["tools"])
        assert bool(given) >= bool(case["given"]), case["task"]
        larger = {id_ for other in BLOCKS if other["task"] == case["task"] for id_ in other["given"]}
        added = [lesson for lesson in given if (moved or {}).get(lesson.id, lesson.id) not in larger]
        assert all(needs.about_tools(lesson, case["tools"] or []) for lesson in added), case["task"]


def moved_back(lessons: list[Lesson]) -> list[Lesson]:
    """``lessons`` with each shape ``lessonbank migrate`` moved to its current id read as the lesson it was: the
    same lesson under its old id, and nothing else at its new one."""
    by_id = {lesson.id: lesson for lesson in lessons}
    moved = {lesson.superseded_by: lesson for lesson in lessons if lesson.status_reason == upgrade.REKEYED}
    assert len(moved) == 2 and all(upgrade.observed_id(by_id[now]) == now for now in moved)
    back = [by_id[now].model_copy(update={"id": old.id}) for now, old in moved.items()]
    return [lesson for lesson in lessons if lesson.id not in moved and lesson.status_reason != upgrade.REKEYED] + back


def raw(store: LessonStoreBase) -> list[dict[str, Any]]:
    return list(store._scroll(BANK, active_only=False))


def test_a_store_of_the_previous_release_reads_correctly_then_migrates(store: LessonStoreBase) -> None:
    assert all("schema_version" not in payload for payload in raw(store))  # as the previous release wrote it
    check_read(store.list(BANK, limit=100, include_inactive=True))
    check_blocks(store)

    counts = migrate_bank(store, BANK)
    # what fixes changed (keys too), the tools of 3 recipes; both shapes, keyed by that release's fingerprint
    assert counts == {"lessons": len(EXPECTED), "completed": 9, "moved": 2, "not_migrated": 0,
                      "not_migrated_lessons": []}
    stored = raw(store)
    assert {payload["schema_version"] for payload in stored} == {LESSON_SCHEMA_VERSION}
    assert all(payload["fix"]["changed"] is not None for payload in stored if payload.get("fix"))
    assert all(payload["recipe"]["tools"] is not None for payload in stored if payload.get("recipe"))
    assert {payload["status_cause"] for payload in stored} >= {"merged", "contradicted", "retracted", "released"}
    after = store.list(BANK, limit=100, include_inactive=True)
    check_read(moved_back(after))
    check_blocks(store, {lesson.superseded_by or "": lesson.id for lesson in after
                         if lesson.status_reason == upgrade.REKEYED})
    again = migrate_bank(store, BANK)
    assert again["completed"] == again["moved"] == 0  # once is enough
