"""smolagents' recorded steps (a CodeAgent on the local executor, and the tool calls of a ToolCallingAgent) read
into the normalised view: the only module that reads smolagents' own text formats.

What smolagents writes and this reads:

- a failed CodeAgent step's error: ``Code execution failed at line '<statement>' due to: <exception>``;
- a failed tool call's error: ``Error executing tool '<name>' with arguments ...: <exception>``;
- a CodeAgent step's observation: ``Execution logs:\\n<printed>\\nLast output from code snippet:\\n<value>``
  (the value ``None`` when the code ended with nothing);
- the model's output, led by ``Thought:``; the code interpreter's own tool call, ``python_interpreter``.

The tools a step called: a ToolCallingAgent step's tool calls; for a CodeAgent step, the call sites in its
code (parsed with ``ast``; code that does not parse calls nothing) whose function is a plain name in the run's
tool list, or, without one, every plain-name call that is neither a Python builtin nor defined by the run's own
code so far (``def``, ``class``, assignment, import, parameter): tools are the names the code calls without
defining them. Each argument's value is kept when it is a constant, with where it came from: the task, the
output of an earlier step (tool output, an error message), or a literal of the agent's own.
"""

from __future__ import annotations

import ast
import builtins
import json
from collections.abc import Iterable, Sequence
from typing import Any

from lessonbank.core.models import StepRecord
from lessonbank.learn.view import Argument, Call, Request, Returned, RunView, Source, Step

CODE_TOOL = "python_interpreter"  # a CodeAgent's own "tool call" carrying its code; the code's calls are what count
LOGS_HEADER = "Execution logs:"
LAST_OUTPUT = "Last output from code snippet:"
THOUGHT = "Thought:"
_CODE_FAILED = "Code execution failed at line '"
_DUE_TO = "' due to: "
_TOOL_FAILED = "Error executing tool '"
_BUILTINS = frozenset(dir(builtins))
_STEP_KINDS = ("action", "planning", "final")


def failing_line(message: str) -> str:
    """The code smolagents says a step failed at (``Code execution failed at line '...' due to: ``), or ""."""
    if message.startswith(_CODE_FAILED) and _DUE_TO in message:
        return message[len(_CODE_FAILED):].split(_DUE_TO, 1)[0]
    return ""


def error_text(message: str) -> str:
    """The exception part of a smolagents error ("ValueError: ..."), without its wrapper."""
    if message.startswith(_CODE_FAILED) and _DUE_TO in message:
        return message.split(_DUE_TO, 1)[1]
    if message.startswith(_TOOL_FAILED):
        for part in _split_after(message, ": "):
            head = part.split(":", 1)[0]
            if head.isidentifier() and head.endswith(("Error", "Exception")):
                return part.split("\n", 1)[0]
    return message


def _split_after(text: str, separator: str) -> Iterable[str]:
    start = text.find(separator)
    while start != -1:
        yield text[start + len(separator):]
        start = text.find(separator, start + 1)


def failed_tool(message: str) -> str | None:
    """The tool named by a ToolCallingAgent's ``Error executing tool 'name' ...``, else None."""
    if not message.startswith(_TOOL_FAILED):
        return None
    return message[len(_TOOL_FAILED):].split("'", 1)[0] or None


def logs(observation: str) -> str:
    """What a CodeAgent step printed, without smolagents' framing (or the observation as it is)."""
    return observation.partition(LAST_OUTPUT)[0].replace(LOGS_HEADER, "").strip()


def last_output(observation: str) -> str:
    """The value a CodeAgent step's code ended with, as smolagents showed it ("" when it showed None, or none)."""
    last = observation.partition(LAST_OUTPUT)[2].strip()
    return "" if last == "None" else last


def unframed(text: str) -> str:
    """An observation without the executor's empty framing: its ``Execution logs:`` header, and the trailer
    saying the code ended with None."""
    lines = text.strip().splitlines()
    if lines and lines[0].strip() == LOGS_HEADER:
        lines = lines[1:]
    if len(lines) >= 2 and lines[-2].strip() == LAST_OUTPUT and lines[-1].strip() == "None":
        lines = lines[:-2]
    return "\n".join(lines)


def thought(model_output: str) -> str:
    """The model's reasoning without the ``Thought:`` label a CodeAgent's prompt asks it to lead with."""
    stripped = model_output.strip()
    return stripped[len(THOUGHT):].strip() if stripped.startswith(THOUGHT) else stripped


