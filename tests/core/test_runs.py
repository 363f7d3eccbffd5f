"""The run state machine in Redis: open -> closed (with one distill task) -> distilled | dead -> closed."""

from __future__ import annotations

import time

import pytest
import redis

from lessonbank.core import runs
from lessonbank.core.constants import (
    DEAD_LETTERS_KEY,
    OPEN_RUNS_KEY,
    RUN_CLOSED,
    RUN_DEAD,
    RUN_DISTILLED,
    run_key,
    run_steps_key,
)
from lessonbank.core.models import StepRecord
from tests.fixtures.recorded import distill_args
from tests.fixtures.runs import run_state

REF = runs.RunRef("bank", "run-1", "agent", "task")


def record(seq: int, kind: str = "action") -> str:
    return StepRecord(id=f"run-1:{seq}", bank="bank", run_id="run-1", kind=kind, seq=seq).to_json()  # type: ignore[arg-type]


def test_steps_open_the_run_and_a_close_queues_it_once(redis_client: redis.Redis) -> None:
    runs.record_step(redis_client, REF, 0, record(0), 100.0)
    state = run_state(redis_client, "run-1")
    assert state["state"] == "open" and state["started_at"] == "100.0"
    # its last activity on Redis's clock: made at 100.0 on a clock that Redis's (the same machine's) agrees with
    assert redis_client.zscore(OPEN_RUNS_KEY, "run-1") == pytest.approx(100.0, abs=0.05)
    assert runs.close_run(redis_client, REF, 1, record(1, "run_end"), "success", 101.0, "q") is True
    assert runs.close_run(redis_client, REF, 1, record(1, "run_end"), "error", 102.0, "q") is False
    state = run_state(redis_client, "run-1")
    assert state["state"] == RUN_CLOSED and state["outcome"] == "success" and state["enqueued"] == "1"
    assert redis_client.zscore(OPEN_RUNS_KEY, "run-1") is None
    assert distill_args(redis_client, "q") == [["bank", "run-1"]]
    assert redis_client.hlen(run_steps_key("run-1")) == 2


def test_a_replayed_step_does_not_reopen_a_closed_run(redis_client: redis.Redis) -> None:
    runs.close_run(redis_client, REF, 3, record(3, "run_end"), "success", 101.0, "q")
    runs.replay_step(redis_client, REF, 2, record(2), 99.0)
    assert run_state(redis_client, "run-1")["state"] == RUN_CLOSED
    assert redis_client.hexists(run_steps_key("run-1"), "2")


def test_abandoned_close_rechecks_activity_and_publishes_once(redis_client: redis.Redis) -> None:
    runs.record_step(redis_client, REF, 0, record(0), 100.0)
    assert runs.close_abandoned(redis_client, "bank", "run-1", now=200.0, cutoff=50.0, queue="q") is False
    assert run_state(redis_client, "run-1")["state"] == "open"  # active after the cutoff: left alone
    assert runs.close_abandoned(redis_client, "bank", "run-1", now=200.0, cutoff=150.0, queue="q") is True
    assert run_state(redis_client, "run-1")["outcome"] == "abandoned"
    assert runs.close_abandoned(redis_client, "bank", "run-1", now=300.0, cutoff=250.0, queue="q") is False
    # the recorder's own close arriving late changes nothing and publishes nothing more
    assert runs.close_run(redis_client, REF, 1, record(1, "run_end"), "success", 301.0, "q") is False
    assert distill_args(redis_client, "q") == [["bank", "run-1"]]


def test_a_worker_writes_nothing_into_a_run_that_is_gone(redis_client: redis.Redis) -> None:
    """Its bank deleted while a worker held it: the worker's writes must not bring back a hash without expiry."""
    assert runs.save_checkpoint(redis_client, "gone", "{}", llm_error="looped") is False
    runs.save_progress(redis_client, "gone", {0})
    runs.save_credit(redis_client, "gone", {"verdict": "success", "lessons": {}})
    runs.save_recount(redis_client, "gone", {"failed": True})
    assert runs.count_attempt(redis_client, "gone") == 0
    assert redis_client.keys("*") == []
    runs.close_run(redis_client, REF, 0, record(0, "run_end"), "success", time.time(), "q")
    assert runs.save_checkpoint(redis_client, "run-1", "{}", llm_error="looped") is True
    assert runs.count_attempt(redis_client, "run-1") == 1
    state = run_state(redis_client, "run-1")
    assert runs.load_checkpoint(redis_client, "run-1") == "{}"
    assert state["llm_error"] == "looped"


