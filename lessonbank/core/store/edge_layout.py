"""How lessons sit in a Qdrant Edge shard: its config (dense and lexical vectors, no HNSW graph, one search thread),
its payload indexes, the filters on a bank's lessons, and the engine's plain exceptions turned into lessonbank's.
``edge.EdgeLessonStore`` opens, writes and searches shards with these.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from lessonbank.core.embeddings import SparseVector
from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable, StoreError
from lessonbank.core.store.base import DENSE, LEXICAL

# ``live``: the bank's name on an active lesson, null or absent on any other, so that "the active lessons
# of a bank" (every instructions request) is one tenant-index lookup. A filter on bank and status checks
# the status of each of the bank's points: 10k lessons, dense scan 3.5 ms against 2.3 ms on ``live``.
LIVE = "live"
INDEXES: dict[str, Any] = {
    "bank": qe.KeywordIndexParams(is_tenant=True),
    LIVE: qe.KeywordIndexParams(is_tenant=True),
    "status": qe.PayloadSchemaType.Keyword,
    "kind": qe.PayloadSchemaType.Keyword,
}


# One search thread: the owner serves callers from several threads already, and on small machines a
# hand-off to the engine's search pool costs more than it saves (10k lessons: p50 2.8 ms against 3.3).
SEARCH_THREADS = 1


def shard_config(dim: int) -> qe.EdgeConfig:
    # No HNSW graph (indexing threshold 0): scanning a bank's vectors takes 1-2 ms per 10k lessons, and
    # building a graph for 100k would hold the GIL of the owning process for about a minute.
    optimizers = qe.EdgeOptimizersConfig(indexing_threshold=0)
    return qe.EdgeConfig(vectors={DENSE: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)},
                         sparse_vectors={LEXICAL: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
                         optimizers=optimizers, max_search_threads=SEARCH_THREADS)


def reopen(shard_dir: Path, dim: int) -> Any:
    """The shard at ``shard_dir`` (its config checked against, and brought up to, ``_config``)."""
    return qe.EdgeShard.load(str(shard_dir), shard_config(dim))


def condition(key: str, value: str) -> qe.FieldCondition:
    return qe.FieldCondition(key, match=qe.MatchValue(value))


def bank_filter(bank: str, active_only: bool, kinds: builtins.list[str] | None = None,
            statuses: builtins.list[str] | None = None) -> qe.Filter:
    """Points of ``bank``: whose status is one of ``statuses`` if given, else active ones if ``active_only``."""
    must: builtins.list[Any]
    if (active_only and not statuses) or statuses == ["active"]:
        must = [condition(LIVE, bank)]
    else:
        must = [condition("bank", bank)]
        if statuses and len(statuses) > 1:
            must.append(qe.FieldCondition("status", match=qe.MatchAny(builtins.list(statuses))))
        elif statuses:
            must.append(condition("status", statuses[0]))
    if kinds:
        must.append(qe.FieldCondition("kind", match=qe.MatchAny(builtins.list(kinds))))
    return qe.Filter(must=must)


def sparse(vector: SparseVector) -> qe.SparseVector:
    return qe.SparseVector(vector.indices, vector.values)


@contextlib.contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """The engine raises plain ``Exception``s; a lessonbank error names what failed."""
    try:
        yield
    except (StoreError, ServiceUnavailable, ConfigurationError):
        raise
    except Exception as e:  # qdrant-edge reports every failure as Exception
        raise StoreError(f"the embedded store failed to {action}: {e}") from e
