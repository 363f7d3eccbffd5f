"""The layers of ARCHITECTURE.md, proven by import-linter: core <- recorder, core <- workers, all <- face."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = [sys.executable, "-c",
        "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]


def lint(package_root: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the package found under `package_root`, with the contracts of `config`."""
    env = {"PYTHONPATH": str(package_root), "PATH": "/usr/bin:/bin"}
    return subprocess.run([*LINT, "--config", str(config), "--no-cache"], cwd=package_root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_contracts_hold() -> None:
    result = lint(ROOT, ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def copy_package(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "lessonbank", tmp_path / "lessonbank", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("recorder/spool.py", "import lessonbank.workers.deadletters", "the recorder imports only the core"),
        ("recorder/ops.py", "from lessonbank.cli import context", "the recorder imports only the core"),
        ("recorder/serialize.py", "import celery", "the recorder imports only the core"),
        ("recorder/ops.py", "import lessonbank.core.store.owner", "the recorder imports only the core"),
        ("workers/transcript.py", "from lessonbank.recorder import ops", "the workers import only the core"),
        ("core/models.py", "import lessonbank.agent", "core imports nothing above it"),
    ],
)
def test_a_lower_layer_reaching_up_breaks_the_build(tmp_path: Path, module: str, line: str, contract: str) -> None:
    root = copy_package(tmp_path)
    target = root / "lessonbank" / module
    target.write_text(target.read_text() + f"\n{line}  # reaching up\n")
    result = lint(root, root / "pyproject.toml")
    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout, result.stdout