def test_distilled_dead_and_retry(redis_client: redis.Redis) -> None:
    runs.close_run(redis_client, REF, 0, record(0, "run_end"), "success", time.time(), "q")
    runs.save_checkpoint(redis_client, "run-1", "{}")
    runs.mark_dead(redis_client, "run-1", ttl=60)
    assert run_state(redis_client, "run-1")["state"] == RUN_DEAD and 0 < redis_client.ttl(run_key("run-1")) <= 60
    assert runs.load_checkpoint(redis_client, "run-1") is None
    assert runs.reopen_for_retry(redis_client, "run-1", "bank", "q", "distill:run-1") == "no-letter"
    redis_client.hset(DEAD_LETTERS_KEY, "run-1", "{}")
    assert runs.reopen_for_retry(redis_client, "run-1", "bank", "q", "distill:run-1") == "reopened"
    assert not redis_client.hexists(DEAD_LETTERS_KEY, "run-1")
    assert run_state(redis_client, "run-1")["state"] == RUN_CLOSED and redis_client.ttl(run_key("run-1")) == -1
    assert distill_args(redis_client, "q") == [["bank", "run-1"], ["bank", "run-1"]]
    runs.mark_distilled(redis_client, "run-1", ttl=60, stats={"added": 2})
    assert run_state(redis_client, "run-1")["state"] == RUN_DISTILLED
    redis_client.delete(run_steps_key("run-1"))
    redis_client.hset(DEAD_LETTERS_KEY, "run-1", "{}")
    assert runs.reopen_for_retry(redis_client, "run-1", "bank", "q", "distill:run-1") == "no-steps"
    assert run_state(redis_client, "run-1")["state"] == RUN_DISTILLED
    assert redis_client.hexists(DEAD_LETTERS_KEY, "run-1")


def test_load_run_skips_malformed_and_foreign_records(redis_client: redis.Redis) -> None:
    runs.record_step(redis_client, REF, 0, record(0), 100.0)
    redis_client.hset(run_steps_key("run-1"), "1", "not json")
    other = StepRecord(id="x:2", bank="bank", run_id="other", kind="action", seq=2).to_json()
    redis_client.hset(run_steps_key("run-1"), "2", other)
    run = runs.load_run(redis_client, "run-1")
    assert [s.seq for s in run.steps] == [0] and run.malformed == 2 and run.task == "task"


def test_extra_fields_reach_the_run_hash_with_a_step_or_the_close(redis_client: redis.Redis) -> None:
    ref = runs.RunRef("bank", "run-1", "agent", "task", extra={"arm": "control", "given": "[]"})
    runs.record_step(redis_client, ref, 0, record(0), 100.0)
    assert run_state(redis_client, "run-1")["arm"] == "control"
    only_close = runs.RunRef("bank", "run-2", extra={"arm": "lessons", "given": '["a"]'})
    runs.close_run(redis_client, only_close, 0, record(0, "run_end"), "error", 100.0, "q")
    state = run_state(redis_client, "run-2")
    assert state["arm"] == "lessons" and state["given"] == '["a"]' and state["state"] == "closed"


def test_a_late_step_never_reopens_and_a_distilled_run_gets_one_followup(redis_client: redis.Redis) -> None:
    runs.record_step(redis_client, REF, 0, record(0), 100.0, queue="q")
    runs.close_run(redis_client, REF, 1, record(1, "run_end"), "success", 101.0, "q")
    assert runs.record_step(redis_client, REF, 2, record(2), 102.0, queue="q") == 1  # closed: kept, not reopened
    state = run_state(redis_client, "run-1")
    assert state["state"] == RUN_CLOSED and state["late_at"] == "102.0"
    assert redis_client.zscore(OPEN_RUNS_KEY, "run-1") is None
    runs.mark_distilled(redis_client, "run-1", ttl=60, stats={}, upto=2)
    assert runs.record_step(redis_client, REF, 3, record(3), 103.0, queue="q") == 2
    assert runs.record_step(redis_client, REF, 4, record(4), 104.0, queue="q") == 1  # one follow-up is enough
    assert distill_args(redis_client, "q") == [["bank", "run-1"], ["bank", "run-1"]]  # the close's and the follow-up
    run = runs.load_run(redis_client, "run-1")
    assert run.state == RUN_DISTILLED and run.followup and run.distilled_upto == 2
    runs.mark_distilled(redis_client, "run-1", ttl=60, stats={}, upto=4)
    assert not runs.load_run(redis_client, "run-1").followup


