"""One run of the tool-families benchmark: the agent of an arm, its memory, its verdict, and what it cost.

An arm says which agent runs and what lessonbank hears about its outcome:

- ``none`` / ``memory``: a CodeAgent on smolagents' local executor, without memory / with
  ``remember(agent, bank=..., check=<the question's checker>)``;
- ``memory-nocheck``: ``remember`` without ``check=``: outcomes come from the run's signals and the LLM only;
- ``memory-late``: no ``check=``; after the run is distilled, ``lessonbank feedback RUN --success/--failure``
  with the true verdict, as a user would later (the harness waits for the run's credit with it);
- ``tca-none`` / ``tca-memory``: a ToolCallingAgent (the family's tools and a ``python_interpreter`` tool) on the
  tool-calling server (``tool_server.py``), with ``check=``. What it took for a small local model to succeed, the
  same in both arms: a call at every step (smolagents' default ``tool_choice="required"``, which the server
  supports, the tool sampled at the agent's temperature), so that an answer goes through ``final_answer``; and an
  interpreter in which the family's tools are functions too, also under the format's ``functions.`` prefix
  (:class:`ToolsInterpreter`), since smolagents' own sees no earlier result and a question over a few dozen
  records cannot be answered by copying them into code or by reading them;
- ``tb-none`` / ``tb-memory``: a CodeAgent whose executor reports errors as a traceback, the way smolagents'
  remote executors do (``kernel.py``), with ``check=``.

Every arm of a (family, run index) pair gets the same variant, sampling seeds and temperature.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import httpx
import redis
from families import Family, FamilyVariant, check, tools_for
from harness import SeededModel, lessons_block, run_seed, wait_distilled
from smolagents import ActionStep, CodeAgent, ToolCallingAgent
from smolagents.default_tools import PythonInterpreterTool
from smolagents.local_python_executor import CodeOutput
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import RemotePythonExecutor
from smolagents.utils import AgentError

from lessonbank.core.constants import run_key
from lessonbank.core.settings import Settings

logger = logging.getLogger("bench.learning")

HERE = Path(__file__).resolve().parent
AUTHORIZED_IMPORTS = ["json", "re", "math", "datetime", "statistics", "csv", "io"]
DISTILL_TIMEOUT = 1800.0
CREDIT_TIMEOUT = 600.0
RUN_FIELDS = ("state", "outcome", "verdict", "verdict_source", "lessons", "credited", "distill_attempts")

Agent = Literal["code", "tca", "tb"]
Verdict = Literal["check", "signals", "late"]


@dataclass(frozen=True)
class FamilyArm:
    """Which agent runs, with or without memory, and how lessonbank hears whether the run did its job."""

    name: str
    agent: Agent
    memory: bool
    verdict: Verdict = "check"
    description: str = ""
    baseline: str = "none"  # the arm without memory this one is paired with


ARMS: dict[str, FamilyArm] = {arm.name: arm for arm in (
    FamilyArm("none", "code", False, description="CodeAgent, local executor, no memory"),
    FamilyArm("memory", "code", True, description="remember(agent, bank=<family>, check=<checker>)"),
    FamilyArm("memory-nocheck", "code", True, "signals",
              "remember(agent, bank=<family>) without check=: outcomes from signals and the LLM only"),
    FamilyArm("memory-late", "code", True, "late",
              "remember without check=, then `lessonbank feedback RUN --success/--failure` after distillation"),
    FamilyArm("tca-none", "tca", False, description="ToolCallingAgent (tools + python_interpreter), no memory",
              baseline="tca-none"),
    FamilyArm("tca-memory", "tca", True, description="ToolCallingAgent with remember(..., check=)",
              baseline="tca-none"),
    FamilyArm("tb-none", "tb", False, description="CodeAgent, executor reporting tracebacks (remote-style), no memory",
              baseline="tb-none"),
    FamilyArm("tb-memory", "tb", True, description="CodeAgent, traceback executor, remember(..., check=)",
              baseline="tb-none"),
)}


@dataclass(frozen=True)
class Endpoints:
    """Where the agents' model answers: the usual server, and the tool-calling one (for ``tca`` arms)."""

    code_url: str
    tool_url: str
    model_id: str
    temperature: float = 0.7
    max_steps: int = 6
    max_tokens: int = 600
    timeout: float = 900.0
    seed: int = 1


class ToolsInterpreter(PythonInterpreterTool):
    """smolagents' ``python_interpreter`` in which ``tools`` are functions too: its code gets their results by
    calling them (no earlier call's result is kept), as a CodeAgent's code does. They are also there as the
    tool-calling format names them to the model (``functions.<name>``, ``tool_server.py``): code that calls
    ``functions.search(...)`` calls the tool rather than failing on an unknown name."""

    def __init__(self, tools: list[Any], authorized_imports: list[str]) -> None:
        super().__init__(authorized_imports=authorized_imports)
        by_name = {tool.name: tool for tool in tools}
        self.base_python_tools = {**self.base_python_tools, **by_name, "functions": SimpleNamespace(**by_name)}
        names = ", ".join(f"`{tool.name}`" for tool in tools)
        self.description = (f"Evaluates python code, for calculations over tools' results. The tools {names} are "
                            "Python functions in it, called with the same arguments; it keeps no variable or "
                            "result between calls, so call the tools your code needs in it.")
        self.inputs["code"]["description"] = (
            "The code to evaluate; it prints what you need to see. It can only import: "
            f"{', '.join(sorted(self.authorized_imports))}.")


