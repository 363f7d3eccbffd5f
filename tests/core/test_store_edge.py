"""The embedded store (a Qdrant Edge shard): deletes that leave nothing in its files, one process per path,
the import of qdrant-client's local store, the fusion it computes, and exact round trips."""

from __future__ import annotations

import errno
import os
import random
import shutil
from pathlib import Path

import pytest
import qdrant_edge as qe
from qdrant_client import QdrantClient

from lessonbank.core.embeddings import FastEmbedEmbedder, sparse_vector
from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable, StoreError
from lessonbank.core.models import Lesson, Recipe
from lessonbank.core.store import edge
from lessonbank.core.store.base import DENSE, LEXICAL, RRF_K, fuse
from lessonbank.core.store.edge import EdgeLessonStore
from lessonbank.core.store.edge_files import COMPLETE, PURGE, REBUILD, RETIRED
from lessonbank.core.store.qdrant import LessonStore


def files_containing(folder: Path, marker: str) -> list[str]:
    """Every file under ``folder`` holding the bytes of ``marker``."""
    needle = marker.encode()
    return [str(path.relative_to(folder)) for path in sorted(folder.rglob("*"))
            if path.is_file() and needle in path.read_bytes()]


def recipe(code: str) -> Recipe:
    return Recipe(task="Sum the sales", code=code, language="python", fingerprint=code[:16], checks=["outcome:user"])


def test_delete_bank_and_delete_leave_no_byte_of_the_lessons_in_the_files(
    tmp_path: Path, embedder: FastEmbedEmbedder
) -> None:
    path = tmp_path / "qdrant"
    old = Lesson.new("gone", "fact", "QUOKKA-LEGACY the ledger export is UTF-16.")
    legacy = LessonStore(QdrantClient(path=str(path)), embedder)  # written by an earlier version
    legacy.upsert([old, Lesson.new("kept", "fact", "WOMBAT-LEGACY the orders API pages by cursor.")])
    legacy.close()

    store = EdgeLessonStore(path, embedder)
    gone = [Lesson.new("gone", "approach", "QUOKKA-ONE read sales.csv with sep=';'."),
            Lesson.new("gone", "failure", "QUOKKA-TWO the billing API hangs without a timeout.", tags=["QUOKKA-TAG"]),
            Lesson.new("gone", "approach", "QUOKKA-RECIPE code that worked.", recipe=recipe("total = QUOKKA_SUM(df)"))]
    kept = [Lesson.new("kept", "fact", f"WOMBAT-{i} the warehouse feed lists weights in grams.") for i in range(3)]
    store.upsert(gone + kept)
    store.upsert([gone[0].model_copy(update={"evidence": 4, "text": gone[0].text})])  # rewritten in place
    store.set_status("gone", [gone[1].id], "superseded", superseded_by=gone[0].id, reason="QUOKKA-REASON")
    store.set_counts("gone", {gone[2].id: {"given": 2, "helpful": 1}})
    markers = ["QUOKKA-LEGACY", "QUOKKA-ONE", "QUOKKA-TWO", "QUOKKA-TAG", "QUOKKA_SUM", "QUOKKA-REASON"]
    assert all(files_containing(path, marker) for marker in markers)  # the check can see them

    assert store.delete_bank("gone") == 4
    for marker in markers:
        assert files_containing(path, marker) == [], marker
    assert store.list("gone", include_inactive=True) == [] and store.banks() == {"kept": 4}

    assert store.delete("kept", [kept[0].id, old.id]) == 1  # a lesson of another bank is not touched
    assert files_containing(path, "WOMBAT-0") == [] and files_containing(path, "WOMBAT-1")
    store.upsert([Lesson.new("kept", "fact", "WOMBAT-NEW written after the deletes.")])
    store.close()

    reopened = EdgeLessonStore(path, embedder)
    try:
        survivors = sorted(lesson.text for lesson in reopened.list("kept"))
        assert survivors == sorted([kept[1].text, kept[2].text, "WOMBAT-LEGACY the orders API pages by cursor.",
                                    "WOMBAT-NEW written after the deletes."])
        assert reopened.get("kept", [kept[1].id]) == [kept[1]]
        assert reopened.delete_bank("kept") == 4 and reopened.banks() == {}
    finally:
        reopened.close()
    assert files_containing(path, "WOMBAT") == []


