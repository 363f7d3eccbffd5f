"""Step serialization: plain-text fields, caps with markers, images counted, secrets gone, types kept."""

from __future__ import annotations

import datetime
import json

import pytest
from PIL import Image
from smolagents.agent_types import AgentImage
from smolagents.memory import ActionStep, FinalAnswerStep, PlanningStep, ToolCall
from smolagents.models import ChatMessage, MessageRole
from smolagents.monitoring import Timing, TokenUsage

from lessonbank.core.models import StepRecord
from lessonbank.core.redact import Redactor
from lessonbank.recorder import snapshot
from lessonbank.recorder.serialize import StepSerializer, cap_text
from lessonbank.recorder.snapshot import RunInfo, Snapshot

RUN = RunInfo(bank="b", run_id="r1", agent="CodeAgent", task="Do it.")


class Serializer(StepSerializer):
    """The serializer fed the way the recorder feeds it: a snapshot taken on the agent's thread."""

    def action(self, step: ActionStep, run: RunInfo, seq: int) -> str:
        return self.record(Snapshot(run, seq, "action", snapshot.action_fields(step), 0.0))

    def planning(self, step: PlanningStep, run: RunInfo, seq: int, step_number: int | None) -> str:
        return self.record(Snapshot(run, seq, "planning", snapshot.planning_fields(step, step_number), 0.0))

    def final(self, step: FinalAnswerStep, run: RunInfo, seq: int) -> str:
        return self.record(Snapshot(run, seq, "final", snapshot.final_fields(step), 0.0))

    def run_end(self, run: RunInfo, seq: int, outcome: str, error: BaseException | None = None) -> str:
        return self.record(Snapshot(run, seq, "run_end", snapshot.end_fields(error), 0.0, outcome))


def serializer(field: int = 4096, record: int = 32768) -> Serializer:
    return Serializer(Redactor(), max_field_chars=field, max_record_bytes=record)


def action(**fields) -> ActionStep:
    return ActionStep(step_number=1, timing=Timing(start_time=100.0, end_time=101.5), **fields)


def load(data: str) -> StepRecord:
    return StepRecord.from_json(data)


def test_json_looking_strings_stay_strings():
    data = serializer().action(action(
        model_output='{"thought": "x"}', observations='{"a": 1}', action_output="[1, 2]",
        tool_calls=[ToolCall(name="lookup", arguments='{"k": "v"}', id="c1")],
    ), RUN, 0)
    raw = json.loads(data)
    assert raw["observations"] == '{"a": 1}' and raw["action_output"] == "[1, 2]"
    assert raw["model_output"] == '{"thought": "x"}' and raw["tool_calls"][0]["arguments"] == '{"k": "v"}'
    record = load(data)
    assert record.duration == 1.5 and record.id == "r1:0" and record.v == 1


def test_structured_values_become_json_text_and_odd_values_reprs():
    class Odd:
        def __repr__(self) -> str:
            return "<odd thing>"

    record = load(serializer().action(action(
        action_output={"when": datetime.date(2024, 1, 2), "blob": b"\xff", "n": 1},
        tool_calls=[ToolCall(name="t", arguments={"x": [1, 2], "y": Odd()}, id="c")],
        observations=None,
    ), RUN, 0))
    assert json.loads(record.action_output) == {"when": "datetime.date(2024, 1, 2)", "blob": "\ufffd", "n": 1}
    assert json.loads(record.tool_calls[0].arguments) == {"x": [1, 2], "y": "<odd thing>"}
    assert record.observations == ""


def test_unrepresentable_value_and_numbers():
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    s = serializer()
    assert load(s.action(action(action_output=Broken()), RUN, 0)).action_output == "<unrepresentable Broken>"
    assert load(s.action(action(action_output=3.5), RUN, 0)).action_output == "3.5"
    assert load(s.action(action(action_output=True), RUN, 0)).action_output == "True"


def test_undecodable_bytes_and_lone_surrogates_are_replaced():
    data = serializer().action(action(observations="bad \udcff surrogate", action_output=b"ok\x80\xfe"), RUN, 0)
    data.encode("utf-8")  # always valid UTF-8
    record = load(data)
    assert record.action_output == "ok\ufffd\ufffd"
    assert record.observations == "bad ? surrogate"


def test_model_input_messages_never_recorded():
    secret_history = ChatMessage(role=MessageRole.USER, content="HISTORY-MARKER repeated every step")
    data = serializer().action(action(model_input_messages=[secret_history], model_output="ok"), RUN, 0)
    assert "HISTORY-MARKER" not in data and "model_input_messages" not in data


def test_field_cap_keeps_head_and_tail_with_a_marker():
    text = "HEAD" + "x" * 10_000 + "TAIL"
    record = load(serializer(field=1000).action(action(observations=text), RUN, 0))
    assert len(record.observations) <= 1000
    assert record.observations.startswith("HEAD") and record.observations.endswith("TAIL")
    assert "chars cut]" in record.observations and record.truncated == ["observations"]


def test_cap_text_marker_counts_cut_chars():
    out, cut = cap_text("a" * 500, 200)
    assert cut and len(out) <= 200 and "[300 chars cut]" in out
    assert cap_text("short", 200) == ("short", False)


def test_whole_record_cap():
    big = "y" * 4000
    data = serializer(field=4096, record=8000).action(action(
        model_output=big, code_action=big, observations=big, action_output=big,
        tool_calls=[ToolCall(name="t", arguments=big, id="1"), ToolCall(name="u", arguments=big, id="2")],
    ), RUN, 0)
    assert len(data.encode()) <= 8000
    record = load(data)
    assert {"observations", "code", "model_output"} <= set(record.truncated)


