"""Gauges of the whole cluster, read from Redis when ``/metrics`` is scraped (``deploy/prometheus/alerts.yml``
alerts on them): tasks queued, runs waiting for distillation and the age of the oldest, dead letters, live
workers, runs distilled without the LLM's lessons. Every worker serves the same values (they are Redis's): alert
rules take their ``max``. A Redis that does not answer within a few seconds gives ``lessonbank_redis_up 0``
and no other gauge, so a scrape never hangs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import redis

from lessonbank.core.connections import create_redis
from lessonbank.core.constants import DEAD_LETTERS_KEY, LLM_STATS_KEY, WAITING_RUNS_KEY, WORKERS_KEY
from lessonbank.core.settings import Settings
from lessonbank.workers.observe.heartbeat import HEARTBEAT_TTL

logger = logging.getLogger(__name__)

SCRAPE_TIMEOUT = 3.0


class ClusterGauges:
    """A prometheus_client collector reading the cluster's state from Redis at each scrape."""

    def __init__(self, settings: Settings, client: redis.Redis | None = None) -> None:
        self.queue = settings.queue
        # the recorder's bounds: a few seconds, never retried, so a scrape ends within Prometheus's timeout
        self._redis = client or create_redis(settings.model_copy(update={"redis_timeout": SCRAPE_TIMEOUT}),
                                             "recorder")

    def read(self) -> dict[str, float]:
        """The values, by gauge name (raises redis.RedisError when Redis does not answer)."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.time()
        pipe.llen(self.queue)
        pipe.zcard(WAITING_RUNS_KEY)
        pipe.zrange(WAITING_RUNS_KEY, 0, 0, withscores=True)
        pipe.hlen(DEAD_LETTERS_KEY)
        pipe.hget(LLM_STATS_KEY, "unusable")
        (seconds, micros), queued, waiting, oldest, dead, unusable = pipe.execute()
        now = seconds + micros / 1e6
        alive = self._redis.zcount(WORKERS_KEY, now - HEARTBEAT_TTL, "+inf")
        return {
            "lessonbank_queue_depth": float(queued),
            "lessonbank_runs_waiting": float(waiting),
            "lessonbank_oldest_waiting_seconds": max(now - float(oldest[0][1]), 0.0) if oldest else 0.0,
            "lessonbank_dead_letters_stored": float(dead),
            "lessonbank_workers_alive": float(alive),
            "lessonbank_llm_unusable_runs": float(unusable or 0),
        }

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        try:
            values = self.read()
        except redis.RedisError as e:
            logger.warning("metrics: Redis did not answer for the cluster gauges: %s", e)
            yield GaugeMetricFamily("lessonbank_redis_up", "Redis answered this scrape.", value=0)
            return
        yield GaugeMetricFamily("lessonbank_redis_up", "Redis answered this scrape.", value=1)
        for name, value in values.items():
            family = GaugeMetricFamily(name, HELP[name], labels=["queue"] if name == "lessonbank_queue_depth" else [])
            if name == "lessonbank_queue_depth":
                family.add_metric([self.queue], value)
            else:
                family.add_metric([], value)
            yield family


HELP = {
    "lessonbank_queue_depth": "Tasks waiting in the Celery queue.",
    "lessonbank_runs_waiting": "Finished runs whose distillation is queued or in hand.",
    "lessonbank_oldest_waiting_seconds": "Age of the run waiting longest for its distillation.",
    "lessonbank_dead_letters_stored": "Runs given up on (dead letters kept in Redis).",
    "lessonbank_workers_alive": "Workers whose heartbeat is current.",
    "lessonbank_llm_unusable_runs": "Runs distilled without the LLM's lessons (its reply unusable), since the start.",
}