class TracebackExecutor(RemotePythonExecutor):
    """A remote-style executor whose kernel is a child process (``kernel.py``) serving one family's tools."""

    def __init__(self, family: str, world: dict[str, Any], allowed: list[str], timeout: float = 120.0) -> None:
        super().__init__(allowed, AgentLogger(level=LogLevel.OFF))
        self.family, self.world, self.allowed, self.timeout = family, world, allowed, timeout
        self.process: subprocess.Popen[str] | None = None

    def _start(self) -> None:
        self.cleanup()
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "kernel.py"), json.dumps(self.allowed)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=HERE)
        self._ask({"op": "setup", "family": self.family, "world": self.world})

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = read_line(self.process, self.timeout)
        if line is None:  # stopped, as a sandbox stops a cell that runs too long; a fresh kernel comes next
            self.process = None
            raise AgentError(f"Executing code yielded an error:\nTimeoutError\nthe code ran longer than "
                             f"{self.timeout:.0f} s and was stopped\n", self.logger)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def send_tools(self, tools: dict[str, Any]) -> None:  # the kernel builds the family's tools itself
        self._start()

    def send_variables(self, variables: dict[str, Any]) -> None:
        if variables:
            self._ask({"op": "vars", "vars": {k: v for k, v in variables.items() if _jsonable(v)}})

    def run_code_raise_errors(self, code: str) -> CodeOutput:
        if self.process is None or self.process.poll() is not None:
            self._start()
        reply = self._ask({"op": "run", "code": code})
        error = reply.get("error")
        if error:  # E2BExecutor's message, with a plain Python traceback
            raise AgentError(f"{reply['logs']}\nExecuting code yielded an error:\n{error['name']}\n{error['value']}\n"
                             f"{error['traceback']}", self.logger)
        return CodeOutput(output=reply["output"], logs=reply["logs"], is_final_answer=reply["final"])

    def cleanup(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def read_line(process: subprocess.Popen[str], timeout: float) -> str | None:
    """The process's next line on stdout, or None (the process killed) when none comes within ``timeout`` s."""
    import threading

    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(process.stdout.readline() if process.stdout else ""),
                              daemon=True)
    reader.start()
    reader.join(timeout)
    if not box or not box[0]:
        process.kill()
        process.wait()
        return None
    return box[0]


def make_agent(endpoints: Endpoints, arm: FamilyArm, family: Family, variant: FamilyVariant, seed: int) -> Any:
    """The arm's agent on the variant's tools, sampling with ``seed`` (+ n for its n-th model call)."""
    tool_calling = arm.agent == "tca"
    model = SeededModel(
        model_id=endpoints.model_id, api_base=endpoints.tool_url if tool_calling else endpoints.code_url,
        api_key="local", client_kwargs={"timeout": endpoints.timeout, "max_retries": 0},
        flatten_messages_as_text=True, temperature=endpoints.temperature, max_tokens=endpoints.max_tokens, seed=seed)
    tools = tools_for(family, variant)
    if tool_calling:  # smolagents asks for tool_choice="required": a call at every step
        return ToolCallingAgent(tools=[*tools, ToolsInterpreter(tools, AUTHORIZED_IMPORTS)],
                                model=model, max_steps=endpoints.max_steps, verbosity_level=-1)
    executor = TracebackExecutor(family.name, variant.world, AUTHORIZED_IMPORTS) if arm.agent == "tb" else None
    return CodeAgent(tools=tools, model=model, max_steps=endpoints.max_steps, verbosity_level=-1,
                     additional_authorized_imports=AUTHORIZED_IMPORTS, executor=executor)


def collect(agent: Any, row: dict[str, Any]) -> None:
    """Steps, errors, tokens, and each step's code or tool calls, from the agent's memory."""
    for step in agent.memory.steps:
        if not isinstance(step, ActionStep):
            continue
        row["steps"] += 1
        if step.error is not None:
            row["errors"] += 1
            row["max_steps_reached"] |= type(step.error).__name__ == "AgentMaxStepsError"
            row["step_errors"].append(f"{type(step.error).__name__}: {step.error}"[:300])
        if step.token_usage is not None:
            row["input_tokens"] += step.token_usage.input_tokens
            row["output_tokens"] += step.token_usage.output_tokens
        if step.code_action:
            row["actions"].append(step.code_action[:600])
        elif step.tool_calls:
            row["actions"].append("; ".join(f"{c.name}({json.dumps(c.arguments, default=str)[:200]})"
                                            for c in step.tool_calls))


