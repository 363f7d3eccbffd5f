"""Lessons written by qdrant-client's local mode (``QdrantClient(path=...)``) at the embedded store's path.

Earlier versions kept the embedded store that way (``<path>/meta.json`` and ``<path>/collection/<name>/``).
``import_local_mode`` moves such a collection's points, vectors and payloads as they are, into the Qdrant
Edge shard, then deletes the collection, so no second copy of a lesson outlives a later delete. Points
already in the shard win. qdrant-client is imported only when there is something to move.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable
from lessonbank.core.store.base import DENSE, LEXICAL
from lessonbank.core.store.edge_files import exact_payload

logger = logging.getLogger(__name__)

_PAGE = 256


def has_local_mode(path: Path, collection: str) -> bool:
    """Whether qdrant-client's local mode holds ``collection`` at ``path``."""
    meta = path / "meta.json"
    if not meta.is_file():
        return False
    try:
        collections = json.loads(meta.read_text()).get("collections") or {}
    except (ValueError, OSError, AttributeError):
        logger.warning("cannot read %s; not importing qdrant-client's local store", meta)
        return False
    return collection in collections


def _vectors(vector: Any, dim: int) -> dict[str, Any]:
    named = vector if isinstance(vector, dict) else {DENSE: vector}
    dense = [float(x) for x in named.get(DENSE) or []]
    if len(dense) != dim:
        raise ConfigurationError(f"qdrant-client's local store holds {len(dense)}-d vectors but the embedder "
                                 f"makes {dim}-d ones; use the same embedding model to import it")
    out: dict[str, Any] = {DENSE: dense}
    lexical = named.get(LEXICAL)
    if lexical is not None:
        out[LEXICAL] = qe.SparseVector(list(lexical.indices), [float(x) for x in lexical.values])
    return out


def import_local_mode(path: Path, collection: str, shard: Any, dim: int) -> int:
    """Move ``collection`` of qdrant-client's local mode at ``path`` into ``shard``; how many points moved."""
    if not has_local_mode(path, collection):
        return 0
    from qdrant_client import QdrantClient

    try:
        client = QdrantClient(path=str(path))
    except RuntimeError as e:
        raise ServiceUnavailable(f"qdrant-client's local store at {path} is held by another process: {e}") from e
    moved = 0
    try:
        offset: Any = None
        while True:
            records, offset = client.scroll(collection, limit=_PAGE, offset=offset, with_payload=True,
                                            with_vectors=True)
            ids = [str(r.id) for r in records]
            present = {str(r.id) for r in shard.retrieve(ids, with_payload=False, with_vector=False)} if ids else set()
            points = [qe.Point(str(r.id), _vectors(r.vector, dim), exact_payload(r.payload or {}))
                      for r in records if str(r.id) not in present]
            if points:
                shard.update(qe.UpdateOperation.upsert_points(points))
                moved += len(points)
            if offset is None:
                break
        client.delete_collection(collection)
    finally:
        client.close()
    return moved