class _Definitions(ast.NodeVisitor):
    """Names a piece of code defines, and its calls of plain names (call sites, in order)."""

    def __init__(self) -> None:
        self.defined: set[str] = set()
        self.called: list[tuple[str, ast.Call]] = []

    def visit_Call(self, node: ast.Call) -> None:  # noqa: N802 (ast's naming)
        if isinstance(node.func, ast.Name):
            self.called.append((node.func.id, node))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:  # noqa: N802
        if isinstance(node.ctx, ast.Store | ast.Del):
            self.defined.add(node.id)

    def visit_arg(self, node: ast.arg) -> None:
        self.defined.add(node.arg)

    def _define(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.defined.add(node.name)
        self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _define  # noqa: N815

    def visit_alias(self, node: ast.alias) -> None:
        self.defined.add(node.asname or node.name.split(".")[0])

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:  # noqa: N802
        if node.name:
            self.defined.add(node.name)
        self.generic_visit(node)


class _Sources:
    """Where a value came from: the task, what the run observed before, or the agent itself."""

    def __init__(self, task: str) -> None:
        self.task = task.lower()
        self.seen = ""

    def argument(self, name: str, value: str | None) -> Argument:
        return Argument(name, value, self.of(value))

    def of(self, value: str | None) -> Source:
        if value is None:
            return "unknown"
        text = value.strip().lower()
        if len(text) >= 2 and _occurs(text, self.task):
            return "task"
        if text and _occurs(text, self.seen):
            return "tool_output"
        return "literal"


MAX_OCCURRENCES = 64  # of a value in a text looked at for one standing alone


def _occurs(value: str, text: str) -> bool:
    """Whether ``value`` stands alone in ``text`` (not part of a longer word or number: "3" is not in "503")."""
    at = text.find(value)
    for _ in range(MAX_OCCURRENCES):
        if at < 0:
            return False
        before = text[at - 1] if at else " "
        after = text[at + len(value)] if at + len(value) < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        at = text.find(value, at + 1)
    return False


def _constant(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float) and not isinstance(
            node.value, bool):
        return str(node.value)
    return None


def _code_calls(code: str, tools: Sequence[str] | None, defined: set[str], sources: _Sources) -> list[Call]:
    """The tool call sites of ``code`` (see the module); adds the names it defines to ``defined``."""
    visitor = _Definitions()
    try:
        visitor.visit(ast.parse(code))
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # code nested deeper than a parser follows
        return []
    defined |= visitor.defined
    known = set(tools) if tools is not None else None
    calls = []
    for name, node in visitor.called:
        if (name not in known) if known is not None else (name in _BUILTINS or name in defined):
            continue
        arguments = [sources.argument(f"#{index}", _constant(arg)) for index, arg in enumerate(node.args, start=1)]
        arguments += [sources.argument(keyword.arg, _constant(keyword.value)) for keyword in node.keywords
                      if keyword.arg]
        calls.append(Call(name, tuple(arguments)))
    return calls


def _requested_calls(requests: list[Request], sources: _Sources) -> list[Call]:
    calls = []
    for request in requests:
        try:
            loaded: Any = json.loads(request.arguments) if request.arguments else {}
        except (ValueError, RecursionError):
            loaded = None
        values = loaded.items() if isinstance(loaded, dict) else []
        arguments = [sources.argument(str(key), str(value) if isinstance(value, str | int | float)
                                      and not isinstance(value, bool) else None) for key, value in values]
        calls.append(Call(request.name, tuple(arguments)))
    return calls


def _step(record: StepRecord, tools: Sequence[str] | None, defined: set[str], sources: _Sources) -> Step:
    requests = tuple(Request(call.name, call.arguments) for call in record.tool_calls)
    named = [request for request in requests if request.name and request.name != CODE_TOOL]
    calls: list[Call] = []
    if record.kind == "action":
        if named:
            calls = _requested_calls(named, sources)
        elif record.code:
            calls = _code_calls(record.code, tools, defined, sources)
    observation, message = record.observations, record.error_message
    return Step(
        seq=record.seq, kind=record.kind, number=record.step_number,  # type: ignore[arg-type]
        thought=thought(record.model_output), model_output=record.model_output, plan=record.plan,
        code=record.code, requests=requests, calls=tuple(calls),
        returned=tuple(Returned(result.name, result.specimen) for result in record.tool_results),
        failed=bool(record.error_type or record.error_message), error_type=record.error_type,
        error=error_text(message), error_message=message, failed_line=failing_line(message),
        failed_tool=failed_tool(message), observation=observation, output=unframed(observation),
        logs=logs(observation), last_output=last_output(observation), answer=record.action_output,
        is_final=record.is_final, duration=record.duration,
    )


def read_run(records: Iterable[StepRecord], task: str | None = None, outcome: str | None = None,
             tools: Sequence[str] | None = None, run_id: str = "") -> RunView:
    """The view of a run from its step records in order (``task``: the run's, else the records'; ``outcome``:
    the recorded one, else the run_end record's; ``tools``: the agent's tool names, when known)."""
    records = list(records)
    if task is None:
        task = next((r.task for r in records if r.task), "")
    if outcome is None:
        outcome = next((r.outcome for r in reversed(records) if r.kind == "run_end" and r.outcome), None) or "unknown"
    defined: set[str] = set()
    sources = _Sources(task)
    steps: list[Step] = []
    for record in records:
        if record.kind not in _STEP_KINDS:
            continue
        steps.append(_step(record, tools, defined, sources))
        sources.seen += f"\n{record.observations}\n{record.error_message}".lower()
    run_id = run_id or next((r.run_id for r in records), "")
    return RunView(task, tuple(steps), outcome, tuple(tools) if tools is not None else None, run_id)
