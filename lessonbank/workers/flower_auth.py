"""Flower's Prometheus ``/metrics`` behind the same authentication as its other pages.

Flower 2.x checks its basic auth (or OAuth) on every page and API call but ``/metrics`` and ``/healthcheck``;
``guard_metrics`` wraps the metrics handler in tornado's ``authenticated`` check, which those pages use, so a
scraper needs Flower's credentials. ``/healthcheck`` stays open for the container's health check.
"""

from __future__ import annotations

import sys


def running_flower(argv: list[str] | None = None) -> bool:
    """Is this process ``celery ... flower``?"""
    return "flower" in (sys.argv if argv is None else argv)[1:]


def guard_metrics() -> bool:
    """Make Flower's ``/metrics`` ask for its credentials; False when Flower is not installed."""
    try:
        from flower.views import monitor
        from tornado import web
    except ImportError:
        return False
    get = monitor.Metrics.get
    if not getattr(get, "lessonbank_guarded", False):
        guarded = web.authenticated(get)
        guarded.lessonbank_guarded = True  # type: ignore[attr-defined]
        monitor.Metrics.get = guarded  # type: ignore[method-assign]
    return True
