"""Opening the embedded lesson store directly, from a process that is not its owner's."""

from __future__ import annotations

from lessonbank.core.embeddings import embedder_from_settings
from lessonbank.core.settings import Settings
from lessonbank.core.store.edge import EdgeLessonStore


def open_local_store(settings: Settings) -> EdgeLessonStore:
    """A direct, open store on the embedded path of ``settings``.

    Raises ServiceUnavailable when another process (normally a worker) holds the path.
    """
    store = EdgeLessonStore(settings.resolved_qdrant_path, embedder_from_settings(settings), settings.collection)
    store.open()
    return store
