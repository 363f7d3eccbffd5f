"""The sweeper: abandoned runs are closed and distilled; finished runs get a TTL."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from lessonbank.core import runs
from lessonbank.core.constants import DISTILL_TASK, OPEN_RUNS_KEY, run_key, run_steps_key
from lessonbank.core.models import StepRecord
from lessonbank.core.settings import Settings
from lessonbank.workers import deadletters, jobs
from lessonbank.workers.sweeper import close_abandoned, expire_finished, sweep
from tests.fixtures.celery_worker import CeleryWorker, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.recorded import distill_args
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.runs import run_state, write_run


def sent(client: redis.Redis, settings: Settings) -> list[tuple[str, str]]:
    """(bank, run id) of every distill task the sweeper queued."""
    return [(bank, run_id) for bank, run_id in distill_args(client, settings.queue)]


def test_abandoned_run_is_closed_and_sent(redis_client: redis.Redis, settings: Settings) -> None:
    old = write_run(redis_client, "b", state="open", last_activity=time.time() - settings.idle_timeout - 5)
    fresh = write_run(redis_client, "b", state="open")
    report = sweep(redis_client, settings)
    assert report.abandoned == 1 and sent(redis_client, settings) == [("b", old)]
    state = run_state(redis_client, old)
    assert state["state"] == "closed" and state["outcome"] == "abandoned" and "closed_at" in state
    assert redis_client.zscore(OPEN_RUNS_KEY, old) is None
    assert run_state(redis_client, fresh)["state"] == "open" and redis_client.zscore(OPEN_RUNS_KEY, fresh)
    assert sweep(redis_client, settings).abandoned == 0
    assert sent(redis_client, settings) == [("b", old)]


@pytest.mark.parametrize("skew", [-7200.0, 7200.0])
def test_a_run_is_abandoned_by_its_idleness_not_by_its_agents_clock(redis_client: redis.Redis, settings: Settings,
                                                                   skew: float) -> None:
    """An agent on a machine whose clock is 2 h behind or ahead of Redis's: its live run (a step 5 s ago) stays
    open, its run idle for an hour (the process died; its spool is replayed now) is closed as abandoned."""
    agent_now = time.time() + skew
    for run_id, ago in (("live-run", 5.0), ("idle-run", 3600.0)):
        ref = runs.RunRef("b", run_id, "agent", "task")
        record = StepRecord(id=f"{run_id}:0", bank="b", run_id=run_id, kind="action", seq=0).to_json()
        runs.run_command(redis_client, runs.steps_command(ref, [(0, record, agent_now - ago)], settings.queue,
                                                          sent=agent_now))
    assert sweep(redis_client, settings.model_copy(update={"idle_timeout": 1800})).abandoned == 1
    assert run_state(redis_client, "live-run")["state"] == "open"
    assert run_state(redis_client, "idle-run")["outcome"] == "abandoned"
    assert sent(redis_client, settings) == [("b", "idle-run")]


def test_run_closed_by_its_recorder_is_left_alone(redis_client: redis.Redis, settings: Settings) -> None:
    run_id = write_run(redis_client, "b", state="closed")
    redis_client.zadd(OPEN_RUNS_KEY, {run_id: 1.0})
    assert sweep(redis_client, settings).abandoned == 0
    assert sent(redis_client, settings) == [] and run_state(redis_client, run_id)["outcome"] == "success"
    assert redis_client.zscore(OPEN_RUNS_KEY, run_id) is None


def test_bank_comes_from_the_steps_without_metadata(redis_client: redis.Redis, settings: Settings) -> None:
    run_id = write_run(redis_client, "steps-bank", state="open", last_activity=1.0)
    redis_client.delete(run_key(run_id))
    sweep(redis_client, settings)
    assert sent(redis_client, settings) == [("steps-bank", run_id)]


def test_finished_runs_get_a_ttl(redis_client: redis.Redis, settings: Settings) -> None:
    distilled = write_run(redis_client, "b", state="distilled")
    dead = write_run(redis_client, "b", state="dead")
    closed = write_run(redis_client, "b", state="closed")
    report = sweep(redis_client, settings)
    assert report.expired == 2
    for run_id in (distilled, dead):
        assert 0 < redis_client.ttl(run_steps_key(run_id)) <= settings.step_ttl
        assert 0 < redis_client.ttl(run_key(run_id)) <= settings.step_ttl
    assert redis_client.ttl(run_steps_key(closed)) == -1


class Interleaved(redis.Redis):
    """A client on which ``between()`` (another process's write) runs once, just before the sweeper's first write
    after the read it interleaves with: a pipeline's or a script's."""

    between: Callable[[], object] = staticmethod(lambda: None)
    done = False

    def _interleave(self) -> None:
        if not self.done:
            self.done = True
            self.between()

    def pipeline(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self._interleave()
        return super().pipeline(*args, **kwargs)

    def zrem(self, *args, **kwargs):  # type: ignore[no-untyped-def, override]
        self._interleave()
        return super().zrem(*args, **kwargs)

    def eval(self, *args, **kwargs):  # type: ignore[no-untyped-def, override]
        self._interleave()
        return super().eval(*args, **kwargs)


def interleaved(client: redis.Redis, between: Callable[[], object]) -> Interleaved:
    racing = Interleaved(connection_pool=client.connection_pool)
    racing.between = between  # type: ignore[method-assign]
    return racing


def test_a_dead_run_sent_again_while_the_sweeper_looks_gets_no_ttl(redis_client: redis.Redis,
                                                                    settings: Settings) -> None:
    """The sweeper reads a run as dead and without a TTL; a user retries its dead letter before the sweeper gives
    its data the TTL: the data of the run now waiting for the workers keeps no expiry."""
    run_id = write_run(redis_client, "b", state="dead")
    deadletters.add(redis_client, run_id, "b", "boom", 1)
    racing = interleaved(redis_client, lambda: deadletters.retry(redis_client, run_id, settings.queue))
    assert expire_finished(racing, settings) == 0 and racing.done
    assert run_state(redis_client, run_id)["state"] == "closed"
    assert redis_client.ttl(run_steps_key(run_id)) == -1 and redis_client.ttl(run_key(run_id)) == -1


def test_an_empty_open_run_given_a_step_while_the_sweeper_looks_stays_open(redis_client: redis.Redis,
                                                                           settings: Settings) -> None:
    """The sweeper finds an idle open run with neither bank nor step records; its recorder's next step lands
    before the sweeper drops it: the run stays among the open runs, without a TTL."""
    ref = runs.RunRef("b", "run-woken", "agent", "task")
    redis_client.zadd(OPEN_RUNS_KEY, {ref.run_id: 1.0})
    record = StepRecord(id=f"{ref.run_id}:0", bank="b", run_id=ref.run_id, kind="action", seq=0).to_json()
    racing = interleaved(redis_client, lambda: runs.record_step(redis_client, ref, 0, record, time.time()))
    assert close_abandoned(racing, settings) == 0 and racing.done
    assert (redis_client.zscore(OPEN_RUNS_KEY, ref.run_id) or 0) > 1.0
    assert run_state(redis_client, ref.run_id)["state"] == "open" and redis_client.ttl(run_key(ref.run_id)) == -1
    redis_client.zadd(OPEN_RUNS_KEY, {"run-empty": 1.0})  # one that stays empty is dropped
    assert close_abandoned(redis_client, settings) == 0 and redis_client.zscore(OPEN_RUNS_KEY, "run-empty") is None


def test_due_jobs_are_sent_again(redis_client: redis.Redis, settings: Settings) -> None:
    """A retry whose time has come (or the job of a worker that died) is published by the sweeper too."""
    job = jobs.Job("distill:r1", DISTILL_TASK, ["b", "r1"], settings.queue, "task-r1")
    lease, _ = jobs.acquire(redis_client, job, 60, 0)
    assert lease is not None and lease.retry(0)
    report = sweep(redis_client, settings)
    assert report.republished == 1 and sent(redis_client, settings) == [("b", "r1")]
    assert sweep(redis_client, settings).republished == 0


@pytest.mark.slow
def test_a_run_whose_task_was_lost_is_sent_again_and_only_that_one(redis_client: redis.Redis,
                                                                   settings: Settings) -> None:
    """Five runs queued for distillation long enough ago: one whose task is nowhere is sent again; one still in the
    queue, one in a worker's hands (kombu's unacknowledged set), one whose job waits for a retry and one
    dead-lettered are not. A distilled run leaves the waiting set; one sent again is looked at only a while later."""
    import json

    from lessonbank.core.constants import DEAD_LETTERS_KEY, UNACKED_KEY, WAITING_RUNS_KEY, job_key
    from lessonbank.core.publish import task_message

    ids = {}
    for name in ("lost", "queued", "in-hand", "retrying", "dead", "distilled"):
        ref = runs.RunRef("b", f"run-{name}", "agent", "task")
        record = StepRecord(id=f"{ref.run_id}:0", bank="b", run_id=ref.run_id, kind="run_end", seq=0).to_json()
        runs.close_run(redis_client, ref, 0, record, "success", time.time(), settings.queue)
        ids[name] = ref.run_id
    assert redis_client.zcard(WAITING_RUNS_KEY) == 6
    redis_client.delete(settings.queue)  # every task gone, and then:
    redis_client.lpush(settings.queue, task_message(DISTILL_TASK, ["b", ids["queued"]], settings.queue))
    held = json.loads(task_message(DISTILL_TASK, ["b", ids["in-hand"]], settings.queue))
    redis_client.hset(UNACKED_KEY, "tag-1", json.dumps([held, "", settings.queue]))
    redis_client.hset(job_key(jobs.job_id("distill", ids["retrying"])), "task", DISTILL_TASK)
    redis_client.hset(DEAD_LETTERS_KEY, ids["dead"], "{}")
    runs.mark_distilled(redis_client, ids["distilled"], 60, {})
    later = redis_client.time()[0] + settings.resend_after + 1
    assert sweep(redis_client, settings, now=later).resent == 1
    assert [run_id for _, run_id in sent(redis_client, settings)] == [ids["queued"], ids["lost"]]
    waiting = {member.decode() for member in redis_client.zrange(WAITING_RUNS_KEY, 0, -1)}
    assert waiting == {ids[name] for name in ("lost", "queued", "in-hand", "retrying")}
    assert sweep(redis_client, settings, now=later + 1).resent == 0  # not again before resend_after


def test_a_run_distilled_while_the_sweeper_looks_is_not_put_back_to_wait(redis_client: redis.Redis,
                                                                         settings: Settings) -> None:
    """The sweeper reads a waiting run's state (closed, its job in a worker's hands) and the worker finishes it
    before the sweeper notes "look again later": the distilled run does not go back to the waiting set, where
    ``lessonbank status`` would count it as waiting."""
    from lessonbank.core.constants import WAITING_RUNS_KEY, job_key

    ref = runs.RunRef("b", "run-racing", "agent", "task")
    record = StepRecord(id=f"{ref.run_id}:0", bank="b", run_id=ref.run_id, kind="run_end", seq=0).to_json()
    runs.close_run(redis_client, ref, 0, record, "success", time.time(), settings.queue)
    redis_client.hset(job_key(jobs.job_id("distill", ref.run_id)), "task", DISTILL_TASK)

    class Racing(redis.Redis):
        def zadd(self, name, mapping, *args, **kwargs):  # type: ignore[no-untyped-def, override]
            runs.mark_distilled(redis_client, ref.run_id, 60, {})  # the worker finishes in between
            return super().zadd(name, mapping, *args, **kwargs)

    racing = Racing(connection_pool=redis_client.connection_pool)
    later = redis_client.time()[0] + settings.resend_after + 1
    assert sweep(racing, settings, now=later).resent == 0
    assert redis_client.zscore(WAITING_RUNS_KEY, ref.run_id) is None
    assert run_state(redis_client, ref.run_id)["state"] == "distilled"


def test_a_run_queued_again_while_the_sweeper_looks_stays_among_the_waiting_runs(redis_client: redis.Redis,
                                                                                settings: Settings) -> None:
    """The sweeper lists a waiting run, the worker distills it, the sweeper reads it distilled, and a late step
    queues its follow-up distillation before the sweeper drops it from the waiting runs: the follow-up stays
    waiting, so that the sweeper can send it again should its task be lost."""
    from lessonbank.core.constants import WAITING_RUNS_KEY

    ref = runs.RunRef("b", "run-followed-up", "agent", "task")

    def record(seq: int, kind: str) -> str:
        return StepRecord(id=f"{ref.run_id}:{seq}", bank="b", run_id=ref.run_id, kind=kind, seq=seq).to_json()

    runs.close_run(redis_client, ref, 0, record(0, "run_end"), "success", time.time(), settings.queue)
    redis_client.delete(settings.queue)
    late: list[int] = []

    class Racing(redis.Redis):
        def zrangebyscore(self, name, *args, **kwargs):  # type: ignore[no-untyped-def, override]
            listed = super().zrangebyscore(name, *args, **kwargs)
            if name == WAITING_RUNS_KEY and listed:
                runs.mark_distilled(redis_client, ref.run_id, 60, {})  # the worker finishes after the listing
            return listed

        def late_step(self) -> None:
            if not late:  # the recorder's late step, after the sweeper read the run's state
                late.append(runs.record_step(redis_client, ref, 1, record(1, "action"), time.time(),
                                            settings.queue))

        def zrem(self, name, *values):  # type: ignore[no-untyped-def, override]
            if name == WAITING_RUNS_KEY:
                self.late_step()
            return super().zrem(name, *values)

        def eval(self, script, numkeys, *keys_and_args):  # type: ignore[no-untyped-def, override]
            if WAITING_RUNS_KEY in keys_and_args[:numkeys]:
                self.late_step()
            return super().eval(script, numkeys, *keys_and_args)

    racing = Racing(connection_pool=redis_client.connection_pool)
    later = redis_client.time()[0] + settings.resend_after + 1
    assert sweep(racing, settings, now=later).resent == 0
    assert late == [2]  # the follow-up was queued
    assert redis_client.zscore(WAITING_RUNS_KEY, ref.run_id) is not None
    assert sent(redis_client, settings) == [("b", ref.run_id)]
    redis_client.delete(settings.queue)  # its task is lost: the sweeper sends it again
    assert sweep(redis_client, settings, now=redis_client.time()[0] + settings.resend_after + 1).resent == 1
    assert sent(redis_client, settings) == [("b", ref.run_id)]


def test_worker_with_embedded_beat_distills_an_abandoned_run(tmp_path: Path, embed_model_path: Path,
                                                             openai_server: FakeOpenAI) -> None:
    """`celery -A lessonbank.workers worker -B` on one node: the beat's sweeper finds the run, the pool distills it."""
    server = RedisServer(tmp_path / "redis").start()
    queue = f"sweep-{uuid.uuid4().hex[:6]}"
    env = worker_env(server.url, queue, tmp_path / "data", openai_server.url, embed_model_path,
                     sweep_interval=1, idle_timeout=2)
    lesson = ("failure", "The export job dies silently when the disk is full.")
    openai_server.script(Reply(content=lessons_json(lesson)))
    client = server.client()
    run_id = write_run(client, "b", state="open", last_activity=time.time() - 60)
    worker = CeleryWorker(env, queue, tmp_path / "worker.log", extra=["-B"])
    try:
        worker.start()
        deadline = time.monotonic() + 30
        while run_state(client, run_id).get("state") != "distilled" and time.monotonic() < deadline:
            time.sleep(0.2)
        state = run_state(client, run_id)
        assert state["state"] == "distilled", worker.log()[-3000:]
        assert state["outcome"] == "abandoned"
        prompt = openai_server.chat_requests()[0]["messages"][1]["content"]
        assert "Recorded outcome: abandoned" in prompt
    finally:
        worker.stop()
        server.stop()
