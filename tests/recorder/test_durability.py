"""What the background writer promises: a normal exit flushes, a slow Redis costs at most 100 ms before
the spool has the records, a forked child records on its own. Agent processes are real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from smolagents import CodeAgent

from lessonbank.cli.main import cli
from lessonbank.core.settings import Settings
from lessonbank.recorder import StepRecorder
from lessonbank.recorder.ops import Op
from lessonbank.recorder.spool import describe, spool_files
from tests.faults.helpers import wait_until
from tests.fixtures.celery_worker import REPO
from tests.fixtures.recorded import distill_args, run_hash, run_records
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code

pytestmark = pytest.mark.slow

PRELUDE = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from smolagents import CodeAgent
    from lessonbank.recorder import StepRecorder
    from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code

    def agent(recorder, replies, **kwargs):
        return CodeAgent(tools=[], model=ScriptedModel(replies), step_callbacks=recorder.step_callbacks,
                         verbosity_level=0, max_steps=20, **kwargs)
""")


def run_agent(script: str, data_dir: Path, redis_url: str, **env: str) -> list[str]:
    """Run ``script`` (after PRELUDE) as an agent process; its stdout lines."""
    environment = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "LESSONBANK_DATA_DIR": str(data_dir),
                   "LESSONBANK_REDIS_URL": redis_url, **env}
    result = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(script)], capture_output=True,
                            text=True, env=environment, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()


def spooled_ops(directory: Path) -> list[Op]:
    return [Op.from_line(line) for path in spool_files(directory) for line in path.read_text().splitlines()]


# -- a normal exit ----------------------------------------------------------------------------------------

EXIT_AFTER_RUNS = """
    recorder = StepRecorder(bank="exit-bank")
    closed = agent(recorder, [code_reply("x = 1"), final_code(2)])
    closed.run("A run that closes.")
    # a run left open: its last steps are handed over right before the process exits
    left_open = agent(recorder, [code_reply(f"y = {i}") for i in range(5)] + [RuntimeError("model gone")])
    try:
        left_open.run("A run that dies.")
    except Exception:
        pass
    print(recorder.run_id(closed), recorder.run_id(left_open), flush=True)
    sys.exit(0)
"""


def test_a_normal_exit_leaves_every_record_in_redis_and_nothing_in_the_spool(redis_url, redis_client, tmp_path):
    data_dir = tmp_path / "data"
    closed, left_open = run_agent(EXIT_AFTER_RUNS, data_dir, redis_url)[-1].split()
    assert [r.kind for r in run_records(redis_client, closed)] == ["action", "action", "final", "run_end"]
    assert run_hash(redis_client, closed)["state"] == "closed"
    assert [r.seq for r in run_records(redis_client, left_open)] == list(range(6))
    assert run_hash(redis_client, left_open)["state"] == "open"  # the sweeper closes it later
    assert distill_args(redis_client) == [["exit-bank", closed]]
    assert spool_files(data_dir / "spool") == []


# A streamed run the caller stopped reading: its generator is closed while the interpreter finalizes, after the
# exit flush, and smolagents hands the step in progress to the recorder then.
EXIT_WITH_A_STREAM_LEFT_OPEN = """
    from smolagents.memory import ActionStep

    recorder = StepRecorder(bank="exit-bank")
    handed = os.open(os.environ["HANDED"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    own = recorder.step_callbacks[ActionStep]

    def noted(step, agent=None, **kwargs):  # each step handed over, noted as it is (the interpreter may finalize)
        own(step, agent=agent, **kwargs)
        os.write(handed, b"step\\n")

    recorder.step_callbacks[ActionStep] = noted
    runner = agent(recorder, [code_reply("x = 1"), code_reply("y = 2"), final_code(1)])
    steps = runner.run("A streamed run nobody finishes reading.", stream=True)
    for i, step in enumerate(steps):
        if i == 3:  # in the middle of the second step
            break
    print(recorder.run_id(runner), flush=True)
"""