def test_a_verdict_for_a_run_with_no_records_expires_unless_the_run_follows(redis_client: redis.Redis) -> None:
    """A check's verdict can reach Redis before the background writer's first record of the run; a verdict for a
    run that never comes (a mistyped id, records lost) must not stay for ever."""
    assert runs.set_verdict(redis_client, "bank", "nobody", True, "check", "", "q", ttl=600) == 1
    assert 0 < redis_client.ttl(run_key("nobody")) <= 600
    assert runs.set_verdict(redis_client, "bank", "run-1", True, "check", "", "q", ttl=600) == 1
    runs.record_step(redis_client, REF, 0, record(0), 100.0)  # the run follows: open, kept until distilled
    assert redis_client.ttl(run_key("run-1")) == -1 and run_state(redis_client, "run-1")["verdict"] == "success"
    runs.set_verdict(redis_client, "bank", "run-1", False, "user", "", "q", ttl=600)  # a run that exists: as it was
    assert redis_client.ttl(run_key("run-1")) == -1
    assert runs.set_verdict(redis_client, "bank", "run-2", True, "check", "", "q", ttl=600) == 1
    runs.close_run(redis_client, runs.RunRef("bank", "run-2", "agent", "task"), 0, record(0, "run_end"), "success",
                   101.0, "q")  # a run whose only write is its close
    assert redis_client.ttl(run_key("run-2")) == -1 and run_state(redis_client, "run-2")["state"] == RUN_CLOSED
    runs.mark_distilled(redis_client, "run-2", 900, {})
    runs.set_verdict(redis_client, "bank", "run-2", False, "user", "", "q", ttl=600)  # keeps the distilled expiry
    assert 600 < redis_client.ttl(run_key("run-2")) <= 900


def test_replayed_steps_of_a_distilled_run_are_not_late_and_queue_no_followup(redis_client: redis.Redis) -> None:
    """A spool replayed after a partial delivery re-sends steps Redis has already: nothing is new, so the
    distilled run is not marked late and no follow-up distillation is queued (a second LLM call for nothing)."""
    runs.record_step(redis_client, REF, 0, record(0), 100.0, queue="q")
    runs.close_run(redis_client, REF, 1, record(1, "run_end"), "success", 101.0, "q")
    runs.mark_distilled(redis_client, "run-1", ttl=60, stats={}, upto=1)
    assert runs.replay_step(redis_client, REF, 0, record(0), 100.0, queue="q") == 3
    command = runs.steps_command(REF, [(0, record(0), 100.0)], "q")  # the recorder's batched form too
    assert runs.run_command(redis_client, command) == 3
    runs.close_run(redis_client, REF, 1, record(1, "run_end"), "success", 101.0, "q")
    state = run_state(redis_client, "run-1")
    assert "late_at" not in state and "followup" not in state and state["state"] == RUN_DISTILLED
    assert distill_args(redis_client, "q") == [["bank", "run-1"]]  # the close's only
    assert runs.record_step(redis_client, REF, 2, record(2), 102.0, queue="q") == 2  # a new step still is late


def test_a_verdict_sent_again_changes_nothing(redis_client: redis.Redis) -> None:
    """The recorder spools a check's verdict with the run's records; a replay may send it again (a partial delivery
    before the process died): the same source's same verdict of the same time is recorded once, and a distilled
    run gets one credit task for it, not one per delivery."""
    runs.close_run(redis_client, REF, 0, record(0, "run_end"), "success", 100.0, "q")
    runs.mark_distilled(redis_client, "run-1", ttl=600, stats={})
    queued = redis_client.llen("q")
    command = runs.verdict_command("bank", "run-1", False, "check", "", 105.5, "q", ttl=600)
    assert runs.run_command(redis_client, command) == 2  # recorded, credit task queued
    assert runs.run_command(redis_client, command) == 0  # the replay
    assert runs.set_verdict(redis_client, "bank", "run-1", False, "check", "", "q", ttl=600, at=105.5) == 0
    state = run_state(redis_client, "run-1")
    assert (state["verdict"], state["verdict_source"], state["verdict_at"]) == ("failure", "check", "105.5")
    assert redis_client.llen("q") == queued + 1
    assert runs.set_verdict(redis_client, "bank", "run-1", True, "user", "", "q", ttl=600) == 2  # a user's word
    assert runs.run_command(redis_client, command) == 0  # a check replayed after it never overrides it
    assert run_state(redis_client, "run-1")["verdict"] == "success"