def test_a_write_may_not_touch_another_banks_point(tmp_path: Path, embedder: FastEmbedEmbedder) -> None:
    store = EdgeLessonStore(tmp_path / "qdrant", embedder)
    theirs = Lesson.new("acme", "fact", "The acme export uses UTF-16.")
    store.upsert([theirs])
    with pytest.raises(StoreError, match="belongs to another bank"):
        store.upsert([theirs.model_copy(update={"bank": "evil", "evidence": 50})])
    assert store.set_status("evil", [theirs.id], "forgotten") == 0 and store.delete("evil", [theirs.id]) == 0
    assert store.set_counts("evil", {theirs.id: {"harmful": 9}}) == 0 and store.delete_bank("evil") == 0
    assert store.get("acme", [theirs.id]) == [theirs]
    store.close()


def test_one_store_holds_the_path_at_a_time(tmp_path: Path, embedder: FastEmbedEmbedder) -> None:
    first = EdgeLessonStore(tmp_path / "qdrant", embedder)
    first.upsert([Lesson.new("a", "fact", "The sales CSV is semicolon separated.")])
    second = EdgeLessonStore(tmp_path / "qdrant", embedder)
    with pytest.raises(ServiceUnavailable, match="held by another process"):
        second.open()
    first.close()
    assert second.banks() == {"a": 1}
    second.close()


class EightDimensions:
    dim = 8

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * 7 for _ in texts]


def test_another_embedding_size_is_refused_with_the_variable_to_change(
    tmp_path: Path, embedder: FastEmbedEmbedder
) -> None:
    made = EdgeLessonStore(tmp_path / "qdrant", embedder)
    made.ensure_collection()  # creates the shard (384-d)
    made.close()
    with pytest.raises(ConfigurationError, match="384-d vectors but the embedder makes 8-d.*LESSONBANK_COLLECTION"):
        EdgeLessonStore(tmp_path / "qdrant", EightDimensions()).open()
    with pytest.raises(ConfigurationError, match="LESSONBANK_COLLECTION='../x'"):
        EdgeLessonStore(tmp_path / "qdrant", embedder, collection="../x").open()
    small = EdgeLessonStore(tmp_path / "qdrant", EightDimensions(), collection="small")
    assert small.banks() == {}
    small.close()


def test_local_mode_lessons_are_moved_once(tmp_path: Path, embedder: FastEmbedEmbedder) -> None:
    path = tmp_path / "qdrant"
    lessons = [Lesson.new("a", "fact", f"Legacy lesson {i} about the orders table.") for i in range(300)]
    legacy = LessonStore(QdrantClient(path=str(path)), embedder)
    legacy.upsert(lessons)
    legacy.set_status("a", [lessons[0].id], "forgotten")
    legacy.close()

    store = EdgeLessonStore(path, embedder)
    assert store.banks() == {"a": 299}
    assert store.get("a", [lessons[5].id]) == [lessons[5]]
    assert store.search("a", "Legacy lesson 7 about the orders table", limit=1)[0][0].id == lessons[7].id
    assert not (path / "collection" / "lessons").exists()
    store.close()
    again = EdgeLessonStore(path, embedder)
    assert len(again.list("a", limit=1000, include_inactive=True)) == 300
    again.close()


def test_floats_and_nested_fields_round_trip_exactly(tmp_path: Path, embedder: FastEmbedEmbedder) -> None:
    rng = random.Random(7)
    lessons = [Lesson.new("a", "fact", f"Timestamp lesson {i}.", run_id=f"run-{i}", steps=[1, 3]).model_copy(
        update={"first_seen": 1.7e9 + rng.random() * 1e8, "last_seen": 1.7e9 + rng.random() * 1e8})
        for i in range(200)]
    store = EdgeLessonStore(tmp_path / "qdrant", embedder)
    store.upsert(lessons)
    store.set_status("a", [lessons[0].id], "retired", reason="harmful in 3 of 3 runs")
    assert store.get("a", [lesson.id for lesson in lessons[1:]]) == lessons[1:]
    (retired,) = store.get("a", [lessons[0].id])
    assert isinstance(retired.status_changed_at, float) and retired.status == "retired"
    store.close()


