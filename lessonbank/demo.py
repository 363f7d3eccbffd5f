"""The demo: an agent runs the same trap task twice; the second run starts with what the first learnt.

Everything runs on this machine with embedded defaults: a Redis server (reused if one answers), a
worker process that owns an embedded Qdrant store, and an LLM (the local llama.cpp one unless
``OPENAI_BASE_URL`` is set). The task hides a trap: the CSV uses ``;`` as its separator.

By default the agent follows a scripted trajectory (it makes no LLM calls of its own): it reads the
file with the default separator unless the lessons it was given mention the ``;`` separator. The distillation
between the runs always uses the real LLM. This module starts and stops the services and runs the
agent; ``lessonbank.cli.demo`` prints what happens.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from smolagents import ActionStep, ChatMessage, CodeAgent, MessageRole, Model, TokenUsage, tool

from lessonbank import llama_server, local_llm, model_files
from lessonbank.agent import lessons_given, lessons_in_text
from lessonbank.core.connections import create_redis, masked_url
from lessonbank.core.constants import RUN_DEAD, RUN_DISTILLED, run_key
from lessonbank.core.embeddings import model_folder
from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable
from lessonbank.core.settings import Settings

logger = logging.getLogger(__name__)

BANK = "demo-csv"
QUEUE = "lessonbank-demo"
SALES_CSV = "date;region;amount\n2024-03-01;north;120.50\n2024-03-01;south;80.25\n2024-03-02;north;99.25\n"
TASK = "What is the total of the 'amount' column in the sales file {path}? Answer with the number only."
TOTAL = 300.0


def right_total(answer: object) -> bool:
    """The demo's check on a final answer: the total of the 'amount' column."""
    try:
        return abs(float(str(answer).strip()) - TOTAL) < 0.01
    except ValueError:
        return False
Say = Callable[[str], None]


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


@dataclass
class DemoEnvironment:
    """Where the demo's services are: the settings an agent process uses to reach them."""

    settings: Settings
    llm_url: str
    llm_key: str
    llm_model: str
    llm_label: str
    workdir: Path
    worker_log: Path


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(predicate: Callable[[], bool], timeout: float, what: str, process: subprocess.Popen[bytes] | None = None,
          log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if process is not None and process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise ServiceUnavailable(f"{what} exited with code {process.returncode}\n{tail}")
        if time.monotonic() > deadline:
            raise ServiceUnavailable(f"{what} not ready after {timeout:.0f} s")
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes], name: str, timeout: float = 30.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.warning("%s did not stop in %.0f s; killing it", name, timeout)
            process.kill()
            process.wait()


@contextmanager
def _redis(settings: Settings, workdir: Path, say: Say) -> Iterator[str]:
    """The configured Redis if it answers, else a redis-server of the demo's own on a free port."""
    try:
        create_redis(settings, "cli").ping()
        say(f"Redis: reusing {masked_url(settings.redis_url)}")
        yield settings.redis_url
        return
    except redis.RedisError:
        pass
    binary = shutil.which("redis-server")
    if binary is None:
        raise ConfigurationError("no Redis answers and redis-server is not installed (apt-get install redis-server)")
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        def answers() -> bool:
            try:
                return bool(create_redis(settings.model_copy(update={"redis_url": url}), "cli").ping())
            except redis.RedisError:
                return False

        _wait(answers, 15, "redis-server", process)
        say(f"Redis: started redis-server on 127.0.0.1:{port}")
        yield url
    finally:
        _stop(process, "redis-server")


OPENAI_URL = "https://api.openai.com/v1"


def _local_cost(settings: Settings, spec: local_llm.ModelSpec, path: Path) -> str:
    """What the local LLM path will cost before the first lesson, said before any of it starts."""
    steps = []
    if not local_llm.is_model_ready(path, spec):
        steps.append(f"fetch {spec.filename} ({spec.size / 1e9:.1f} GB)")
    if local_llm.llama_cpp_version() is None and local_llm.cached_llama_wheel(
            local_llm.wheel_dir(settings.data_dir)) is None:
        steps.append("install llama-cpp-python (a prebuilt wheel if one fits, else a 6-minute build on 2 cores)")
    first = f"first it will {' and '.join(steps)}, then " if steps else ""
    return (f"LLM: none configured (OPENAI_BASE_URL / OPENAI_API_KEY), so a local one runs on this CPU: {first}each "
            "distillation takes a few minutes. With an OpenAI-compatible endpoint set, the demo takes under a minute.")


