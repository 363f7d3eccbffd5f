"""The demo's services, on this machine: Redis (reused if one answers), the distilling LLM (the user's endpoint, or
a local llama.cpp server), the pinned embedding model and a worker process that owns a fresh embedded store.

``services`` starts what is missing and stops all of it on exit; ``lessonbank.demo`` runs the agent against them.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from lessonbank import llama_server, local_llm, model_files
from lessonbank.core.connections import create_redis, masked_url
from lessonbank.core.embeddings import model_folder
from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable
from lessonbank.core.settings import Settings

logger = logging.getLogger(__name__)

QUEUE = "lessonbank-demo"
Say = Callable[[str], None]  # where a service says what it does (the CLI prints it)


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


def _wait(predicate: Callable[[], bool], timeout: float, what: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.poll() is not None:
            raise ServiceUnavailable(f"{what} exited with code {process.returncode}")
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
def _worker(env: dict[str, str], workdir: Path, say: Say) -> Iterator[Path]:
    from lessonbank.workers.launch import worker_process  # the worker extra: imported only when a worker starts

    log = workdir / "worker.log"
    with worker_process(env, log, QUEUE, "demo", ready_timeout=180) as process:
        say(f"Worker: celery -A lessonbank.workers worker (pid {process.pid}, log: {log})")
        yield log


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
        worker_log = stack.enter_context(_worker(env, workdir, say))
        yield DemoEnvironment(demo_settings, llm_url, llm_key, llm_model, llm_label, workdir, worker_log)
