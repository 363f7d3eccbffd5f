"""The benchmark's own services: a redis-server, the local llama.cpp server and a distilling worker.

Nothing is shared with other processes on the machine: Redis listens on a free port, the worker
consumes its own queue and owns an embedded Qdrant store in the benchmark's work directory, and the
same llama.cpp server answers both the agents and the worker (the worker distills with the same
model the agents run on).
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from common import free_port, redis_server

from lessonbank import llama_server, local_llm
from lessonbank.core.settings import Settings

logger = logging.getLogger("bench.learning")

QUEUE = "lessonbank-learning-bench"
EMBED_MODEL_DIR = Path.home() / ".local" / "share" / "lessonbank" / "models" / "all-MiniLM-L6-v2"
# The worker waits long for a CPU-bound LLM that also serves the agents; a run is never retried for speed.
WORKER_ENV = {
    "LESSONBANK_LLM_TIMEOUT": "900", "LESSONBANK_TASK_SOFT_TIME_LIMIT": "1800", "LESSONBANK_TASK_TIME_LIMIT": "1900",
    "LESSONBANK_VISIBILITY_TIMEOUT": "7200", "LESSONBANK_TRANSCRIPT_BUDGET_CHARS": "6000",
    "LESSONBANK_MAX_RETRIES": "2", "LESSONBANK_DISTILL_LOCK_TIMEOUT": "600", "LESSONBANK_IDLE_TIMEOUT": "3600",
    # The distiller samples with a fixed seed too, like the agents: the same run distills into (nearly) the
    # same lessons in every invocation, so two versions of the worker are compared on paired banks. Not
    # exactly: llama-cpp-python reuses cached prompt prefixes, which can flip a token whose logit is almost tied.
    "LESSONBANK_LLM_SEED": "20261202",
}


@dataclass
class Services:
    """Where the benchmark's services are."""

    llm_url: str
    llm_model: str
    settings: Settings | None = None  # the agent-side settings (None when no worker runs)
    worker_log: Path | None = None


@contextmanager
def llama(model_key: str, workdir: Path, n_ctx: int, threads: int) -> Iterator[tuple[str, str]]:
    """(base URL, model alias) of a llama.cpp server on the cached GGUF of ``model_key``."""
    spec = local_llm.model_spec(model_key)
    path = local_llm.model_path(Settings().data_dir, spec)
    server = llama_server.LlamaServer(path, free_port(), n_threads=threads, n_ctx=n_ctx, alias=spec.alias,
                                   log_path=workdir / "llama-server.log")
    logger.info("starting llama.cpp on %s (n_ctx %d, %d threads)", spec.filename, n_ctx, threads)
    server.start(timeout=600)
    try:
        yield server.base_url, spec.alias
    finally:
        server.stop()


@contextmanager
def worker(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``celery -A lessonbank.workers worker`` (solo pool, the benchmark's queue) until the block ends."""
    from lessonbank.workers.launch import worker_process  # builds the worker's app: only where a worker runs

    with worker_process(env, log, QUEUE, "learning-bench", ready_timeout=240) as process:
        logger.info("worker ready (pid %d, log %s)", process.pid, log)
        yield process


@contextmanager
def services(
    workdir: Path, model_key: str, with_worker: bool, n_ctx: int = 8192, threads: int = 2
) -> Iterator[Services]:
    """Start the LLM (and, for arms with memory, Redis and a worker); stop everything on exit."""
    with ExitStack() as stack:
        llm_url, llm_model = stack.enter_context(llama(model_key, workdir, n_ctx, threads))
        if not with_worker:
            yield Services(llm_url, llm_model)
            return
        redis_url = stack.enter_context(redis_server(workdir / "redis"))
        data_dir = workdir / "data"
        qdrant = workdir / "qdrant"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "OPENAI_"))}
        env.update(WORKER_ENV)
        env.update({
            "LESSONBANK_REDIS_URL": redis_url, "LESSONBANK_QUEUE": QUEUE, "LESSONBANK_DATA_DIR": str(data_dir),
            "LESSONBANK_QDRANT_PATH": str(qdrant), "LESSONBANK_EMBED_MODEL_PATH": str(EMBED_MODEL_DIR),
            "OPENAI_BASE_URL": llm_url, "OPENAI_API_KEY": "local", "LESSONBANK_DISTILL_MODEL": llm_model,
        })
        log = workdir / "worker.log"
        stack.enter_context(worker(env, log))
        settings = Settings(
            redis_url=redis_url, queue=QUEUE, data_dir=data_dir, qdrant_path=qdrant,
            embed_model_path=EMBED_MODEL_DIR, store_timeout=120.0, redis_timeout=2.0,
        )
        yield Services(llm_url, llm_model, settings, log)
