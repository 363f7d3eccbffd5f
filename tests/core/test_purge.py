"""``lessonbank.core.purge`` on a real redis-server: tombstones, and a bank's data removed without touching
another bank's (the CLI around it is tested in tests/cli/test_banks.py)."""

from __future__ import annotations

import time

import pytest
import redis

from lessonbank.core import purge
from lessonbank.core.constants import DISTILL_TASK, OPEN_RUNS_KEY, bank_lock_key, bank_tools_key, run_key, run_steps_key
from lessonbank.core.exceptions import ServiceUnavailable
from lessonbank.core.models import lesson_id
from lessonbank.core.publish import publish
from tests.fixtures.redis_server import free_port
from tests.fixtures.runs import write_run


def test_tombstones(redis_client: redis.Redis) -> None:
    ids = [lesson_id("a", "first"), lesson_id("a", "second")]
    assert purge.purged_ids(redis_client, "a", ids) == set()
    assert purge.add_tombstones(redis_client, "a", [ids[0], ids[0]]) == 1
    assert purge.purged_ids(redis_client, "a", ids) == {ids[0]}
    assert purge.purged_ids(redis_client, "b", ids) == set()  # per bank
    assert purge.tombstones(redis_client, "a") == [ids[0]]
    assert purge.remove_tombstones(redis_client, "a", ids) == 1 and purge.tombstones(redis_client, "a") == []
    assert purge.add_tombstones(redis_client, "a", []) == 0 and purge.purged_ids(redis_client, "a", []) == set()


def test_bank_run_ids_finds_runs_by_hash_steps_and_index(redis_client: redis.Redis) -> None:
    by_hash = write_run(redis_client, "a")
    steps_only = write_run(redis_client, "a")
    redis_client.delete(run_key(steps_only))  # the hash expired first: the step records still name the bank
    other = write_run(redis_client, "b")
    redis_client.zadd("lessonbank:bank:a:runs", {"summarised-only": time.time()})
    assert purge.bank_run_ids(redis_client, "a") == {by_hash, steps_only, "summarised-only"}
    assert purge.bank_run_ids(redis_client, "b") == {other}


def test_delete_bank_data_keeps_other_banks(redis_client: redis.Redis) -> None:
    mine = write_run(redis_client, "a", state="open")
    theirs = write_run(redis_client, "b", state="open")
    publish(redis_client, "q", DISTILL_TASK, ["a", mine])
    publish(redis_client, "q", DISTILL_TASK, ["b", theirs])
    redis_client.lpush("q", b"not a task message")
    purge.add_tombstones(redis_client, "a", ["x"])
    redis_client.hset(bank_tools_key("a"), "get_invoice", "{}")
    report = purge.delete_bank_data(redis_client, "a", "q")
    assert (report.runs, report.queued_tasks, report.tombstones) == (1, 1, 1)
    assert not redis_client.exists(run_key(mine), run_steps_key(mine), "lessonbank:bank:a:purged", bank_tools_key("a"))
    assert redis_client.exists(run_key(theirs), run_steps_key(theirs)) == 2
    assert [m.decode() for m in redis_client.zrange(OPEN_RUNS_KEY, 0, -1)] == [theirs]
    assert [purge.task_args(raw) for raw in redis_client.lrange("q", 0, -1)] == [None, ["b", theirs]]


def test_bank_held_waits_for_the_lock(redis_client: redis.Redis) -> None:
    with purge.bank_held(redis_client, "a", wait=1, hold=5):
        assert redis_client.exists(bank_lock_key("a"))
        with pytest.raises(ServiceUnavailable, match=r"stayed locked by a worker for 0\.2s"):
            with purge.bank_held(redis_client, "a", wait=0.2, hold=5):
                pass
    assert not redis_client.exists(bank_lock_key("a"))


def test_bank_held_unless_away_goes_ahead_without_redis() -> None:
    away = redis.Redis(port=free_port(), socket_connect_timeout=1)
    with pytest.raises(redis.ConnectionError):
        with purge.bank_held(away, "a", wait=1, hold=5):
            pass
    ran = []
    with purge.bank_held(away, "a", wait=1, hold=5, unless_away=True):
        ran.append(True)
    assert ran == [True]
