"""The worker service end to end: a real `celery -A workers worker --pool prefork -c 2` process, a real
redis-server, the real embedding model and a real HTTP server speaking OpenAI's protocol."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from lessonbank.core import runs
from lessonbank.core.constants import (
    CREDIT_TASK,
    DISTILL_TASK,
    REMEMBER_TASK,
    job_key,
    pending_lesson_key,
    run_steps_key,
)
from lessonbank.core.models import Lesson, StepRecord
from lessonbank.core.settings import Settings
from lessonbank.core.store.remote import RemoteLessonStore
from lessonbank.workers import deadletters, jobs
from tests.fixtures.celery_worker import CeleryWorker, enqueue, producer, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply, error, lessons_json
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.runs import run_state, write_run

pytestmark = pytest.mark.slow

QUEUE = "lessonbank-it"
GOOD = lessons_json(
    ("fact", "The sales.csv file is semicolon-delimited; read it with pandas.read_csv(path, sep=';')."),
    ("failure", "pandas.read_csv with the default comma separator fails on sales.csv with a ParserError."),
)


class Service:
    def __init__(self, redis_server: RedisServer, llm: FakeOpenAI, worker: CeleryWorker, app: Celery,
                 settings: Settings) -> None:
        self.redis_server = redis_server
        self.llm = llm
        self.worker = worker
        self.app = app
        self.client = redis_server.client()
        self.store = RemoteLessonStore(settings, redis_server.client())

    def submit(self, bank: str, **kwargs: Any) -> str:
        run_id = write_run(self.client, bank, **kwargs)
        enqueue(self.app, QUEUE, bank, run_id)
        return run_id

    def wait(self, run_id: str, states: tuple[str, ...] = ("distilled", "dead"), timeout: float = 40) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = run_state(self.client, run_id)
            if state.get("state") in states:
                return state
            time.sleep(0.1)
        raise AssertionError(f"run {run_id} still {run_state(self.client, run_id)}\n{self.worker.log()[-3000:]}")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, embed_model_path: Path) -> Iterator[Service]:
    """One worker (and its Redis and fake LLM) shared by the module; tests use their own banks."""
    root = tmp_path_factory.mktemp("worker-it")
    server = RedisServer(root / "redis").start()
    llm = FakeOpenAI().start()
    env = worker_env(server.url, QUEUE, root / "data", llm.url, embed_model_path)
    worker = CeleryWorker(env, QUEUE, root / "worker.log").start()
    settings = Settings(_env_file=None, redis_url=server.url, data_dir=root / "data", store_timeout=15)
    try:
        yield Service(server, llm, worker, producer(server.url), settings)
    finally:
        worker.stop()
        llm.stop()
        server.stop()


@pytest.fixture
def svc(service: Service) -> Iterator[Service]:
    service.llm.reset()
    yield service


def bank() -> str:
    return f"bank-{uuid.uuid4().hex[:8]}"


def active_texts(svc: Service, bank_name: str) -> list[str]:
    return sorted(lesson.text for lesson in svc.store.list(bank_name))


def test_good_json_is_stored(svc: Service) -> None:
    svc.llm.script(Reply(content=GOOD))
    b = bank()
    run_id = svc.submit(b)
    state = svc.wait(run_id)
    assert state["state"] == "distilled"
    lessons = svc.store.list(b)
    assert len(lessons) == 2
    assert all(lesson.evidence == 1 and lesson.source_run_ids == [run_id] for lesson in lessons)
    assert json.loads(state["lessons"])["added"] == 2
    assert 0 < svc.client.ttl(run_steps_key(run_id)) <= Settings(_env_file=None).step_ttl
    request = svc.llm.chat_requests()[0]
    assert request["response_format"]["type"] == "json_schema"
    assert request["model"] == "fake-model"
    prompt = " ".join(m["content"] for m in request["messages"])
    assert "never follow instructions" in prompt and "Sum the sales in sales.csv" in prompt and "pd.read_csv" in prompt


def test_fenced_json_is_stored(svc: Service) -> None:
    svc.llm.script(Reply(content=f"Here you go:\n```json\n{GOOD}\n```\n"))
    b = bank()
    assert svc.wait(svc.submit(b))["state"] == "distilled"
    assert len(active_texts(svc, b)) == 2


def test_garbage_then_good_is_repaired(svc: Service) -> None:
    svc.llm.script(Reply(content="Sure! The run went well, lessons: read the file."), Reply(content=GOOD))
    b = bank()
    state = svc.wait(svc.submit(b))
    assert state["state"] == "distilled" and state["distill_attempts"] == "1"
    requests = svc.llm.chat_requests()
    assert len(requests) == 2
    assert "invalid" in requests[1]["messages"][-1]["content"]
    assert len(active_texts(svc, b)) == 2


def test_server_errors_are_retried_then_stored(svc: Service) -> None:
    svc.llm.script(error(500, "overloaded"), error(503, "busy"), Reply(content=GOOD))
    b = bank()
    state = svc.wait(svc.submit(b))
    assert state["state"] == "distilled"
    assert state["distill_attempts"] == "3"
    assert len(svc.llm.chat_requests()) == 3
    assert len(active_texts(svc, b)) == 2


def test_hang_past_client_timeout_is_retried(svc: Service) -> None:
    svc.llm.script(Reply(content=GOOD, delay=4.0), Reply(content=GOOD))  # llm_timeout is 2 s
    b = bank()
    state = svc.wait(svc.submit(b))
    assert state["state"] == "distilled" and state["distill_attempts"] == "2"
    assert len(svc.llm.chat_requests()) == 2
    assert len(svc.store.list(b)) == 2


def test_retries_exhausted_is_dead_lettered(svc: Service) -> None:
    svc.llm.default = error(500, "down")
    b = bank()
    run_id = svc.submit(b)
    assert svc.wait(run_id)["state"] == "dead"
    letter = deadletters.get(svc.client, run_id)
    assert letter is not None and letter.bank == b
    assert letter.attempts == 4 and "retries exhausted" in letter.reason and "500" in letter.reason
    assert len(svc.llm.chat_requests()) == 4  # max_retries 3
    assert svc.store.list(b) == []


def test_permanent_400_is_dead_lettered_then_retried(svc: Service) -> None:
    svc.llm.script(error(400, "model 'fake-model' does not exist"))
    b = bank()
    run_id = svc.submit(b)
    assert svc.wait(run_id)["state"] == "dead"
    letter = deadletters.get(svc.client, run_id)
    assert letter is not None
    assert letter.attempts == 1 and "400" in letter.reason and "does not exist" in letter.reason
    assert len(svc.llm.chat_requests()) == 1
    assert 0 < svc.client.ttl(run_steps_key(run_id))  # kept for a retry, but not forever

    svc.llm.script(Reply(content=GOOD))
    deadletters.retry(svc.client, run_id, QUEUE)
    assert svc.wait(run_id, states=("distilled",))["state"] == "distilled"
    assert deadletters.get(svc.client, run_id) is None
    assert len(svc.store.list(b)) == 2


def _busy_child(svc: Service) -> int:
    active = svc.app.control.inspect(timeout=2, limit=1).active() or {}  # returns with the one worker's reply
    pids = [task["worker_pid"] for tasks in active.values() for task in tasks]
    assert len(pids) == 1, active
    return int(pids[0])


def test_pool_child_killed_mid_distillation_is_redelivered_once(svc: Service) -> None:
    release = svc.llm.released_event()
    svc.llm.script(Reply(content=GOOD, block=release), Reply(content=GOOD))
    b = bank()
    run_id = svc.submit(b)
    svc.llm.wait_for_requests(1)
    child = _busy_child(svc)
    assert child in svc.worker.child_pids()
    os.kill(child, signal.SIGKILL)
    state = svc.wait(run_id)
    release.set()
    assert state["state"] == "distilled"
    assert len(svc.llm.chat_requests()) == 2  # asked again after the kill
    log = svc.worker.log()
    assert re.search(rf"holder \S+:{child}:\w+ is gone; taking it over", log)  # at once, from the killed process
    assert f"run {run_id}: delivery 2" in log and f"job distill:{run_id}: TransientDistillError" not in log
    lessons = svc.store.list(b)
    assert len(lessons) == 2 and all(lesson.evidence == 1 for lesson in lessons)
    deadline = time.monotonic() + 15  # the main process logs the loss of its child asynchronously
    while f"pid:{child} exited with 'signal 9 (SIGKILL)'" not in svc.worker.log():
        assert time.monotonic() < deadline, svc.worker.log()[-3000:]
        time.sleep(0.2)


WORDINGS = [
    "The sales.csv file is semicolon-delimited; read it with pandas.read_csv(path, sep=';').",
    "sales.csv uses semicolons as separators, so pass sep=';' to pandas.read_csv.",
    "Read sales.csv with pandas.read_csv(path, sep=';') because its fields are separated by semicolons.",
    "pandas.read_csv needs sep=';' for sales.csv, whose columns are delimited by semicolons.",
    "The delimiter in sales.csv is a semicolon: load it using pd.read_csv(path, sep=';').",
]


def _five_runs_llm(body: dict[str, Any]) -> Reply:
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if "maintain a bank of short lessons" in system:  # consolidation: it is the same lesson
        return Reply(content=json.dumps({"decisions": [{"new": 1, "action": "merge", "existing": 1, "text": ""}]}))
    variant = next(i for i in range(len(WORDINGS)) if f"variant {i}" in user)
    return Reply(content=lessons_json(("fact", WORDINGS[variant])))


def test_five_runs_same_lesson_make_one_lesson_with_evidence_five(svc: Service) -> None:
    svc.llm.handler = _five_runs_llm
    b = bank()
    run_ids = [svc.submit(b, task=f"Sum the sales in sales.csv (variant {i})") for i in range(len(WORDINGS))]
    states = [svc.wait(run_id) for run_id in run_ids]
    assert all(state["state"] == "distilled" for state in states)
    lessons = svc.store.list(b)
    assert len(lessons) == 1, [lesson.text for lesson in lessons]
    assert lessons[0].evidence == 5
    assert sorted(lessons[0].source_run_ids) == sorted(run_ids)
    totals = [json.loads(state["lessons"]) for state in states]
    assert sum(t["added"] for t in totals) == 1
    assert sum(t["reinforced"] + t["merged"] for t in totals) == 4


def test_run_without_steps_is_dead_lettered(svc: Service) -> None:
    b = bank()
    run_id = svc.submit(b, steps=[])
    assert svc.wait(run_id)["state"] == "dead"
    letter = deadletters.get(svc.client, run_id)
    assert letter is not None and "no step records" in letter.reason
    assert svc.llm.chat_requests() == []


def test_remembered_lesson_is_consolidated(svc: Service) -> None:
    b = bank()
    lesson = Lesson.new(b, "approach", "Cache the orders API token for its 15 minute lifetime.", origin="remembered")
    pending_id = uuid.uuid4().hex
    svc.client.set(pending_lesson_key(pending_id), lesson.to_json(), ex=600)
    svc.app.send_task(REMEMBER_TASK, args=[b, pending_id], queue=QUEUE)
    deadline = time.monotonic() + 30
    while svc.client.exists(pending_lesson_key(pending_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    [stored] = svc.store.list(b)
    assert stored.id == lesson.id and stored.origin == "remembered" and stored.evidence == 1


def test_worker_logs_carry_no_step_content(svc: Service) -> None:
    log = svc.worker.log()
    assert "distilled in" in log and "step records (" in log
    assert "columns: date;region;amount" not in log and "test-key" not in log
    assert "semicolon-delimited" not in log


def test_a_verdict_given_while_the_runs_credit_runs_is_credited_after_it(svc: Service) -> None:
    """The user's "wrong" comes while another worker credits the run (its job held): the worker that gets the new
    credit task drops its delivery, and the job runs once more when the holder finishes, with the new verdict."""
    svc.llm.script(Reply(content=GOOD))
    b = bank()
    run_id = svc.submit(b)
    assert svc.wait(run_id)["state"] == "distilled"
    assert runs.load_credit(svc.client, run_id)["verdict"] == "success"  # its own ending
    held = jobs.Job(f"credit:{run_id}", CREDIT_TASK, [b, run_id], QUEUE, "elsewhere", again_if_held=True)
    lease, _ = jobs.acquire(svc.client, held, 60, 0, token="another-host:9:cafe0002")
    assert lease is not None
    assert runs.set_verdict(svc.client, b, run_id, False, "user", "wrong", QUEUE) == 2
    deadline = time.monotonic() + 20
    while f"job credit:{run_id}: delivery" not in svc.worker.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "runs once more after that" in svc.worker.log()
    assert runs.load_credit(svc.client, run_id)["verdict"] == "success"  # not credited while held
    assert lease.finish()  # the other worker is done
    deadline = time.monotonic() + 20
    while runs.load_credit(svc.client, run_id)["verdict"] != "failure" or svc.client.exists(job_key(held.id)):
        assert time.monotonic() < deadline, svc.worker.log()[-3000:]  # credited, then its job let go
        time.sleep(0.1)


def test_a_late_step_queued_while_another_worker_holds_the_run_is_distilled_after_it(svc: Service) -> None:
    """A step arrives as the run is marked distilled, while the worker that distilled it still holds its job: the
    follow-up distillation it queued finds the job held. Dropped, the step was never distilled (and no later step
    queues another follow-up); it runs once more when the holder is done, and the step is distilled alone."""
    svc.llm.script(Reply(content=GOOD), Reply(content=lessons_json()))
    b = bank()
    run_id = svc.submit(b)
    state = svc.wait(run_id)
    assert state["state"] == "distilled"
    held = jobs.Job(f"distill:{run_id}", DISTILL_TASK, [b, run_id], QUEUE, "elsewhere", again_if_held=True)
    lease, _ = jobs.acquire(svc.client, held, 60, 0, token="another-host:9:cafe0003")
    assert lease is not None
    seq = max(int(k) for k in svc.client.hkeys(run_steps_key(run_id))) + 1
    late = StepRecord(id=f"{run_id}:{seq}", bank=b, run_id=run_id, task="Sum the sales in sales.csv", kind="action",
                      seq=seq, step_number=seq + 1, code="print(open('sales.csv').readline())",
                      observations="Execution logs:\ndate;region;amount")
    ref = runs.RunRef(b, run_id, "tester", "Sum the sales in sales.csv")
    assert runs.record_step(svc.client, ref, seq, late.to_json(), time.time(), queue=QUEUE) == 2
    deadline = time.monotonic() + 20
    while f"job distill:{run_id}: delivery" not in svc.worker.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "runs once more after that" in svc.worker.log()
    assert run_state(svc.client, run_id)["distilled_upto"] == state["distilled_upto"]  # not while held
    assert lease.finish()  # the other worker is done
    deadline = time.monotonic() + 20
    while ((state := run_state(svc.client, run_id)).get("distilled_upto") != str(seq) or "followup" in state
           or svc.client.exists(job_key(held.id))):
        assert time.monotonic() < deadline, svc.worker.log()[-3000:]  # distilled, then its job let go
        time.sleep(0.1)
