"""Redis killed, frozen, slowed and restarted under a running agent and a running worker.

One worker service for the module: redis-server with AOF (so the queue and the runs survive a
SIGKILL), the fake OpenAI server, one ``celery -A workers worker`` owning the embedded store. Redis's
``MONITOR`` feed counts what reached it: each step record sent, each distill task pushed. Faults are
injected and lifted at steps of the agent's run (events), not after timers.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from smolagents import CodeAgent
from smolagents.memory import ActionStep, FinalAnswerStep

from lessonbank.core import runs
from lessonbank.core.settings import Settings
from lessonbank.recorder import StepRecorder
from lessonbank.recorder.spool import spool_files
from tests.faults.conftest import Report
from tests.faults.helpers import (
    Monitor,
    Service,
    by_task,
    deliveries,
    duplicate_lessons,
    paced,
    records,
    seqs,
    step_count,
    wait_until,
)
from tests.fixtures.openai_server import Reply, lessons_json
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

QUEUE = "faults-redis"
STEPS = 20  # action steps; the last one calls final_answer
RECORDS = STEPS + 2  # + the final answer step + the run's end
AOF_WINDOW = 3.0  # seconds: everysec's second, plus the 2 s a write may wait for a slow fsync


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, embed_model_path: Path) -> Iterator[Service]:
    # An LLM call long enough to outlast a Redis restart and the worker's reconnection (2 s).
    service = Service(tmp_path_factory.mktemp("faults-redis"), embed_model_path, QUEUE, appendonly=True,
                      llm_timeout=10, task_soft_time_limit=30, task_time_limit=35, visibility_timeout=60,
                      resend_after=2).start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def monitor(svc: Service) -> Iterator[Monitor]:
    feed = Monitor(svc.redis_server.port).start()
    yield feed
    feed.stop()


def recorder_for(svc: Service, bank: str) -> StepRecorder:
    settings: Settings = svc.settings.model_copy(update={"breaker_cooldown": 0.3})
    return StepRecorder(bank=bank, settings=settings)


def twenty_step_agent(recorder: StepRecorder, faults: dict[int, Callable[[], None]], pace: float = 0.05,
                      callbacks: dict[Any, Any] | None = None) -> CodeAgent:
    """20 code steps; ``faults[i]`` runs as step i's model call starts."""
    replies = [code_reply(f"value_{i} = {i} * 2\nprint(value_{i})") for i in range(STEPS - 1)] + [final_code("done")]
    scripted = [paced(r, pace, before=faults.get(i)) for i, r in enumerate(replies)]
    return CodeAgent(tools=[], model=ScriptedModel(scripted), step_callbacks=callbacks or recorder.step_callbacks,
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
    assert duplicate_lessons(svc, bank) == 0


def resent(sends: Counter[int]) -> int:
    return sum(n - 1 for n in sends.values() if n > 1)


def test_redis_killed_mid_run_restarted_later(svc: Service, monitor: Monitor, report: Report) -> None:
    """SIGKILL Redis at step 7 of 20 and start it again at step 14: all 22 records land once (the spool
    replays what Redis missed), the close publishes one task, the run is distilled once."""
    bank, task = "redis-killed", "Double twenty values (killed Redis)."
    svc.llm.handler = by_task({task: [Reply(content=two_lessons("killed"))]})
    recorder = recorder_for(svc, bank)
    before_kill: list[int] = []

    def kill() -> None:
        assert recorder.flush()  # what was handed over is in Redis (the writer would have sent it within 100 ms)
        before_kill.append(step_count(svc.client, recorder.run_id(agent) or ""))
        svc.redis_server.kill()

    agent = twenty_step_agent(recorder, {7: kill, 14: svc.redis_server.start})
    assert recorder.run(agent, task) == "done"
    run_id = recorder.run_id(agent)
    assert run_id

    assert before_kill == [7]  # Redis held steps 0-6 when it died; AOF kept them
    assert recorder.transport.spooled > 0  # the steps taken while it was down went to the spool...
    assert recorder.flush() and spool_files(recorder.settings.resolved_spool_dir) == []  # ...and were replayed
    state = svc.wait(run_id)
    assert seqs(svc.client, run_id) == list(range(RECORDS))  # every record exactly once, in order
    kinds = [r.kind for r in records(svc.client, run_id)]
    assert kinds.count("action") == STEPS and kinds[-2:] == ["final", "run_end"]
    assert state["state"] == "distilled" and state["distill_attempts"] == "1"
    assert deliveries(svc.client, run_id) == 1 and monitor.published(QUEUE, run_id) == 1
    assert len(svc.requests_for(task)) == 1  # one distill task, one LLM call
    distilled_once(svc, bank, run_id, "killed")
    report("Redis SIGKILLed at step 7, restarted at step 14", faults=1, runs=1,
           records_lost=RECORDS - len(seqs(svc.client, run_id)), records_resent=resent(monitor.record_sends(run_id)),
           tasks_published=monitor.published(QUEUE, run_id), deliveries=deliveries(svc.client, run_id),
           duplicate_tasks=deliveries(svc.client, run_id) - int(state["distill_attempts"]),
           llm_calls=len(svc.requests_for(task)), duplicate_lessons=duplicate_lessons(svc, bank))
    recorder.close()


def test_redis_frozen_during_ten_steps(svc: Service, monitor: Monitor, report: Report) -> None:
    """SIGSTOP Redis at step 5, SIGCONT at step 15: the agent takes its ten steps meanwhile (their records
    go to the spool); after SIGCONT everything is delivered once and the run is distilled once."""
    bank, task = "redis-frozen", "Double twenty values (frozen Redis)."
    svc.llm.handler = by_task({task: [Reply(content=two_lessons("frozen"))]})
    recorder = recorder_for(svc, bank)
    frozen_at: list[int] = []

    def freeze() -> None:
        frozen_at.append(recorder.transport.spooled)
        svc.redis_server.freeze()

    try:
        agent = twenty_step_agent(recorder, {5: freeze, 15: svc.redis_server.thaw})
        assert recorder.run(agent, task) == "done"
    finally:
        svc.redis_server.thaw()
    run_id = recorder.run_id(agent)
    assert run_id and frozen_at == [0]
    assert recorder.transport.spooled >= 9  # steps 5-14 were taken while Redis was frozen

    wait_until(recorder.flush, 10, "the spool to be delivered after SIGCONT")
    state = svc.wait(run_id)
    assert seqs(svc.client, run_id) == list(range(RECORDS))
    assert state["state"] == "distilled" and state["distill_attempts"] == "1"
    assert deliveries(svc.client, run_id) == 1 and monitor.published(QUEUE, run_id) == 1
    assert len(svc.requests_for(task)) == 1
    distilled_once(svc, bank, run_id, "frozen")
    report("Redis SIGSTOPped from step 5 to step 15", faults=1, runs=1,
           records_lost=RECORDS - len(seqs(svc.client, run_id)), records_resent=resent(monitor.record_sends(run_id)),
           tasks_published=monitor.published(QUEUE, run_id), deliveries=deliveries(svc.client, run_id),
           duplicate_tasks=deliveries(svc.client, run_id) - int(state["distill_attempts"]),
           llm_calls=len(svc.requests_for(task)), duplicate_lessons=duplicate_lessons(svc, bank))
    recorder.close()


def test_latency_spike_during_the_close_publishes_one_task(svc: Service, monitor: Monitor, report: Report) -> None:
    """Redis stalls 600 ms just as the run's close is sent: Redis runs the close (and publishes the distill
    task) after the recorder gave up waiting, so the recorder spools the close and replays it later. The
    close and its publish are one script guarded by the run's ``enqueued`` field: the replay publishes
    nothing, and the run is delivered once, distilled once, with one LLM call."""
    bank, task = "redis-spike", "Double twenty values (latency spike)."
    svc.llm.handler = by_task({task: [Reply(content=two_lessons("spike"))]})
    recorder = recorder_for(svc, bank)
    thawed = threading.Event()

    def spike(_step: FinalAnswerStep, agent: CodeAgent) -> None:
        """Runs just before the recorder hands over the final answer and the close."""
        assert recorder.flush()  # every earlier record is in Redis: the close goes out in the next batch

        def thaw() -> None:
            svc.redis_server.thaw()
            thawed.set()

        svc.redis_server.freeze()
        threading.Timer(0.6, thaw).start()

    callbacks = {ActionStep: [recorder.step_callbacks[ActionStep]],
                 FinalAnswerStep: [spike, recorder.step_callbacks[FinalAnswerStep]]}
    try:
        agent = twenty_step_agent(recorder, {}, pace=0.0, callbacks=callbacks)
        assert recorder.run(agent, task) == "done"
    finally:
        assert thawed.wait(10)
    run_id = recorder.run_id(agent)
    assert run_id
    assert recorder.transport.spooled >= 2  # the final answer and the close timed out and went to the spool
    assert recorder.flush()
    state = svc.wait(run_id)
    closes = monitor.script_sends(runs.SCRIPTS["close"], run_id)
    assert len(closes) >= 2  # Redis ran the close when it woke up, and again from the spool
    assert monitor.published(QUEUE, run_id) == 1  # ...and pushed one distill task
    assert seqs(svc.client, run_id) == list(range(RECORDS))
    assert state["state"] == "distilled" and state["enqueued"] == "1"
    assert deliveries(svc.client, run_id) == 1 and len(svc.requests_for(task)) == 1
    distilled_once(svc, bank, run_id, "spike")
    report("Redis stalled 600 ms while the close was sent", faults=1, runs=1,
           records_lost=RECORDS - len(seqs(svc.client, run_id)), records_resent=resent(monitor.record_sends(run_id)),
           tasks_published=monitor.published(QUEUE, run_id), deliveries=deliveries(svc.client, run_id),
           duplicate_tasks=deliveries(svc.client, run_id) - int(state["distill_attempts"]),
           llm_calls=len(svc.requests_for(task)), duplicate_lessons=duplicate_lessons(svc, bank))
    recorder.close()


def test_redis_killed_while_a_run_is_distilled(svc: Service, report: Report) -> None:
    """SIGKILL Redis while the worker waits for the LLM's answer about a run, and start it again: the worker
    reconnects, the task in hand goes on (its lease and the run are in Redis's AOF), the answer is used once,
    and any copy of the task the broker hands out again finds the run held or done."""
    bank, task = "redis-killed-distilling", "Sum the sales (Redis killed while distilling)"
    release = svc.llm.released_event()
    svc.llm.handler = by_task({task: [Reply(content=two_lessons("distilling"), block=release)]})
    run_id = svc.submit(bank, task=task)
    wait_until(lambda: svc.requests_for(task), 30, "the distill request")
    time.sleep(AOF_WINDOW)  # the run on disk (appendfsync everysec): what the restart must keep (the LLM waits)
    assert svc.worker is not None
    log_mark = len(svc.worker.log())
    svc.restart_redis()
    wait_until(lambda: "Connected to " in svc.worker.log()[log_mark:], 60, "the worker to reconnect")
    release.set()
    assert "Unrecoverable error" not in svc.worker.log()

    state = svc.wait(run_id)
    assert state["state"] == "distilled" and state["distill_attempts"] == "1"
    assert len(svc.requests_for(task)) == 1  # the answer that arrived after the restart was used
    distilled_once(svc, bank, run_id, "distilling")
    wait_until(lambda: svc.client.llen(QUEUE) == 0, 30, "the queue to drain")
    delivered = deliveries(svc.client, run_id)
    report("Redis SIGKILLed during a distillation, restarted", faults=1, runs=1, deliveries=delivered,
           duplicate_tasks=delivered - int(state["distill_attempts"]), llm_calls=len(svc.requests_for(task)),
           duplicate_lessons=duplicate_lessons(svc, bank))


def test_aof_restart_keeps_50_queued_tasks(svc: Service, report: Report) -> None:
    """50 runs and their distill tasks wait in a queue no worker consumes; Redis is SIGKILLed and restarted;
    then the worker consumes the queue: all 50 are distilled, each exactly once."""
    bank, side_queue, task = "redis-aof", "faults-redis-side", "Sum the sales in sales.csv (AOF)"
    lesson = "The AOF sales files are semicolon-delimited; read them with pandas.read_csv(path, sep=';')."
    svc.llm.handler = by_task({task: [Reply(content=lessons_json(("fact", lesson)))]})
    run_ids = [svc.submit(bank, queue=side_queue, task=f"{task} #{i}") for i in range(50)]
    assert svc.client.llen(side_queue) == 50
    # appendfsync everysec (as in compose) fsyncs once a second and holds writes up to 2 s more while a busy disk
    # is still syncing (seen once with a benchmark running beside the suite: 22 of 50 left): what was queued
    # before that window is what must survive
    time.sleep(AOF_WINDOW)

    svc.restart_redis()
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
    assert [deliveries(svc.client, run_id) for run_id in run_ids] == [1] * 50
    assert svc.client.llen(side_queue) == 0
    [stored] = svc.lessons(bank)
    assert stored.evidence == 50 and sorted(stored.source_run_ids) == sorted(run_ids)
    report("Redis SIGKILLed with 50 distill tasks queued, restarted (AOF)", faults=1, runs=50,
           deliveries=sum(deliveries(svc.client, run_id) for run_id in run_ids),
           duplicate_tasks=sum(deliveries(svc.client, r) - int(states[r]["distill_attempts"]) for r in run_ids),
           llm_calls=len(svc.requests_for(task)),
           duplicate_lessons=duplicate_lessons(svc, bank))


class Timed:
    """The recorder's step callbacks, timed: what each costs the agent's thread (the final answer's includes the
    run's close, which waits until its records are in Redis or in the spool)."""

    def __init__(self, recorder: StepRecorder) -> None:
        self.steps: list[float] = []
        self.closes: list[float] = []
        for kind, callback in list(recorder.step_callbacks.items()):
            recorder.step_callbacks[kind] = self._timed(callback, self.closes if kind is FinalAnswerStep else
                                                        self.steps)

    @staticmethod
    def _timed(callback: Callable[..., Any], into: list[float]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return callback(*args, **kwargs)
            finally:
                into.append(time.perf_counter() - started)

        return timed


def test_a_frozen_redis_costs_one_run_the_store_timeout_and_later_runs_nothing(svc: Service, report: Report) -> None:
    """Redis SIGSTOPped between two runs of an agent with ``remember``: the first run waits at most
    ``LESSONBANK_STORE_TIMEOUT`` for its lessons, the next ones do not wait at all (Redis counts as not answering
    for a back-off period), each step callback and each close stays well under one store timeout (a third of it:
    a wide margin, so that a loaded machine's scheduling is not taken for a wait); once Redis answers again and the
    back-off is over, runs get their lessons again, and every record of every run reaches Redis."""
    import lessonbank
    from lessonbank.agent import AgentHook, lessons_given
    from lessonbank.core.models import Lesson
    from lessonbank.source import owner_state

    bank, lesson = "redis-frozen-lessons", "The frozen-lessons report doubles every value before printing it."
    svc.llm.handler = by_task({"frozen-lessons report": [Reply(content=two_lessons("frozen-lessons"))]})
    svc.store().upsert([Lesson.new(bank, "fact", lesson, origin="added")])
    settings = svc.settings.model_copy(update={"store_timeout": 6.0, "breaker_cooldown": 60.0})
    recorder = StepRecorder(bank=bank, settings=settings)
    timed = Timed(recorder)
    agent = CodeAgent(tools=[], model=ScriptedModel([], then=final_code("done")), verbosity_level=0)
    lessonbank.remember(agent, bank=bank, settings=settings, recorder=recorder)
    hook: AgentHook = agent._lessonbank_memory
    lookups: list[float] = []
    own_lookup = hook.lessons_for

    def lessons_for(task: str) -> Any:
        started = time.perf_counter()
        try:
            return own_lookup(task)
        finally:
            lookups.append(time.perf_counter() - started)

    hook.lessons_for = lessons_for  # type: ignore[method-assign]
    task = "Print the frozen-lessons report, doubling every value."
    run_ids, given = [], []

    def run() -> None:
        assert agent.run(task) == "done"
        run_ids.append(recorder.run_id(agent))
        given.append(lesson in lessons_given(agent))

    run()  # Redis answers: the owner's lessons are given
    svc.redis_server.freeze()
    try:
        for _ in range(3):
            run()
    finally:
        svc.redis_server.thaw()
    state = owner_state(settings)
    wait_until(lambda: time.monotonic() >= state.away_until, 120, "the back-off to end")
    run()  # one quick PING finds Redis again: lessons again
    assert recorder.flush(timeout=30)
    handed = len(timed.steps) + 2 * len(timed.closes)  # each step's record; a final answer's and its run's end
    lost = handed - sum(step_count(svc.client, run_id or "") for run_id in run_ids)
    print(f"\nRedis frozen: lessons lookup {lookups[1]:.2f} s in the first run, "
          f"{max(lookups[2:4]):.3f} s in the later ones (store timeout {settings.store_timeout:g} s); step "
          f"callbacks at most {max(timed.steps):.3f} s, closes at most {max(timed.closes[1:4]):.3f} s")
    assert given == [True, False, False, False, True]
    assert lookups[1] < 1.5 * settings.store_timeout  # one store timeout (its first reply's wait), not two
    no_wait = settings.store_timeout / 3
    assert max(lookups[2:4]) < no_wait  # no wait at all: Redis counts as not answering
    assert max(timed.steps) < no_wait and max(timed.closes) < no_wait
    assert lost == 0
    report(f"Redis SIGSTOPped between runs (lessons: {lookups[1]:.1f} s once, then "
           f"{max(lookups[2:4]):.2f} s; callbacks <= {max(timed.steps + timed.closes):.2f} s)", faults=1,
           runs=len(run_ids), records_lost=lost)
    recorder.close()


def fill_to_maxmemory(client: Any) -> int:
    """Set ``maxmemory`` just above what Redis uses (``noeviction``) and write until it refuses: the keys written."""
    import redis

    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + 2 * 1024 * 1024)
    written = 0
    try:
        while written < 100_000:
            client.set(f"filler:{written}", "x" * 65536)
            written += 1
    except redis.exceptions.OutOfMemoryError:
        # and it stays full whatever Redis frees meanwhile (expiring keys, a client's buffers) until the test frees it
        client.config_set("maxmemory", int(client.info("memory")["used_memory"]) - 1024 * 1024)
        return written
    raise AssertionError("Redis never refused a write")


def test_a_full_redis_loses_no_run(svc: Service, monitor: Monitor, report: Report) -> None:
    """Redis reaches ``maxmemory`` (``noeviction``) with a run closed and its task queued, and the worker takes the
    task while Redis refuses writes: the run is neither failed nor dead-lettered, ``lessonbank status`` says why it
    waits, and once memory is freed it is distilled, once (the sweeper sends it again if its task was lost)."""
    import os
    import signal

    from click.testing import CliRunner

    from lessonbank.cli.main import cli
    from lessonbank.core.constants import SWEEP_TASK, WAITING_RUNS_KEY

    bank, task = "redis-full", "Double twenty values (full Redis)."
    svc.llm.handler = by_task({task: [Reply(content=two_lessons("full"))]})
    assert svc.worker is not None and svc.worker.process is not None
    worker = [svc.worker.process.pid, *svc.worker.child_pids()]
    log_mark = len(svc.worker.log())
    recorder = recorder_for(svc, bank)
    agent = twenty_step_agent(recorder, {}, pace=0.0)
    for pid in worker:  # the worker takes the task only once Redis is full
        os.kill(pid, signal.SIGSTOP)
    try:
        assert recorder.run(agent, task) == "done"
        run_id = recorder.run_id(agent) or ""
        assert recorder.flush() and svc.state(run_id)["state"] == "closed"
        filled = fill_to_maxmemory(svc.client)
    finally:
        for pid in worker:
            os.kill(pid, signal.SIGCONT)
    try:
        shown = CliRunner().invoke(cli, ["status", "--json"], env=svc.cli_env())
        status = json.loads(shown.stdout)
        waiting = svc.client.zrange(WAITING_RUNS_KEY, 0, -1)
        assert "maxmemory" in status["redis_refuses_writes"] and run_id.encode() in waiting
        assert status["runs_waiting"] == len(waiting)
        wait_until(lambda: "maxmemory" in svc.worker.log()[log_mark:], 60, "the worker to meet the refusal")
        assert svc.state(run_id)["state"] == "closed" and svc.dead_letter(run_id) is None  # not failed meanwhile
    finally:
        svc.client.delete(*[f"filler:{i}" for i in range(filled)])
        svc.client.config_set("maxmemory", 0)
    svc.app.send_task(SWEEP_TASK, queue=QUEUE)  # a task lost to the refused writes is sent again
    state = svc.wait(run_id, timeout=120)
    print(f"\nfull Redis: {filled} filler values of 64 KiB; run {state['state']} after {state['deliveries']} "
          f"delivery(ies), {len(svc.requests_for(task))} LLM call(s)")
    # one LLM call (an attempt that a busy machine made retry reuses its output), no dead letter, lessons once
    assert state["state"] == "distilled" and len(svc.requests_for(task)) == 1 and svc.dead_letter(run_id) is None
    distilled_once(svc, bank, run_id, "full")
    assert svc.client.zscore(WAITING_RUNS_KEY, run_id) is None
    report("Redis full (maxmemory, noeviction) when the worker takes the run", faults=1, runs=1,
           records_lost=RECORDS - len(seqs(svc.client, run_id)), tasks_published=monitor.published(QUEUE, run_id),
           deliveries=deliveries(svc.client, run_id),
           duplicate_tasks=deliveries(svc.client, run_id) - int(state["distill_attempts"]),
           llm_calls=len(svc.requests_for(task)), duplicate_lessons=duplicate_lessons(svc, bank))
    recorder.close()