def run_once(endpoints: Endpoints, arm: FamilyArm, family: Family, variant: FamilyVariant, bank: str,
             settings: Settings | None) -> dict[str, Any]:
    """Run the arm's agent once on ``variant`` and check its answer (never raises for the agent's errors)."""
    seed = run_seed(family.name, variant.index, endpoints.seed)
    row: dict[str, Any] = {
        "family": family.name, "arm": arm.name, "run_index": variant.index, "kind": variant.kind,
        "wording": variant.wording, "prompt": variant.prompt, "expected": variant.answer, "seed": seed,
        "answer": "", "correct": False, "steps": 0, "errors": 0, "max_steps_reached": False, "input_tokens": 0,
        "output_tokens": 0, "seconds": 0.0, "error": "", "run_id": "", "lessons_given": "", "actions": [],
        "step_errors": []}
    agent = make_agent(endpoints, arm, family, variant, seed)
    recorder = None
    if arm.memory:
        import lessonbank

        assert settings is not None
        judge = (lambda answer: check(variant, answer)) if arm.verdict == "check" else None
        recorder = lessonbank.remember(agent, bank=bank, settings=settings, judge=judge)
    evict_prompt_cache(endpoints.tool_url if arm.agent == "tca" else endpoints.code_url, endpoints)
    started = time.monotonic()
    answer: Any = None
    try:
        answer = agent.run(variant.prompt)
    except Exception as e:  # the agent's own failure is a failed run, not a benchmark error
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    finally:
        cleanup = getattr(agent, "cleanup", None)
        if callable(cleanup):
            cleanup()
    row["seconds"] = round(time.monotonic() - started, 2)
    row["answer"] = repr(answer)[:200]
    row["correct"] = check(variant, answer)
    collect(agent, row)
    row["lessons_given"] = lessons_block(agent)
    if recorder is not None:
        row["run_id"] = recorder.run_id(agent) or ""
        recorder.flush()
        recorder.close()
    return row


def evict_prompt_cache(url: str, endpoints: Endpoints) -> None:
    """Start every run cold (see ``harness.evict_prompt_cache``): a 1-token request with an unrelated prompt."""
    response = httpx.post(f"{url}/chat/completions", timeout=endpoints.timeout,
                          headers={"Authorization": "Bearer local"},
                          json={"model": endpoints.model_id, "messages": [{"role": "user", "content": "ok"}],
                                "max_tokens": 1})
    response.raise_for_status()


def after_run(client: redis.Redis, arm: FamilyArm, row: dict[str, Any], settings: Settings) -> None:
    """Wait for the run's distillation; for ``memory-late``, give the true verdict with the CLI and wait for its
    credit. What lessonbank recorded about the run goes into ``row["lessonbank"]``."""
    run_id = row["run_id"]
    if not run_id:
        row["distill_state"] = "no run id"
        return
    row["distill_state"], row["distill_seconds"] = wait_distilled(client, run_id, DISTILL_TIMEOUT)
    if arm.verdict == "late":
        row["feedback"] = late_feedback(client, run_id, row["correct"], settings)
    row["lessonbank"] = run_meta(client, run_id)


def late_feedback(client: redis.Redis, run_id: str, success: bool, settings: Settings) -> str:
    """``lessonbank feedback RUN --success|--failure`` in a process of its own, then wait for the run's credit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LESSONBANK_")}
    env.update({"LESSONBANK_REDIS_URL": settings.redis_url, "LESSONBANK_QUEUE": settings.queue,
                "LESSONBANK_DATA_DIR": str(settings.data_dir), "LESSONBANK_QDRANT_PATH": str(settings.qdrant_path),
                "LESSONBANK_EMBED_MODEL_PATH": str(settings.embed_model_path)})
    cli = Path(sys.executable).with_name("lessonbank")
    try:
        done = subprocess.run([str(cli), "feedback", run_id, "--success" if success else "--failure"], env=env,
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "feedback did not return within 300 s"
    if done.returncode != 0:
        return f"feedback failed ({done.returncode}): {(done.stderr or done.stdout).strip()[:300]}"
    wanted = "success" if success else "failure"
    deadline = time.monotonic() + CREDIT_TIMEOUT
    while time.monotonic() < deadline:
        raw = client.hget(run_key(run_id), "credited")
        if raw and json.loads(raw).get("verdict") == wanted:
            return f"{wanted}, credited"
        time.sleep(0.5)
    return f"{wanted}, credit not seen within {CREDIT_TIMEOUT:.0f} s"


def run_meta(client: redis.Redis, run_id: str) -> dict[str, str]:
    """What lessonbank wrote about the run (state, outcome, verdict and its source, lesson counts, credit)."""
    raw = client.hgetall(run_key(run_id))
    meta = {k.decode(): v.decode(errors="replace") for k, v in raw.items()}
    return {k: meta[k] for k in RUN_FIELDS if k in meta}
