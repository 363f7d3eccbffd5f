"""The demo: an agent runs the same trap task twice; the second run starts with what the first learnt.

Everything runs on this machine with embedded defaults: a Redis server (reused if one answers), a
worker process that owns an embedded Qdrant store, and an LLM (the local llama.cpp one unless
``OPENAI_BASE_URL`` is set). The task hides a trap: the CSV uses ``;`` as its separator.

By default the agent follows a scripted trajectory (it makes no LLM calls of its own): it reads the
file with the default separator unless the lessons it was given mention the ``;`` separator. The distillation
between the runs always uses the real LLM. This module runs the agent against the services that
``demo_services`` starts and stops; ``lessonbank.cli.demo`` prints what happens.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from smolagents import ActionStep, ChatMessage, CodeAgent, MessageRole, Model, TokenUsage, tool

from lessonbank.agent import lessons_given, lessons_in_text
from lessonbank.core.constants import RUN_DEAD, RUN_DISTILLED, run_key
from lessonbank.demo_services import QUEUE, DemoEnvironment, services

# The services the demo runs against, re-exported for its command
__all__ = ["BANK", "QUEUE", "SALES_CSV", "TASK", "TOTAL", "DemoEnvironment", "RunView", "StepView", "TrajectoryModel",
           "make_agent", "read_text_file", "right_total", "run_once", "services", "wait_distilled"]

logger = logging.getLogger(__name__)

BANK = "demo-csv"
SALES_CSV = "date;region;amount\n2024-03-01;north;120.50\n2024-03-01;south;80.25\n2024-03-02;north;99.25\n"
TASK = "What is the total of the 'amount' column in the sales file {path}? Answer with the number only."
TOTAL = 300.0


def right_total(answer: object) -> bool:
    """The demo's check on a final answer: the total of the 'amount' column."""
    try:
        return abs(float(str(answer).strip()) - TOTAL) < 0.01
    except ValueError:
        return False


@tool
def read_text_file(path: str) -> str:
    """Return the whole text content of a file.

    Args:
        path: Path of the file to read.
    """
    return Path(path).read_text()


class TrajectoryModel(Model):
    """The demo's scripted agent: a fixed trajectory, shortened when the lessons it was given know the trap.

    Without a lesson about the ``;`` separator it reads the CSV with the default separator (which
    fails), looks at the header line, then reads it right. With one, it reads it right at once.
    Token counts are estimates (characters / 4), since no model runs.
    """

    def __init__(self, csv_path: Path) -> None:
        super().__init__(model_id="scripted-trajectory")
        self.csv_path = csv_path

    def generate(self, messages: list[Any], stop_sequences: list[str] | None = None, **kwargs: Any) -> ChatMessage:
        knows = lessons_in_text("\n\n".join(_text(m) for m in messages[:2]))  # the system prompt and the task
        step = sum(1 for m in messages if _role(m) == MessageRole.ASSISTANT.value)
        plan = self._short_plan() if _knows_separator(knows) else self._long_plan()
        code = plan[min(step, len(plan) - 1)]
        content = f"Thought: {code[0]}\n<code>\n{code[1]}\n</code>"
        chars_in = sum(len(_text(m)) for m in messages)
        return ChatMessage(
            role=MessageRole.ASSISTANT, content=content,
            token_usage=TokenUsage(input_tokens=chars_in // 4, output_tokens=len(content) // 4),
        )

    def _read(self, delimiter: str | None) -> str:
        args = "io.StringIO(text)" if delimiter is None else f"io.StringIO(text), delimiter={delimiter!r}"
        return (
            f"import csv, io\ntext = read_text_file(path={str(self.csv_path)!r})\n"
            f"rows = list(csv.DictReader({args}))\ntotal = round(sum(float(row['amount']) for row in rows), 2)\n"
            "print(total)"
        )

    def _long_plan(self) -> list[tuple[str, str]]:
        return [
            ("I will read the CSV file and sum the amount column.", self._read(None)),
            ("The 'amount' column was not found. Let me look at the header line.",
             f"text = read_text_file(path={str(self.csv_path)!r})\nprint(text.splitlines()[0])"),
            ("The fields are separated by ';'. I will read it with that delimiter.", self._read(";")),
            ("I have the total.", "final_answer(total)"),
        ]

    def _short_plan(self) -> list[tuple[str, str]]:
        return [
            ("The lessons say these CSV files use ';' as separator; I read it that way.", self._read(";")),
            ("I have the total.", "final_answer(total)"),
        ]


def _role(message: Any) -> str:
    role = message.get("role") if isinstance(message, dict) else getattr(message, "role", "")
    return str(getattr(role, "value", role) or "")


def _text(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else getattr(message, "content", "")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def _knows_separator(lessons_block: str) -> bool:
    body = lessons_block.split("\n", 2)[-1].lower()
    return any(hint in body for hint in ("';'", '";"', "semicolon", "sep=';'", "delimiter=';'", "`;`"))


@dataclass
class StepView:
    number: int
    code: str
    error: str = ""
    observation: str = ""


@dataclass
class RunView:
    """What one demo run did."""

    run_id: str
    answer: Any
    seconds: float
    instructions: str  # the lessons block the run was given ("" for none)
    steps: list[StepView] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def errors(self) -> int:
        return sum(1 for step in self.steps if step.error)


def make_agent(env: DemoEnvironment, real_agent: bool, csv_path: Path) -> CodeAgent:
    """The demo agent: scripted trajectory, or the demo's LLM as the agent's own model."""
    model: Model
    if real_agent:
        from smolagents import OpenAIServerModel

        model = OpenAIServerModel(model_id=env.llm_model, api_base=env.llm_url, api_key=env.llm_key or "none")
    else:
        model = TrajectoryModel(csv_path)
    return CodeAgent(
        tools=[read_text_file], model=model, additional_authorized_imports=["csv", "io"], max_steps=6,
        verbosity_level=0,
    )


def run_once(agent: CodeAgent, task: str, recorder: Any) -> RunView:
    """Run the agent once (recorded, with the bank's lessons) and describe what it did."""
    started = time.monotonic()
    answer = agent.run(task)
    seconds = time.monotonic() - started
    view = RunView(recorder.run_id(agent) or "", answer, seconds, lessons_given(agent))
    for step in agent.memory.steps:
        if isinstance(step, ActionStep):
            error = f"{type(step.error).__name__}: {step.error}" if step.error else ""
            view.steps.append(StepView(step.step_number, step.code_action or "", error, step.observations or ""))
            if step.token_usage:
                view.input_tokens += step.token_usage.input_tokens
                view.output_tokens += step.token_usage.output_tokens
    return view


def wait_distilled(client: redis.Redis, run_id: str, timeout: float, tick: Callable[[float], None]) -> str:
    """Wait until the worker has distilled (or dead-lettered) the run; returns the final state."""
    started = time.monotonic()
    next_tick = 10.0
    while True:
        raw = client.hget(run_key(run_id), "state")
        state = raw.decode() if isinstance(raw, bytes) else str(raw or "")
        if state in (RUN_DISTILLED, RUN_DEAD):
            return state
        elapsed = time.monotonic() - started
        if elapsed > timeout:
            return state or "unknown"
        if elapsed >= next_tick:
            tick(elapsed)
            next_tick += 15.0
        time.sleep(0.5)
