"""Run summaries kept per bank in a real redis-server, and the tool table summed over them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from lessonbank.core.constants import bank_runs_key, bank_summaries_key
from lessonbank.core.exceptions import ServiceUnavailable
from lessonbank.core.models import RunSummary, ToolStats
from lessonbank.core.summary import (
    VERDICT_TRIES,
    load_summaries,
    load_summary,
    save_summary,
    tool_table,
    update_verdict,
)
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.relay import Relay


def summary(run_id: str, started: float, bank: str = "b", **fields: object) -> RunSummary:
    return RunSummary(run_id=run_id, bank=bank, started_at=started, **fields)  # type: ignore[arg-type]


def test_summaries_are_kept_per_bank_newest_first_trimmed(redis_client: redis.Redis) -> None:
    dropped = [save_summary(redis_client, summary(f"r{i}", 100.0 + i), keep=3) for i in range(5)]
    assert dropped == [0, 0, 0, 1, 1]
    assert [s.run_id for s in load_summaries(redis_client, "b")] == ["r2", "r3", "r4"]
    assert redis_client.hlen(bank_summaries_key("b")) == 3
    assert [s.run_id for s in load_summaries(redis_client, "b", since=103.0)] == ["r3", "r4"]
    save_summary(redis_client, summary("r4", 104.0, steps=9), keep=3)  # saving again replaces
    assert load_summaries(redis_client, "b")[-1].steps == 9
    assert load_summaries(redis_client, "other") == []
    redis_client.hset(bank_summaries_key("b"), "r3", "{not json")
    assert [s.run_id for s in load_summaries(redis_client, "b")] == ["r2", "r4"]
    assert redis_client.zcard(bank_runs_key("b")) == 3


def test_update_verdict_respects_the_more_trusted_source(redis_client: redis.Redis) -> None:
    save_summary(redis_client, summary("r1", 1.0))
    assert not update_verdict(redis_client, "b", "missing", "success", "user")
    assert update_verdict(redis_client, "b", "r1", "failure", "llm")
    assert update_verdict(redis_client, "b", "r1", "success", "user")
    assert not update_verdict(redis_client, "b", "r1", "failure", "signals")  # the user's word stays
    stored = load_summaries(redis_client, "b")[0]
    assert (stored.verdict, stored.verdict_source) == ("success", "user")


class _Changing(redis.Redis):
    """A client after each of whose reads of a summary ``change()`` rewrites that summary (another writer)."""

    change: Callable[[], None] = staticmethod(lambda: None)

    def hget(self, name: Any, key: Any) -> Any:
        value = super().hget(name, key)
        self.change()
        return value


def test_a_verdict_is_not_written_over_a_summary_changed_since_it_was_read(redis_client: redis.Redis) -> None:
    """A user's verdict lands between the read and the write of an LLM's: the LLM's is decided again on what
    is stored now, and the user's word stays."""
    save_summary(redis_client, summary("r1", 1.0))
    changes: list[str] = []

    def user_verdict() -> None:
        if not changes:
            changes.append("user")
            assert update_verdict(redis_client, "b", "r1", "success", "user")

    racing = _Changing(connection_pool=redis_client.connection_pool)
    racing.change = user_verdict  # type: ignore[method-assign]
    assert not update_verdict(racing, "b", "r1", "failure", "llm")
    stored = load_summary(redis_client, "b", "r1")
    assert changes == ["user"] and stored is not None and (stored.verdict, stored.verdict_source) == ("success", "user")


def test_a_summary_that_keeps_changing_fails_the_verdict_after_a_few_reads(redis_client: redis.Redis) -> None:
    save_summary(redis_client, summary("r1", 1.0))
    reads = []

    def resave() -> None:
        reads.append(1)
        save_summary(redis_client, summary("r1", 1.0, steps=len(reads)))

    racing = _Changing(connection_pool=redis_client.connection_pool)
    racing.change = resave  # type: ignore[method-assign]
    with pytest.raises(ServiceUnavailable, match="kept changing"):
        update_verdict(racing, "b", "r1", "failure", "llm")
    assert len(reads) == VERDICT_TRIES
    stored = load_summary(redis_client, "b", "r1")
    assert stored is not None and stored.verdict_source == "none"


def test_a_connection_cut_as_a_verdict_is_written_is_raised_not_retried(redis_client: redis.Redis,
                                                                        redis_server: RedisServer) -> None:
    """A connection that dies as the verdict is written (a real TCP cut, in a relay in front of the real server,
    before the write command) fails the call at once: the write is not sent again, as a watched transaction
    whose connection died is (for ever, while the connection keeps dying)."""
    save_summary(redis_client, summary("r1", 1.0))
    relay = Relay(redis_server.port, cut_before=(b"EVAL", b"EXEC"), max_cuts=2).open()
    try:
        cut = redis.Redis.from_url(relay.url, socket_timeout=2, retry=Retry(NoBackoff(), 0))
        with pytest.raises(redis.ConnectionError):
            update_verdict(cut, "b", "r1", "failure", "user")
    finally:
        relay.close()
    assert relay.cuts == 1
    stored = load_summary(redis_client, "b", "r1")
    assert stored is not None and stored.verdict_source == "none"


def test_tool_table_sums_runs() -> None:
    runs = [
        summary("a", 1, tools={"search": ToolStats(calls=3, errors=1, seconds=[1.0], error_messages=["E: <n>"]),
                               "fetch": ToolStats(calls=1)}),
        summary("b", 2, tools={"search": ToolStats(calls=2, errors=2, seconds=[3.0, 5.0],
                                                   error_messages=["E: <n>", "F"])}),
    ]
    rows = tool_table(runs)
    assert [r.name for r in rows] == ["search", "fetch"]
    search = rows[0].to_dict()
    assert (search["runs"], search["calls"], search["errors"], search["error_rate"], search["p50_s"]) == (
        2, 5, 3, 0.6, 3.0)
    assert search["top_errors"] == [{"message": "E: <n>", "count": 2}, {"message": "F", "count": 1}]
    assert rows[1].to_dict()["p50_s"] is None and rows[1].error_rate == 0.0
