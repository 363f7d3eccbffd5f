"""What every lesson store does the same way, whatever engine holds the points.

``LessonStoreBase`` implements ``LessonStoreProtocol`` on top of a few engine primitives (read points by
id, write, set payload, remove, scroll, nearest, hybrid, ranked, per-bank counts) that ``qdrant.LessonStore``
(qdrant-client: a Qdrant server, ``:memory:``) and ``edge.EdgeLessonStore`` (the embedded engine) provide.

Each point is one lesson: id = the lesson's deterministic uuid, payload = the lesson's fields, a dense
vector ``dense`` (cosine) and a sparse lexical vector ``lexical`` (term counts, IDF modifier). Every
read names exactly one bank and filters on it, and no write touches a point of another bank.
"""

from __future__ import annotations

import builtins
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import Any, get_args

from lessonbank.core.embeddings import Embedder, SparseVector, sparse_vector
from lessonbank.core.exceptions import StoreError
from lessonbank.core.models import Lesson, LessonStatus, StatusCause

DENSE = "dense"
LEXICAL = "lexical"
LESSON_STATUSES: tuple[str, ...] = get_args(LessonStatus)
COUNT_FIELDS = frozenset({"given", "applied", "helpful", "harmful"})
# Qdrant's reciprocal rank fusion: a point at 0-based position p of a list scores 1 / (p + RRF_K).
RRF_K = 2

Payload = dict[str, Any]
Hit = tuple[Payload, float]


def point_id(lesson_id: str) -> str | None:
    """``lesson_id`` in the engine's form of a uuid (lower case, dashed), whatever its spelling; None if no uuid."""
    try:
        return str(uuid.UUID(lesson_id))
    except (ValueError, AttributeError, TypeError):
        return None


def valid_point_id(lesson_id: str) -> bool:
    """Whether a lesson may be written with this id: a uuid in the engine's own form, which is how its id
    reads back (``Lesson.new`` makes them so)."""
    return point_id(lesson_id) == lesson_id


def hybrid_depth(limit: int) -> int:
    """How many candidates each side (dense, lexical) of a hybrid search looks at for ``limit`` results."""
    return max(limit * 4, 20)


def fuse(*ranked: Iterable[str]) -> builtins.list[tuple[str, float]]:
    """Reciprocal rank fusion of ranked id lists, best first, with Qdrant's scores (a point at 0-based
    position p of a list gets 1 / (p + RRF_K) from it); ties go to the point placed first in the earlier list."""
    scores: dict[str, float] = {}
    first: dict[str, tuple[int, int]] = {}
    for which, ids in enumerate(ranked):
        for position, point_id in enumerate(ids):
            scores[point_id] = scores.get(point_id, 0.0) + 1.0 / (position + RRF_K)
            first.setdefault(point_id, (which, position))
    order = sorted(scores, key=lambda point_id: (-scores[point_id], first[point_id]))
    return [(point_id, scores[point_id]) for point_id in order]


def lesson_of(payload: Payload | None) -> Lesson:
    return Lesson.model_validate(payload or {})