@contextmanager
def _llm(settings: Settings, model_key: str, workdir: Path, say: Say) -> Iterator[tuple[str, str, str, str]]:
    """(base URL, API key, model name, label) of the distilling LLM; starts the local one if needed."""
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
    if settings.openai_base_url or key:  # the user's endpoint: nothing to fetch, build or start
        url = settings.openai_base_url or OPENAI_URL
        source = "OPENAI_BASE_URL" if settings.openai_base_url else "OPENAI_API_KEY"
        say(f"LLM: {settings.distill_model} at {url} (from {source}; LESSONBANK_DISTILL_MODEL names the model)")
        yield url, key, settings.distill_model, settings.distill_model
        return
    spec = local_llm.model_spec(model_key)
    path = local_llm.model_path(settings.data_dir, spec)
    say(_local_cost(settings, spec, path))
    if not local_llm.is_model_ready(path, spec):
        say(f"LLM: fetching {spec.filename} ({spec.size / 1e6:.0f} MB, sha256 verified; "
            f"LESSONBANK_MODEL_SOURCE={settings.model_source})...")
        last = [0.0]

        def progress(done: int) -> None:
            last[0] += done
            if int(last[0] * 10 / spec.size) != int((last[0] - done) * 10 / spec.size):
                say(f"  {last[0] / spec.size:.0%}")

        local_llm.ensure_model(settings.data_dir, model_key, source=settings.model_source, progress=progress)
    if local_llm.llama_cpp_version() is None:
        log_path = settings.data_dir / "logs" / "llama-cpp-build.log"
        if local_llm.cached_llama_wheel(local_llm.wheel_dir(settings.data_dir)) is None:
            say("LLM: installing llama-cpp-python: a prebuilt wheel when one fits, else a build once per machine "
                f"(about 6 min on 2 cores; log: {log_path})")
        else:
            say("LLM: installing llama-cpp-python from the wheel kept earlier on this machine")
        local_llm.install_llama_cpp(
            log_path, settings.data_dir, heartbeat=lambda seconds: say(f"  still working... {seconds:.0f} s")
        )
    server = llama_server.LlamaServer(
        path, _free_port(), n_threads=settings.local_llm_threads, n_ctx=settings.local_llm_ctx, alias=spec.alias,
        log_path=workdir / "llama-server.log",
    )
    say(f"LLM: starting llama.cpp server on {spec.filename}...")
    server.start(timeout=600)
    try:
        yield server.base_url, "local", spec.alias, f"{spec.alias} (local llama.cpp, CPU)"
    finally:
        server.stop()


def _embed_model(settings: Settings, say: Say) -> Path | None:
    if settings.embed_base_url:
        return None
    say(f"Embeddings: {settings.embed_model} in {model_folder(settings)}")
    return model_files.ensure(settings)


@contextmanager
def _worker(settings: Settings, env: dict[str, str], workdir: Path, say: Say) -> Iterator[Path]:
    log = workdir / "worker.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "lessonbank.workers", "worker", "--pool", "solo", "-Q", QUEUE,
             "-n", f"demo-{os.getpid()}@%h", "--loglevel", "INFO", "--without-gossip", "--without-mingle"],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        def ready() -> bool:
            text = log.read_text(errors="replace")
            return "ready." in text and "serving the lesson store" in text

        _wait(ready, 180, "the worker", process, log)
        say(f"Worker: celery -A lessonbank.workers worker (pid {process.pid}, log: {log})")
        yield log
    finally:
        _stop(process, "the worker", timeout=60)


@contextmanager
def services(settings: Settings, model_key: str, say: Say) -> Iterator[DemoEnvironment]:
    """Start (or reuse) Redis, the LLM and a worker owning a fresh demo store; stop all of it on exit."""
    base = settings.data_dir / "demo"
    shutil.rmtree(base, ignore_errors=True)  # the demo starts from an empty bank every time
    base.mkdir(parents=True)
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=base))
    with ExitStack() as stack:
        redis_url = stack.enter_context(_redis(settings, workdir, say))
        embed_path = _embed_model(settings, say)
        llm_url, llm_key, llm_model, llm_label = stack.enter_context(_llm(settings, model_key, workdir, say))
        demo_settings = settings.model_copy(update={
            "redis_url": redis_url, "queue": QUEUE, "qdrant_url": None, "qdrant_path": base / "qdrant",
            "embed_model_path": embed_path, "store_timeout": 60.0,
        })
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "OPENAI_"))}
        env.update({
            "LESSONBANK_REDIS_URL": redis_url, "LESSONBANK_QUEUE": QUEUE,
            "LESSONBANK_DATA_DIR": str(settings.data_dir), "LESSONBANK_QDRANT_PATH": str(base / "qdrant"),
            "OPENAI_BASE_URL": llm_url, "OPENAI_API_KEY": llm_key or "none", "LESSONBANK_DISTILL_MODEL": llm_model,
            "LESSONBANK_LLM_TIMEOUT": "900", "LESSONBANK_TASK_SOFT_TIME_LIMIT": "1800",
            "LESSONBANK_TASK_TIME_LIMIT": "1900", "LESSONBANK_VISIBILITY_TIMEOUT": "7200",
            "LESSONBANK_TRANSCRIPT_BUDGET_CHARS": "6000", "LESSONBANK_MAX_RETRIES": "2",
        })
        if embed_path is not None:
            env["LESSONBANK_EMBED_MODEL_PATH"] = str(embed_path)
        if settings.embed_base_url:
            env["LESSONBANK_EMBED_BASE_URL"] = settings.embed_base_url
        worker_log = stack.enter_context(_worker(settings, env, workdir, say))
        yield DemoEnvironment(demo_settings, llm_url, llm_key, llm_model, llm_label, workdir, worker_log)


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