def test_a_step_handed_over_while_the_interpreter_finalizes_neither_hangs_the_exit_nor_is_lost(
        redis_url, redis_client, tmp_path):
    handed = tmp_path / "handed"
    environment = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "LESSONBANK_DATA_DIR": str(tmp_path / "d"),
                   "LESSONBANK_REDIS_URL": redis_url, "HANDED": str(handed)}
    started = time.monotonic()
    try:
        result = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(EXIT_WITH_A_STREAM_LEFT_OPEN)],
                                capture_output=True, text=True, env=environment, timeout=30, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail("the agent process never exited: a writer thread was started while the interpreter finalized")
    assert result.returncode == 0, result.stderr[-3000:]
    assert time.monotonic() - started < 20
    run_id = result.stdout.split()[-1]
    assert [r.seq for r in run_records(redis_client, run_id)] == [0]  # before the exit
    # the second step, handed over while the interpreter finalized (no new connection possible), is spooled
    # (under the run the recorder still knew of then); every step handed over is in Redis or in the spool
    steps = handed.read_text().splitlines()
    spooled = [(op.op, op.task) for op in spooled_ops(tmp_path / "d" / "spool")]
    assert len(steps) == 1 + len(spooled) and spooled in ([], [("step", "A streamed run nobody finishes reading.")])
    print(f"\n{len(steps)} step(s) handed over, {len(spooled)} of them during finalization and spooled")


# Redis goes away before the run's last steps: the process still exits normally, the rest waits in the spool.
EXIT_WITHOUT_REDIS = """
    ready, go = Path(os.environ["READY"]), Path(os.environ["GO"])

    def redis_goes_away(_messages):
        assert recorder.flush()  # the first two records are in Redis
        ready.touch()
        while not go.exists():
            time.sleep(0.01)
        return code_reply("z = 3")

    recorder = StepRecorder(bank="exit-bank")
    runner = agent(recorder, [code_reply("x = 1"), code_reply("y = 2"), redis_goes_away, final_code(4)])
    runner.run("A run whose end Redis misses.")
    print(recorder.run_id(runner), flush=True)
"""


def test_records_of_a_process_that_exits_while_redis_is_away_are_replayed_and_queue_the_run(tmp_path):
    server = RedisServer(tmp_path / "redis", appendonly=True).start()
    data_dir, ready, go = tmp_path / "data", tmp_path / "ready", tmp_path / "go"
    try:
        def stop_redis_when_asked() -> None:
            wait_until(ready.exists, 60, "the agent to reach its third step")
            server.stop()  # SIGTERM: the AOF keeps the first two records
            go.touch()

        threading.Thread(target=stop_redis_when_asked, daemon=True).start()
        [run_id] = run_agent(EXIT_WITHOUT_REDIS, data_dir, server.url, READY=str(ready), GO=str(go))[-1:]
        [spool] = spool_files(data_dir / "spool")
        assert not describe(spool).live
        assert [(op.op, op.seq) for op in spooled_ops(data_dir / "spool")] == [
            ("step", 2), ("step", 3), ("step", 4), ("close", 5)]

        server.start()  # same port, same AOF
        client = server.client()
        assert [r.seq for r in run_records(client, run_id)] == [0, 1]
        replayed = CliRunner().invoke(cli, ["--redis-url", server.url, "spool", "replay"],
                                      env={"LESSONBANK_DATA_DIR": str(data_dir)})
        assert replayed.exit_code == 0, replayed.output
        assert "4 records of 1 runs, 1 runs closed" in replayed.output
        assert [r.kind for r in run_records(client, run_id)] == ["action"] * 4 + ["final", "run_end"]
        assert run_hash(client, run_id)["state"] == "closed"
        assert distill_args(client) == [["exit-bank", run_id]]
        assert spool_files(data_dir / "spool") == []
    finally:
        server.stop()


# -- fork ------------------------------------------------------------------------------------------------

FORKING_AGENT = """
    recorder = StepRecorder(bank="fork-bank")
    shared = agent(recorder, [final_code("before"), final_code("child"), final_code("after")])
    shared.run("Parent run before the fork.")
    before = recorder.run_id(shared)
    # an open run whose records may still be queued when the process forks
    left_open = agent(recorder, [code_reply(f"y = {i}") for i in range(3)] + [RuntimeError("model gone")])
    try:
        left_open.run("Parent run left open.")
    except Exception:
        pass
    pid = os.fork()
    if pid == 0:
        queued = recorder._writer.pending  # the parent's queue is the parent's
        shared.run("Child run.")
        print("child", recorder.run_id(shared), queued, recorder.transport.delivered + recorder.transport.spooled,
              recorder.transport.spool.path, flush=True)
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    shared.run("Parent run after the fork.")
    print("parent", before, recorder.run_id(left_open), recorder.run_id(shared), flush=True)
"""