def test_rank_fuses_like_qdrants_rrf(tmp_path: Path, embedder: FastEmbedEmbedder) -> None:
    texts = [f"The {subject} {fact}." for subject in ("sales CSV", "orders API", "billing job", "weather feed")
             for fact in ("uses semicolons", "pages by cursor", "needs a timeout", "is gzip compressed")]
    store = EdgeLessonStore(tmp_path / "qdrant", embedder)
    store.upsert([Lesson.new("a", "fact", text) for text in texts])
    query = "read the sales CSV with semicolons and a timeout"
    vector, lexical = embedder.embed([query])[0], sparse_vector(query)
    engine = store.shard.query(qe.QueryRequest(
        limit=40, query=qe.Fusion.Rrf(k=RRF_K), with_payload=False,
        prefetches=[qe.Prefetch(limit=20, query=qe.Query.Nearest(vector, using=DENSE)),
                    qe.Prefetch(limit=20, query=qe.Query.Nearest(qe.SparseVector(lexical.indices, lexical.values),
                                                                  using=LEXICAL))]))
    dense = store.shard.query(qe.QueryRequest(limit=20, query=qe.Query.Nearest(vector, using=DENSE)))
    sparse = store.shard.query(qe.QueryRequest(limit=20, query=qe.Query.Nearest(
        qe.SparseVector(lexical.indices, lexical.values), using=LEXICAL)))
    ours = dict(fuse([str(p.id) for p in dense], [str(p.id) for p in sparse]))
    assert ours == pytest.approx({str(p.id): p.score for p in engine}, abs=1e-6)

    ranked = store.rank("a", query, limit=5)
    by_search = [lesson.id for lesson, _ in store.search("a", query, limit=5)]
    assert [sim for _, sim, _ in ranked] == sorted((sim for _, sim, _ in ranked), reverse=True)
    assert all(rank == (by_search.index(lesson.id) if lesson.id in by_search else None)
               for lesson, _, rank in ranked)
    store.close()


def test_an_interrupted_purge_is_finished_on_open(tmp_path: Path, embedder: FastEmbedEmbedder) -> None:
    path = tmp_path / "qdrant"
    store = EdgeLessonStore(path, embedder)
    store.upsert([Lesson.new("a", "fact", "The sales CSV is semicolon separated.")])
    store.close()
    shard = store.shard_dir
    shutil.copytree(shard, shard.with_name(shard.name + RETIRED))  # the old shard, not yet removed
    (shard.with_name(shard.name + REBUILD)).mkdir()  # a copy that never completed
    assert EdgeLessonStore(path, embedder).banks() == {"a": 1}
    assert sorted(p.name for p in shard.parent.iterdir()) == [shard.name]

    shard.rename(shard.with_name(shard.name + REBUILD))  # a complete copy, renamed before the crash
    (shard.with_name(shard.name + REBUILD) / COMPLETE).write_text("")
    reopened = EdgeLessonStore(path, embedder)
    assert reopened.banks() == {"a": 1} and not (shard / COMPLETE).exists()
    reopened.close()


def test_a_purge_killed_before_its_swap_is_done_again_when_the_store_opens(
    tmp_path: Path, embedder: FastEmbedEmbedder
) -> None:
    path = tmp_path / "qdrant"
    store = EdgeLessonStore(path, embedder)
    kept = [Lesson.new("b", "fact", f"WOMBAT-{i} the warehouse feed lists weights in grams.") for i in range(3)]
    gone = [Lesson.new("b", "fact", f"QUOKKA-{i} the billing API hangs without a timeout.") for i in range(2)]
    store.upsert(kept + gone)
    store.close()
    pid = os.fork()
    if pid == 0:  # the process deleting dies once the fresh copy is complete, before the swap
        try:
            child = EdgeLessonStore(path, embedder)
            child.open()
            Path.rename = lambda *_: os._exit(3)  # type: ignore[assignment,method-assign]
            child.delete("b", [lesson.id for lesson in gone])
        finally:
            os._exit(4)
    assert os.waitpid(pid, 0)[1] >> 8 == 3
    assert files_containing(path, "QUOKKA") and (store.shard_dir.parent / (store.shard_dir.name + PURGE)).exists()

    reopened = EdgeLessonStore(path, embedder)
    try:
        assert reopened.delete("b", [lesson.id for lesson in gone]) == 0  # gone from the index already
        assert sorted(lesson.text for lesson in reopened.list("b")) == sorted(lesson.text for lesson in kept)
    finally:
        reopened.close()
    assert files_containing(path, "QUOKKA") == [] and files_containing(path, "WOMBAT-2")
    assert sorted(p.name for p in store.shard_dir.parent.iterdir()) == [store.shard_dir.name]


