"""One normalised view of a run: what every learning function reads, whatever agent made the run.

An adapter (``lessonbank.learn.adapters``) turns an agent type's recorded steps into it; nothing after it
reads an agent's own text formats. A step holds the calls it made (the tools, their arguments and where each
argument's value came from when known), whether it failed and how, what it printed and returned, and the raw
texts the run observed: those stay data (quoted, searched for values, shown to the distiller), never parsed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# Where an argument's value came from: the user's task, the output of an earlier step (tool output, an error
# message), a literal the agent wrote itself, or unknown (a value the code computed).
Source = Literal["task", "tool_output", "literal", "unknown"]
StepKind = Literal["action", "planning", "final"]


@dataclass(frozen=True)
class Argument:
    """One argument of a call: its keyword (``#N`` for the N-th passed by position), its value as text when it
    is a constant (None when computed), and where that value came from."""

    name: str
    value: str | None
    source: Source


@dataclass(frozen=True)
class Call:
    """A tool the step called, with its arguments (for code, one call site: a call in a loop counts once), the one
    line of code it was made in (a tool call written as the line that makes it), and whether that line failed."""

    tool: str
    arguments: tuple[Argument, ...] = ()
    line: str = ""
    failed: bool = False

    def value(self, name: str) -> str | None:
        """The constant value passed as ``name`` (a keyword, or ``#N`` by position), None when none."""
        return next((argument.value for argument in self.arguments if argument.name == name), None)


@dataclass(frozen=True)
class Request:
    """A call as the agent sent it, arguments as (capped) text: a tool call, or the code interpreter's."""

    name: str
    arguments: str = ""


@dataclass(frozen=True)
class Returned:
    """The structure of what a tool call returned (keys and type placeholders, ``core.specimen``)."""

    tool: str
    structure: Any


@dataclass(frozen=True)
class Step:
    """One step of a run: an action, a plan or the final answer."""

    seq: int
    kind: StepKind
    number: int | None = None
    thought: str = ""  # the model's reasoning, without the agent's own label for it
    model_output: str = ""  # the model's output as it came
    plan: str = ""
    code: str = ""  # the code the step ran ("" for a step of tool calls)
    requests: tuple[Request, ...] = ()
    calls: tuple[Call, ...] = ()
    returned: tuple[Returned, ...] = ()
    failed: bool = False
    error_type: str = ""
    error: str = ""  # the exception ("ValueError: ...") without the executor's wrapper
    error_message: str = ""  # the error as the agent saw it
    failed_line: str = ""  # the line the step failed at: a statement of its code, or the failed tool call as a line
    failed_tool: str | None = None  # the tool the error says failed, when it names one (a tool call's failure)
    observation: str = ""  # what the agent saw after the step, as it saw it
    output: str = ""  # the observation without the executor's empty framing
    logs: str = ""  # what the step printed
    last_output: str = ""  # the value the step's code ended with ("" when None or none)
    answer: str = ""  # the step's output (the final answer of a final step)
    is_final: bool = False
    duration: float | None = None

    @property
    def printed(self) -> str:
        """What the step printed, followed by the value its code ended with unless that was None."""
        return f"{self.logs}\n{self.last_output}".strip()

    @property
    def action(self) -> bool:
        return self.kind == "action"


@dataclass(frozen=True)
class RunView:
    """A run: its task, its steps in order, how it ended, the tools its agent had (None: not known), and for a
    managed agent's run the id of its manager's run."""

    task: str
    steps: tuple[Step, ...]
    outcome: str = "unknown"
    tools: tuple[str, ...] | None = None
    run_id: str = ""
    parent_run: str = ""

    @property
    def actions(self) -> list[Step]:
        return [step for step in self.steps if step.action]

    @property
    def final(self) -> Step | None:
        """The step that gave the final answer (None when the run gave none)."""
        return next((s for s in reversed(self.steps) if s.kind == "final" or s.is_final), None)

    @property
    def final_answer(self) -> str:
        """The run's final answer as recorded ("" when it had none)."""
        final = self.final
        return final.answer.strip() if final is not None else ""

    def only(self, steps: list[Step]) -> RunView:
        """The same run with only ``steps`` (the late steps of a follow-up distillation)."""
        return RunView(self.task, tuple(steps), self.outcome, self.tools, self.run_id, self.parent_run)
