"""Snapshots -> ``StepRecord`` JSON: redacted, capped, and always valid UTF-8. Runs on the writer thread.

Every text field is redacted, then capped (head and tail kept, a marker in between); a text longer
than 16 field caps is cut to its head before redaction (redacting 10 MB costs seconds), with room
for a secret straddling the cut. Lone surrogates are replaced. JSON-looking strings stay strings.
Tool call names are cut to ``MAX_TOOL_NAME`` characters. The whole record is then fitted to
``max_record_bytes`` by halving its largest parts (counted as JSON, escapes included; the tool calls'
arguments all at once, then the number of calls); a record that still does not fit keeps no text at all:
the cap holds whatever the step held.
"""

from __future__ import annotations

import json
from typing import Any

from lessonbank.core.models import StepRecord, TokenUsageRecord, ToolCallRecord, ToolResultRecord
from lessonbank.core.redact import Redactor
from lessonbank.recorder.snapshot import RunInfo, Snapshot, valid_utf8
from lessonbank.recorder.tracking import MAX_TOOL_NAME

# Text longer than this many field caps is cut to its head before redaction.
_HEAD_ONLY_FACTOR = 16
# Room kept after the cut so that a secret straddling it is still seen whole by the redactor.
_REDACT_MARGIN = 512
_TEXT_FIELDS = ("model_output", "code", "observations", "error_message", "action_output", "plan", "task")
_SHRINK_ROUNDS = 100  # halvings tried before a record that still does not fit loses its text altogether
_MIN_SHRINK = 64  # bytes of JSON (or characters of tool call arguments) below which a part is not halved
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
        return valid_utf8(text)

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
                    ToolCallRecord(name=self.tool_name(call, cut), arguments=self.clean(args, cut, name))
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

    def tool_name(self, name: str, truncated: list[str]) -> str:
        """A tool call's name (the model wrote it): cleaned and cut to ``MAX_TOOL_NAME`` characters."""
        text = self.clean(name[: MAX_TOOL_NAME * _HEAD_ONLY_FACTOR], truncated, "tool_calls")
        if len(text) > MAX_TOOL_NAME:
            truncated.append("tool_calls")
            text = text[:MAX_TOOL_NAME]
        return text

    def tool_results(self, kept: list[tuple[str, Any]]) -> list[ToolResultRecord]:
        """The specimens of a step's tool results, less any whose keys look like a secret."""
        found = []
        for name, value in kept:
            if len(name) > MAX_TOOL_NAME or self.redactor.has_secret(json.dumps(value)):
                continue
            found.append(ToolResultRecord(name=name, specimen=value))
        return found

    def fit(self, record: StepRecord, truncated: list[str]) -> str:
        """The record's JSON, fitted to ``max_record_bytes``: its largest parts halved (sizes counted as JSON
        writes them, escapes included) until it fits; whatever is left over the cap then goes whole."""
        if truncated:
            record.truncated = sorted(set(truncated))
        data = record.to_json()
        for _ in range(_SHRINK_ROUNDS):
            if self._fits(data):
                return data
            if not _shrink_largest(record):
                break
            record.truncated = sorted(set(record.truncated))
            data = record.to_json()
        if self._fits(data):
            return data
        return _bare(record)

    def _fits(self, data: str) -> bool:
        return len(data) * 4 <= self.max_record_bytes or len(data.encode("utf-8")) <= self.max_record_bytes


def _json_size(text: str) -> int:
    return len(json.dumps(text))


def _shrink_largest(record: StepRecord) -> bool:
    """Halve the largest part of ``record`` (a text field, the tool calls, the tool results). False when
    nothing is left to shrink."""
    sizes = [(_json_size(getattr(record, name)), name) for name in _TEXT_FIELDS]
    sizes.append((sum(_json_size(c.name) + _json_size(c.arguments) + 24 for c in record.tool_calls), "tool_calls"))
    sizes.append((len(json.dumps([r.model_dump() for r in record.tool_results], default=str))
                  if record.tool_results else 0, "tool_results"))
    size, name = max(sizes)
    if size < _MIN_SHRINK:
        return False
    if name == "tool_results":
        record.tool_results = []
    elif name == "tool_calls":
        _shrink_calls(record)
    else:
        text = getattr(record, name)
        cut = cap_text(text, len(text) // 2)[0]
        setattr(record, name, cut if _json_size(cut) < size else "")
    record.truncated.append(name)
    return True


def _shrink_calls(record: StepRecord) -> None:
    """Halve the longest arguments (every call's, at once), or, when they are all short, drop the later half
    of the calls."""
    longest = max(len(call.arguments) for call in record.tool_calls)
    if longest >= _MIN_SHRINK:
        limit = longest // 2
        for call in record.tool_calls:
            call.arguments = cap_text(call.arguments, limit)[0]
    elif len(record.tool_calls) > 1:
        record.tool_calls = record.tool_calls[: len(record.tool_calls) // 2]
    else:
        record.tool_calls = []


def _bare(record: StepRecord) -> str:
    """The record without any text, tool call or tool result: ids, kind, numbers and what was cut."""
    for name in _TEXT_FIELDS:
        setattr(record, name, "")
    record.tool_calls, record.tool_results = [], []
    record.truncated = sorted({*record.truncated, *_TEXT_FIELDS, "tool_calls", "tool_results"})
    return record.to_json()
