"""Snapshots -> ``StepRecord`` JSON: redacted, capped, and always valid UTF-8. Runs on the writer thread.

Every text field is redacted, then capped (head and tail kept, a marker in between); a text longer
than 16 field caps is cut to its head before redaction (redacting 10 MB costs seconds), with room
for a secret straddling the cut. Lone surrogates are replaced. JSON-looking strings stay strings.
The whole record is then fitted to ``max_record_bytes`` by halving its largest fields.
"""

from __future__ import annotations

import json
from typing import Any

from lessonbank.core.models import StepRecord, TokenUsageRecord, ToolCallRecord, ToolResultRecord
from lessonbank.core.redact import Redactor
from lessonbank.recorder.snapshot import RunInfo, Snapshot
from lessonbank.recorder.tracking import MAX_TOOL_NAME

# Text longer than this many field caps is cut to its head before redaction.
_HEAD_ONLY_FACTOR = 16
# Room kept after the cut so that a secret straddling it is still seen whole by the redactor.
_REDACT_MARGIN = 512
_TEXT_FIELDS = ("model_output", "code", "observations", "error_message", "action_output", "plan", "task")
_CLEANED = ("model_output", "code", "observations", "error_message", "action_output", "plan")


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


class StepSerializer:
    """Builds the capped, redacted JSON of one step record from a snapshot."""

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

    def task_of(self, run: RunInfo) -> str:
        """The run's task, redacted and capped (computed once per run)."""
        if run.clean_task is None:
            run.clean_task = self.clean(run.task)
        return run.clean_task

    def record(self, snap: Snapshot) -> str:
        """The record JSON of ``snap``."""
        run = snap.run
        cut: list[str] = []
        fields: dict[str, Any] = {
            "id": f"{run.run_id}:{snap.seq}", "bank": run.bank, "run_id": run.run_id, "agent": run.agent,
            "task": self.task_of(run), "kind": snap.kind, "seq": snap.seq,
        }
        for name, value in snap.fields.items():
            if name in _CLEANED:
                fields[name] = self.clean(value, cut, name)
            elif name == "tool_calls":
                fields[name] = [
                    ToolCallRecord(name=self.clean(call, cut, name), arguments=self.clean(args, cut, name))
                    for call, args in value
                ]
            elif name == "tool_results":
                fields[name] = self.tool_results(value)
            elif name == "token_usage":
                fields[name] = TokenUsageRecord(input_tokens=value[0], output_tokens=value[1])
            else:
                fields[name] = value
        if snap.kind == "run_end":
            fields["outcome"] = snap.outcome
        return self.fit(StepRecord(**fields), cut)

    def tool_results(self, kept: list[tuple[str, Any]]) -> list[ToolResultRecord]:
        """The specimens of a step's tool results, less any whose keys look like a secret."""
        found = []
        for name, value in kept:
            if len(name) > MAX_TOOL_NAME or self.redactor.has_secret(json.dumps(value)):
                continue
            found.append(ToolResultRecord(name=name, specimen=value))
        return found

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
            if record.tool_results:
                record.tool_results = []
                record.truncated.append("tool_results")
                return True
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