def test_a_forked_child_records_its_own_runs_with_its_own_writer(redis_url, redis_client, tmp_path):
    lines = run_agent(FORKING_AGENT, tmp_path / "data", redis_url)
    child = next(line.split() for line in lines if line.startswith("child"))
    parent = next(line.split() for line in lines if line.startswith("parent"))
    child_run, queued, handled = child[1], int(child[2]), int(child[3])
    before, left_open, after = parent[1:]
    assert len({child_run, before, left_open, after}) == 4
    assert queued == 0 and handled == 3  # the child's writer handled its own run only: action, final, close
    for run_id in (child_run, before, after):
        assert [r.kind for r in run_records(redis_client, run_id)] == ["action", "final", "run_end"]
    assert [r.seq for r in run_records(redis_client, left_open)] == [0, 1, 2, 3]
    assert run_records(redis_client, child_run)[0].task == "Child run."
    closed = sorted(("fork-bank", run_id) for run_id in (child_run, before, after))
    assert sorted(map(tuple, distill_args(redis_client))) == closed
    assert spool_files(tmp_path / "data" / "spool") == []


def test_a_forked_child_spools_into_a_file_of_its_own(tmp_path):
    data_dir = tmp_path / "data"
    unreachable = f"redis://127.0.0.1:{RedisServer(tmp_path).port}/0"
    lines = run_agent(FORKING_AGENT, data_dir, unreachable)
    child_run, child_spool = (lambda fields: (fields[1], Path(fields[4])))(
        next(line.split() for line in lines if line.startswith("child")))
    files = spool_files(data_dir / "spool")
    assert len(files) == 2 and child_spool in files
    [parent_spool] = [path for path in files if path != child_spool]
    assert parent_spool.name.split("-")[1] != child_spool.name.split("-")[1]  # two processes
    runs_in = {path: {Op.from_line(line).run_id for line in path.read_text().splitlines()} for path in files}
    assert runs_in[child_spool] == {child_run}
    assert child_run not in runs_in[parent_spool] and len(runs_in[parent_spool]) == 3


FORKED_MID_EXCHANGE = """
    from smolagents.memory import ActionStep

    recorder = StepRecorder(bank="fork-bank")
    writer = recorder._writer
    runner = CodeAgent(tools=[], model=ScriptedModel([code_reply("x = 1"), code_reply("y = 2")]), verbosity_level=0,
                       step_callbacks={ActionStep: recorder.step_callbacks[ActionStep]})
    runner.run("Forked while the writer waits for Redis.", max_steps=2)
    deadline = time.monotonic() + 30
    while not (writer._io.locked() and len(recorder.transport.spool)):  # a batch sent, its reply awaited
        assert time.monotonic() < deadline, "the writer never waited for Redis"
        time.sleep(0.002)
    forked = time.monotonic()
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # a normal exit: the child's writers are closed at exit
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), time.monotonic() - forked, flush=True)
    os._exit(0)  # the parent's writer waits for the frozen Redis: not what this measures
"""


def test_a_child_forked_while_the_writer_waits_for_redis_exits_at_once(own_redis, tmp_path):
    """The writer thread is inside an exchange with a Redis that does not answer (SIGSTOP, a 5 s timeout) when
    the process forks: the child, with no writer thread of its own, exits normally within that timeout (0.3 s
    idle; 4 s leaves a loaded machine room, a child that waited for the exchange takes 5 s and more)."""
    own_redis.freeze()
    try:
        [line] = run_agent(FORKED_MID_EXCHANGE, tmp_path / "data", own_redis.url, LESSONBANK_REDIS_TIMEOUT="5")[-1:]
    finally:
        own_redis.thaw()
    code, took = line.split()
    print(f"\nchild forked mid-exchange exited with {code} in {float(took):.2f} s")
    assert code == "0" and float(took) < 4.0


# -- a slow Redis --------------------------------------------------------------------------------------------


