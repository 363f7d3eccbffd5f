"""``python -m llama_cpp.server`` on one GGUF file (``lessonbank.local_llm`` assembles it), as a subprocess on
a loopback port; it speaks the OpenAI protocol: point ``OPENAI_BASE_URL`` at :attr:`LlamaServer.base_url`."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import httpx

from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable

logger = logging.getLogger(__name__)

# llama.cpp's OpenMP threads spin while waiting; on a small, shared CPU (another server, a build)
# that makes a 32-token completion take minutes instead of seconds. Passive waiting avoids it.
SERVER_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


class LlamaServer:
    """``python -m llama_cpp.server`` on one GGUF file, as a subprocess on a loopback port.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        model: Path,
        port: int,
        *,
        host: str = "127.0.0.1",
        n_threads: int = 2,
        n_ctx: int = 4096,
        alias: str | None = None,
        log_path: Path | None = None,
        python: str = sys.executable,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.model = model
        self.port = port
        self.host = host
        self.n_threads = n_threads
        self.n_ctx = n_ctx
        self.alias = alias
        self.log_path = log_path
        self.python = python
        self.extra_args = list(extra_args)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of this server (``http://HOST:PORT/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        """The command line that starts the server."""
        cmd = [
            self.python, "-m", "llama_cpp.server", "--model", str(self.model), "--host", self.host,
            "--port", str(self.port), "--n_threads", str(self.n_threads), "--n_threads_batch", str(self.n_threads),
            "--n_ctx", str(self.n_ctx),
        ]
        if self.alias:
            cmd += ["--model_alias", self.alias]
        return cmd + self.extra_args

    def start(self, timeout: float = 180.0) -> LlamaServer:
        """Start the server and wait until ``GET /v1/models`` answers."""
        if not self.model.is_file():
            raise ConfigurationError(f"model file {self.model} does not exist; run `lessonbank llm setup`")
        if not _port_free(self.host, self.port):
            raise ConfigurationError(f"port {self.port} on {self.host} is already in use")
        log = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        logger.info("starting llama.cpp server: %s", " ".join(self.command()))
        try:
            # Own session: a Ctrl-C meant for the caller does not reach the server; the caller stops it.
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **SERVER_ENV},
            )
        finally:
            if self.log_path:
                log.close()  # type: ignore[union-attr]
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                where = f"; see {self.log_path}" if self.log_path else ""
                raise ServiceUnavailable(f"llama.cpp server exited with code {self.process.returncode}{where}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2.0).status_code == 200:
                    logger.info("llama.cpp server ready at %s", self.base_url)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise ServiceUnavailable(f"llama.cpp server did not answer on {self.base_url} within {timeout:.0f} s")

    def running(self) -> bool:
        """True while the server process is alive."""
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        """Terminate the server (kill it if it does not exit within ``timeout``)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

