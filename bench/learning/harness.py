"""One benchmark run of a real CodeAgent on a trap task, with or without memory, and what it cost.

An *arm* says how the agent is set up: ``none`` is a plain agent; ``memory`` is the same agent given
``lessonbank.remember(agent, bank=<per-task bank>, check=<the task's checker>)``. Every arm of a
(task, run index) pair gets the same variant, the same sampling seed and the same temperature, so the
only difference between the arms is what the agent was told by its memory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import redis
from smolagents import ActionStep, CodeAgent, OpenAIServerModel
from trap_tasks import TrapTask, Variant, tools_for

from lessonbank.core.constants import RUN_DEAD, RUN_DISTILLED, run_key
from lessonbank.core.settings import Settings

logger = logging.getLogger("bench.learning")

AUTHORIZED_IMPORTS = ["json", "re", "math", "datetime", "statistics"]


@dataclass(frozen=True)
class Arm:
    """How the agent of one arm is set up: no memory, or ``remember`` with these extra keyword arguments."""

    name: str
    memory: bool
    remember_kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    one_bank: bool = False  # one bank for every task (as one agent doing several jobs), not one per task


ARMS: dict[str, Arm] = {
    "none": Arm("none", memory=False, description="plain agent, no memory"),
    "memory": Arm("memory", memory=True, description="lessonbank.remember(agent, bank=..., check=...)"),
    "memory-prose": Arm("memory-prose", memory=True, remember_kwargs={"recipes": False},
                        description="lessonbank.remember(..., check=..., recipes=False): prose lessons only"),
    "memory-one-bank": Arm("memory-one-bank", memory=True, one_bank=True,
                           description="lessonbank.remember(agent, bank=<one bank for every task>, check=...)"),
}


@dataclass(frozen=True)
class AgentConfig:
    """What every arm's agent shares: the model endpoint, sampling and limits."""

    base_url: str
    model_id: str
    api_key: str = "local"
    temperature: float = 0.7
    max_steps: int = 6
    max_tokens: int = 600
    timeout: float = 900.0
    seed: int = 0  # the set of variants and sampling seeds (0: the benchmark's usual one)
    reworded: bool = False  # each run's task asked in another wording than the run before it


@dataclass
class RunResult:
    """One run of one arm on one variant."""

    task: str
    arm: str
    run_index: int
    variant: str
    seed: int
    expected: Any
    answer: str = ""
    correct: bool = False
    steps: int = 0
    errors: int = 0
    max_steps_reached: bool = False  # the answer came from smolagents' forced final answer after max_steps
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    error: str = ""
    run_id: str = ""
    lessons_given: str = ""
    distill_state: str = ""
    distill_seconds: float = 0.0
    feedback: str = ""
    codes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_seed(task: str, run_index: int, seed: int = 0) -> int:
    """The sampling seed of a (task, run index) in the set ``seed``: the same in every arm."""
    return (sum(ord(c) * (i + 1) for i, c in enumerate(task)) * 1009 + run_index * 7919
            + seed * 104_729) % 2_147_483_647