def test_while_redis_does_not_answer_records_reach_the_spool_before_its_timeout(own_redis, tmp_path):
    """Redis frozen (SIGSTOP) with a long timeout (30 s): the batch in flight and what follows go to the spool
    while the writer still waits (milliseconds idle; a third of the timeout leaves a loaded machine room); after
    SIGCONT the batch's reply comes, and the rest is replayed."""
    settings = Settings(_env_file=None, redis_url=own_redis.url, data_dir=tmp_path / "data", redis_timeout=30.0)
    recorder = StepRecorder(bank="slow", settings=settings)

    def freeze(_messages):
        assert recorder.flush()  # the first record is in Redis
        own_redis.freeze()
        return code_reply("x = 0")

    replies = [code_reply("warm = 1"), freeze, *[code_reply(f"x = {i}") for i in range(1, 4)], RuntimeError("gone")]
    agent = CodeAgent(tools=[], model=ScriptedModel(replies), step_callbacks=recorder.step_callbacks,
                      verbosity_level=0, max_steps=10)
    try:
        with pytest.raises(Exception, match="gone"):
            agent.run("Count while Redis sleeps.")  # no close: nothing waits for the writer
        ended = time.monotonic()
        wait_until(lambda: len(spooled_ops(settings.resolved_spool_dir)) >= 5, 10.0, "the records to be spooled",
                   interval=0.002)
        spooled_after = time.monotonic() - ended
        assert [op.seq for op in spooled_ops(settings.resolved_spool_dir)] == [1, 2, 3, 4, 5]
    finally:
        own_redis.thaw()
    assert spooled_after < 10.0, spooled_after  # the last record was handed over right before the run ended
    assert recorder.flush()
    assert [r.seq for r in run_records(own_redis.client(), recorder.run_id(agent))] == list(range(6))
    assert spool_files(settings.resolved_spool_dir) == []
    assert not recorder.transport.breaker.tripped  # Redis answered within the timeout: no outage
    recorder.close()


@pytest.mark.parametrize("late_writer", [False, True], ids=["writer-first", "late-writer"])
def test_records_of_a_recorder_dropped_while_redis_is_away_reach_redis_while_the_process_lives_on(
        own_redis, tmp_path, monkeypatch, caplog, late_writer):
    """One agent and one recorder per request, the recorder garbage-collected while Redis is away: its spool is
    replayed when Redis is back, by the process itself, without ``lessonbank spool replay``. A writer thread that
    gets the CPU late (a loaded machine) leaves the first failed delivery, and its warning, to the agent's thread:
    the warning, kept by the log capture, keeps no frame of the recorder alive."""
    import gc
    import weakref

    from lessonbank.recorder import writer

    if late_writer:
        wait = writer.Writer._wait
        monkeypatch.setattr(writer.Writer, "_wait", lambda self, me: (time.sleep(0.5), wait(self, me))[1])
    settings = Settings(_env_file=None, redis_url=own_redis.url, data_dir=tmp_path / "data", breaker_cooldown=0.2)

    def request(task: str) -> tuple[str, weakref.ref]:
        recorder = StepRecorder(bank="dropped", settings=settings)
        agent = CodeAgent(tools=[], model=ScriptedModel([code_reply("x = 1"), final_code(1)]), verbosity_level=0,
                          step_callbacks=recorder.step_callbacks)
        agent.run(task)
        return recorder.run_id(agent) or "", weakref.ref(recorder)

    own_redis.stop()
    dropped = [request(f"Request {i} while Redis is away.") for i in range(3)]
    wait_until(lambda: gc.collect() is not None and all(ref() is None for _, ref in dropped), 60, "recorders dropped")
    own_redis.start()  # same port
    client = own_redis.client()
    for run_id, _ in dropped:
        wait_until(lambda run_id=run_id: run_hash(client, run_id).get("state") == "closed", 60, "the run in Redis")
        assert [r.kind for r in run_records(client, run_id)] == ["action", "action", "final", "run_end"]
    assert sorted(args[1] for args in distill_args(client, settings.queue)) == sorted(run_id for run_id, _ in dropped)
    wait_until(lambda: spool_files(settings.resolved_spool_dir) == [], 60, "the spool files delivered and gone")
    assert any("Redis did not take step records" in record.getMessage() for record in caplog.records)
