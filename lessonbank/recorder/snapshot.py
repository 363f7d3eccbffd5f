"""What the step callback keeps of a smolagents step: plain values, taken on the agent's thread.

A snapshot holds text (or numbers) only, never the step's objects: the agent may change its values
later, and images must not stay alive. Converting is cheap for the usual step (strings are kept as
they are); redaction, caps and JSON happen later, on the recorder's writer thread (``serialize.py``).

Rules: never ``model_input_messages``; images become a count (and a ``<image WxH MODE>`` text when
they are a value); values that are not text become JSON (dicts, lists, tuples, sets) or a ``repr`` cut at
1 MiB. A container is walked, never more than ``MAX_ITEMS`` of its values (deep ones included) and never
deeper than ``MAX_DEPTH``, before it is written: what is left out is said in its place (``"…": "[599,000
more items]"``), and a string inside it keeps its first ``MAX_INNER_CHARS`` characters, so a huge value left
as a step's last expression costs the callback the same few milliseconds as a small one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from smolagents.memory import ActionStep, FinalAnswerStep, PlanningStep

_REPR_LIMIT = 1 << 20
_CODE_TOOL = "python_interpreter"
MAX_ITEMS = 2000  # values of a container (at any depth) a snapshot walks
MAX_DEPTH = 32
MAX_INNER_CHARS = 16384  # characters kept of one string inside a container
MORE = "…"  # the key (in an object) or the first characters (in a list) of what says how much was left out
_PLAIN = (str, int, float, bool, type(None))


@dataclass(slots=True)
class RunInfo:
    """One run, as every record of it names it. ``task`` is the raw task text; the writer cleans it once
    (``clean_task``). ``extra`` goes into the run's hash with its records and its close."""

    bank: str
    run_id: str
    agent: str
    task: str
    extra: dict[str, str] = field(default_factory=dict)
    clean_task: str | None = None


@dataclass(slots=True)
class Snapshot:
    """One record to write: ``kind`` is ``action``, ``planning``, ``final`` or ``run_end``; ``fields`` holds
    the step's values as text (``tool_calls``: ``(name, arguments)`` pairs) and numbers. Or (``kind``
    ``verdict``) the verdict of the run's check: its ``outcome``, and its ``source``, ``note`` and ``ttl``."""

    run: RunInfo
    seq: int
    kind: str
    fields: dict[str, Any]
    at: float
    outcome: str = ""