class SeededModel(OpenAIServerModel):
    """``OpenAIServerModel`` whose n-th call of a run samples with seed ``seed + n``.

    A run is reproducible (same seeds, call by call, in every arm), yet a step that failed is not
    resampled with the very seed that produced it.
    """

    def __init__(self, *args: Any, seed: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seed = seed
        self.calls = 0

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["seed"] = self.seed + self.calls
        self.calls += 1
        return super().generate(*args, **kwargs)


def make_agent(config: AgentConfig, task: TrapTask, variant: Variant, seed: int) -> CodeAgent:
    model = SeededModel(
        model_id=config.model_id, api_base=config.base_url, api_key=config.api_key,
        client_kwargs={"timeout": config.timeout, "max_retries": 0}, flatten_messages_as_text=True,
        temperature=config.temperature, max_tokens=config.max_tokens, seed=seed,
    )
    return CodeAgent(
        tools=tools_for(task, variant), model=model, max_steps=config.max_steps, verbosity_level=-1,
        additional_authorized_imports=AUTHORIZED_IMPORTS,
    )


def evict_prompt_cache(config: AgentConfig) -> None:
    """Start every run cold: one 1-token request with an unrelated prompt replaces llama.cpp's cached prefix.

    Otherwise a run that follows another run with the same system prompt skips ~2,000 prompt tokens
    (tens of seconds on 2 cores), and the arm that runs second would look faster.
    """
    response = httpx.post(
        f"{config.base_url}/chat/completions", timeout=config.timeout,
        headers={"Authorization": f"Bearer {config.api_key}"},
        json={"model": config.model_id, "messages": [{"role": "user", "content": "ok"}], "max_tokens": 1},
    )
    response.raise_for_status()


def lessons_block(agent: CodeAgent) -> str:
    """The lessons block the run was given, after its task or in its system prompt ("" when none)."""
    from lessonbank.agent import lessons_given

    return lessons_given(agent)


def attach_memory(
    agent: CodeAgent, arm: Arm, bank: str, settings: Settings, check: Callable[[Any], bool]
) -> tuple[Any, bool]:
    """``lessonbank.remember(agent, bank=bank, check=check, **arm.remember_kwargs)``: (recorder, check= taken).

    When this lessonbank has no ``check=`` yet, the agent is remembered without it and the harness
    reports the checker's verdict with ``lessonbank.feedback`` after the run if that exists (see
    :func:`report_verdict`); the fallback is logged once per run.
    """
    import lessonbank

    try:
        return lessonbank.remember(agent, bank=bank, settings=settings, judge=check, **arm.remember_kwargs), True
    except TypeError as e:
        if "judge" not in str(e):
            raise
        logger.warning("lessonbank.remember has no check= yet (%s); remembering without it", e)
        return lessonbank.remember(agent, bank=bank, settings=settings, **arm.remember_kwargs), False


def report_verdict(run_id: str, success: bool, remembered_with_check: bool) -> str:
    """Tell lessonbank whether the run did its job when ``check=`` could not: ``lessonbank.feedback``."""
    if remembered_with_check:
        return "check="
    import lessonbank

    feedback = getattr(lessonbank, "feedback", None)
    if feedback is None:
        return "none (no check=, no lessonbank.feedback)"
    feedback(run_id, success=success)
    return "feedback()"


def collect(agent: CodeAgent, result: RunResult) -> None:
    """Steps, errors, tokens and the code of each step, from the agent's memory."""
    for step in agent.memory.steps:
        if not isinstance(step, ActionStep):
            continue
        result.steps += 1
        if step.error is not None:
            result.errors += 1
            result.max_steps_reached |= type(step.error).__name__ == "AgentMaxStepsError"
        if step.token_usage is not None:
            result.input_tokens += step.token_usage.input_tokens
            result.output_tokens += step.token_usage.output_tokens
        if step.code_action:
            result.codes.append(step.code_action[:600])


def run_once(
    config: AgentConfig, task: TrapTask, variant: Variant, arm: Arm, run_index: int,
    bank: str = "", settings: Settings | None = None,
) -> RunResult:
    """Run the agent of ``arm`` once on ``variant`` and check its answer (never raises for the agent's errors)."""
    seed = run_seed(task.name, run_index, config.seed)
    result = RunResult(task.name, arm.name, run_index, variant.key, seed, variant.answer)
    agent = make_agent(config, task, variant, seed)
    recorder = None
    with_check = False
    if arm.memory:
        assert settings is not None and bank
        recorder, with_check = attach_memory(agent, arm, bank, settings, lambda answer: task.check(variant, answer))
    evict_prompt_cache(config)
    started = time.monotonic()
    answer: Any = None
    try:
        answer = agent.run(variant.prompt)
    except Exception as e:  # the agent's own failure is a failed run, not a benchmark error
        result.error = f"{type(e).__name__}: {e}"[:300]
        logger.warning("%s/%s run %d raised %s", task.name, arm.name, run_index, result.error)
    result.seconds = round(time.monotonic() - started, 2)
    result.answer = repr(answer)[:200]
    result.correct = task.check(variant, answer)
    collect(agent, result)
    result.lessons_given = lessons_block(agent)
    if recorder is not None:
        result.run_id = recorder.run_id(agent) or ""
        recorder.flush()
        if result.run_id:
            result.feedback = report_verdict(result.run_id, result.correct, with_check)
        recorder.close()
    return result


def wait_distilled(client: redis.Redis, run_id: str, timeout: float) -> tuple[str, float]:
    """Wait until the worker has distilled (or dead-lettered) the run: (final state, seconds waited)."""
    started = time.monotonic()
    next_log = 60.0
    while True:
        raw = client.hget(run_key(run_id), "state")
        state = raw.decode() if isinstance(raw, bytes) else str(raw or "")
        waited = time.monotonic() - started
        if state in (RUN_DISTILLED, RUN_DEAD):
            return state, round(waited, 1)
        if waited > timeout:
            return f"timeout ({state or 'no state'})", round(waited, 1)
        if waited > next_log:
            logger.info("  still waiting for run %s to be distilled (%s, %.0f s)", run_id, state or "-", waited)
            next_log += 60.0
        time.sleep(0.5)
