"""A run's step records read into the view, whatever agent made them: each step through the adapter of what
made it.

- a CodeAgent step on the local executor (``codeagent``), or on a remote one whose error is a traceback
  (``remote``);
- a ToolCallingAgent step (``toolcalling``): its tool calls, the one that failed (from its error), and the code
  of its code interpreter tool, read as a CodeAgent step's code;
- a managed agent's run: one of the above, with the id of its manager's run (``parent_run``), whose verdict
  it inherits.

Each call is kept with the line it was made in (a statement of the step's code, or the tool call written as
one line of Python) and whether that line failed, so that what reads the view (fixes, shapes, recipes,
evidence, credit) never reads an agent's own text formats.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lessonbank.core.models import StepRecord
from lessonbank.learn.adapters import codeagent, remote, toolcalling
from lessonbank.learn.adapters.calls import Sources, argument_values, as_line, code_calls
from lessonbank.learn.view import Call, Request, Returned, RunView, Step

_STEP_KINDS = ("action", "planning", "final")


@dataclass
class _Error:
    """What a step's error says: the exception, the line it failed at, the tool call that failed."""

    error: str = ""
    line: str = ""
    tool: str | None = None
    arguments: dict[str, object] | None = None
    code: str = ""  # the code a failed interpreter tool call ran
    printed: str = ""  # what a remote executor's step printed before it failed


def _error(message: str, code: str) -> _Error:
    if not message:
        return _Error()
    tool = toolcalling.failed_tool(message)
    if tool is not None:
        arguments = toolcalling.failed_arguments(message)
        ran = toolcalling.interpreter_code(tool, arguments or {})
        inner = toolcalling.tool_error(message) or message
        if ran:
            found = _error(inner, ran)
            return _Error(found.error, found.line, None, None, ran, found.printed)
        line = as_line(tool, arguments) if arguments is not None else ""
        return _Error(inner, line, tool, arguments)
    if codeagent.failing_line(message):
        return _Error(codeagent.error_text(message), codeagent.failing_line(message))
    if remote.is_traceback(message):
        return _Error(remote.error_text(message), remote.failing_line(message, code), printed=remote.logs(message))
    return _Error(message)


class _Reader:
    """Reads a run's records in order, keeping what later steps need: the names the code defined, what the run
    observed so far."""

    def __init__(self, task: str, tools: Sequence[str] | None) -> None:
        self.tools = tools
        self.defined: set[str] = set()
        self.sources = Sources(task)

    def step(self, record: StepRecord) -> Step:
        requests = tuple(Request(call.name, call.arguments) for call in record.tool_calls)
        loaded = [(request.name, toolcalling.arguments_of(request.arguments)) for request in requests]
        interpreted = "\n".join(code for name, arguments in loaded
                                if (code := toolcalling.interpreter_code(name, arguments)))
        message = record.error_message
        found = _error(message, record.code or interpreted)
        code = record.code or interpreted or found.code
        calls: list[Call] = []
        if record.kind == "action":
            calls = [argument_values(name, arguments, self.sources) for name, arguments in loaded
                     if name and name != toolcalling.CODE_TOOL]
            if code:
                calls += code_calls(code, self.tools, self.defined, self.sources, found.line)
            if found.tool is not None:
                calls.append(argument_values(found.tool, found.arguments or {}, self.sources, failed=True))
        observation = record.observations
        output = codeagent.unframed(observation)
        printed, last = codeagent.logs(observation), codeagent.last_output(observation)
        if interpreted and not record.code:
            printed, last = toolcalling.interpreter_output(observation)
        elif found.printed and not printed:
            printed = found.printed
        return Step(
            seq=record.seq, kind=record.kind, number=record.step_number,  # type: ignore[arg-type]
            thought=codeagent.thought(record.model_output), model_output=record.model_output, plan=record.plan,
            code=code, requests=requests, calls=tuple(calls),
            returned=tuple(Returned(result.name, result.specimen) for result in record.tool_results),
            failed=bool(record.error_type or message), error_type=record.error_type,
            error=found.error, error_message=message, failed_line=found.line, failed_tool=found.tool,
            observation=observation, output=output, logs=printed, last_output=last, answer=record.action_output,
            is_final=record.is_final, duration=record.duration,
        )

    def observed(self, record: StepRecord) -> None:
        self.sources.seen += f"\n{record.observations}\n{record.error_message}".lower()


def read_run(records: Iterable[StepRecord], task: str | None = None, outcome: str | None = None,
             tools: Sequence[str] | None = None, run_id: str = "", parent_run: str = "") -> RunView:
    """The view of a run from its step records in order (``task``: the run's, else the records'; ``outcome``:
    the recorded one, else the run_end record's; ``tools``: the agent's tool names, when known; ``parent_run``:
    the manager's run, for a managed agent's)."""
    records = list(records)
    if task is None:
        task = next((r.task for r in records if r.task), "")
    if outcome is None:
        outcome = next((r.outcome for r in reversed(records) if r.kind == "run_end" and r.outcome), None) or "unknown"
    reader = _Reader(task, tools)
    steps: list[Step] = []
    for record in records:
        if record.kind not in _STEP_KINDS:
            continue
        steps.append(reader.step(record))
        reader.observed(record)
    run_id = run_id or next((r.run_id for r in records), "")
    return RunView(task, tuple(steps), outcome, tuple(tools) if tools is not None else None, run_id, parent_run)
