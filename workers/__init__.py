"""The worker service: ``celery -A workers worker`` distills finished runs into lessons."""

from workers import lifecycle as _lifecycle  # noqa: F401  (connects the service's signal handlers)
from workers.app import app

__all__ = ["app"]
