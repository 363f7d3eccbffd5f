"""Redis killed, frozen and restarted under a running agent and a running worker.

One worker service for the module: redis-server with AOF (so the queue and the runs survive a
SIGKILL), the fake OpenAI server, one ``celery -A workers worker`` owning the embedded store.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from smolagents import CodeAgent

from lessonbank.core.settings import Settings
from lessonbank.recorder import StepRecorder
from lessonbank.recorder.spool import spool_files
from tests.faults.helpers import Service, by_task, paced, records, seqs, step_count, wait_until
from tests.fixtures.openai_server import Reply, lessons_json
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code

pytestmark = pytest.mark.slow

QUEUE = "faults-redis"
STEPS = 20  # action steps; the last one calls final_answer
RECORDS = STEPS + 2  # + the final answer step + the run's end


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, embed_model_path: Path) -> Iterator[Service]:
    service = Service(tmp_path_factory.mktemp("faults-redis"), embed_model_path, QUEUE, appendonly=True).start()
    try:
        yield service
    finally:
        service.stop()


def recorder_for(svc: Service, bank: str) -> StepRecorder:
    settings: Settings = svc.settings.model_copy(update={"breaker_cooldown": 0.3})
    return StepRecorder(bank=bank, settings=settings)


def twenty_step_agent(recorder: StepRecorder, pace: float, fault_at: int, fault: Callable[[], None]) -> CodeAgent:
    replies = [code_reply(f"value_{i} = {i} * 2\nprint(value_{i})") for i in range(STEPS - 1)] + [final_code("done")]
    scripted = [paced(r, pace, before=fault if i == fault_at else None) for i, r in enumerate(replies)]
    return CodeAgent(tools=[], model=ScriptedModel(scripted), step_callbacks=recorder.step_callbacks,
                     verbosity_level=0, max_steps=STEPS + 5)


def lesson_texts(tag: str) -> tuple[str, str]:
    return (f"The {tag} report doubles every value before printing it.",
            f"Print each intermediate value of the {tag} report to check it.")


def two_lessons(tag: str) -> str:
    fact, approach = lesson_texts(tag)
    return lessons_json(("fact", fact), ("approach", approach))


def distilled_once(svc: Service, bank: str, run_id: str, tag: str) -> None:
    """The LLM's two lessons are in the bank, each from this one run (the workers may add a recipe of it)."""
    lessons = svc.lessons(bank)
    assert set(lesson_texts(tag)) <= {lesson.text for lesson in lessons}
    assert all(lesson.evidence == 1 and lesson.source_run_ids == [run_id] for lesson in lessons)


def test_redis_killed_mid_run_restarted_2s_later(svc: Service) -> None:
    """SIGKILL Redis at step 7 of 20, start it again 2 s later on the same port: all 22 records land once
    (the spool replays what Redis missed), the close enqueues one task, the run is distilled once."""
    bank, task = "redis-killed", "Double twenty values (killed Redis)."
    svc.llm.handler = by_task({task: [Reply(content=two_lessons("killed"))]})
    recorder = recorder_for(svc, bank)
    before_kill: list[int] = []
    restarted = threading.Event()

    def kill() -> None:
        assert recorder.flush()  # what was handed over is in Redis (the writer would have sent it within 100 ms)
        before_kill.append(step_count(svc.client, recorder.run_id(agent) or ""))
        svc.redis_server.kill()
        def restart() -> None:
            svc.redis_server.start()
            restarted.set()

        threading.Timer(2.0, restart).start()

    agent = twenty_step_agent(recorder, pace=0.25, fault_at=7, fault=kill)
    started = time.monotonic()
    assert recorder.run(agent, task) == "done"
    elapsed = time.monotonic() - started
    run_id = recorder.run_id(agent)
    assert run_id
    assert restarted.wait(10)
    assert elapsed < STEPS * 0.25 + 3, elapsed  # the outage cost the agent a few short timeouts at most

    assert before_kill == [7]  # Redis held steps 0-6 when it died; AOF kept them
    assert recorder.transport.spooled > 0  # steps taken while it was down went to the spool...
    assert recorder.flush() and spool_files(recorder.settings.resolved_spool_dir) == []  # ...and were replayed
    state = svc.wait(run_id)
    assert seqs(svc.client, run_id) == list(range(RECORDS))  # every record exactly once, in order
    kinds = [r.kind for r in records(svc.client, run_id)]
    assert kinds.count("action") == STEPS and kinds[-2:] == ["final", "run_end"]
    assert state["state"] == "distilled" and state["distill_attempts"] == "1"
    assert len(svc.requests_for(task)) == 1  # one distill task, one LLM call
    distilled_once(svc, bank, run_id, "killed")
    recorder.close()


