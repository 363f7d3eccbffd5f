"""Jobs in hand, against a real redis-server: one holder at a time, leases that lapse when their holder dies,
retries kept as due times and published once, and the retry delay a 429 asks for."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from types import SimpleNamespace

import httpx
import openai
import pytest
import redis
from celery.exceptions import Reject, Retry

from lessonbank.core.constants import CREDIT_TASK, DISTILL_TASK, JOBS_DUE_KEY, job_key
from lessonbank.core.exceptions import PermanentDistillError, TransientDistillError
from lessonbank.core.runs import mark_dead
from lessonbank.core.settings import Settings
from lessonbank.workers import deadletters, jobs
from lessonbank.workers.llm import classify, retry_after
from tests.fixtures.recorded import queued_tasks
from tests.fixtures.redis_server import free_port
from tests.fixtures.runs import write_run

QUEUE = "jobs-q"


def job(run_id: str = "run-1", task_id: str = "task-1") -> jobs.Job:
    return jobs.Job(f"distill:{run_id}", DISTILL_TASK, ["bank", run_id], QUEUE, task_id)


def fields(client: redis.Redis, job_id: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in client.hgetall(job_key(job_id)).items()}


def messages(client: redis.Redis) -> list[dict]:
    return [json.loads(raw) for raw in reversed(client.lrange(QUEUE, 0, -1))]


def dead_pid() -> int:
    """The pid of a process of this host that has exited (and been reaped)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_one_holder_at_a_time(redis_client: redis.Redis) -> None:
    lease, _ = jobs.acquire(redis_client, job(), 60, 0)
    assert lease is not None and lease.retries == 0
    again, holder = jobs.acquire(redis_client, job(task_id="task-2"), 60, 0)
    assert again is None and holder == lease.token  # a live holder (this process, mid-task): dropped
    foreign, holder = jobs.acquire(redis_client, job(), 60, 0, token="other-host:1:abcd")
    assert foreign is None and holder == lease.token
    assert lease.finish()
    assert redis_client.exists(job_key(job().id)) == 0 and redis_client.zscore(JOBS_DUE_KEY, job().id) is None
    assert publish(redis_client) == 0 and messages(redis_client) == []


def publish(client: redis.Redis) -> int:
    return jobs.publish_due(client)


def test_a_job_delivered_while_held_runs_once_more_if_it_asks_to(redis_client: redis.Redis) -> None:
    """A run's credit reads the run's verdict: a verdict given while its credit runs queues a delivery that finds
    the job held. Dropped, the new verdict would never be credited; the job runs once more instead, once."""
    credit = jobs.Job("credit:run-1", CREDIT_TASK, ["bank", "run-1"], QUEUE, "task-1", again_if_held=True)
    lease, _ = jobs.acquire(redis_client, credit, 60, 0)
    assert lease is not None
    for task_id in ("task-2", "task-3"):  # two verdicts meanwhile: one more run reads both
        dropped, holder = jobs.acquire(redis_client, dataclasses.replace(credit, task_id=task_id), 60, 0)
        assert dropped is None and holder == lease.token
    assert lease.finish()
    state = fields(redis_client, credit.id)
    assert "holder" not in state and state["retries"] == "0" and redis_client.zscore(JOBS_DUE_KEY, credit.id) == 0
    assert publish(redis_client) == 1 and publish(redis_client) == 0
    assert queued_tasks(redis_client, QUEUE) == [(CREDIT_TASK, ["bank", "run-1"])]
    assert messages(redis_client)[0]["headers"]["retries"] == 0
    again, _ = jobs.acquire(redis_client, credit, 60, 0)  # the run once more: nothing asked meanwhile
    assert again is not None and again.retries == 0 and again.finish()
    assert redis_client.exists(job_key(credit.id)) == 0 and publish(redis_client) == 0
    failing, _ = jobs.acquire(redis_client, credit, 60, 0)  # failed for good: a delivery meanwhile changes nothing
    assert failing is not None and jobs.acquire(redis_client, credit, 60, 0)[0] is None
    assert failing.finish(done=False) and redis_client.exists(job_key(credit.id)) == 0 and publish(redis_client) == 0


