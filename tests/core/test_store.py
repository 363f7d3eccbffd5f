"""Both lesson stores (qdrant-client: ``:memory:`` and local path; the embedded Qdrant Edge shard) behave the
same, with the real MiniLM embedder."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from qdrant_client import QdrantClient, models

from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable, StoreError
from lessonbank.core.models import Lesson
from lessonbank.core.store.base import LessonStoreBase
from lessonbank.core.store.edge import EdgeLessonStore
from lessonbank.core.store.qdrant import DENSE, LEXICAL, LessonStore
from tests.fixtures.redis_server import free_port

CSV = "Read semicolon separated CSV files with pandas.read_csv(sep=';')."
TIMEOUT = "Always pass a timeout to requests.get, the billing API hangs otherwise."
DATES = "The sales API returns dates as ISO 8601 strings in UTC."


@pytest.fixture(params=["qdrant-client", "edge"])
def store(request: pytest.FixtureRequest, embedder: FastEmbedEmbedder, tmp_path: Path) -> Iterator[LessonStoreBase]:
    """The same lessons through qdrant-client (in memory) and through the embedded Qdrant Edge shard."""
    made: LessonStoreBase
    if request.param == "edge":
        made = EdgeLessonStore(tmp_path / "edge", embedder)
    else:
        made = LessonStore(QdrantClient(":memory:"), embedder, collection="lessons")
    yield made
    made.close()


@pytest.fixture
def client_store(embedder: FastEmbedEmbedder) -> Iterator[LessonStore]:
    client = QdrantClient(":memory:")
    yield LessonStore(client, embedder, collection="lessons")
    client.close()


def lesson(bank: str, kind: str, text: str, **fields: object) -> Lesson:
    return Lesson.new(bank, kind, text).model_copy(update=fields)  # type: ignore[arg-type]


def test_constructor_does_no_io_and_errors_map_to_lessonbank(embedder: FastEmbedEmbedder) -> None:
    client = QdrantClient(url=f"http://127.0.0.1:{free_port()}", check_compatibility=False, timeout=2)
    store = LessonStore(client, embedder)  # nothing listens there: only a call may fail
    assert not store.is_local
    with pytest.raises(ServiceUnavailable, match="Qdrant did not answer"):
        store.list("bank")


def test_ensure_collection_is_idempotent_and_shaped(client_store: LessonStoreBase) -> None:
    store = client_store
    store.ensure_collection()
    store.ensure_collection()
    info = store.client.get_collection("lessons")
    vectors = info.config.params.vectors
    assert isinstance(vectors, dict)
    assert vectors[DENSE].size == 384 and vectors[DENSE].distance == models.Distance.COSINE
    sparse = info.config.params.sparse_vectors
    assert sparse is not None and sparse[LEXICAL].modifier == models.Modifier.IDF


def test_ensure_collection_rejects_another_dimension(embedder: FastEmbedEmbedder) -> None:
    client = QdrantClient(":memory:")
    small = models.VectorParams(size=8, distance=models.Distance.COSINE)
    client.create_collection("lessons", vectors_config={DENSE: small})
    with pytest.raises(ConfigurationError, match="8-d vectors"):
        LessonStore(client, embedder).ensure_collection()


def test_upsert_is_idempotent_and_overwrites(store: LessonStoreBase) -> None:
    first = lesson("a", "approach", CSV)
    store.upsert([first])
    store.upsert([first])
    assert store.list("a", include_inactive=True) == [first]
    store.upsert([first.model_copy(update={"evidence": 3, "tags": ["csv"]})])
    (stored,) = store.get("a", [first.id])
    assert stored.evidence == 3 and stored.tags == ["csv"]
    assert stored == first.model_copy(update={"evidence": 3, "tags": ["csv"]})
    store.upsert([])


def test_upsert_rejects_a_non_uuid_id(store: LessonStoreBase) -> None:
    with pytest.raises(StoreError, match="not a uuid"):
        store.upsert([lesson("a", "fact", DATES, id="lesson-1")])
    upper = lesson("a", "fact", DATES)
    with pytest.raises(StoreError, match="not a uuid in its standard form"):  # it would read back lower case
        store.upsert([upper.model_copy(update={"id": upper.id.upper()})])


def test_a_lesson_is_found_by_its_id_in_any_spelling_of_the_uuid(store: LessonStoreBase) -> None:
    first = lesson("a", "fact", DATES)
    store.upsert([first])
    spellings = [first.id.upper(), "{" + first.id + "}", first.id.replace("-", ""), "urn:uuid:" + first.id]
    for spelling in spellings:
        assert store.get("a", [spelling]) == [first], spelling
    assert store.set_status("a", [first.id.upper()], "forgotten") == 1
    assert store.delete("a", [first.id.replace("-", "")]) == 1 and store.list("a", include_inactive=True) == []


def test_get_keeps_order_skips_other_banks_and_bad_ids(store: LessonStoreBase) -> None:
    a1, a2, b1 = lesson("a", "approach", CSV), lesson("a", "fact", DATES), lesson("b", "approach", CSV)
    store.upsert([a1, a2, b1])
    store.set_status("a", [a2.id], "forgotten")
    got = store.get("a", [a2.id, b1.id, "not-a-uuid", a1.id, a2.id])
    assert [x.id for x in got] == [a2.id, a1.id]
    assert got[0].status == "forgotten"  # get returns any status
    assert store.get("a", []) == []


def test_similar_returns_real_cosine_best_first_active_only(
    store: LessonStoreBase, embedder: FastEmbedEmbedder
) -> None:
    csv, timeout, dates = lesson("a", "approach", CSV), lesson("a", "failure", TIMEOUT), lesson("a", "fact", DATES)
    store.upsert([csv, timeout, dates])
    query = "load a csv file whose columns are separated by semicolons"
    results = store.similar("a", query, limit=3)
    assert [x.id for x, _ in results][0] == csv.id
    scores = [score for _, score in results]
    assert scores == sorted(scores, reverse=True)
    q, v = embedder.embed([query, CSV])
    assert scores[0] == pytest.approx(sum(x * y for x, y in zip(q, v, strict=True)), abs=1e-4)
    store.set_status("a", [csv.id], "superseded", superseded_by=timeout.id)
    assert csv.id not in [x.id for x, _ in store.similar("a", query)]
    assert len(store.similar("a", query, limit=1)) == 1


def test_similar_searches_the_statuses_asked_for(store: LessonStoreBase) -> None:
    csv, timeout, dates = lesson("a", "approach", CSV), lesson("a", "failure", TIMEOUT), lesson("a", "fact", DATES)
    store.upsert([csv, timeout, dates, lesson("b", "approach", CSV + " ")])
    store.set_status("a", [csv.id], "retired", reason="given to 8 runs, applied by none")
    store.set_status("a", [dates.id], "forgotten")
    query = "load a csv file whose columns are separated by semicolons"
    held = store.similar("a", query, limit=5, statuses=["forgotten", "retired"])
    assert [x.id for x, _ in held] == [csv.id, dates.id] and held[0][1] > 0.5  # not the active one, nor bank b's
    assert [x.id for x, _ in store.similar("a", query, statuses=["retired"])] == [csv.id]
    assert [x.id for x, _ in store.similar("a", query)] == [timeout.id]
    assert [x.id for x, _ in store.similar("a", query, statuses=["active"])] == [timeout.id]


def test_search_is_hybrid_filtered_by_kind_and_status(store: LessonStoreBase) -> None:
    csv, timeout, dates = lesson("a", "approach", CSV), lesson("a", "failure", TIMEOUT), lesson("a", "fact", DATES)
    store.upsert([csv, timeout, dates])
    top = store.search("a", "the billing API request never returns")
    assert top[0][0].id == timeout.id
    assert [score for _, score in top] == sorted((score for _, score in top), reverse=True)
    facts = store.search("a", "the billing API request never returns", kinds=["fact"])
    assert [x.id for x, _ in facts] == [dates.id]
    assert len(store.search("a", "anything", limit=2)) == 2
    store.set_status("a", [timeout.id], "forgotten")
    assert timeout.id not in [x.id for x, _ in store.search("a", "billing API timeout")]


def test_search_lexical_match_survives_a_dense_threshold(store: LessonStoreBase) -> None:
    csv, dates = lesson("a", "approach", CSV), lesson("a", "fact", DATES)
    store.upsert([csv, dates])
    # "read_csv" is a rare term only the CSV lesson has; the dense side alone is weak for this query
    found = store.search("a", "read_csv", min_similarity=0.95)
    assert [x.id for x, _ in found] == [csv.id]
    assert store.search("a", "completely unrelated gardening advice", min_similarity=0.95) == []


def test_list_orders_by_recency_and_hides_inactive(store: LessonStoreBase) -> None:
    old = lesson("a", "fact", DATES, last_seen=100.0)
    new = lesson("a", "approach", CSV, last_seen=300.0)
    gone = lesson("a", "failure", TIMEOUT, last_seen=200.0, status="forgotten")
    store.upsert([old, new, gone, lesson("b", "fact", DATES)])
    assert [x.id for x in store.list("a")] == [new.id, old.id]
    assert [x.id for x in store.list("a", include_inactive=True)] == [new.id, gone.id, old.id]
    assert [x.id for x in store.list("a", limit=1)] == [new.id]
    assert store.list("nobody") == []


def test_list_pages_through_many_lessons(store: LessonStoreBase) -> None:
    many = [lesson("big", "fact", f"Fact number {i} about the warehouse.", last_seen=float(i)) for i in range(300)]
    store.upsert(many)
    listed = store.list("big", limit=1000)
    assert len(listed) == 300
    assert listed[0].last_seen == 299.0


def test_banks_counts_active_lessons(store: LessonStoreBase) -> None:
    assert store.banks() == {}
    store.upsert([lesson("a", "fact", DATES), lesson("a", "approach", CSV), lesson("b", "approach", CSV)])
    store.upsert([lesson("c", "fact", DATES, status="forgotten")])
    assert store.banks() == {"a": 2, "b": 1}


def test_set_status_touches_only_the_named_bank(store: LessonStoreBase) -> None:
    a1, b1 = lesson("a", "approach", CSV), lesson("b", "approach", CSV)
    store.upsert([a1, b1])
    assert store.set_status("a", [a1.id, b1.id], "superseded", superseded_by="x") == 1
    assert store.get("a", [a1.id])[0].status == "superseded"
    assert store.get("a", [a1.id])[0].superseded_by == "x"
    assert store.get("b", [b1.id])[0].status == "active"
    assert store.set_status("a", [a1.id], "active") == 1
    assert store.get("a", [a1.id])[0].superseded_by is None
    with pytest.raises(StoreError, match="unknown lesson status"):
        store.set_status("a", [a1.id], "deleted")


def test_counts_and_status_reasons_touch_only_the_named_bank(store: LessonStoreBase) -> None:
    a1, b1 = Lesson.new("a", "fact", "Lesson one of bank a."), Lesson.new("b", "fact", "Lesson one of bank b.")
    store.upsert([a1, b1])
    assert store.set_counts("a", {a1.id: {"given": 3, "applied": 2, "helpful": 1, "harmful": 1, "evidence": 99},
                                  b1.id: {"given": 7}}) == 1
    stored = store.get("a", [a1.id])[0]
    assert (stored.given, stored.applied, stored.helpful, stored.harmful, stored.evidence) == (3, 2, 1, 1, 1)
    assert store.get("b", [b1.id])[0].given == 0
    assert store.set_status("a", [a1.id], "retired", reason="harmful in 3 of 3 runs") == 1
    stored = store.get("a", [a1.id])[0]
    assert stored.status == "retired" and stored.status_reason == "harmful in 3 of 3 runs"
    assert stored.status_changed_at is not None and stored.status_changed_at > stored.first_seen - 1


def test_a_write_may_not_touch_another_banks_point(store: LessonStoreBase) -> None:
    theirs = Lesson.new("acme", "fact", "The acme export uses UTF-16.")
    store.upsert([theirs])
    forged = theirs.model_copy(update={"bank": "evil", "evidence": 50})
    with pytest.raises(StoreError, match="belongs to another bank"):
        store.upsert([forged])
    assert store.get("acme", [theirs.id])[0].evidence == 1 and store.get("evil", [theirs.id]) == []


def test_local_path_store_persists(tmp_path: Path, embedder: FastEmbedEmbedder) -> None:
    saved = lesson("a", "approach", CSV)
    first = LessonStore(QdrantClient(path=str(tmp_path / "qdrant")), embedder)
    assert first.is_local
    first.upsert([saved])
    first.close()
    second = LessonStore(QdrantClient(path=str(tmp_path / "qdrant")), embedder)
    try:
        assert second.get("a", [saved.id]) == [saved]
        assert second.search("a", "semicolon csv")[0][0].id == saved.id
    finally:
        second.close()


def test_rank_gives_similarity_and_hybrid_rank_from_one_call(store: LessonStoreBase) -> None:
    csv = Lesson.new("a", "fact", "The sales CSV uses ';' as its separator.")
    api = Lesson.new("a", "fact", "The orders API pages its results three at a time.")
    store.upsert([csv, api, Lesson.new("b", "fact", "The sales CSV of bank b is comma separated.")])
    ranked = store.rank("a", "read the sales CSV separator", limit=5)
    assert [lesson.id for lesson, _, _ in ranked][0] == csv.id and {lesson.bank for lesson, _, _ in ranked} == {"a"}
    assert ranked[0][1] > 0.3 and ranked[0][2] == 0
    assert store.rank("a", "read the sales CSV separator", min_similarity=0.99) == []


def test_delete_and_delete_bank_remove_points_of_one_bank(store: LessonStoreBase) -> None:
    a1, a2 = Lesson.new("a", "fact", "First lesson of bank a."), Lesson.new("a", "fact", "Second lesson of bank a.")
    b1 = Lesson.new("b", "fact", "First lesson of bank b.")
    store.upsert([a1, a2, b1])
    assert store.delete("a", [a1.id, b1.id]) == 1
    assert store.get("a", [a1.id]) == [] and store.get("b", [b1.id]) == [b1]
    assert store.delete_bank("a") == 1 and store.list("a", include_inactive=True) == []
    assert store.list("b") == [b1]


def test_warm_embeds_a_batch_once_for_the_calls_that_follow(store: LessonStoreBase) -> None:
    fresh = uuid.uuid4().hex  # the session's embedder is shared: texts it never saw
    texts = [f"Warm lesson one about the orders API {fresh}.", f"Warm lesson two about the sales CSV {fresh}."]
    cache = store.embedder.cache  # type: ignore[attr-defined]
    assert store.warm([*texts, texts[0]]) == 2
    assert store.warm(texts) == 0
    misses = cache.misses
    store.similar("a", texts[0])
    store.upsert([Lesson.new("a", "fact", text) for text in texts])
    assert cache.misses == misses  # both calls found the vectors ready
