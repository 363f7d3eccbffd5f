"""The worker service: ``celery -A lessonbank.workers worker`` distills finished runs into lessons.

It imports only ``lessonbank.core`` (and Celery, the OpenAI client, Qdrant): never the recorder or the face.
"""

from lessonbank.workers import lifecycle as _lifecycle  # noqa: F401  (connects the service's signal handlers)
from lessonbank.workers import observe as _observe  # noqa: F401  (metrics, spans and the heartbeat)
from lessonbank.workers.app import app

__all__ = ["app"]
