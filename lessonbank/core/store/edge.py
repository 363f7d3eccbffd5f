"""The embedded lesson store: one Qdrant Edge shard (``qdrant-edge-py``) in this process.

Qdrant's own engine, in process: payload indexes on bank (the tenant key), status and kind, and on
``live`` (the bank of an active lesson, set with its status), so "the active lessons of a bank" is one
index lookup, and ``query_batch`` runs the dense and lexical candidate searches of
one query in one planned pass. The instructions builder's ``rank`` is one embedding and one such call;
the dense and lexical lists are fused with Qdrant's reciprocal rank fusion here (``base.fuse``), which
spares a second scan of the dense vectors that a fused query with prefetches would make.

Files: ``<path>/shards/<collection>/`` (segments and write-ahead log) and ``<path>/lessonbank.lock``,
held (``flock``) while a store has the shard open: one process at a time, like qdrant-client's local
mode. Lessons that an earlier version wrote with qdrant-client's local mode at the same path
(``<path>/collection/<collection>``) are moved into the shard on first open.

Delete means delete: after removing points the live points are copied into a fresh shard that replaces
the old one (whose segments and write-ahead log still hold what was deleted), so no file under the
path keeps a deleted lesson. That costs a pass over the store (1-2 s per 10k lessons, during which
the store answers nothing else), and deletes are rare. Writes are durable through the write-ahead
log; ``maintain()`` flushes segments now and then. The shard's config, indexes and filters are ``edge_layout``'s.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import qdrant_edge as qe

from lessonbank.core.embeddings import Embedder, SparseVector
from lessonbank.core.exceptions import ConfigurationError, StoreError
from lessonbank.core.models import Lesson
from lessonbank.core.store import edge_layout as layout
from lessonbank.core.store.base import DENSE, LEXICAL, Hit, LessonStoreBase, Payload, fuse, hybrid_depth
from lessonbank.core.store.edge_files import (
    COMPLETE,
    PURGE,
    REBUILD,
    RETIRED,
    SUFFIXES,
    exact_payload,
    lock_path,
    recover,
    sibling,
)

logger = logging.getLogger(__name__)

SHARDS = "shards"
FLUSH_SECONDS = 5.0
PURGE_RETRY_SECONDS = 60.0  # a purge left undone by an error is tried again by ``maintain()`` this often
_PAGE = 256
_COPY_PAGE = 4096
_FACET_LIMIT = 100_000
_COLLECTION_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
class EdgeLessonStore(LessonStoreBase):
    """Lessons of every bank in one embedded Qdrant Edge shard at ``path``; every method names one bank.

    The constructor does no I/O; ``open()`` (or the first call) takes the path's lock and opens the shard.
    """

    def __init__(self, path: Path | str, embedder: Embedder, collection: str = "lessons") -> None:
        super().__init__(embedder)
        self.path = Path(path)
        self.collection = collection
        self._shard: Any = None
        self._lock_file: IO[str] | None = None
        self._engine = threading.RLock()
        self._dirty = False
        self._flushed_at = time.monotonic()
        self._purge_pending = False  # this shard's ``.purge`` marker is there (read at open, set by deletes)
        self._purge_tried = 0.0

    @property
    def shard_dir(self) -> Path:
        if not _COLLECTION_NAME.fullmatch(self.collection) or self.collection.endswith(SUFFIXES):
            raise ConfigurationError(
                f"LESSONBANK_COLLECTION={self.collection!r} cannot name the embedded store's folder "
                f"(letters, digits, '_', '-' and '.', up to 128 characters, not ending in {', '.join(SUFFIXES)})"
            )
        return self.path / SHARDS / self.collection

    # -- opening and closing --------------------------------------------------------------------

    def open(self) -> None:
        """Take the path's lock and open (or create) the shard; ServiceUnavailable when another process
        holds the path. Idempotent."""
        with self._engine:
            if self._shard is not None:
                return
            shard_dir = self.shard_dir
            self.path.mkdir(parents=True, exist_ok=True)
            if self._lock_file is None:  # still held after a purge that failed with the shard closed
                self._lock_file = lock_path(self.path)
            try:
                recover(shard_dir)
                self._shard = self._load(shard_dir)
                from lessonbank.core.store.legacy import import_local_mode

                moved = import_local_mode(self.path, self.collection, self._shard, self.embedder.dim)
                if moved:
                    logger.info("moved %d lessons of qdrant-client's local store at %s into %s", moved,
                                self.path, shard_dir)
                marked = self._mark_live(self._shard)
                if marked:
                    logger.info("indexed %d active lessons of %s by bank", marked, shard_dir)
                if moved or marked:
                    self._shard.flush()
                self._purge_pending = sibling(shard_dir, PURGE).exists()
                if self._purge_pending:
                    self._purge_again("a delete's purge was left undone")
            except BaseException:
                self._close_engine()
                raise

    def _load(self, shard_dir: Path) -> Any:
        dim = self.embedder.dim
        if (shard_dir / "edge_config.json").is_file():
            stored = json.loads((shard_dir / "edge_config.json").read_text()).get("vectors", {}).get(DENSE, {})
            if stored.get("size") != dim:
                raise ConfigurationError(
                    f"the embedded store at {shard_dir} holds {stored.get('size')}-d vectors but the embedder "
                    f"makes {dim}-d ones; use another LESSONBANK_COLLECTION or the same embedding model"
                )
            with layout.engine_errors("open its shard"):
                shard = layout.reopen(shard_dir, dim)
        else:
            logger.info("creating the embedded lesson store %s (%d-d dense + lexical)", shard_dir, dim)
            with layout.engine_errors("create its shard"):
                shard = qe.EdgeShard.create(str(shard_dir), layout.shard_config(dim))
        with layout.engine_errors("create its payload indexes"):
            present = set(shard.info().payload_schema)
            for field, schema in layout.INDEXES.items():
                if field not in present:
                    shard.update(qe.UpdateOperation.create_field_index(field, schema))
        return shard

    @staticmethod
    def _mark_live(shard: Any) -> int:
        """Set ``live`` on the active points that lack it (a shard written before the field, or points moved
        from qdrant-client's local mode); how many. Nothing to do reads one empty page."""
        flt = qe.Filter(must=[layout.condition("status", "active"), qe.IsEmptyCondition(layout.LIVE)])
        marked = 0
        with layout.engine_errors("index the active lessons"):
            while True:  # each pass sets what it read, so the next one starts from the top again
                records, _ = shard.scroll(qe.ScrollRequest(limit=_COPY_PAGE, filter=flt, with_payload=["bank"]))
                by_bank: dict[str, builtins.list[Any]] = {}
                for record in records:
                    by_bank.setdefault(str((record.payload or {}).get("bank", "")), []).append(record.id)
                for bank, ids in by_bank.items():
                    shard.update(qe.UpdateOperation.set_payload(ids, {layout.LIVE: bank}))
                marked += len(records)
                if len(records) < _COPY_PAGE:
                    return marked

    def ensure_collection(self) -> None:
        """Open the shard, creating it and its payload indexes if missing (idempotent)."""
        self.open()

    def _ensure(self) -> None:
        if self._shard is None:
            self.open()

    def close(self) -> None:
        """Flush and close the shard, and release the path's lock."""
        with self._engine:
            if self._shard is not None:
                with contextlib.suppress(Exception):  # closing must not fail; the WAL has every write
                    self._shard.flush()
            self._close_engine()

    def _close_engine(self) -> None:
        if self._shard is not None:
            with contextlib.suppress(Exception):
                self._shard.close()
            self._shard = None
        if self._lock_file is not None:
            self._lock_file.close()  # releases the flock
            self._lock_file = None

    @property
    def shard(self) -> Any:
        if self._shard is None:
            raise StoreError("the embedded lesson store is closed")
        return self._shard

    def maintain(self) -> None:
        """Flush written points to the segments if the last flush is older than ``FLUSH_SECONDS``; retry a
        purge that an error left undone every ``PURGE_RETRY_SECONDS``."""
        with self._engine:
            if (self._purge_pending and self._shard is not None
                    and time.monotonic() - self._purge_tried >= PURGE_RETRY_SECONDS):
                self._purge_again("retrying the purge a delete left undone")
            if self._dirty and self._shard is not None and time.monotonic() - self._flushed_at >= FLUSH_SECONDS:
                with layout.engine_errors("flush"):
                    self._shard.flush()
                self._dirty = False
                self._flushed_at = time.monotonic()

    def _purge(self) -> None:
        """Make removed points unrecoverable: copy the live points into a fresh shard and drop the old one.

        Deleted points linger in the old shard's segments until a vacuum, and their original writes in
        its write-ahead log until the log wraps; a fresh shard holds neither. (Vacuuming and then
        dropping the log is not an option: a new log restarts the operation numbers, and the engine
        would skip later operations as already applied.) ``recover`` finishes an interrupted purge; one
        that failed leaves the store open on whichever shard ``recover`` keeps, and its ``.purge`` marker,
        so that the purge is done again (``maintain``, ``open``).
        """
        shard_dir = self.shard_dir
        fresh, old = sibling(shard_dir, REBUILD), sibling(shard_dir, RETIRED)
        with self._engine:
            self._purge_tried = time.monotonic()
            try:
                with layout.engine_errors("compact after a delete"):
                    shutil.rmtree(fresh, ignore_errors=True)
                    self._copy_live(fresh)
                    self.shard.close()
                    self._shard = None
                    (fresh / COMPLETE).write_text("")
                    shard_dir.rename(old)
                    fresh.rename(shard_dir)
                    (shard_dir / COMPLETE).unlink()
                    shutil.rmtree(old)
                    self._shard = layout.reopen(shard_dir, self.embedder.dim)
                    self._dirty = False
                    self._flushed_at = time.monotonic()
            finally:
                if self._shard is None:  # failed with no shard open: reopen the one recover keeps
                    with contextlib.suppress(Exception):  # else the next call's open() tries again
                        recover(shard_dir)
                        self._shard = layout.reopen(shard_dir, self.embedder.dim)
            sibling(shard_dir, PURGE).unlink(missing_ok=True)
            self._purge_pending = False

    def _purge_again(self, why: str) -> None:
        """Purge for a delete whose purge was left undone; a failure is logged (the marker stays)."""
        logger.warning("%s: purging %s, where deleted lessons' text is still in the files", why, self.shard_dir)
        try:
            self._purge()
        except StoreError:
            logger.exception("the purge of %s failed again; retrying in %.0f s", self.shard_dir,
                             PURGE_RETRY_SECONDS)

    def _copy_live(self, fresh: Path) -> None:
        target = qe.EdgeShard.create(str(fresh), layout.shard_config(self.embedder.dim))
        for field, schema in layout.INDEXES.items():
            target.update(qe.UpdateOperation.create_field_index(field, schema))
        offset: Any = None
        while True:
            records, offset = self.shard.scroll(qe.ScrollRequest(offset=offset, limit=_COPY_PAGE, with_payload=True,
                                                                 with_vector=True))
            if records:
                target.update(qe.UpdateOperation.upsert_points(
                    [qe.Point(r.id, r.vector, r.payload or {}) for r in records]))
            if offset is None:
                break
        target.flush()
        target.close()

    # -- engine primitives ----------------------------------------------------------------------

    def _update(self, operation: Any, action: str) -> None:
        with self._engine, layout.engine_errors(action):
            self.shard.update(operation)
            self._dirty = True

    def _retrieve(
        self, ids: builtins.list[str], fields: builtins.list[str] | None
    ) -> builtins.list[tuple[str, Payload]]:
        with self._engine, layout.engine_errors("read lessons"):
            records = self.shard.retrieve(ids, with_payload=fields if fields else True, with_vector=False)
        return [(str(r.id), r.payload or {}) for r in records]

    def _write(self, lessons: builtins.list[Lesson], dense: builtins.list[builtins.list[float]],
               lexical: builtins.list[SparseVector]) -> None:
        points = [
            qe.Point(lesson.id, {DENSE: vector, LEXICAL: layout.sparse(terms)}, exact_payload(
                {**lesson.model_dump(mode="json"), **self._status_fields(lesson.bank, lesson.status)}))
            for lesson, vector, terms in zip(lessons, dense, lexical, strict=True)
        ]
        self._update(qe.UpdateOperation.upsert_points(points), "write lessons")

    @staticmethod
    def _status_fields(bank: str, status: str) -> Payload:
        return {layout.LIVE: bank if status == "active" else None}

    def _set_payload(self, ids: builtins.list[str], payload: Payload) -> None:
        self._update(qe.UpdateOperation.set_payload(builtins.list(ids), exact_payload(payload)), "update lessons")

    def _remove(self, ids: builtins.list[str]) -> None:
        with self._engine:
            sibling(self.shard_dir, PURGE).touch()  # until the purge is done: see ``_purge``
            self._purge_pending = True
            self._update(qe.UpdateOperation.delete_points(builtins.list(ids)), "delete lessons")
            self._purge()

    def _remove_bank(self, bank: str) -> int:
        # By ids: a delete by filter can miss points of a segment that a vacuum rewrote (qdrant-edge 0.9).
        flt = layout.bank_filter(bank, active_only=False)
        ids: builtins.list[str] = []
        offset: Any = None
        with self._engine:
            while True:
                with layout.engine_errors("list a bank"):
                    records, offset = self.shard.scroll(qe.ScrollRequest(offset=offset, limit=_PAGE * 4, filter=flt,
                                                                         with_payload=False))
                ids.extend(str(r.id) for r in records)
                if offset is None:
                    break
            if ids:
                self._remove(ids)
        return len(ids)

    def _scroll(self, bank: str, active_only: bool) -> Iterator[Payload]:
        flt = layout.bank_filter(bank, active_only)
        offset: Any = None
        while True:
            with self._engine, layout.engine_errors("list lessons"):
                records, offset = self.shard.scroll(
                    qe.ScrollRequest(offset=offset, limit=_PAGE, filter=flt, with_payload=True)
                )
            for record in records:
                yield record.payload or {}
            if offset is None:
                return

    @staticmethod
    def _dense_request(flt: qe.Filter, vector: builtins.list[float], limit: int,
                       threshold: float | None) -> qe.QueryRequest:
        return qe.QueryRequest(limit=limit, query=qe.Query.Nearest(vector, using=DENSE), filter=flt,
                               score_threshold=threshold, with_payload=False)

    @staticmethod
    def _lexical_request(flt: qe.Filter, lexical: SparseVector, limit: int) -> qe.QueryRequest:
        return qe.QueryRequest(limit=limit, query=qe.Query.Nearest(layout.sparse(lexical), using=LEXICAL), filter=flt,
                               with_payload=False)

    def _search(self, requests: builtins.list[qe.QueryRequest]) -> builtins.list[builtins.list[tuple[str, float]]]:
        """(id, score) of each request's hits, in one engine call: best first, equal scores in id order (the
        engine leaves ties in storage order, and the fusion must not depend on it)."""
        with self._engine, layout.engine_errors("search lessons"):
            found = self.shard.query_batch(qe.QueryBatchRequest(requests))
        return [sorted(((str(p.id), float(p.score)) for p in points), key=lambda hit: (-hit[1], hit[0]))
                for points in found]

    def _payloads(self, hits: builtins.list[tuple[str, float]]) -> builtins.list[Hit]:
        """Payloads of the hits (read once the candidates are known: a search returns only ids and scores)."""
        if not hits:
            return []
        payloads = dict(self._retrieve([point_id for point_id, _ in hits], None))
        return [(payloads[point_id], score) for point_id, score in hits if point_id in payloads]

    def _nearest(self, bank: str, vector: builtins.list[float], limit: int,
                 statuses: builtins.list[str]) -> builtins.list[Hit]:
        flt = layout.bank_filter(bank, True, statuses=statuses)
        (hits,) = self._search([self._dense_request(flt, vector, limit, None)])
        return self._payloads(hits)

    def _candidates(self, flt: qe.Filter, dense: builtins.list[float], lexical: SparseVector, depth: int,
                    min_similarity: float | None) -> builtins.list[builtins.list[tuple[str, float]]]:
        requests = [self._dense_request(flt, dense, depth, min_similarity)]
        if lexical.indices:
            requests.append(self._lexical_request(flt, lexical, depth))
        return self._search(requests)

    def _hybrid(self, bank: str, dense: builtins.list[float], lexical: SparseVector, limit: int,
                kinds: builtins.list[str] | None, min_similarity: float | None) -> builtins.list[Hit]:
        flt = layout.bank_filter(bank, True, kinds)
        found = self._candidates(flt, dense, lexical, hybrid_depth(limit), min_similarity)
        return self._payloads(fuse(*([point_id for point_id, _ in hits] for hits in found))[:limit])

    def _ranked(self, bank: str, dense: builtins.list[float], lexical: SparseVector, limit: int,
                min_similarity: float | None) -> tuple[builtins.list[Hit], builtins.list[str]]:
        found = self._candidates(layout.bank_filter(bank, True), dense, lexical, hybrid_depth(limit), None)
        floor = -1.0 if min_similarity is None else min_similarity
        similar = self._payloads([hit for hit in found[0][:limit] if hit[1] >= floor])
        if not similar:
            return [], []
        fused = fuse(*([point_id for point_id, _ in hits] for hits in found))[:limit]
        return similar, [point_id for point_id, _ in fused]

    def _bank_counts(self, status: str = "active") -> dict[str, int]:
        request = qe.FacetRequest("bank", limit=_FACET_LIMIT, exact=True, filter=qe.Filter(
            must=[layout.condition("status", status)]))
        with self._engine, layout.engine_errors("count lessons per bank"):
            response = self.shard.facet(request)
        return {str(hit.value): int(hit.count) for hit in response.hits}
