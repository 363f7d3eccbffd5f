"""Run summaries kept per bank in a real redis-server, and the tool table summed over them."""

from __future__ import annotations

import redis

from lessonbank.core.constants import bank_runs_key, bank_summaries_key
from lessonbank.core.models import RunSummary, ToolStats
from lessonbank.core.summary import load_summaries, save_summary, tool_table, update_verdict


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