def test_redis_frozen_10s_during_run(svc: Service) -> None:
    """SIGSTOP Redis for 10 s from step 5: the agent finishes at its own pace plus a bounded cost; after
    SIGCONT everything spooled is delivered once and the run is distilled once."""
    bank, task = "redis-frozen", "Double twenty values (frozen Redis)."
    svc.llm.handler = by_task({task: [Reply(content=two_lessons("frozen"))]})
    recorder = recorder_for(svc, bank)
    thawed = threading.Event()

    def freeze() -> None:
        svc.redis_server.freeze()
        def thaw() -> None:
            svc.redis_server.thaw()
            thawed.set()

        threading.Timer(10.0, thaw).start()

    pace = 0.1
    agent = twenty_step_agent(recorder, pace=pace, fault_at=5, fault=freeze)
    started = time.monotonic()
    try:
        assert recorder.run(agent, task) == "done"
        elapsed = time.monotonic() - started
        run_id = recorder.run_id(agent)
        assert run_id
        assert not thawed.is_set()  # the run ended while Redis was still frozen
    finally:
        thawed.wait(15)
    added = elapsed - STEPS * pace
    timeout = recorder.settings.redis_timeout
    # a hung Redis costs one timeout, then one per probe after each cooldown
    assert added < timeout * (1 + (STEPS * pace) / recorder.settings.breaker_cooldown) + 2.0, added

    wait_until(recorder.flush, 10, "the spool to be delivered after SIGCONT")
    state = svc.wait(run_id)
    assert seqs(svc.client, run_id) == list(range(RECORDS))
    assert state["state"] == "distilled" and state["distill_attempts"] == "1"
    assert len(svc.requests_for(task)) == 1
    distilled_once(svc, bank, run_id, "frozen")
    recorder.close()


def test_aof_restart_keeps_50_queued_tasks(svc: Service) -> None:
    """50 runs and their distill tasks wait in a queue no worker consumes; Redis is SIGKILLed and restarted;
    then the worker consumes the queue: all 50 are distilled, each exactly once."""
    bank, side_queue, task = "redis-aof", "faults-redis-side", "Sum the sales in sales.csv (AOF)"
    lesson = "The AOF sales files are semicolon-delimited; read them with pandas.read_csv(path, sep=';')."
    svc.llm.handler = by_task({task: [Reply(content=lessons_json(("fact", lesson)))]})
    run_ids = [svc.submit(bank, queue=side_queue, task=f"{task} #{i}") for i in range(50)]
    assert svc.client.llen(side_queue) == 50

    svc.restart_redis(down_for=0.5)
    assert svc.client.llen(side_queue) == 50  # the queue survived
    assert all(svc.state(run_id)["state"] == "closed" for run_id in run_ids)  # and so did the runs

    assert svc.worker is not None
    host = svc.worker.name.replace("%h", socket.gethostname())

    def consume() -> bool:
        replies = svc.app.control.add_consumer(side_queue, destination=[host], reply=True, timeout=2)
        return bool(replies)

    wait_until(consume, 30, "the worker to take the side queue after the restart", interval=0.5)
    states = svc.wait_all(run_ids, timeout=120)
    assert all(s["state"] == "distilled" for s in states.values())
    assert sum(int(s["distill_attempts"]) for s in states.values()) == 50
    assert svc.client.llen(side_queue) == 0
    [stored] = svc.lessons(bank)
    assert stored.evidence == 50 and sorted(stored.source_run_ids) == sorted(run_ids)