class LessonStoreBase(ABC):
    """The store protocol over an engine's primitives; writes of one store object are serialised."""

    embedder: Embedder

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._writing = threading.RLock()

    # -- engine primitives ----------------------------------------------------------------------

    @abstractmethod
    def ensure_collection(self) -> None:
        """Create the collection and its indexes if missing (idempotent)."""

    @abstractmethod
    def close(self) -> None:
        """Release what the store holds (a client, a file lock)."""

    @abstractmethod
    def _ensure(self) -> None:
        """Make the collection usable (cheap once done)."""

    @abstractmethod
    def _retrieve(
        self, ids: builtins.list[str], fields: builtins.list[str] | None
    ) -> builtins.list[tuple[str, Payload]]:
        """(id, payload) of the points with these ids that exist; ``fields`` None = the whole payload."""

    @abstractmethod
    def _write(self, lessons: builtins.list[Lesson], dense: builtins.list[builtins.list[float]],
               lexical: builtins.list[SparseVector]) -> None:
        """Write the points of ``lessons`` (whole payload and both vectors)."""

    @staticmethod
    def _status_fields(bank: str, status: str) -> Payload:
        """Engine-specific payload fields that follow a lesson's status (written with it)."""
        return {}

    @abstractmethod
    def _set_payload(self, ids: builtins.list[str], payload: Payload) -> None:
        """Set these payload fields of these points."""

    @abstractmethod
    def _remove(self, ids: builtins.list[str]) -> None:
        """Remove these points for good."""

    @abstractmethod
    def _remove_bank(self, bank: str) -> int:
        """Remove every point of ``bank`` for good; how many there were."""

    @abstractmethod
    def _scroll(self, bank: str, active_only: bool) -> Iterator[Payload]:
        """Payloads of the points of ``bank`` (active only if asked)."""

    @abstractmethod
    def _nearest(self, bank: str, vector: builtins.list[float], limit: int,
                 statuses: builtins.list[str]) -> builtins.list[Hit]:
        """Points of ``bank`` whose status is one of ``statuses``, by dense cosine similarity, best first."""

    @abstractmethod
    def _hybrid(self, bank: str, dense: builtins.list[float], lexical: SparseVector, limit: int,
                kinds: builtins.list[str] | None, min_similarity: float | None) -> builtins.list[Hit]:
        """Active points of ``bank``: dense and lexical candidates fused by RRF, best first (score: RRF)."""

    @abstractmethod
    def _ranked(self, bank: str, dense: builtins.list[float], lexical: SparseVector, limit: int,
                min_similarity: float | None) -> tuple[builtins.list[Hit], builtins.list[str]]:
        """In one engine call: the ``limit`` most similar active points of ``bank`` (at least
        ``min_similarity``) with their cosine, and the ids of the ``limit`` best of the hybrid search."""

    @abstractmethod
    def _bank_counts(self, status: str = "active") -> dict[str, int]:
        """Points with ``status`` per bank."""

    # -- helpers --------------------------------------------------------------------------------

    def _points(self, bank: str, lesson_ids: builtins.list[str]) -> builtins.list[tuple[str, Payload]]:
        """(id, payload) of the points of ``bank`` with these ids, in the order asked, each once."""
        ids = builtins.list(dict.fromkeys(found for i in lesson_ids if (found := point_id(i)) is not None))
        if not ids:
            return []
        by_id = {point_id: payload for point_id, payload in self._retrieve(ids, None) if payload.get("bank") == bank}
        return [(i, by_id[i]) for i in ids if i in by_id]

    def _refuse_foreign(self, lessons: builtins.list[Lesson]) -> None:
        """No write may touch a point of another bank (ids are computable, so they are not secrets)."""
        ids = builtins.list(dict.fromkeys(lesson.id for lesson in lessons))
        banks = {lesson.id: lesson.bank for lesson in lessons}
        for point_id, payload in self._retrieve(ids, ["bank"]):
            owner = payload.get("bank")
            if owner is not None and owner != banks.get(point_id):
                raise StoreError(f"lesson {point_id} belongs to another bank; refusing to overwrite it")

    # -- writes ---------------------------------------------------------------------------------

    def upsert(self, lessons: builtins.list[Lesson]) -> None:
        """Write lessons (point id = lesson id, so repeating a write never duplicates)."""
        if not lessons:
            return
        for lesson in lessons:
            if not valid_point_id(lesson.id):
                raise StoreError(f"lesson id {lesson.id!r} is not a uuid in its standard form (lower case, with "
                                 "dashes); build lessons with Lesson.new()")
        self._ensure()
        dense = self.embedder.embed([lesson.text for lesson in lessons])  # one batch, outside the write lock
        lexical = [sparse_vector(lesson.text) for lesson in lessons]
        with self._writing:
            self._refuse_foreign(lessons)
            self._write(lessons, dense, lexical)

    def delete(self, bank: str, lesson_ids: builtins.list[str]) -> int:
        """Remove those lessons of ``bank`` from the store for good; returns how many were removed."""
        self._ensure()
        with self._writing:
            points = self._points(bank, lesson_ids)
            if points:
                self._remove([point_id for point_id, _ in points])
        return len(points)

    def delete_bank(self, bank: str) -> int:
        """Remove every lesson of ``bank`` for good; returns how many were removed."""
        self._ensure()
        with self._writing:
            return self._remove_bank(bank)

    def set_status(
        self, bank: str, lesson_ids: builtins.list[str], status: str, superseded_by: str | None = None,
        reason: str = "", cause: StatusCause | None = None, cause_run: str = "",
    ) -> int:
        """Set the status of those lessons of ``bank`` (with why: in words, ``reason``; its cause and the run it
        names, ``cause`` and ``cause_run``); returns how many were changed."""
        if status not in LESSON_STATUSES:
            raise StoreError(f"unknown lesson status {status!r} (one of {', '.join(LESSON_STATUSES)})")
        self._ensure()
        payload = {"status": status, "superseded_by": superseded_by, "status_reason": reason[:500],
                   "status_cause": cause, "status_run": cause_run[:200], "status_changed_at": time.time(),
                   **self._status_fields(bank, status)}
        with self._writing:
            points = self._points(bank, lesson_ids)
            if points:
                self._set_payload([point_id for point_id, _ in points], payload)
        return len(points)

    def set_counts(self, bank: str, counts: dict[str, dict[str, int]]) -> int:
        """Set the given/applied/helpful/harmful counts of those lessons of ``bank``; returns how many."""
        self._ensure()
        with self._writing:
            points = self._points(bank, builtins.list(counts))
            for point_id, _ in points:
                update = {name: int(value) for name, value in counts[point_id].items() if name in COUNT_FIELDS}
                if update:
                    self._set_payload([point_id], update)
        return len(points)

    def warm(self, texts: builtins.list[str]) -> int:
        """Embed these texts in one batch, so the calls that name them next (``similar``, ``search``,
        ``rank``, ``upsert``) find their vectors ready; returns how many were not ready yet."""
        cache = getattr(self.embedder, "cache", None)
        if cache is None:
            return 0
        cold = [text for text in dict.fromkeys(texts) if cache.get(text) is None]
        if cold:
            self.embedder.embed(cold)
        return len(cold)

    # -- reads ----------------------------------------------------------------------------------

    def get(self, bank: str, lesson_ids: builtins.list[str]) -> builtins.list[Lesson]:
        """The lessons of ``bank`` with these ids (any status), in the order asked; others are left out."""
        self._ensure()
        return [lesson_of(payload) for _, payload in self._points(bank, lesson_ids)]

    def similar(self, bank: str, text: str, limit: int = 5,
                statuses: builtins.list[LessonStatus] | None = None) -> builtins.list[tuple[Lesson, float]]:
        """Lessons of ``bank`` by dense cosine similarity to ``text``, best first: the active ones, or those
        whose status is one of ``statuses``."""
        self._ensure()
        vector = self.embedder.embed([text])[0]
        wanted: builtins.list[str] = builtins.list(dict.fromkeys(statuses)) if statuses else ["active"]
        return [(lesson_of(payload), score) for payload, score in self._nearest(bank, vector, limit, wanted)]

    def search(
        self,
        bank: str,
        query: str,
        limit: int = 8,
        kinds: builtins.list[str] | None = None,
        min_similarity: float | None = None,
    ) -> builtins.list[tuple[Lesson, float]]:
        """Hybrid search of the active lessons of ``bank``: dense + lexical, fused with RRF.

        The score is the RRF score (rank-based, higher is better). ``min_similarity`` drops dense
        candidates below that cosine similarity, so a query with nothing relevant returns only lexical
        matches (or nothing).
        """
        self._ensure()
        dense = self.embedder.embed([query])[0]
        hits = self._hybrid(bank, dense, sparse_vector(query), limit, kinds, min_similarity)
        return [(lesson_of(payload), score) for payload, score in hits]

    def rank(
        self, bank: str, query: str, limit: int = 8, min_similarity: float | None = None
    ) -> builtins.list[tuple[Lesson, float, int | None]]:
        """Active lessons of ``bank`` relevant to ``query``: (lesson, dense cosine similarity, rank in the
        hybrid dense + lexical search or None), most similar first; one embedding, one engine call."""
        self._ensure()
        dense = self.embedder.embed([query])[0]
        similar, fused = self._ranked(bank, dense, sparse_vector(query), limit, min_similarity)
        ranks = {point_id: i for i, point_id in enumerate(fused)}
        out = []
        for payload, score in similar:
            lesson = lesson_of(payload)
            out.append((lesson, score, ranks.get(lesson.id)))
        return out

    def list(self, bank: str, limit: int = 100, include_inactive: bool = False) -> builtins.list[Lesson]:
        """Lessons of ``bank``, most recently seen first (active only unless ``include_inactive``)."""
        self._ensure()
        lessons = [lesson_of(payload) for payload in self._scroll(bank, active_only=not include_inactive)]
        lessons.sort(key=lambda lesson: (lesson.last_seen, lesson.first_seen), reverse=True)
        return lessons[:limit]

    def banks(self, status: LessonStatus = "active") -> dict[str, int]:
        """Lesson count per bank, of the lessons with ``status`` (active ones unless said)."""
        self._ensure()
        return self._bank_counts(status)
