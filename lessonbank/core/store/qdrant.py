"""The lesson store through qdrant-client: a Qdrant server (every process talks to it directly), or
qdrant-client's own ``:memory:`` / local-path modes (tests; stores written by earlier versions).

One collection holds every bank's lessons (see ``base`` for the point layout). With a server the
payload indexes (bank as the tenant key, status, kind) keep the bank filter cheap, and ``rank`` asks
for the dense candidates and the fused hybrid ranking in one batched request.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from qdrant_client import QdrantClient, models
from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from lessonbank.core.embeddings import Embedder, SparseVector
from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable, StoreError
from lessonbank.core.models import Lesson
from lessonbank.core.store.base import (
    COUNT_FIELDS,
    DENSE,
    LESSON_STATUSES,
    LEXICAL,
    Hit,
    LessonStoreBase,
    Payload,
    hybrid_depth,
)

__all__ = ["COUNT_FIELDS", "DENSE", "LESSON_STATUSES", "LEXICAL", "LessonStore"]

logger = logging.getLogger(__name__)

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


def _sparse(vector: SparseVector) -> models.SparseVector:
    return models.SparseVector(indices=vector.indices, values=vector.values)


class LessonStore(LessonStoreBase):
    """Lessons of every bank in one Qdrant collection, through qdrant-client; every method names one bank.

    The constructor does no I/O; the collection is created on first use (or by ``ensure_collection``).
    """

    def __init__(self, client: QdrantClient, embedder: Embedder, collection: str = "lessons") -> None:
        super().__init__(embedder)
        self.client = client
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
            if not self.is_local:  # payload indexes have no effect in qdrant-client's local modes
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
        # only the missing ones: a process holding Qdrant's read-only key (an agent) may not create any
        present = set(self.client.get_collection(self.collection).payload_schema or {})
        for field, schema in schemas.items():
            if field not in present:
                self.client.create_payload_index(self.collection, field, field_schema=schema)

    def _ensure(self) -> None:
        if not self._ready:
            self.ensure_collection()

    def close(self) -> None:
        """Close the Qdrant client (releases the local path's lock)."""
        self.client.close()

    @staticmethod
    def _filter(bank: str, active_only: bool, kinds: builtins.list[str] | None = None,
                statuses: builtins.list[str] | None = None) -> models.Filter:
        """Points of ``bank``: whose status is one of ``statuses`` if given, else active ones if ``active_only``."""
        must: builtins.list[models.Condition] = [models.FieldCondition(key="bank", match=models.MatchValue(value=bank))]
        if statuses and len(statuses) > 1:
            must.append(models.FieldCondition(key="status", match=models.MatchAny(any=builtins.list(statuses))))
        elif statuses or active_only:
            value = statuses[0] if statuses else "active"
            must.append(models.FieldCondition(key="status", match=models.MatchValue(value=value)))
        if kinds:
            must.append(models.FieldCondition(key="kind", match=models.MatchAny(any=builtins.list(kinds))))
        return models.Filter(must=must)

    # -- engine primitives ----------------------------------------------------------------------

    def _retrieve(
        self, ids: builtins.list[str], fields: builtins.list[str] | None
    ) -> builtins.list[tuple[str, Payload]]:
        with _qdrant_errors("read lessons"):
            records = self.client.retrieve(self.collection, ids=ids, with_payload=fields if fields else True,
                                           with_vectors=False)
        return [(str(r.id), r.payload or {}) for r in records]

    def _write(self, lessons: builtins.list[Lesson], dense: builtins.list[builtins.list[float]],
               lexical: builtins.list[SparseVector]) -> None:
        points = [
            models.PointStruct(id=lesson.id, vector={DENSE: vector, LEXICAL: _sparse(terms)},
                               payload=lesson.model_dump(mode="json"))
            for lesson, vector, terms in zip(lessons, dense, lexical, strict=True)
        ]
        with _qdrant_errors("write lessons"):
            self.client.upsert(self.collection, points=points, wait=True)
        logger.debug("upserted %d lessons", len(points))

    def _set_payload(self, ids: builtins.list[str], payload: Payload) -> None:
        with _qdrant_errors("update lessons"):
            self.client.set_payload(self.collection, payload=payload, points=builtins.list(ids), wait=True)

    def _remove(self, ids: builtins.list[str]) -> None:
        with _qdrant_errors("delete lessons"):
            self.client.delete(self.collection, points_selector=builtins.list(ids), wait=True)

    def _remove_bank(self, bank: str) -> int:
        flt = self._filter(bank, active_only=False)
        with _qdrant_errors("delete a bank"):
            count = self.client.count(self.collection, count_filter=flt, exact=True).count
            if count:
                self.client.delete(self.collection, points_selector=models.FilterSelector(filter=flt), wait=True)
        return int(count)

    def _scroll(self, bank: str, active_only: bool) -> Iterator[Payload]:
        flt = self._filter(bank, active_only=active_only)
        offset: Any = None
        while True:
            with _qdrant_errors("list lessons"):
                records, offset = self.client.scroll(
                    self.collection, scroll_filter=flt, limit=_SCROLL_PAGE, offset=offset, with_payload=True
                )
            for record in records:
                yield record.payload or {}
            if offset is None:
                return

    def _dense_request(self, bank: str, vector: builtins.list[float], limit: int,
                       min_similarity: float | None, statuses: builtins.list[str] | None = None) -> models.QueryRequest:
        return models.QueryRequest(query=vector, using=DENSE, filter=self._filter(bank, True, statuses=statuses),
                                   limit=limit, score_threshold=min_similarity, with_payload=True)

    def _hybrid_request(self, bank: str, dense: builtins.list[float], lexical: SparseVector, limit: int,
                        kinds: builtins.list[str] | None, min_similarity: float | None,
                        with_payload: bool = True) -> models.QueryRequest:
        depth = hybrid_depth(limit)
        prefetch = [models.Prefetch(query=dense, using=DENSE, limit=depth, score_threshold=min_similarity)]
        if lexical.indices:
            prefetch.append(models.Prefetch(query=_sparse(lexical), using=LEXICAL, limit=depth))
        return models.QueryRequest(prefetch=prefetch, query=models.FusionQuery(fusion=models.Fusion.RRF),
                                   filter=self._filter(bank, active_only=True, kinds=kinds), limit=limit,
                                   with_payload=with_payload)

    def _nearest(self, bank: str, vector: builtins.list[float], limit: int,
                 statuses: builtins.list[str]) -> builtins.list[Hit]:
        request = self._dense_request(bank, vector, limit, None, statuses)
        with _qdrant_errors("search lessons"):
            (response,) = self.client.query_batch_points(self.collection, [request])
        return [(p.payload or {}, float(p.score)) for p in response.points]

    def _hybrid(self, bank: str, dense: builtins.list[float], lexical: SparseVector, limit: int,
                kinds: builtins.list[str] | None, min_similarity: float | None) -> builtins.list[Hit]:
        request = self._hybrid_request(bank, dense, lexical, limit, kinds, min_similarity)
        with _qdrant_errors("search lessons"):
            (response,) = self.client.query_batch_points(self.collection, [request])
        return [(p.payload or {}, float(p.score)) for p in response.points]

    def _ranked(self, bank: str, dense: builtins.list[float], lexical: SparseVector, limit: int,
                min_similarity: float | None) -> tuple[builtins.list[Hit], builtins.list[str]]:
        requests = [self._dense_request(bank, dense, limit, min_similarity),
                    self._hybrid_request(bank, dense, lexical, limit, None, None, with_payload=False)]
        with _qdrant_errors("search lessons"):
            similar, fused = self.client.query_batch_points(self.collection, requests)
        if not similar.points:
            return [], []
        return [(p.payload or {}, float(p.score)) for p in similar.points], [str(p.id) for p in fused.points]

    def _bank_counts(self, status: str = "active") -> dict[str, int]:
        active = models.Filter(must=[models.FieldCondition(key="status", match=models.MatchValue(value=status))])
        with _qdrant_errors("count lessons per bank"):
            response = self.client.facet(
                self.collection, key="bank", facet_filter=active, limit=_FACET_LIMIT, exact=True
            )
        return {str(hit.value): int(hit.count) for hit in response.hits}