def test_huge_text_is_cut_before_redaction_without_leaking_a_straddling_secret():
    secret = "sk-" + "Q" * 40
    text = "z" * 990 + secret + "w" * 5_000_000
    record = load(serializer(field=1000).action(action(observations=text), RUN, 0))
    assert "QQQQQQQQ" not in record.observations
    assert "chars cut]" in record.observations and len(record.observations) <= 1000


def test_secrets_are_redacted_in_every_field():
    key = "sk-abcdefghijklmnopqrstuvwx0123"
    data = serializer().action(action(
        model_output=f"use {key}", code_action=f"api_key = '{key}'", observations=f"got {key}",
        error=None, action_output=key, tool_calls=[ToolCall(name="t", arguments={"token": key}, id="1")],
    ), RunInfo("b", "r", "a", f"task with {key}"), 0)
    assert key not in data and "[REDACTED]" in data and load(data).task == "task with [REDACTED]"


def test_images_are_counted_not_embedded():
    image = Image.new("RGB", (3, 2))
    data = serializer().action(action(observations_images=[image, image], action_output=AgentImage(image)), RUN, 0)
    record = load(data)
    assert record.images == 3 and record.action_output == "<image 3x2 RGB>"
    assert len(data) < 2000


def test_error_planning_final_and_run_end_records():
    from smolagents.monitoring import AgentLogger, LogLevel
    from smolagents.utils import AgentExecutionError

    error = AgentExecutionError("boom at line 3", AgentLogger(level=LogLevel.OFF))
    s = serializer()
    record = load(s.action(action(error=error, token_usage=TokenUsage(3, 4)), RUN, 0))
    assert (record.error_type, record.error_message) == ("AgentExecutionError", "boom at line 3")
    assert record.token_usage is not None and record.token_usage.output_tokens == 4

    plan = PlanningStep(model_input_messages=[], model_output_message=ChatMessage(role=MessageRole.ASSISTANT),
                        plan="1. Look.\n2. Answer.", timing=Timing(start_time=1.0, end_time=2.0))
    record = load(s.planning(plan, RUN, 1, 1))
    assert (record.kind, record.plan, record.step_number) == ("planning", "1. Look.\n2. Answer.", 1)

    record = load(s.final(FinalAnswerStep(output={"answer": 42}), RUN, 2))
    assert record.kind == "final" and record.is_final and json.loads(record.action_output) == {"answer": 42}

    record = load(s.run_end(RUN, 3, "error", ValueError("password=hunter2 rejected")))
    assert (record.kind, record.outcome, record.error_type) == ("run_end", "error", "ValueError")
    assert "hunter2" not in record.error_message


@pytest.mark.parametrize("output", ["plain", 7, None, [1, "a"], b"bytes"])
def test_final_output_types_always_text(output):
    record = load(serializer().final(FinalAnswerStep(output=output), RUN, 0))
    assert isinstance(record.action_output, str)


def test_code_agent_tool_call_duplicate_of_code_is_dropped():
    code = "print(1)"
    record = load(serializer().action(action(
        code_action=code, tool_calls=[ToolCall(name="python_interpreter", arguments=code, id="c")]
    ), RUN, 0))
    assert record.code == code and record.tool_calls == []


def test_tool_result_structures_are_kept_unless_secret_and_go_first_when_the_record_is_too_big():
    fields = snapshot.action_fields(action(code_action="r = f()", observations=""))
    shape = {"data": {"items": [{"name": "", "price": 0.0}]}}
    fields["tool_results"] = [("f", shape), ("leaky", {"AKIA" + "ABCDEFGHIJKLMNOP": [{"x": 0}]}), ("g" * 65, shape)]
    record = load(serializer().record(Snapshot(RUN, 0, "action", fields, 0.0)))
    assert [(r.name, r.specimen) for r in record.tool_results] == [("f", shape)]  # no token, no overlong name
    wide = {f"key_{i}": [{f"field_{j}": "" for j in range(13)}] for i in range(13)}
    fields["tool_results"] = [("f", wide)]
    data = serializer(record=1024).record(Snapshot(RUN, 0, "action", fields, 0.0))
    assert len(data) <= 1024 and load(data).tool_results == [] and "tool_results" in load(data).truncated


@pytest.mark.parametrize("calls", [
    [ToolCall(name=f"t{i}", arguments={"q": "y" * 4000}, id=str(i)) for i in range(200)],
    [ToolCall(name="\x01" * 4000, arguments="\x01" * 4000, id=str(i)) for i in range(20)],  # 6 bytes a char
    [ToolCall(name="n" * 60, arguments="", id=str(i)) for i in range(2000)],
], ids=["200 calls of 4 KB", "escape-heavy names and arguments", "2000 short calls"])
def test_the_record_cap_holds_whatever_the_tool_calls_hold(calls):
    for cap in (32768, 1024):
        data = serializer(record=cap).action(action(tool_calls=calls, observations="\x02" * 4096,
                                                    model_output="m" * 4096), RUN, 0)
        assert len(data.encode("utf-8")) <= cap
        record = load(data)
        assert "tool_calls" in record.truncated and (record.tool_calls or cap == 1024)
        assert all(len(call.name) <= 64 for call in record.tool_calls)
        assert record.run_id == "r1" and record.kind == "action"