def valid_utf8(text: str) -> str:
    """``text``, with any lone surrogate (text decoded with ``surrogateescape``, say) replaced: Redis, the
    run scripts' JSON and the spool file all need text that encodes as UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def is_image(value: Any) -> bool:
    """A PIL image (smolagents' AgentImage included), recognised without importing PIL."""
    return any(cls.__module__.startswith("PIL.") for cls in type(value).__mro__)


class Converter:
    """Turns any value into text, counting the images it meets on the way."""

    __slots__ = ("images",)

    def __init__(self) -> None:
        self.images = 0

    def text(self, value: Any) -> str:
        if value is None:
            return ""
        if type(value) is str:
            return value
        if isinstance(value, str):
            return str.__str__(value)
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value).decode("utf-8", "replace")
        if isinstance(value, bool | int | float):
            return repr(value)
        if is_image(value):
            return self._image(value)
        if isinstance(value, dict | list | tuple | set | frozenset):
            try:
                return json.dumps(self._pruned(value, [MAX_ITEMS], ()), ensure_ascii=False,
                                  default=self._json_default)
            except (TypeError, ValueError, RecursionError):
                pass
        return self._repr(value)

    def _pruned(self, value: Any, left: list[int], path: tuple[int, ...]) -> Any:
        """A copy of ``value`` JSON can write at once: at most ``left[0]`` values walked (shared by the whole
        value), strings cut, keys that are not text or numbers given as their ``repr``, cycles and depth cut."""
        if isinstance(value, str):
            return value if len(value) <= MAX_INNER_CHARS else (
                value[:MAX_INNER_CHARS] + f"{MORE}[{len(value) - MAX_INNER_CHARS:,} chars cut]")
        if not isinstance(value, dict | list | tuple | set | frozenset):
            return value if isinstance(value, _PLAIN) else self._json_default(value)
        if id(value) in path or len(path) >= MAX_DEPTH:
            return f"{MORE}[{'a cycle' if id(value) in path else 'deeper values'} left out]"
        inner = (*path, id(value))
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            for key, item in value.items():
                if left[0] <= 0:
                    out[MORE] = f"[{len(value) - len(out):,} more items]"
                    break
                left[0] -= 1
                name = key if isinstance(key, _PLAIN) else self._repr(key)[:MAX_INNER_CHARS]
                out[name] = self._pruned(item, left, inner)
            return out
        items: list[Any] = []
        for item in value:
            if left[0] <= 0:
                items.append(f"{MORE}[{len(value) - len(items):,} more items]")
                break
            left[0] -= 1
            items.append(self._pruned(item, left, inner))
        return items

    def _image(self, value: Any) -> str:
        self.images += 1
        raw = getattr(value, "_raw", None)  # smolagents' AgentImage wraps the real image
        image = raw if raw is not None else value
        size = getattr(image, "size", ("?", "?"))
        return f"<image {size[0]}x{size[1]} {getattr(image, 'mode', '')}>".replace(" >", ">")

    def _json_default(self, value: Any) -> Any:
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value[:MAX_INNER_CHARS]).decode("utf-8", "replace")
        if is_image(value):
            return self._image(value)
        return self._repr(value)[:MAX_INNER_CHARS]

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


def _timing(fields: dict[str, Any], timing: Any, usage: Any) -> dict[str, Any]:
    if timing is not None:
        fields["started_at"] = timing.start_time
        fields["ended_at"] = timing.end_time
        fields["duration"] = timing.duration
    if usage is not None:
        fields["token_usage"] = (usage.input_tokens, usage.output_tokens)
    return fields


def action_fields(step: ActionStep) -> dict[str, Any]:
    conv = Converter()
    code = conv.text(step.code_action)
    calls = []
    for call in step.tool_calls or ():
        arguments = conv.text(call.arguments)
        if not (call.name == _CODE_TOOL and arguments == code):
            calls.append((conv.text(call.name), arguments))
    fields: dict[str, Any] = {
        "step_number": step.step_number,
        "model_output": conv.text(_content_text(step.model_output)),
        "code": code,
        "tool_calls": calls,
        "observations": conv.text(step.observations),
        "action_output": conv.text(step.action_output),
        "is_final": bool(step.is_final_answer),
    }
    if step.error is not None:
        fields["error_type"] = type(step.error).__name__
        fields["error_message"] = conv.text(getattr(step.error, "message", None) or str(step.error))
    fields["images"] = conv.images + len(step.observations_images or ())
    return _timing(fields, step.timing, step.token_usage)


def planning_fields(step: PlanningStep, step_number: int | None) -> dict[str, Any]:
    fields = {"step_number": step_number, "plan": Converter().text(step.plan)}
    return _timing(fields, step.timing, step.token_usage)


def final_fields(step: FinalAnswerStep) -> dict[str, Any]:
    conv = Converter()
    output = conv.text(step.output)
    return {"action_output": output, "is_final": True, "images": conv.images}


def end_fields(error: BaseException | None) -> dict[str, Any]:
    """The fields of a run's close; never raises (an exception's ``__str__`` is foreign code)."""
    if error is None:
        return {}
    try:
        message = Converter().text(str(error))
    except Exception:  # a user exception whose __str__ raises (or returns a non-str)
        message = f"<unprintable {type(error).__name__}>"
    return {"error_type": type(error).__name__, "error_message": message}
