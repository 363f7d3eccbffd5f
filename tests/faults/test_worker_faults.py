"""Workers SIGKILLed in the middle of a distillation, and one run delivered twice: it counts once.

The kill lands at the worst moment: the run's first lesson is already in the bank, the LLM's output is
checkpointed, and the worker is waiting for the consolidation decision about its second lesson (which
resembles a lesson an earlier run left). The redelivered task must not add, nor reinforce, twice.

The broker's visibility timeout is an hour here, as in production: a run comes back only through its
lease (``LESSONBANK_LEASE_TIMEOUT``, 3 s here), and the suite measures how long that takes.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lessonbank.core.constants import DISTILL_TASK, JOBS_DUE_KEY, job_key
from lessonbank.core.publish import publish
from tests.faults.conftest import Report
from tests.faults.helpers import Service, deliveries, duplicate_lessons, wait_until
from tests.fixtures.celery_worker import CeleryWorker
from tests.fixtures.openai_server import Reply, lessons_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

QUEUE = "faults-worker"
LEASE = 3
SEED = "The sales.csv file is semicolon-delimited; read it with pandas.read_csv(path, sep=';')."
RELATED = "The delimiter in sales.csv is a semicolon: load it using pd.read_csv(path, sep=';')."  # cosine 0.87
NEW = "The orders API returns its results in pages; keep asking for pages until one comes back empty."
DECIDE_MARKER = "maintain a bank of short lessons"


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, embed_model_path: Path) -> Iterator[Service]:
    service = Service(
        tmp_path_factory.mktemp("faults-worker"), embed_model_path, QUEUE, concurrency=1,
        task_soft_time_limit=6, task_time_limit=8, visibility_timeout=3600, distill_lock_timeout=3,
        lease_timeout=LEASE,
    ).start()
    try:
        yield service
    finally:
        service.stop()


class Llm:
    """Distills the seed run to SEED and the second run to NEW + RELATED; blocks the first decision."""

    def __init__(self, svc: Service) -> None:
        self.release = svc.llm.released_event()
        self.decisions = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        system = body["messages"][0]["content"]
        user = body["messages"][-1]["content"]
        if DECIDE_MARKER in system:
            with self.lock:
                self.decisions += 1
                first = self.decisions == 1
            merge = json.dumps({"decisions": [{"new": 1, "action": "merge", "existing": 1, "text": ""}]})
            return Reply(content=merge, block=self.release if first else None)
        if "seed run" in user:
            return Reply(content=lessons_json(("fact", SEED)))
        return Reply(content=lessons_json(("fact", NEW), ("fact", RELATED)))


def distill_requests(svc: Service, task: str) -> int:
    return sum(1 for r in svc.requests_for(task) if DECIDE_MARKER not in r["messages"][0]["content"])


def decide_requests(svc: Service) -> int:
    return sum(1 for r in svc.llm.chat_requests() if DECIDE_MARKER in r["messages"][0]["content"])


def job_seen(svc: Service, run_id: str) -> str:
    """What a failed wait for the run's takeover saw: its deliveries, its job, and the worker's log lines about it."""
    job = f"distill:{run_id}"
    fields = {k.decode(): v.decode() for k, v in svc.client.hgetall(job_key(job)).items()}
    fields.pop("args", None)
    log = svc.worker.log() if svc.worker is not None else ""
    lines = [line for line in log.splitlines() if run_id in line or "WorkerLost" in line or "exited" in line]
    return (f"deliveries={deliveries(svc.client, run_id)} job={fields} due={svc.client.zscore(JOBS_DUE_KEY, job)} "
            f"redis_time={svc.client.time()[0]} queued={svc.client.llen(QUEUE)}; worker log about it:\n"
            + "\n".join(lines[-20:]))


@pytest.mark.parametrize("kill", ["pool child", "whole worker"])
def test_killed_mid_consolidation_counts_once(svc: Service, kill: str, report: Report) -> None:
    bank = f"killed-{kill.replace(' ', '-')}"
    svc.llm.reset()
    llm = Llm(svc)
    svc.llm.handler = llm
    seed_run = svc.submit(bank, task="Sum the sales (seed run)")
    assert svc.wait(seed_run)["state"] == "distilled"

    task = f"Sum the sales and the orders ({kill})"
    run_id = svc.submit(bank, task=task)
    wait_until(lambda: decide_requests(svc) == 1, 30, "the consolidation decision request")
    # the decision call comes before the bank's lock and any write: the kill finds nothing half-written
    assert [lesson.text for lesson in svc.lessons(bank)].count(NEW) == 0
    worker = svc.worker
    assert worker is not None and worker.process is not None
    children = worker.child_pids()
    assert len(children) == 1 and deliveries(svc.client, run_id) == 1
    killed_at = time.monotonic()
    if kill == "pool child":
        # The main process requeues the message, whose next delivery takes the dead process's job over at once;
        # or, should it come late (a busy host), the job's lease lapses first: a keeper sends the run again, or
        # the requeued delivery takes the lapsed lease over itself. Each of the three says so in the log.
        os.kill(children[0], signal.SIGKILL)
        taken_over: tuple[str, ...] = ("is gone; taking it over", "lapsed")
    else:
        for pid in [*children, worker.process.pid]:
            os.kill(pid, signal.SIGKILL)
        worker.process.wait(10)
        worker.process = None
        svc.start_worker()  # as a supervisor would; the message itself stays with the dead worker for an hour
        taken_over = ("lapsed",)
    wait_until(lambda: deliveries(svc.client, run_id) >= 2, 60, "the run's next delivery", interval=0.02,
               seen=lambda: job_seen(svc, run_id))
    redelivered = time.monotonic() - killed_at
    assert svc.worker is not None
    wait_until(lambda: any(line in svc.worker.log() for line in taken_over), 60, f"one of {taken_over} in the log",
               seen=lambda: job_seen(svc, run_id))
    llm.release.set()

    state = svc.wait(run_id)
    assert state["state"] == "distilled" and state["distill_attempts"] == "2"
    assert distill_requests(svc, task) == 1  # the second attempt reused the checkpointed LLM output
    assert decide_requests(svc) == 2  # the decision was the one thing left to do
    lessons = {lesson.text: lesson for lesson in svc.lessons(bank, include_inactive=True)}
    assert set(lessons) == {SEED, NEW}  # nothing added twice, no merged copy
    assert lessons[SEED].evidence == 2 and lessons[SEED].source_run_ids == [seed_run, run_id]
    assert lessons[NEW].evidence == 1 and lessons[NEW].source_run_ids == [run_id]
    assert sum(lesson.evidence for lesson in lessons.values()) == 3  # one per (run, lesson) contribution
    report(f"{kill} SIGKILLed mid-consolidation", faults=1, runs=1, deliveries=deliveries(svc.client, run_id),
           duplicate_tasks=deliveries(svc.client, run_id) - int(state["distill_attempts"]),
           llm_calls=distill_requests(svc, task), duplicate_lessons=duplicate_lessons(svc, bank),
           redelivery_s=round(redelivered, 1))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_the_main_process_killed_alone_leaves_no_child_holding_the_store(svc: Service, report: Report) -> None:
    """The worker's main process owns the embedded store (and the embedding model: the process an OOM killer
    picks). SIGKILLed alone, its pool children, forked after it opened the store and holding its files, exit
    too: a restarted worker owns the store at once and distills."""
    bank = "main-killed-alone"
    svc.llm.reset()
    svc.llm.handler = lambda body: Reply(content=lessons_json(("fact", SEED)))
    worker = svc.worker
    assert worker is not None and worker.process is not None
    children = worker.child_pids()
    assert children
    killed_at = time.monotonic()
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.wait(10)
    worker.process = None
    wait_until(lambda: not any(alive(pid) for pid in children), 60, "the pool children to exit")
    orphaned = time.monotonic() - killed_at
    started = time.monotonic()
    restarted = svc.start_worker()  # waits for "serving the lesson store": the path was free
    owned = time.monotonic() - started
    assert "not serving the lesson store" not in restarted.log()
    run_id = svc.submit(bank, task="Sum the sales (main process killed alone)")
    assert svc.wait(run_id)["state"] == "distilled"
    assert [lesson.text for lesson in svc.lessons(bank)] == [SEED]
    report(f"worker main process SIGKILLed alone (children gone in {orphaned:.1f}s, store owned again in "
           f"{owned:.1f}s)", faults=1, runs=1, llm_calls=len(svc.requests_for("main process killed alone")),
           duplicate_lessons=duplicate_lessons(svc, bank))


def test_a_run_delivered_twice_is_distilled_once(svc: Service, report: Report) -> None:
    """Two deliveries of one run at once, to two workers (as when the broker hands a message out again while
    the first worker still holds it), then a late third: one LLM call, the other deliveries dropped."""
    bank, task = "delivered-twice", "Sum the sales (delivered twice)"
    svc.llm.reset()
    release = svc.llm.released_event()
    lesson = "The sales export lists one row per order; sum the amount column."
    svc.llm.handler = lambda body: Reply(content=lessons_json(("fact", lesson)), block=release)
    assert svc.worker is not None
    second = CeleryWorker(svc.worker_env(), QUEUE, svc.root / "second-worker.log", concurrency=1).start(
        wait_for=("ready.",))
    try:
        run_id = svc.submit(bank, task=task)
        svc.llm.wait_for_requests(1)
        publish(svc.client, QUEUE, DISTILL_TASK, [bank, run_id])  # the same run, handed out again
        wait_until(lambda: "dropped" in svc.worker.log() + second.log(), 30, "the second delivery to be dropped")
        assert deliveries(svc.client, run_id) == 2 and len(svc.llm.chat_requests()) == 1
        release.set()
        state = svc.wait(run_id)
        before = deliveries(svc.client, run_id)  # 2, or 3 with the run once more that the held delivery asked for
        publish(svc.client, QUEUE, DISTILL_TASK, [bank, run_id])  # and once more, after it was distilled
        wait_until(lambda: deliveries(svc.client, run_id) > before and svc.client.llen(QUEUE) == 0, 60,
                   "the late delivery")
        wait_until(lambda: not svc.client.exists(job_key(f"distill:{run_id}")), 60, "the late job to end")
    finally:
        second.stop()
    assert state["state"] == "distilled" and state["distill_attempts"] == "1"
    assert len(svc.requests_for(task)) == 1  # one LLM call for three deliveries
    [stored] = [item for item in svc.lessons(bank) if item.recipe is None]
    assert stored.text == lesson and stored.evidence == 1 and stored.source_run_ids == [run_id]
    assert svc.client.zscore(JOBS_DUE_KEY, f"distill:{run_id}") is None
    delivered = deliveries(svc.client, run_id)
    report("one run delivered three times (twice at once, once late)", faults=2, runs=1, deliveries=delivered,
           duplicate_tasks=delivered - int(state["distill_attempts"]), llm_calls=len(svc.requests_for(task)),
           duplicate_lessons=stored.evidence - 1)
