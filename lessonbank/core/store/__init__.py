"""The lesson store: one protocol (``protocol.LessonStoreProtocol``), a Qdrant implementation
(``qdrant.LessonStore``) and a proxy to the process that owns the embedded store (``remote``)."""
