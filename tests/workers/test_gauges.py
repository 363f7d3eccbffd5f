"""The cluster's gauges read from a real Redis at scrape time, and what a scrape gives when Redis is away."""

from __future__ import annotations

import time

import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lessonbank.core.constants import DEAD_LETTERS_KEY, LLM_STATS_KEY, WAITING_RUNS_KEY, WORKERS_KEY
from lessonbank.core.settings import Settings
from lessonbank.workers.observe.gauges import ClusterGauges
from tests.fixtures.redis_server import RedisServer


def scraped(settings: Settings) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(ClusterGauges(settings))
    text = generate_latest(registry).decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_the_gauges_count_what_redis_holds(settings: Settings, redis_client: redis.Redis) -> None:
    now = time.time()
    redis_client.lpush(settings.queue, "a", "b", "c")
    redis_client.zadd(WAITING_RUNS_KEY, {"run-1": now - 600, "run-2": now - 5})
    redis_client.hset(DEAD_LETTERS_KEY, mapping={"run-3": "{}", "run-4": "{}"})
    redis_client.zadd(WORKERS_KEY, {"alive@a": now - 1, "gone@b": now - 3600})
    redis_client.hset(LLM_STATS_KEY, "unusable", 4)
    samples = scraped(settings)
    assert samples[("lessonbank_redis_up", ())] == 1
    assert samples[("lessonbank_queue_depth", (("queue", settings.queue),))] == 3
    assert samples[("lessonbank_runs_waiting", ())] == 2
    assert 590 < samples[("lessonbank_oldest_waiting_seconds", ())] < 900
    assert samples[("lessonbank_dead_letters_stored", ())] == 2
    assert samples[("lessonbank_workers_alive", ())] == 1
    assert samples[("lessonbank_llm_unusable_runs", ())] == 4


def test_nothing_waiting_is_zero(settings: Settings) -> None:
    samples = scraped(settings)
    assert samples[("lessonbank_oldest_waiting_seconds", ())] == 0 and samples[("lessonbank_runs_waiting", ())] == 0


def test_a_redis_that_does_not_answer_gives_redis_up_0_within_seconds(settings: Settings,
                                                                      own_redis: RedisServer) -> None:
    own_redis.freeze()
    try:
        started = time.monotonic()
        samples = scraped(settings.model_copy(update={"redis_url": own_redis.url}))
        assert samples == {("lessonbank_redis_up", ()): 0}
        assert time.monotonic() - started < 60  # bounded by the scrape timeout, not by Redis
    finally:
        own_redis.thaw()