def test_a_purge_that_fails_leaves_the_store_open_and_is_retried(
    tmp_path: Path, embedder: FastEmbedEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "qdrant"
    store = EdgeLessonStore(path, embedder)
    kept = Lesson.new("b", "fact", "WOMBAT the warehouse feed lists weights in grams.")
    gone = Lesson.new("b", "fact", "QUOKKA the billing API hangs without a timeout.")
    store.upsert([kept, gone])
    write_text = Path.write_text

    def disk_full(self: Path, *args: object, **kwargs: object) -> int:
        if self.name == COMPLETE:  # the shard is closed by then
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", disk_full)
    try:
        with pytest.raises(StoreError, match="compact after a delete: .*No space left"):
            store.delete("b", [gone.id])
        assert store.list("b") == [kept]  # still open, on the old shard, without the deleted lesson
        store.upsert([Lesson.new("b", "fact", "WOMBAT-NEW written after the failed purge.")])
        store.maintain()  # retried: fails again, logged, not raised
        assert files_containing(path, "QUOKKA")
        monkeypatch.setattr(Path, "write_text", write_text)
        store.maintain()  # not before PURGE_RETRY_SECONDS
        assert files_containing(path, "QUOKKA")
        monkeypatch.setattr(edge, "PURGE_RETRY_SECONDS", 0.0)
        store.maintain()
        assert files_containing(path, "QUOKKA") == []
        assert sorted(lesson.text for lesson in store.list("b")) == sorted(
            [kept.text, "WOMBAT-NEW written after the failed purge."])
    finally:
        store.close()
    assert not (store.shard_dir.parent / (store.shard_dir.name + PURGE)).exists()
    other = EdgeLessonStore(path, embedder)  # the path's lock was released
    assert other.banks() == {"b": 2}
    other.close()


@pytest.mark.parametrize("collection", ["lessons.retired", "lessons.rebuild", "lessons.purge"])
def test_a_collection_may_not_take_the_name_of_another_ones_purge_folder(
    tmp_path: Path, embedder: FastEmbedEmbedder, collection: str
) -> None:
    with pytest.raises(ConfigurationError, match="LESSONBANK_COLLECTION=.*not ending in"):
        EdgeLessonStore(tmp_path, embedder, collection=collection).open()


def test_active_lessons_are_found_through_live_whatever_wrote_them(tmp_path: Path,
                                                                   embedder: FastEmbedEmbedder) -> None:
    """Searches select "active in this bank" by the one indexed ``live`` field: a status change moves it, and a
    shard written before the field gets it when opened."""
    path = tmp_path / "qdrant"
    texts = [f"The orders table {fact}." for fact in ("uses cursors", "stores cents", "pages by 50", "is in UTC")]
    lessons = [Lesson.new("a", "fact", text) for text in texts] + [Lesson.new("b", "fact", texts[0])]
    store = EdgeLessonStore(path, embedder)
    store.upsert(lessons)
    store.upsert([Lesson.new("a", "fact", "The orders table is archived.").model_copy(update={"status": "retired"})])
    store.set_status("a", [lessons[1].id], "retired")

    def found(bank: str = "a") -> set[str]:
        query = "the orders table"
        return ({lesson.id for lesson, _ in store.search(bank, query, limit=10)}
                | {lesson.id for lesson, _, _ in store.rank(bank, query, limit=10)}
                | {lesson.id for lesson, _ in store.similar(bank, query, limit=10)})

    active = {lessons[0].id, lessons[2].id, lessons[3].id}
    assert found() == active and found("b") == {lessons[4].id}
    store.set_status("a", [lessons[1].id], "active")
    assert found() == active | {lessons[1].id}
    assert {lesson.id for lesson, _ in store.similar("a", "the orders table", statuses=["retired"])} == {
        lesson.id for lesson in store.list("a", include_inactive=True) if lesson.status == "retired"}

    # a shard from before the field: no index, no ``live`` on any point
    store.shard.update(qe.UpdateOperation.delete_payload([lesson.id for lesson in lessons], ["live"]))
    store.shard.update(qe.UpdateOperation.delete_field_index("live"))
    assert found() == set()
    store.close()
    store = EdgeLessonStore(path, embedder)
    assert found() == active | {lessons[1].id} and found("b") == {lessons[4].id}
    assert "live" in store.shard.info().payload_schema
    store.close()


def test_the_shard_has_the_payload_indexes(tmp_path: Path, embedder: FastEmbedEmbedder) -> None:
    store = EdgeLessonStore(tmp_path / "qdrant", embedder)
    store.ensure_collection()
    store.ensure_collection()
    assert {"bank", "status", "kind"} <= set(store.shard.info().payload_schema)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        _ = store.shard
