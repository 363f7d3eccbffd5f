"""Workers SIGKILLed in the middle of a distillation: the run is redelivered and counts once.

The kill lands at the worst moment: the run's first lesson is already in the bank, the LLM's output is
checkpointed, and the worker is waiting for the consolidation decision about its second lesson (which
resembles a lesson an earlier run left). The redelivered task must not add, nor reinforce, twice.
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

from tests.faults.helpers import Service, wait_until
from tests.fixtures.openai_server import Reply, lessons_json

pytestmark = pytest.mark.slow

QUEUE = "faults-worker"
VISIBILITY = 10
SEED = "The sales.csv file is semicolon-delimited; read it with pandas.read_csv(path, sep=';')."
RELATED = "The delimiter in sales.csv is a semicolon: load it using pd.read_csv(path, sep=';')."  # cosine 0.87
NEW = "The orders API paginates with a next_cursor field; loop until it is null."
DECIDE_MARKER = "maintain a bank of short lessons"


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, embed_model_path: Path) -> Iterator[Service]:
    service = Service(
        tmp_path_factory.mktemp("faults-worker"), embed_model_path, QUEUE, concurrency=1,
        task_soft_time_limit=6, task_time_limit=8, visibility_timeout=VISIBILITY, distill_lock_timeout=3,
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


@pytest.mark.parametrize("kill", ["pool child", "whole worker"])
def test_killed_mid_consolidation_counts_once(svc: Service, kill: str) -> None:
    bank = f"killed-{kill.replace(' ', '-')}"
    svc.llm.reset()
    llm = Llm(svc)
    svc.llm.handler = llm
    seed_run = svc.submit(bank, task="Sum the sales (seed run)")
    assert svc.wait(seed_run)["state"] == "distilled"

    task = f"Sum the sales and the orders ({kill})"
    submitted = time.monotonic()
    run_id = svc.submit(bank, task=task)
    wait_until(lambda: decide_requests(svc) == 1, 30, "the consolidation decision request")
    assert [lesson.text for lesson in svc.lessons(bank)].count(NEW) == 1  # written before the kill
    worker = svc.worker
    assert worker is not None and worker.process is not None
    children = worker.child_pids()
    assert len(children) == 1
    if kill == "pool child":
        os.kill(children[0], signal.SIGKILL)  # the main process sees it and requeues the message
    else:
        for pid in [*children, worker.process.pid]:
            os.kill(pid, signal.SIGKILL)
        worker.process.wait(10)
        worker.process = None
        # A message taken by a dead worker becomes visible again after the visibility timeout.
        time.sleep(max(0.0, submitted + VISIBILITY + 0.5 - time.monotonic()))
        svc.start_worker()
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
