"""Real smolagents agents, driven by scripted models, recorded into the real redis-server."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from PIL import Image
from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.memory import ActionStep, FinalAnswerStep, PlanningStep

from lessonbank.core.constants import DISTILL_TASK, OPEN_RUNS_KEY
from lessonbank.core.settings import Settings
from lessonbank.recorder import StepRecorder
from tests.faults.helpers import wait_until
from tests.fixtures.recorded import distill_args, queued_tasks, run_hash, run_records
from tests.fixtures.scripted_model import (
    ScriptedModel,
    code_reply,
    final_code,
    final_tool_call,
    tool_call_reply,
)

BANK = "team-a"


@tool
def lookup(key: str) -> str:
    """Look a key up in the table.

    Args:
        key: Name of the entry.
    """
    return json.dumps({"key": key, "value": 7})


@pytest.fixture
def recorder(settings: Settings) -> Iterator[StepRecorder]:
    rec = StepRecorder(bank=BANK, settings=settings)
    yield rec
    rec.close(interrupt_open_runs=False)


def code_agent(recorder: StepRecorder, replies: list, **kwargs) -> CodeAgent:
    return CodeAgent(tools=[], model=ScriptedModel(replies), step_callbacks=recorder.step_callbacks,
                     verbosity_level=0, **kwargs)


def test_code_agent_run_records_every_step_and_enqueues_one_distill(recorder, redis_client):
    agent = code_agent(recorder, [
        code_reply("ratio = 10 / 0", "Thought: divide first."),
        code_reply("ratio = 10 / 2\nprint('ratio is', ratio)", "Thought: fix the divisor."),
        final_code(5.0),
    ])
    assert agent.run("Compute the ratio of 10 and 2.") == 5.0
    run_id = recorder.run_id(agent)
    assert run_id and len(run_id) == 32

    records = run_records(redis_client, run_id)
    assert [r.kind for r in records] == ["action", "action", "action", "final", "run_end"]
    assert [r.seq for r in records] == [0, 1, 2, 3, 4]
    assert all(r.id == f"{run_id}:{r.seq}" and r.run_id == run_id and r.bank == BANK for r in records)
    assert all(r.task == "Compute the ratio of 10 and 2." and r.agent == "CodeAgent" and r.v == 1 for r in records)
    first, fix, last, final, end = records
    assert [first.step_number, fix.step_number, last.step_number] == [1, 2, 3]
    assert first.error_type == "AgentExecutionError" and "ZeroDivisionError" in first.error_message
    assert first.code == "ratio = 10 / 0" and "divide first" in first.model_output
    assert fix.error_type == "" and fix.code.startswith("ratio = 10 / 2") and "ratio is 5.0" in fix.observations
    assert last.is_final and last.action_output == "5.0"
    assert final.is_final and final.action_output == "5.0"
    assert end.outcome == "success" and end.error_type == ""
    assert first.token_usage is not None and first.token_usage.input_tokens == 10
    assert first.duration is not None and first.duration >= 0

    raw = redis_client.hget(f"lessonbank:run:{run_id}:steps", "0").decode()
    assert "model_input_messages" not in raw and "New task" not in raw

    state = run_hash(redis_client, run_id)
    assert state["state"] == "closed" and state["outcome"] == "success" and state["bank"] == BANK
    assert state["enqueued"] == "1" and float(state["closed_at"]) >= float(state["started_at"])
    assert redis_client.zscore(OPEN_RUNS_KEY, run_id) is None
    assert queued_tasks(redis_client) == [(DISTILL_TASK, [BANK, run_id])]


def test_tool_calling_agent_run(recorder, redis_client):
    agent = ToolCallingAgent(tools=[lookup], model=ScriptedModel([
        tool_call_reply("lookup", {"key": "alpha"}), final_tool_call("seven"),
    ]), verbosity_level=0)
    recorder.attach(agent)
    assert agent.run("Find alpha.") == "seven"
    run_id = recorder.run_id(agent)
    records = run_records(redis_client, run_id)
    assert [r.kind for r in records] == ["action", "action", "final", "run_end"]
    call = records[0].tool_calls[0]
    assert call.name == "lookup" and call.arguments == '{"key": "alpha"}'
    assert records[0].observations == '{"key": "alpha", "value": 7}'  # JSON-looking text stays text
    assert records[1].tool_calls[0].name == "final_answer" and records[1].is_final
    assert records[2].action_output == "seven" and records[3].outcome == "success"
    assert all(r.agent == "ToolCallingAgent" for r in records)
    assert distill_args(redis_client) == [[BANK, run_id]]


def test_two_consecutive_runs_and_reset_false_get_their_own_run_ids(recorder, redis_client):
    agent = code_agent(recorder, [final_code("one"), final_code("two"), final_code("three")])
    ids = []
    for task, reset in (("first", True), ("second", True), ("third", False)):
        agent.run(task, reset=reset)
        ids.append(recorder.run_id(agent))
    assert len(set(ids)) == 3
    for run_id, task in zip(ids, ("first", "second", "third"), strict=True):
        records = run_records(redis_client, run_id)
        assert [r.kind for r in records] == ["action", "final", "run_end"]
        assert {r.task for r in records} == {task}
    assert distill_args(redis_client) == [[BANK, run_id] for run_id in ids]


def test_agents_in_threads_never_share_a_run(recorder, redis_client):
    def slow(code: str):
        def reply(_messages):
            time.sleep(0.01)
            return code_reply(code)
        return reply

    agents = [code_agent(recorder, [slow(f"x = {i}\nprint(x)") for _ in range(5)] + [final_code(i)], max_steps=10)
              for i in range(2)]
    results: dict[int, str | None] = {}

    def work(i: int) -> None:
        agents[i].run(f"task {i}")
        results[i] = recorder.run_id(agents[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results[0] and results[1] and results[0] != results[1]
    for i in range(2):
        records = run_records(redis_client, results[i])
        assert [r.seq for r in records] == list(range(8))
        assert {r.task for r in records} == {f"task {i}"}
        assert all(f"x = {i}" in r.code for r in records[:5])
    assert sorted(map(tuple, distill_args(redis_client))) == sorted((BANK, results[i]) for i in range(2))


def test_max_steps_run_is_closed_with_outcome_max_steps(recorder, redis_client):
    agent = code_agent(recorder, [code_reply("x = 1"), code_reply("x = 2"), "The answer is probably 2."],
                       max_steps=2)
    agent.run("Never finishes.")
    records = run_records(redis_client, recorder.run_id(agent))
    assert [r.kind for r in records] == ["action", "action", "action", "final", "run_end"]
    assert records[2].error_type == "AgentMaxStepsError"
    assert records[3].action_output == "The answer is probably 2."
    assert records[4].outcome == "max_steps"
    assert run_hash(redis_client, records[0].run_id)["outcome"] == "max_steps"
    assert len(distill_args(redis_client)) == 1


def test_run_helper_closes_a_raising_run_with_outcome_error(recorder, redis_client):
    agent = code_agent(recorder, [code_reply("x = 1")])  # the second model call finds the script exhausted
    with pytest.raises(Exception, match="scripted model has only 1 replies"):
        recorder.run(agent, "Fails on step two.")
    run_id = recorder.run_id(agent)
    records = run_records(redis_client, run_id)
    assert [r.kind for r in records] == ["action", "action", "run_end"]
    assert records[1].step_number == 2 and records[1].model_output == ""  # smolagents re-raises, no step error
    assert records[2].outcome == "error" and records[2].error_type == "AgentGenerationError"
    assert "scripted model has only 1 replies" in records[2].error_message
    assert run_hash(redis_client, run_id)["outcome"] == "error"
    assert distill_args(redis_client) == [[BANK, run_id]]


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("broken __str__")


def test_a_run_ending_with_an_exception_whose_str_raises_is_still_closed(recorder, redis_client):
    """The user's own step callback raises an exception whose ``__str__`` raises: the run is closed as
    ``error`` all the same (its close sent, its distillation queued), not left open for the sweeper."""
    def guard(step, agent=None):
        raise _UnprintableError()

    agent = code_agent(recorder, [code_reply("x = 1"), final_code(1)])
    agent.step_callbacks.register(ActionStep, guard)
    with pytest.raises(_UnprintableError):
        recorder.run(agent, "Stopped by a guard.")
    run_id = recorder.run_id(agent)
    records = run_records(redis_client, run_id)
    assert [r.kind for r in records] == ["action", "run_end"]
    assert records[1].outcome == "error" and records[1].error_type == "_UnprintableError"
    assert records[1].error_message == "<unprintable _UnprintableError>"
    assert run_hash(redis_client, run_id)["state"] == "closed"
    assert distill_args(redis_client) == [[BANK, run_id]]


def test_a_prepared_field_with_a_lone_surrogate_costs_no_record_of_any_run(recorder, redis_client):
    """A ``prepare_run`` field read with ``surrogateescape`` (a file name, an environment value) is recorded with
    the character replaced: neither its run's records nor another agent's in the same batch are lost, and the
    breaker does not take it for an outage."""
    first = code_agent(recorder, [code_reply("x = 1"), final_code(1)])
    second = code_agent(recorder, [final_code(2)])
    recorder.prepare_run(first, source=b"caf\xe9".decode("utf-8", "surrogateescape"))
    first.run("A run with a strange label.")
    second.run("A clean run.")
    assert recorder.flush(5)
    for agent, kinds in ((first, ["action", "action", "final", "run_end"]), (second, ["action", "final", "run_end"])):
        run_id = recorder.run_id(agent)
        assert [r.kind for r in run_records(redis_client, run_id)] == kinds
        assert run_hash(redis_client, run_id)["state"] == "closed"
    assert run_hash(redis_client, recorder.run_id(first))["source"] == "caf?"
    assert len(distill_args(redis_client)) == 2
    assert not recorder.transport.breaker.tripped and recorder.transport.spooled == 0


def test_recording_block_that_raises_before_any_run_closes_nothing(recorder, redis_client):
    agent = code_agent(recorder, [final_code(1)])
    with pytest.raises(KeyError), recorder.recording(agent):
        raise KeyError("before run")
    assert recorder.run_id(agent) is None
    assert redis_client.keys("lessonbank:run:*") == []


def test_open_run_is_closed_as_interrupted_when_the_agent_starts_its_next_run(recorder, redis_client):
    agent = code_agent(recorder, [code_reply("x = 1"), ConnectionError("model server went away"), final_code("ok")])
    with pytest.raises(Exception, match="model server went away"):
        agent.run("Dies without the helper.")
    first = recorder.run_id(agent)
    assert recorder.flush()  # no close waited for the writer: the open run's records are on their way
    assert run_hash(redis_client, first)["state"] == "open"
    assert redis_client.zscore(OPEN_RUNS_KEY, first) is not None
    assert distill_args(redis_client) == []

    agent.run("Next run.")
    second = recorder.run_id(agent)
    assert second != first
    assert run_records(redis_client, first)[-1].outcome == "interrupted"
    assert run_hash(redis_client, first)["state"] == "closed"
    assert distill_args(redis_client) == [[BANK, first], [BANK, second]]


def test_managed_sub_agent_gets_its_own_run(recorder, redis_client):
    helper = ToolCallingAgent(tools=[lookup], model=ScriptedModel([
        tool_call_reply("lookup", {"key": "beta"}), final_tool_call("beta is 7"),
    ]), name="finder", description="Finds values of keys.", verbosity_level=0)
    manager = code_agent(recorder, [
        code_reply("found = finder(task='find beta')\nprint(found)"), final_code("done"),
    ], managed_agents=[helper])
    recorder.attach(helper)
    manager.run("Ask the finder for beta.")
    manager_run, helper_run = recorder.run_id(manager), recorder.run_id(helper)
    assert manager_run != helper_run
    helper_records = run_records(redis_client, helper_run)
    assert {r.agent for r in helper_records} == {"finder"} and "find beta" in helper_records[0].task
    assert helper_records[-1].outcome == "success"
    assert "beta is 7" in run_records(redis_client, manager_run)[0].observations
    assert distill_args(redis_client) == [[BANK, helper_run], [BANK, manager_run]]


def test_planning_steps_are_recorded(recorder, redis_client):
    agent = code_agent(recorder, ["1. Print.\n2. Answer.\n<end_plan>", final_code(3)], planning_interval=5)
    agent.run("Plan then answer.")
    records = run_records(redis_client, recorder.run_id(agent))
    assert [r.kind for r in records] == ["planning", "action", "final", "run_end"]
    assert "1. Print." in records[0].plan and records[0].step_number == 1


def test_run_id_is_known_inside_the_run(settings, redis_client):
    recorder = StepRecorder(bank=BANK, settings=settings)
    seen: list[str | None] = []

    @tool
    def whoami() -> str:
        """Report the current run id."""
        seen.append(recorder.run_id(agent))
        return "ok"

    agent = ToolCallingAgent(tools=[whoami], model=ScriptedModel([
        tool_call_reply("whoami", {}), final_tool_call("done"),
    ]), verbosity_level=0)
    recorder.attach(agent)
    agent.run("Who am I?")
    assert seen == [recorder.run_id(agent)]
    assert run_records(redis_client, seen[0])[0].tool_calls[0].name == "whoami"
    recorder.close()


def test_attach_is_idempotent_and_step_callbacks_cover_the_three_step_types(recorder, redis_client):
    assert set(recorder.step_callbacks) == {ActionStep, PlanningStep, FinalAnswerStep}
    agent = code_agent(recorder, [final_code(1)])
    recorder.attach(agent)
    recorder.attach(agent)
    agent.run("Once.")
    assert [r.seq for r in run_records(redis_client, recorder.run_id(agent))] == [0, 1, 2]


def test_ten_megabyte_observation_is_capped(settings, redis_client):
    @tool
    def dump() -> str:
        """Return a huge text."""
        return "A" * 10_000_000 + " api_key=sk-proj-abcdefghijklmnopqrstuvwx1234"

    recorder = StepRecorder(bank=BANK, settings=settings)
    agent = ToolCallingAgent(tools=[dump], model=ScriptedModel([tool_call_reply("dump", {}), final_tool_call("ok")]),
                             verbosity_level=0)
    recorder.attach(agent)
    started = time.monotonic()
    agent.run("Dump it.")
    assert time.monotonic() - started < 10
    run_id = recorder.run_id(agent)
    raw = redis_client.hget(f"lessonbank:run:{run_id}:steps", "0")
    assert len(raw) <= settings.max_record_bytes
    record = run_records(redis_client, run_id)[0]
    assert len(record.observations) <= settings.max_field_chars
    assert "chars cut]" in record.observations and "observations" in record.truncated
    assert "sk-proj" not in raw.decode()
    recorder.close()


def test_a_huge_value_left_as_the_last_expression_costs_the_callback_milliseconds(settings, redis_client):
    """600,000 entries in a dict the step's code ends with: the callback walks 2,000 of them, whatever the size,
    and the record says how many were left out."""
    recorder = StepRecorder(bank=BANK, settings=settings)
    took, cpu = [], []
    own = recorder.step_callbacks[ActionStep]

    def timed(*args, **kwargs):  # wall clock, and the agent thread's own CPU (what a busy machine does not inflate)
        started, used = time.perf_counter(), time.thread_time()
        own(*args, **kwargs)
        took.append(time.perf_counter() - started)
        cpu.append(time.thread_time() - used)

    @tool
    def load_table() -> dict:
        """Load the whole table."""
        return {f"k{i}": i for i in range(600_000)}

    # built by a tool, natively: smolagents' interpreter takes seconds over such a comprehension on a busy machine
    agent = CodeAgent(tools=[load_table], model=ScriptedModel([code_reply("table = load_table()\ntable"),
                                                               final_code("ok")]),
                      step_callbacks={ActionStep: timed, FinalAnswerStep: recorder.step_callbacks[FinalAnswerStep]},
                      verbosity_level=0)
    assert agent.run("Build the table.") == "ok"
    print(f"\ncallback with a 600,000-entry dict as the step's value: {took[0] * 1000:.1f} ms "
          f"({cpu[0] * 1000:.1f} ms of the agent thread's CPU)")
    assert cpu[0] <= 0.02
    record = run_records(redis_client, recorder.run_id(agent))[0]
    assert record.action_output.startswith('{"k0": 0, "k1": 1') and "598,000 more items" in record.action_output
    recorder.close()


def test_bytes_and_image_outputs(recorder, redis_client):
    @tool
    def snapshot() -> Image.Image:
        """Take a small picture."""
        return Image.new("RGB", (8, 6), "red")

    picture = Image.new("RGB", (4, 4), "blue")
    agent = CodeAgent(tools=[snapshot], model=ScriptedModel([
        code_reply("final_answer(b'ok \\xff\\xfe end')"),
        code_reply("final_answer(snapshot())"),
    ]), verbosity_level=0)
    recorder.attach(agent)
    assert agent.run("Bytes.", images=[picture]) == b"ok \xff\xfe end"
    records = run_records(redis_client, recorder.run_id(agent))
    assert records[0].images == 1  # the task image, shown to the model at every step
    assert records[0].action_output == "ok \ufffd\ufffd end" and records[1].action_output == "ok \ufffd\ufffd end"

    agent.run("Image.", reset=False)
    records = run_records(redis_client, recorder.run_id(agent))
    assert records[1].kind == "final" and records[1].images == 1
    assert records[1].action_output == "<image 8x6 RGB>"


def test_importing_the_recorder_stays_light():
    code = (
        "import sys, lessonbank.recorder\n"
        "from lessonbank.recorder import StepRecorder\n"
        "heavy = ('qdrant_client', 'fastembed', 'celery', 'kombu', 'lessonbank.workers', 'lessonbank.cli', 'openai')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "StepRecorder(bank='b')\n"
        "assert 'celery' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_constructor_does_no_io(tmp_path):
    settings = Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0", data_dir=tmp_path / "none")
    StepRecorder(settings=settings)
    assert not (tmp_path / "none").exists()


def test_callback_never_raises(recorder, redis_client, caplog, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("snapshot bug")

    monkeypatch.setattr("lessonbank.recorder.snapshot.action_fields", broken)  # on the agent's thread
    agent = code_agent(recorder, [code_reply("x = 1"), final_code(2)])
    assert agent.run("Still answers.") == 2
    warnings = [r for r in caplog.records if "recording a step failed" in r.getMessage()]
    assert len(warnings) == 1 and "Traceback (most recent call last)" in warnings[0].getMessage()
    assert [r.kind for r in run_records(redis_client, recorder.run_id(agent))] == ["final", "run_end"]


def test_a_record_the_writer_cannot_build_is_dropped_and_the_rest_delivered(recorder, redis_client, caplog,
                                                                            monkeypatch):
    build = recorder.serializer.record

    def broken_actions(snap):
        if snap.kind == "action":
            raise RuntimeError("serializer bug")
        return build(snap)

    monkeypatch.setattr(recorder.serializer, "record", broken_actions)  # on the writer's thread
    agent = code_agent(recorder, [code_reply("x = 1"), final_code(2)])
    assert agent.run("Still answers.") == 2
    warnings = [r for r in caplog.records if "building a step record failed" in r.getMessage()]
    assert len(warnings) == 1 and "Traceback (most recent call last)" in warnings[0].getMessage()
    records = run_records(redis_client, recorder.run_id(agent))
    assert [(r.kind, r.seq) for r in records] == [("final", 2), ("run_end", 3)]
    assert run_hash(redis_client, recorder.run_id(agent))["state"] == "closed"


def test_injected_redis_client_is_used(settings, redis_url):
    client = redis.Redis.from_url(redis_url.replace("/0", "/1"))
    recorder = StepRecorder(bank="other", settings=settings, redis_client=client)
    agent = code_agent(recorder, [final_code(1)])
    agent.run("Injected.")
    run_id = recorder.run_id(agent)
    assert [r.bank for r in run_records(client, run_id)] == ["other"] * 3
    assert redis.Redis.from_url(redis_url).exists(f"lessonbank:run:{run_id}") == 0
    recorder.close()
    assert client.ping()  # an injected client is not closed by the recorder


def test_close_interrupts_runs_still_open(settings, redis_client):
    recorder = StepRecorder(bank=BANK, settings=settings)
    agent = code_agent(recorder, [code_reply("x = 1"), ValueError("model crashed")])
    with pytest.raises(Exception, match="model crashed"):
        agent.run("Left open.")
    run_id = recorder.run_id(agent)
    recorder.close()
    assert run_records(redis_client, run_id)[-1].outcome == "interrupted"
    assert distill_args(redis_client) == [[BANK, run_id]]


def test_spool_write_failure_is_logged_once_and_the_run_goes_on(tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the spool directory should be")
    settings = Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0", data_dir=tmp_path, spool_dir=blocker)
    recorder = StepRecorder(bank=BANK, settings=settings)
    agent = code_agent(recorder, [code_reply("x = 1"), code_reply("x = 2"), final_code(3)])
    assert agent.run("Nowhere to write.") == 3
    assert len([r for r in caplog.records if "could not write the spool" in r.getMessage()]) == 1
    recorder.close()


# -- prepare_run and the run's tools ---------------------------------------------------------------------


def test_prepare_run_mints_the_next_runs_id_and_its_fields_reach_the_hash(recorder, redis_client):
    seen: list[str | None] = []

    @tool
    def whoami() -> str:
        """Report the current run id."""
        seen.append(recorder.run_id(agent))
        return "ok"

    agent = ToolCallingAgent(tools=[whoami], model=ScriptedModel([
        final_tool_call("first"), tool_call_reply("whoami", {}), final_tool_call("second"), final_tool_call("third"),
    ]), verbosity_level=0)
    recorder.attach(agent)
    agent.run("First run.")
    first = recorder.run_id(agent)

    prepared = recorder.prepare_run(agent, arm="control", given='["old"]')
    assert recorder.run_id(agent) == first  # the prepared run has not started yet
    assert recorder.prepare_run(agent, arm="lessons", given='["id1", "id2"]') == prepared  # same id, new fields
    agent.run("Second run.")
    assert recorder.run_id(agent) == prepared and seen == [prepared]
    state = run_hash(redis_client, prepared)
    assert state["arm"] == "lessons" and state["given"] == '["id1", "id2"]' and state["state"] == "closed"
    assert [r.task for r in run_records(redis_client, prepared)] == ["Second run."] * 4

    agent.run("Third run.")  # the prepared id was used once
    third = recorder.run_id(agent)
    assert third not in (first, prepared) and "arm" not in run_hash(redis_client, third)
    assert "arm" not in run_hash(redis_client, first)


def test_prepare_run_before_the_agents_first_run_and_a_run_that_fails(recorder, redis_client):
    agent = code_agent(recorder, [code_reply("x = 1"), RuntimeError("model gone")])
    run_id = recorder.prepare_run(agent, arm="control", given="[]")
    assert recorder.run_id(agent) is None
    with pytest.raises(Exception, match="model gone"):
        recorder.run(agent, "Fails on step two.")
    assert recorder.run_id(agent) == run_id
    state = run_hash(redis_client, run_id)
    assert (state["arm"], state["given"], state["outcome"]) == ("control", "[]", "error")


def test_prepare_run_rejects_fields_it_cannot_write(recorder):
    agent = code_agent(recorder, [])
    with pytest.raises(TypeError, match="field 'given' must be a str, not list"):
        recorder.prepare_run(agent, given=["id1"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'state' cannot be set"):
        recorder.prepare_run(agent, state="closed")
    for written_by_workers in ("verdict_trust", "judged", "taught", "followup", "late_at", "distilled_upto"):
        with pytest.raises(ValueError, match=f"'{written_by_workers}' cannot be set"):  # e.g. a user's trust
            recorder.prepare_run(agent, **{written_by_workers: "3"})
    with pytest.raises(ValueError, match="LESSONBANK_MAX_FIELD_CHARS"):
        recorder.prepare_run(agent, given="x" * (recorder.settings.max_field_chars + 1))


def test_prepared_fields_survive_the_spool(tmp_path, redis_url, redis_client):
    settings = Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0", data_dir=tmp_path)
    recorder = StepRecorder(bank=BANK, settings=settings)
    agent = code_agent(recorder, [final_code(1)])
    run_id = recorder.prepare_run(agent, arm="lessons", given='["a"]')
    agent.run("Recorded while Redis is away.")
    assert recorder.transport.spooled == 3
    recorder.close()
    from lessonbank.recorder.spool import replay_directory
    from lessonbank.recorder.transport import RedisSink

    sink = RedisSink(redis_client, settings.queue)
    [report] = replay_directory(settings.resolved_spool_dir, lambda op: sink.apply(op, replay=True))
    assert report.delivered == 3
    state = run_hash(redis_client, run_id)
    assert (state["arm"], state["given"], state["state"]) == ("lessons", '["a"]', "closed")
    assert json.loads(state["tools"]) == ["final_answer"]


def test_every_run_records_its_tool_names(recorder, redis_client):
    finder = ToolCallingAgent(tools=[lookup], model=ScriptedModel([final_tool_call("7")]), name="finder",
                              description="Finds values of keys.", verbosity_level=0)
    agent = CodeAgent(tools=[lookup], model=ScriptedModel([code_reply("x = 1"), final_code(1)]),
                      managed_agents=[finder], step_callbacks=recorder.step_callbacks, verbosity_level=0)
    agent.run("Use the tools.")
    run_id = recorder.run_id(agent)
    assert json.loads(run_hash(redis_client, run_id)["tools"]) == ["lookup", "final_answer", "finder"]


def test_the_tool_list_is_capped(recorder, redis_client):
    from lessonbank.recorder.tracking import MAX_TOOL_NAME, MAX_TOOLS

    agent = code_agent(recorder, [final_code(1)])
    agent.tools.update({f"tool_{i:03d}_" + "x" * 100: agent.tools["final_answer"] for i in range(100)})
    agent.run("Many tools.")
    names = json.loads(run_hash(redis_client, recorder.run_id(agent))["tools"])
    assert len(names) == MAX_TOOLS and all(len(name) <= MAX_TOOL_NAME for name in names)
    assert names[0] == "final_answer"


def test_a_closed_recorder_records_again_when_its_agent_runs_again(recorder, redis_client):
    agent = code_agent(recorder, [final_code(1), code_reply("x = 1"), RuntimeError("model gone")])
    agent.run("Before the close.")
    recorder.close()
    with pytest.raises(Exception, match="model gone"):
        agent.run("After the close.")  # no close waits for the writer: its thread delivers
    run_id = recorder.run_id(agent)
    deadline = time.monotonic() + 5
    while redis_client.hlen(f"lessonbank:run:{run_id}:steps") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [r.seq for r in run_records(redis_client, run_id)] == [0, 1]


def test_secrets_never_reach_the_spool(tmp_path):
    import stat

    from lessonbank.recorder.spool import spool_files

    @tool
    def read_config() -> str:
        """Read the configuration."""
        return "OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx1234 region=eu"

    settings = Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0", data_dir=tmp_path)
    recorder = StepRecorder(bank=BANK, settings=settings)
    agent = ToolCallingAgent(tools=[read_config], model=ScriptedModel([
        tool_call_reply("read_config", {}), final_tool_call("token=hunter2hunter2 done"),
    ]), verbosity_level=0)
    recorder.attach(agent)
    agent.run("Configure with password=hunter2hunter2.")
    [path] = spool_files(settings.resolved_spool_dir)
    text = path.read_text()
    assert "region=eu" in text and "[REDACTED]" in text
    assert "sk-proj" not in text and "hunter2" not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    recorder.close()


def test_a_dropped_recorder_delivers_what_it_holds_and_ends_its_thread(settings, redis_client):
    import gc
    import weakref

    def run_and_drop() -> tuple[str, weakref.ref]:
        recorder = StepRecorder(bank=BANK, settings=settings)
        # only ActionStep: no final answer reaches the recorder, so no close waits for the writer
        agent = CodeAgent(tools=[], model=ScriptedModel([code_reply("x = 1"), code_reply("y = 2")]),
                          step_callbacks={ActionStep: recorder.step_callbacks[ActionStep]}, verbosity_level=0)
        agent.run("Dropped with its agent.", max_steps=2)
        return recorder.run_id(agent) or "", weakref.ref(recorder)

    before = {t for t in threading.enumerate() if t.name == "lessonbank-recorder"}
    run_id, recorder_ref = run_and_drop()
    mine = [t for t in threading.enumerate() if t.name == "lessonbank-recorder" and t not in before]
    deadline = time.monotonic() + 30
    while recorder_ref() is not None or any(t.is_alive() for t in mine):
        assert time.monotonic() < deadline, "the dropped recorder's writer thread did not end"
        gc.collect()
        time.sleep(0.05)
    # delivered by the writer, or (Redis slow to answer on a busy machine) spooled and replayed by the survivor
    wait_until(lambda: [r.kind for r in run_records(redis_client, run_id)] == ["action", "action", "action"], 60,
               "the dropped recorder's records in Redis")


def test_a_writer_retired_while_it_lingers_for_more_records_still_ends(settings, redis_client, monkeypatch):
    # The thread lingers after each batch for more records; a retirement whose wake-up it takes there
    # used to send it to sleep for good (the dropped-recorder test above failed now and then).
    from lessonbank.recorder import writer as writer_module

    monkeypatch.setattr(writer_module, "LINGER", 30.0)  # a window no machine, however busy, lets pass unseen
    recorder = StepRecorder(bank=BANK, settings=settings)
    agent = CodeAgent(tools=[], model=ScriptedModel([code_reply("x = 1")]),
                      step_callbacks={ActionStep: recorder.step_callbacks[ActionStep]}, verbosity_level=0)
    agent.run("Retired while lingering.", max_steps=1)
    run_id = recorder.run_id(agent) or ""
    writer = recorder._writer
    thread = writer._thread
    assert thread is not None and thread.is_alive()
    wait_until(lambda: writer.pending == 0 and len(run_records(redis_client, run_id)) == 2, 5,
               "both records delivered")
    writer.retire()  # the thread lingers 30 s for more records after that delivery: the retirement comes inside it
    thread.join(10)
    assert not thread.is_alive(), "a writer retired while lingering never ended"


@tool
def search_catalog(query: str) -> dict:
    """Search the product catalog.

    Args:
        query: Words to look for in product names.
    """
    if query == "boom":
        raise ValueError("catalog is down")
    items = [{"name": f"{query} small", "price": 9.5}, {"name": f"{query} large", "price": 31.0}]
    return {"status": "ok", "data": {"items": items, "total": 17}, "took_ms": 12}


@tool
def leaky(query: str) -> dict:
    """Return a record keyed by a token.

    Args:
        query: Anything.
    """
    return {"ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8": [{"x": 1}]}


def test_a_tool_result_the_code_never_printed_leaves_its_structure_in_the_step(recorder, redis_client):
    """The small agent's mistake: it loops over the dict's keys. The step shows the error, not the result;
    the record carries the result's structure (keys and types, no value), and the agent's run is unchanged."""
    agent = CodeAgent(tools=[search_catalog, leaky], model=ScriptedModel([
        code_reply('r = search_catalog("lamp")\ncount = sum(1 for p in r if p["price"] < 20)'),
        code_reply('r = search_catalog("boom")'),
        code_reply('items = search_catalog("mug")["data"]["items"]\nsearch_catalog("cup")\nleaky("x")\n'
                   'n = len([p for p in items if p["price"] < 20])'),
        code_reply("final_answer(n)"),
    ]), verbosity_level=0, max_steps=5)
    assert recorder.run(agent, "How many lamps cost less than 20 euros?") == 1  # results reach the code unchanged
    records = run_records(redis_client, recorder.run_id(agent))
    looped, boom, counted = records[:3]
    assert "string indices must be integers" in looped.error_message and "lamp small" not in looped.observations
    assert [(r.name, r.specimen) for r in looped.tool_results] == [
        ("search_catalog", {"status": "", "data": {"items": [{"name": "", "price": 0.0}, {"~": "count", "n": 2}],
                                                   "total": 0}, "took_ms": 0})]
    assert "catalog is down" in boom.error_message and boom.tool_results == []  # the tool's error passes through
    assert [r.name for r in counted.tool_results] == ["search_catalog"]  # once per tool and step; the token key
    raw = redis_client.hget(f"lessonbank:run:{recorder.run_id(agent)}:steps", "0").decode()  # ... never leaves
    record = json.loads(raw)
    kept = json.dumps(record["tool_results"])
    untimed = json.dumps({k: v for k, v in record.items() if not k.endswith("_at") and k != "duration"})
    # (the price 9.5 is looked for outside the timestamps, which hold "9.5" now and then: 1796410349.57)
    assert "lamp small" not in raw and "9.5" not in untimed
    assert "17" not in kept and "ok" not in kept.replace("took", "")
    assert all(r.tool_results == [] for r in records[3:])


def test_tools_shared_by_two_recorded_agents_feed_each_its_own_steps(settings, redis_client):
    first, second = StepRecorder(bank="one", settings=settings), StepRecorder(bank="two", settings=settings)
    original_forward = search_catalog.forward
    agents = []
    for rec, query in ((first, "lamp"), (second, "mug")):
        agent = CodeAgent(tools=[search_catalog], model=ScriptedModel([
            code_reply(f'r = search_catalog("{query}")'), final_code("'done'")]), verbosity_level=0)
        rec.attach(agent)
        rec.attach(agent)  # idempotent: the tool is wrapped once
        agents.append(agent)
    assert agents[0].tools["search_catalog"] is not agents[1].tools["search_catalog"]  # a copy per agent
    assert search_catalog.forward == original_forward  # the shared tool itself is left alone
    agents[0].run("Search lamps.")
    agents[1].run("Search mugs.")
    for rec, agent in ((first, agents[0]), (second, agents[1])):
        (action, *_) = run_records(redis_client, rec.run_id(agent))
        assert [r.name for r in action.tool_results] == ["search_catalog"]
        rec.close(interrupt_open_runs=False)
    assert agents[0].tools["search_catalog"]("chair")["data"]["total"] == 17  # still the tool itself
    assert agents[0].tools["final_answer"].forward == type(agents[0].tools["final_answer"]).forward.__get__(
        agents[0].tools["final_answer"])  # final_answer is never watched


@pytest.mark.parametrize("kind", ["code", "tool_calling"])
def test_a_shared_tool_feeds_only_the_agent_whose_run_called_it(settings, redis_client, kind):
    """Two banks (two tenants) share a module-level tool: one agent's tool results never reach the other's
    records, whether the tool is called from code (in the executor's thread) or as a tool call."""
    tenant_a, tenant_b = StepRecorder(bank="tenant-a", settings=settings), StepRecorder(bank="tenant-b",
                                                                                       settings=settings)
    if kind == "code":
        a = CodeAgent(tools=[search_catalog], model=ScriptedModel([
            code_reply('r = search_catalog("lamp")'), final_code(1)]), verbosity_level=0)
        b = CodeAgent(tools=[search_catalog], model=ScriptedModel([code_reply("x = 2"), final_code(2)]),
                      verbosity_level=0)
    else:
        a = ToolCallingAgent(tools=[search_catalog], model=ScriptedModel([
            tool_call_reply("search_catalog", {"query": "lamp"}), final_tool_call("1")]), verbosity_level=0)
        b = ToolCallingAgent(tools=[search_catalog], model=ScriptedModel([
            tool_call_reply("final_answer", {"answer": "2"})]), verbosity_level=0)
    tenant_a.attach(a)
    tenant_b.attach(b)
    try:
        a.run("tenant A task")
        b.run("tenant B task, never calls the tool")
        a_actions = [r for r in run_records(redis_client, tenant_a.run_id(a)) if r.kind == "action"]
        b_actions = [r for r in run_records(redis_client, tenant_b.run_id(b)) if r.kind == "action"]
        assert [t.name for t in a_actions[0].tool_results] == ["search_catalog"]
        assert b_actions and all(r.tool_results == [] for r in b_actions), "tenant A's tool result leaked into B"
    finally:
        tenant_a.close(interrupt_open_runs=False)
        tenant_b.close(interrupt_open_runs=False)


def test_watching_a_shared_tool_leaves_nothing_behind_when_its_agents_go(settings):
    """One short-lived agent per request, all sharing a module-level tool: the tool does not collect a watcher
    per agent (its calls would walk them all), and what watched an agent goes away with the agent."""
    import gc
    import weakref

    rec = StepRecorder(bank="b", settings=settings)
    original_forward = search_catalog.forward
    copies = []
    try:
        for _ in range(50):
            agent = CodeAgent(tools=[search_catalog], model=ScriptedModel([], then=final_code(1)),
                              verbosity_level=0)
            rec.attach(agent)
            copies.append(weakref.ref(agent.tools["search_catalog"]))
            del agent
        gc.collect()
        assert search_catalog.forward == original_forward
        assert not vars(search_catalog.forward).get("_lessonbank_sinks")
        assert all(ref() is None or ref() is search_catalog for ref in copies)
    finally:
        rec.close(interrupt_open_runs=False)
