"""The worker service: ``celery -A lessonbank.workers worker`` distills finished runs into lessons.

The Celery service only: the app and its tasks, jobs and leases, the pipeline's reads, writes and locks around
``lessonbank.learn``, the sweeper, the lifecycle (and the owner of the embedded store), dead letters, metrics
and traces. It imports ``lessonbank.core`` and ``lessonbank.learn`` (and Celery, the OpenAI client, Qdrant):
never the recorder or the face.
"""

from lessonbank.workers import lifecycle as _lifecycle  # noqa: F401  (connects the service's signal handlers)
from lessonbank.workers.app import app
from lessonbank.workers.observe import service as _observe  # noqa: F401  (metrics, spans and the heartbeat)

__all__ = ["app"]
