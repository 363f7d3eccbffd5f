"""smolagents memory steps -> ``StepRecord`` JSON: redacted, capped, and always plain text.

Rules: never ``model_input_messages``; images become a count; every text field is redacted, then
capped (head and tail kept, a marker in between); values that are not text become capped ``repr``s;
undecodable bytes and lone surrogates are replaced. JSON-looking strings stay strings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from smolagents.memory import ActionStep, FinalAnswerStep, PlanningStep

from lessonbank.core.models import RunOutcome, StepRecord, TokenUsageRecord, ToolCallRecord
from lessonbank.core.redact import Redactor

# Text longer than this many field caps is cut to its head before redaction (redacting 10 MB costs seconds).
_HEAD_ONLY_FACTOR = 16
# Room kept after the cut so that a secret straddling it is still seen whole by the redactor.
_REDACT_MARGIN = 512
_REPR_LIMIT = 1 << 20
_CODE_TOOL = "python_interpreter"
_TEXT_FIELDS = ("model_output", "code", "observations", "error_message", "action_output", "plan", "task")


@dataclass(frozen=True)
class RunInfo:
    """What every record of one run carries (``task`` already redacted and capped)."""

    bank: str
    run_id: str
    agent: str
    task: str


def is_image(value: Any) -> bool:
    """A PIL image (smolagents' AgentImage included), recognised without importing PIL."""
    return any(cls.__module__.startswith("PIL.") for cls in type(value).__mro__)


def marker(cut: int) -> str:
    return f"\n…[{cut} chars cut]…\n"


def cap_text(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` characters, keeping head and tail around a marker."""
    if len(text) <= limit:
        return text, False
    mark = marker(len(text) - limit)
    keep = max(limit - len(mark), 0)
    head = keep * 3 // 4
    tail = keep - head
    return text[:head] + mark + (text[-tail:] if tail else ""), True


def _clean_surrogates(text: str) -> str:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


class _Converter:
    """Turns any value into text, counting the images it meets on the way."""

    def __init__(self) -> None:
        self.images = 0

    def text(self, value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, str):
            return str.__str__(value)
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value).decode("utf-8", "replace")
        if isinstance(value, bool | int | float):
            return repr(value)
        if is_image(value):
            return self._image(value)
        if isinstance(value, dict | list | tuple):
            try:
                return json.dumps(value, ensure_ascii=False, default=self._json_default)
            except (TypeError, ValueError, RecursionError):
                pass
        return self._repr(value)

    def _image(self, value: Any) -> str:
        self.images += 1
        raw = getattr(value, "_raw", None)  # smolagents' AgentImage wraps the real image
        image = raw if raw is not None else value
        size = getattr(image, "size", ("?", "?"))
        return f"<image {size[0]}x{size[1]} {getattr(image, 'mode', '')}>".replace(" >", ">")

    def _json_default(self, value: Any) -> Any:
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value).decode("utf-8", "replace")
        if is_image(value):
            return self._image(value)
        return self._repr(value)

    def _repr(self, value: Any) -> str:
        if type(value).__module__.startswith("smolagents.agent_types"):
            return f"<{type(value).__name__}>"  # their str()/repr() write temp files
        try:
            text = repr(value)
        except Exception:  # a user object's __repr__ may raise anything
            return f"<unrepresentable {type(value).__name__}>"
        return text[:_REPR_LIMIT]


def _content_text(content: Any) -> Any:
    """Chat content given as a list of blocks -> the text of its text blocks."""
    if isinstance(content, list) and all(isinstance(block, dict) for block in content):
        texts = [block.get("text") for block in content if isinstance(block.get("text"), str)]
        if texts:
            return "\n".join(texts)
    return content


class StepSerializer:
    """Builds the capped, redacted JSON of one step record."""

    def __init__(self, redactor: Redactor, max_field_chars: int = 4096, max_record_bytes: int = 32768) -> None:
        self.redactor = redactor
        self.max_field_chars = max_field_chars
        self.max_record_bytes = max_record_bytes

    def clean(self, text: str, truncated: list[str] | None = None, name: str = "") -> str:
        """Redact then cap one text field; ``name`` goes into ``truncated`` when it was cut."""
        limit = self.max_field_chars
        original = len(text)
        if original > limit * _HEAD_ONLY_FACTOR:
            text = self.redactor.redact(text[: limit + _REDACT_MARGIN])
            head = max(limit - len(marker(original)), 0)
            text, cut = text[:head] + marker(original - head), True
        else:
            text, cut = cap_text(self.redactor.redact(text), limit)
        if cut and truncated is not None:
            truncated.append(name)
        return _clean_surrogates(text)

    def task_text(self, task: Any) -> str:
        return self.clean(_Converter().text(task))

    def action(self, step: ActionStep, run: RunInfo, seq: int) -> str:
        conv = _Converter()
        cut: list[str] = []
        code = conv.text(step.code_action)
        calls = [
            ToolCallRecord(
                name=self.clean(conv.text(call.name), cut, "tool_calls"),
                arguments=self.clean(conv.text(call.arguments), cut, "tool_calls"),
            )
            for call in step.tool_calls or []
            if not (call.name == _CODE_TOOL and conv.text(call.arguments) == code)
        ]
        fields = self._base(run, "action", seq, step.timing, step.token_usage)
        fields.update(
            step_number=step.step_number,
            model_output=self.clean(conv.text(_content_text(step.model_output)), cut, "model_output"),
            code=self.clean(code, cut, "code"),
            tool_calls=calls,
            observations=self.clean(conv.text(step.observations), cut, "observations"),
            action_output=self.clean(conv.text(step.action_output), cut, "action_output"),
            is_final=bool(step.is_final_answer),
        )
        if step.error is not None:
            message = conv.text(getattr(step.error, "message", None) or str(step.error))
            fields.update(error_type=type(step.error).__name__, error_message=self.clean(message, cut, "error_message"))
        fields["images"] = conv.images + len(step.observations_images or [])
        return self.fit(StepRecord(**fields), cut)

    def planning(self, step: PlanningStep, run: RunInfo, seq: int, step_number: int | None) -> str:
        cut: list[str] = []
        fields = self._base(run, "planning", seq, step.timing, step.token_usage)
        fields.update(step_number=step_number, plan=self.clean(_Converter().text(step.plan), cut, "plan"))
        return self.fit(StepRecord(**fields), cut)

    def final(self, step: FinalAnswerStep, run: RunInfo, seq: int) -> str:
        conv = _Converter()
        cut: list[str] = []
        fields = self._base(run, "final", seq)
        fields.update(action_output=self.clean(conv.text(step.output), cut, "action_output"), is_final=True)
        fields["images"] = conv.images
        return self.fit(StepRecord(**fields), cut)

    def run_end(self, run: RunInfo, seq: int, outcome: RunOutcome, error: BaseException | None = None) -> str:
        cut: list[str] = []
        fields = self._base(run, "run_end", seq)
        fields["outcome"] = outcome
        if error is not None:
            message = self.clean(_Converter().text(str(error)), cut, "error_message")
            fields.update(error_type=type(error).__name__, error_message=message)
        return self.fit(StepRecord(**fields), cut)

    def _base(self, run: RunInfo, kind: str, seq: int, timing: Any = None, usage: Any = None) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "id": f"{run.run_id}:{seq}", "bank": run.bank, "run_id": run.run_id, "agent": run.agent,
            "task": run.task, "kind": kind, "seq": seq,
        }
        if timing is not None:
            fields.update(started_at=timing.start_time, ended_at=timing.end_time, duration=timing.duration)
        if usage is not None:
            fields["token_usage"] = TokenUsageRecord(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
        return fields

    def fit(self, record: StepRecord, truncated: list[str]) -> str:
        """The record's JSON, with its largest fields halved until it fits ``max_record_bytes``."""
        if truncated:
            record.truncated = sorted(set(truncated))
        data = record.to_json()
        for _ in range(64):
            if len(data) * 4 <= self.max_record_bytes or len(data.encode("utf-8")) <= self.max_record_bytes:
                return data
            if not self._shrink_largest(record):
                break
            record.truncated = sorted(set(record.truncated))
            data = record.to_json()
        return data

    def _shrink_largest(self, record: StepRecord) -> bool:
        sizes = [(len(getattr(record, name)), name) for name in _TEXT_FIELDS]
        sizes += [(len(call.arguments), f"tool_calls.{i}") for i, call in enumerate(record.tool_calls)]
        size, name = max(sizes)
        if size < 64:
            if len(record.tool_calls) > 1:
                record.tool_calls = record.tool_calls[:1]
                record.truncated.append("tool_calls")
                return True
            return False
        if name.startswith("tool_calls."):
            call = record.tool_calls[int(name.split(".")[1])]
            call.arguments = cap_text(call.arguments, size // 2)[0]
            name = "tool_calls"
        else:
            setattr(record, name, cap_text(getattr(record, name), size // 2)[0])
        record.truncated.append(name)
        return True