def test_a_holder_that_died_on_this_host_is_taken_over_at_once(redis_client: redis.Redis) -> None:
    """A pool process killed mid-task: Celery requeues the message at once; its next delivery must not wait
    for the lease to lapse. The lost attempt counts as a retry."""
    gone = f"{jobs.socket.gethostname()}:{dead_pid()}:dead0001"
    first, _ = jobs.acquire(redis_client, job(), 60, 0, token=gone)
    assert first is not None
    lease, holder = jobs.acquire(redis_client, job(), 60, 0)
    assert lease is not None and holder == "" and lease.retries == 1
    assert fields(redis_client, job().id)["holder"] == lease.token
    assert not first.finish()  # the dead holder's late word changes nothing
    assert lease.finish()


def test_a_dead_holder_whose_lease_lapsed_before_its_next_delivery_is_taken_over_in_the_log(
        redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """On a busy host the requeued delivery of a killed pool process's task can come after the lease lapsed but
    before any keeper sent the job again: it takes the job at once, and the log says whose lease it took over."""
    gone = f"{jobs.socket.gethostname()}:{dead_pid()}:dead0002"
    first, _ = jobs.acquire(redis_client, job(), 60, 0, token=gone)
    assert first is not None
    redis_client.zadd(JOBS_DUE_KEY, {job().id: 0})  # the lease lapsed; no keeper has looked yet
    with caplog.at_level("INFO", logger=jobs.__name__):
        lease, holder = jobs.acquire(redis_client, job(), 60, 0)
    assert lease is not None and holder == "" and lease.retries == 1
    assert [r.getMessage() for r in caplog.records] == [f"job {job().id}: the lease of {gone} lapsed; taken over "
                                                        "(retry 1)"]
    assert publish(redis_client) == 0 and lease.finish()
    caplog.clear()
    with caplog.at_level("INFO", logger=jobs.__name__):  # a job nobody held: taken without a word
        fresh, _ = jobs.acquire(redis_client, job(), 60, 0)
    assert fresh is not None and caplog.records == [] and fresh.finish()


def test_a_holder_whose_pid_another_process_was_given_is_gone() -> None:
    """A busy host hands a dead holder's pid to a new process: the start time in the token tells them apart."""
    host = jobs.socket.gethostname()
    with subprocess.Popen(["sleep", "60"]) as other:
        try:
            started = jobs._stat(other.pid)
            assert started is not None
            assert not jobs.holder_gone(f"{host}:{other.pid}:{started[1]}_beef0001")  # the holder itself, alive
            assert jobs.holder_gone(f"{host}:{other.pid}:{int(started[1]) + 1}_beef0001")  # its pid, reused
            assert not jobs.holder_gone(f"{host}:{other.pid}:beef0001")  # a token without a start time
        finally:
            other.kill()
    assert jobs.new_token().split(":")[2].split("_")[0] == jobs._stat(jobs.os.getpid())[1]  # type: ignore[index]


def test_a_foreign_holder_is_waited_out_then_taken_over(redis_client: redis.Redis,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    abroad, _ = jobs.acquire(redis_client, job(), 0.3, 0, token="another-host:77:beef0001")
    assert abroad is not None
    assert jobs.acquire(redis_client, job(), 60, 0)[0] is None  # alive as far as anyone here can tell
    time.sleep(0.4)  # the lease lapses: nobody renewed it
    with caplog.at_level("WARNING", logger=jobs.__name__):
        lease, _ = jobs.acquire(redis_client, job(), 60, 0)
    assert lease is not None and lease.retries == 1
    assert "the lease of another-host:77:beef0001 lapsed; taken over" in caplog.text
    assert abroad.renew() == 0  # the old holder learns it lost the job


def test_a_retry_is_a_due_time_published_once_with_its_count(redis_client: redis.Redis) -> None:
    lease, _ = jobs.acquire(redis_client, job(), 60, 0)
    assert lease is not None and lease.retry(0.5)
    state = fields(redis_client, job().id)
    assert "holder" not in state and state["retries"] == "1"
    assert publish(redis_client) == 0  # not due yet
    assert lease.renew() == 0 and "holder" not in fields(redis_client, job().id)  # a late renewal cannot re-take it
    time.sleep(0.6)
    assert publish(redis_client) == 1 and publish(redis_client) == 0
    [message] = messages(redis_client)
    assert message["headers"]["retries"] == 1 and message["headers"]["id"] == "task-1"  # one task, retried
    assert queued_tasks(redis_client, QUEUE) == [(DISTILL_TASK, ["bank", "run-1"])]
    assert redis_client.zscore(JOBS_DUE_KEY, job().id) is None
    again, _ = jobs.acquire(redis_client, job(), 60, 1)
    assert again is not None and again.retries == 1 and again.finish()


def test_publishing_is_once_however_many_keepers(redis_client: redis.Redis) -> None:
    for i in range(20):
        lease, _ = jobs.acquire(redis_client, job(f"run-{i}"), 60, 0)
        assert lease is not None and lease.retry(0)
    counts: list[int] = []
    threads = [threading.Thread(target=lambda: counts.append(publish(redis_client))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(counts) == 20 and redis_client.llen(QUEUE) == 20


def test_a_lapsed_lease_is_published_again_and_its_holder_if_alive_keeps_the_job(redis_client: redis.Redis) -> None:
    lease, _ = jobs.acquire(redis_client, job(), 0.2, 0)
    assert lease is not None
    time.sleep(0.3)  # e.g. Redis away longer than the lease: nobody could renew
    assert publish(redis_client) == 1
    [message] = messages(redis_client)
    assert message["headers"]["retries"] == 1  # a lost attempt counts
    assert lease.renew() == 2  # the holder is alive after all: it holds the job again...
    assert jobs.acquire(redis_client, job(), 60, 1)[0] is None  # ...and the new delivery is dropped
    assert lease.finish()


def test_renewing_keeps_a_job_held_past_its_lease(redis_client: redis.Redis) -> None:
    lease, _ = jobs.acquire(redis_client, job(), 0.4, 0)
    assert lease is not None
    with jobs.renewing(lease, 0.1):
        time.sleep(1.0)
        assert publish(redis_client) == 0
        assert jobs.acquire(redis_client, job(), 60, 0, token="another-host:5:feed0001")[0] is None
    assert lease.finish()


def test_keeper_publishes_due_retries(redis_client: redis.Redis, settings: Settings) -> None:
    lease, _ = jobs.acquire(redis_client, job(), 60, 0)
    assert lease is not None and lease.retry(0.2)
    keeper = jobs.Keeper(settings, redis_client, every=0.05).start()
    try:
        deadline = time.monotonic() + 10
        while redis_client.llen(QUEUE) == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        keeper.stop()
    assert queued_tasks(redis_client, QUEUE) == [(DISTILL_TASK, ["bank", "run-1"])]


# -- how long a retry waits -------------------------------------------------------------------------------


def rate_limited(headers: dict[str, str], status: int = 429) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://llm.test/v1/chat/completions")
    response = httpx.Response(status, headers=headers, request=request)
    kind = openai.RateLimitError if status == 429 else openai.InternalServerError
    return kind("slow down", response=response, body={"error": {"message": "slow down"}})


def test_retry_after_in_seconds_or_as_an_http_date() -> None:
    assert retry_after(rate_limited({"Retry-After": "7"})) == 7
    assert retry_after(rate_limited({"Retry-After": "1.5"})) == 1.5
    assert retry_after(rate_limited({"retry-after-ms": "2500", "Retry-After": "9"})) == 2.5
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 < (retry_after(rate_limited({"Retry-After": when})) or 0) <= 30
    past = format_datetime(datetime.now(UTC) - timedelta(seconds=30), usegmt=True)
    assert retry_after(rate_limited({"Retry-After": past})) == 0
    assert retry_after(rate_limited({"Retry-After": "soon"})) is None
    assert retry_after(rate_limited({})) is None
    assert retry_after(rate_limited({"Retry-After": "4"}, status=503)) == 4
    assert retry_after(rate_limited({"Retry-After": "4"}, status=500)) is None


def test_retry_after_is_found_behind_the_distill_error() -> None:
    error = rate_limited({"Retry-After": "12"})
    try:
        try:
            raise error
        except openai.APIStatusError as e:
            raise classify(e, 30) from e
    except TransientDistillError as distill_error:
        assert "(Retry-After 12s)" in str(distill_error)
        assert retry_after(distill_error) == 12
    assert retry_after(TransientDistillError("LLM call timed out after 2s")) is None


@pytest.mark.parametrize(("asked", "expected"), [("3", 3.0), ("3600", 5.0), ("0", 0.0)])
def test_retry_delay_honours_retry_after_capped_by_the_backoff_max(monkeypatch: pytest.MonkeyPatch, asked: str,
                                                                    expected: float) -> None:
    from lessonbank.workers import tasks

    monkeypatch.setattr(tasks, "settings", Settings(_env_file=None, retry_backoff=1, retry_backoff_max=5))
    error = rate_limited({"Retry-After": asked})
    chained = TransientDistillError("LLM answered 429")
    chained.__cause__ = error
    assert tasks.retry_delay(chained, 0) == expected
    assert all(0 <= tasks.retry_delay(TransientDistillError("x"), 4) <= 5 for _ in range(20))  # jittered backoff


# -- a task's delivery, in hand ---------------------------------------------------------------------------


class Delivery:
    """What ``in_hand`` reads of a Celery task: its request."""

    def __init__(self, retries: int = 0) -> None:
        self.request = SimpleNamespace(retries=retries, id="task-1", delivery_info={"routing_key": QUEUE})


@pytest.fixture
def in_hand(monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis) -> Callable[..., bool]:
    from lessonbank.workers import tasks

    monkeypatch.setattr(tasks, "settings", Settings(_env_file=None, retry_backoff=1, retry_backoff_max=1,
                                                    max_retries=2, lease_timeout=60))
    monkeypatch.setattr(tasks, "deps", lambda: SimpleNamespace(redis=redis_client))
    return tasks.in_hand


def test_done_work_ends_the_job(redis_client: redis.Redis, in_hand: Callable[..., bool]) -> None:
    ran: list[bool] = []
    assert in_hand(Delivery(), job(), lambda: ran.append(True)) and ran == [True]
    assert redis_client.exists(job_key(job().id)) == 0 and redis_client.zscore(JOBS_DUE_KEY, job().id) is None


def test_a_transient_error_is_a_retry_due_in_redis(redis_client: redis.Redis, in_hand: Callable[..., bool]) -> None:
    def fails() -> None:
        raise TransientDistillError("LLM answered 503: busy")

    with pytest.raises(Retry):
        in_hand(Delivery(), job(), fails)
    state = fields(redis_client, job().id)
    assert state["retries"] == "1" and "holder" not in state and redis_client.zscore(JOBS_DUE_KEY, job().id)
    with pytest.raises(TransientDistillError):  # the last allowed attempt fails too: raised, the job ends
        in_hand(Delivery(retries=2), job(), fails)
    assert redis_client.exists(job_key(job().id)) == 0


def test_a_permanent_error_ends_the_job(redis_client: redis.Redis, in_hand: Callable[..., bool]) -> None:
    def fails() -> None:
        raise PermanentDistillError("LLM rejected the request (400)")

    with pytest.raises(PermanentDistillError):
        in_hand(Delivery(), job(), fails)
    assert redis_client.exists(job_key(job().id)) == 0


def test_a_stopped_process_hands_its_job_back(redis_client: redis.Redis, in_hand: Callable[..., bool]) -> None:
    """A pool process terminated mid-task (SIGTERM becomes SystemExit): the job is due at once, for another."""
    def stopped() -> None:
        raise SystemExit(-15)

    with pytest.raises(SystemExit):
        in_hand(Delivery(), job(), stopped)
    assert "holder" not in fields(redis_client, job().id) and publish(redis_client) == 1


def test_a_held_job_drops_the_delivery(redis_client: redis.Redis, in_hand: Callable[..., bool]) -> None:
    lease, _ = jobs.acquire(redis_client, job(), 60, 0, token="another-host:9:cafe0001")
    assert lease is not None
    assert in_hand(Delivery(), job(), lambda: pytest.fail("ran while another worker holds the run")) is False


def test_a_delivery_that_cannot_reach_redis_goes_back_to_the_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    from lessonbank.workers import tasks

    refused = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)
    monkeypatch.setattr(tasks, "deps", lambda: SimpleNamespace(redis=refused))
    with pytest.raises(Reject) as rejected:
        tasks.in_hand(Delivery(), job(), lambda: pytest.fail("ran without its job"))
    assert rejected.value.requeue


def test_a_dead_letter_retried_gets_every_retry_again(redis_client: redis.Redis) -> None:
    """What is left of a dead-lettered run's job (its count of retries) goes with its letter."""
    run_id = write_run(redis_client, "bank")
    lease, _ = jobs.acquire(redis_client, job(run_id), 60, 5)
    assert lease is not None and lease.retry(3600)
    deadletters.add(redis_client, run_id, "bank", "retries exhausted (5)", 6)
    mark_dead(redis_client, run_id, 3600)
    deadletters.retry(redis_client, run_id, QUEUE)
    gone = job(run_id).id
    assert redis_client.exists(job_key(gone)) == 0 and redis_client.zscore(JOBS_DUE_KEY, gone) is None
    fresh, _ = jobs.acquire(redis_client, job(run_id), 60, 0)
    assert fresh is not None and fresh.retries == 0
