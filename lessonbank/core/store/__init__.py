"""The lesson store: one protocol (``protocol.LessonStoreProtocol``), what every implementation shares
(``base``), the embedded Qdrant Edge shard (``edge.EdgeLessonStore``, with ``legacy`` moving in what
qdrant-client's local mode wrote), qdrant-client for a Qdrant server (``qdrant.LessonStore``), and the
process that owns the embedded store (``owner``) with the proxy other processes reach it through (``remote``)."""
