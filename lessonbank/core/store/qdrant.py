"""The lesson store: one Qdrant collection holding every bank's lessons.

Each point is one lesson: id = the lesson's deterministic uuid, payload = the lesson's fields,
a dense vector ``dense`` (cosine) and a sparse lexical vector ``lexical`` (term counts, IDF modifier).
Every read names exactly one bank and filters on it, so no call returns another bank's lessons.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any, get_args

from qdrant_client import QdrantClient, models
from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from lessonbank.core.embeddings import Embedder, sparse_vector
from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable, StoreError
from lessonbank.core.models import Lesson, LessonStatus

logger = logging.getLogger(__name__)

DENSE = "dense"
LEXICAL = "lexical"
LESSON_STATUSES: tuple[str, ...] = get_args(LessonStatus)
COUNT_FIELDS = frozenset({"given", "applied", "helpful", "harmful"})
_SCROLL_PAGE = 256
_FACET_LIMIT = 100_000


@contextlib.contextmanager
def _qdrant_errors(action: str) -> Iterator[None]:
    """Turn qdrant-client failures into lessonbank errors."""
    try:
        yield
    except (ResponseHandlingException, ResourceExhaustedResponse) as e:
        raise ServiceUnavailable(f"Qdrant did not answer while trying to {action}: {e}") from e
    except UnexpectedResponse as e:
        raise StoreError(f"Qdrant refused to {action}: {e}") from e


def _valid_point_id(lesson_id: str) -> bool:
    try:
        uuid.UUID(lesson_id)
    except (ValueError, AttributeError, TypeError):
        return False
    return True


class LessonStore:
    """Lessons of every bank in one Qdrant collection; every method names one bank.

    The constructor does no I/O; the collection is created on first use (or by ``ensure_collection``).
    """

    def __init__(self, client: QdrantClient, embedder: Embedder, collection: str = "lessons") -> None:
        self.client = client
        self.embedder = embedder
        self.collection = collection
        self._ready = False

    # -- collection -----------------------------------------------------------------------------

    @property
    def is_local(self) -> bool:
        """True for the embedded qdrant-client modes (``:memory:`` or a path), False for a server."""
        options = self.client.init_options
        return bool(options.get("path")) or options.get("location") == ":memory:"

    def ensure_collection(self) -> None:
        """Create the collection and its payload indexes if missing (idempotent)."""
        with _qdrant_errors(f"create collection {self.collection}"):
            if not self.client.collection_exists(self.collection):
                self._create_collection()
            else:
                self._check_dimension()
            if not self.is_local:  # payload indexes have no effect in the embedded modes
                self._create_payload_indexes()
        self._ready = True

    def _create_collection(self) -> None:
        logger.info("creating Qdrant collection %s (%d-d dense + lexical)", self.collection, self.embedder.dim)
        try:
            self.client.create_collection(
                self.collection,
                vectors_config={DENSE: models.VectorParams(size=self.embedder.dim, distance=models.Distance.COSINE)},
                sparse_vectors_config={LEXICAL: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            )
        except UnexpectedResponse as e:  # another process created it first
            if not self.client.collection_exists(self.collection):
                raise StoreError(f"cannot create collection {self.collection}: {e}") from e

    def _check_dimension(self) -> None:
        info = self.client.get_collection(self.collection)
        vectors = info.config.params.vectors
        params = vectors.get(DENSE) if isinstance(vectors, dict) else None
        if params is None:
            raise ConfigurationError(f"collection {self.collection} has no dense vector {DENSE!r}")
        if params.size != self.embedder.dim:
            raise ConfigurationError(
                f"collection {self.collection} holds {params.size}-d vectors but the embedder makes "
                f"{self.embedder.dim}-d ones; use another collection or the same embedding model"
            )

    def _create_payload_indexes(self) -> None:
        schemas: dict[str, Any] = {
            "bank": models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
            "status": models.PayloadSchemaType.KEYWORD,
            "kind": models.PayloadSchemaType.KEYWORD,
        }
        for field, schema in schemas.items():
            self.client.create_payload_index(self.collection, field, field_schema=schema)

    def _ensure(self) -> None:
        if not self._ready:
            self.ensure_collection()

    def close(self) -> None:
        """Close the Qdrant client (releases the embedded store's lock)."""
        self.client.close()

    # -- helpers --------------------------------------------------------------------------------

    @staticmethod
    def _filter(bank: str, active_only: bool, kinds: builtins.list[str] | None = None) -> models.Filter:
        must: builtins.list[models.Condition] = [models.FieldCondition(key="bank", match=models.MatchValue(value=bank))]
        if active_only:
            must.append(models.FieldCondition(key="status", match=models.MatchValue(value="active")))
        if kinds:
            must.append(models.FieldCondition(key="kind", match=models.MatchAny(any=builtins.list(kinds))))
        return models.Filter(must=must)

    @staticmethod
    def _lesson(payload: dict[str, Any] | None) -> Lesson:
        return Lesson.model_validate(payload or {})

    def _points(self, bank: str, lesson_ids: builtins.list[str]) -> builtins.list[models.Record]:
        ids = builtins.list(dict.fromkeys(i for i in lesson_ids if _valid_point_id(i)))
        if not ids:
            return []
        with _qdrant_errors("read lessons"):
            records = self.client.retrieve(self.collection, ids=ids, with_payload=True, with_vectors=False)
        by_id = {str(r.id): r for r in records if (r.payload or {}).get("bank") == bank}
        return [by_id[i] for i in ids if i in by_id]

    # -- writes ---------------------------------------------------------------------------------

    def upsert(self, lessons: builtins.list[Lesson]) -> None:
        """Write lessons (point id = lesson id, so repeating a write never duplicates)."""
        if not lessons:
            return
        for lesson in lessons:
            if not _valid_point_id(lesson.id):
                raise StoreError(f"lesson id {lesson.id!r} is not a uuid; build lessons with Lesson.new()")
        self._ensure()
        self._refuse_foreign(lessons)
        dense = self.embedder.embed([lesson.text for lesson in lessons])
        points = [
            models.PointStruct(
                id=lesson.id,
                vector={DENSE: vector, LEXICAL: sparse_vector(lesson.text)},
                payload=lesson.model_dump(mode="json"),
            )
            for lesson, vector in zip(lessons, dense, strict=True)
        ]
        with _qdrant_errors("write lessons"):
            self.client.upsert(self.collection, points=points, wait=True)
        logger.debug("upserted %d lessons", len(points))

    def delete(self, bank: str, lesson_ids: builtins.list[str]) -> int:
        """Remove those lessons of ``bank`` for good; returns how many were removed."""
        self._ensure()
        points = self._points(bank, lesson_ids)
        if points:
            with _qdrant_errors("delete lessons"):
                self.client.delete(self.collection, points_selector=[p.id for p in points], wait=True)
        return len(points)

    def delete_bank(self, bank: str) -> int:
        """Remove every lesson of ``bank`` for good; returns how many were removed."""
        self._ensure()
        flt = self._filter(bank, active_only=False)
        with _qdrant_errors("delete a bank"):
            count = self.client.count(self.collection, count_filter=flt, exact=True).count
            if count:
                self.client.delete(self.collection, points_selector=models.FilterSelector(filter=flt), wait=True)
        return int(count)

    def _refuse_foreign(self, lessons: builtins.list[Lesson]) -> None:
        """No write may touch a point of another bank (ids are computable, so they are not secrets)."""
        ids = builtins.list(dict.fromkeys(lesson.id for lesson in lessons))
        banks = {lesson.id: lesson.bank for lesson in lessons}
        with _qdrant_errors("read lessons"):
            existing = self.client.retrieve(self.collection, ids=ids, with_payload=["bank"], with_vectors=False)
        for record in existing:
            owner = (record.payload or {}).get("bank")
            if owner is not None and owner != banks.get(str(record.id)):
                raise StoreError(f"lesson {record.id} belongs to another bank; refusing to overwrite it")

    def set_status(
        self, bank: str, lesson_ids: builtins.list[str], status: str, superseded_by: str | None = None,
        reason: str = "",
    ) -> int:
        """Set the status of those lessons of ``bank`` (with why); returns how many were changed."""
        if status not in LESSON_STATUSES:
            raise StoreError(f"unknown lesson status {status!r} (one of {', '.join(LESSON_STATUSES)})")
        self._ensure()
        points = self._points(bank, lesson_ids)
        if not points:
            return 0
        payload = {"status": status, "superseded_by": superseded_by, "status_reason": reason[:500],
                   "status_changed_at": time.time()}
        with _qdrant_errors("update lesson status"):
            self.client.set_payload(self.collection, payload=payload, points=[p.id for p in points], wait=True)
        return len(points)

    def set_counts(self, bank: str, counts: dict[str, dict[str, int]]) -> int:
        """Set the given/applied/helpful/harmful counts of those lessons of ``bank``; returns how many."""
        self._ensure()
        points = self._points(bank, list(counts))
        for point in points:
            update = {name: int(value) for name, value in counts[str(point.id)].items() if name in COUNT_FIELDS}
            with _qdrant_errors("update lesson counts"):
                self.client.set_payload(self.collection, payload=update, points=[point.id], wait=True)
        return len(points)

    # -- reads ----------------------------------------------------------------------------------

    def get(self, bank: str, lesson_ids: builtins.list[str]) -> builtins.list[Lesson]:
        """The lessons of ``bank`` with these ids (any status), in the order asked; others are left out."""
        self._ensure()
        return [self._lesson(p.payload) for p in self._points(bank, lesson_ids)]

    def similar(self, bank: str, text: str, limit: int = 5) -> builtins.list[tuple[Lesson, float]]:
        """Active lessons of ``bank`` by dense cosine similarity to ``text``, best first."""
        self._ensure()
        vector = self.embedder.embed([text])[0]
        with _qdrant_errors("search lessons"):
            response = self.client.query_points(
                self.collection,
                query=vector,
                using=DENSE,
                query_filter=self._filter(bank, active_only=True),
                limit=limit,
                with_payload=True,
            )
        return [(self._lesson(p.payload), float(p.score)) for p in response.points]

    def search(
        self,
        bank: str,
        query: str,
        limit: int = 8,
        kinds: builtins.list[str] | None = None,
        min_similarity: float | None = None,
    ) -> builtins.list[tuple[Lesson, float]]:
        """Hybrid search of the active lessons of ``bank``: dense + lexical, fused with RRF in one query.

        The score is the RRF score (rank-based, higher is better). ``min_similarity`` drops dense
        candidates below that cosine similarity, so a query with nothing relevant returns only lexical
        matches (or nothing).
        """
        self._ensure()
        dense = self.embedder.embed([query])[0]
        lexical = sparse_vector(query)
        depth = max(limit * 4, 20)
        prefetch = [models.Prefetch(query=dense, using=DENSE, limit=depth, score_threshold=min_similarity)]
        if lexical.indices:
            prefetch.append(models.Prefetch(query=lexical, using=LEXICAL, limit=depth))
        with _qdrant_errors("search lessons"):
            response = self.client.query_points(
                self.collection,
                prefetch=prefetch,
                query=models.FusionQuery(fusion=models.Fusion.RRF),
                query_filter=self._filter(bank, active_only=True, kinds=kinds),
                limit=limit,
                with_payload=True,
            )
        return [(self._lesson(p.payload), float(p.score)) for p in response.points]

    def rank(
        self, bank: str, query: str, limit: int = 8, min_similarity: float | None = None
    ) -> builtins.list[tuple[Lesson, float, int | None]]:
        """Dense similarity and hybrid rank of the active lessons of ``bank`` for ``query``, best first."""
        similar = self.similar(bank, query, limit=limit)
        if min_similarity is not None:
            similar = [(lesson, score) for lesson, score in similar if score >= min_similarity]
        if not similar:
            return []
        ranks = {lesson.id: i for i, (lesson, _) in enumerate(self.search(bank, query, limit=limit))}
        return [(lesson, score, ranks.get(lesson.id)) for lesson, score in similar]

    def list(self, bank: str, limit: int = 100, include_inactive: bool = False) -> builtins.list[Lesson]:
        """Lessons of ``bank``, most recently seen first (active only unless ``include_inactive``)."""
        self._ensure()
        flt = self._filter(bank, active_only=not include_inactive)
        lessons: builtins.list[Lesson] = []
        offset: Any = None
        with _qdrant_errors("list lessons"):
            while True:
                records, offset = self.client.scroll(
                    self.collection, scroll_filter=flt, limit=_SCROLL_PAGE, offset=offset, with_payload=True
                )
                lessons.extend(self._lesson(r.payload) for r in records)
                if offset is None:
                    break
        lessons.sort(key=lambda lesson: (lesson.last_seen, lesson.first_seen), reverse=True)
        return lessons[:limit]

    def banks(self) -> dict[str, int]:
        """Active lesson count per bank."""
        self._ensure()
        active = models.Filter(must=[models.FieldCondition(key="status", match=models.MatchValue(value="active"))])
        with _qdrant_errors("count lessons per bank"):
            response = self.client.facet(
                self.collection, key="bank", facet_filter=active, limit=_FACET_LIMIT, exact=True
            )
        return {str(hit.value): int(hit.count) for hit in response.hits}

