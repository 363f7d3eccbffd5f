"""The layers of ARCHITECTURE.md, proven by import-linter: core <- learn <- workers, core <- recorder, all <- face;
and the learning logic lives in ``lessonbank.learn``, not in the core."""

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
    assert "4 kept, 0 broken" in result.stdout


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
        ("recorder/ops.py", "import lessonbank.core.store.edge", "the recorder imports only the core"),
        ("recorder/ops.py", "import lessonbank.learn.fixes", "the recorder imports only the core"),
        ("workers/pipeline.py", "from lessonbank.recorder import ops", "the workers import the core and learn"),
        ("workers/credit.py", "import lessonbank.instructions", "the workers import the core and learn"),
        ("core/models.py", "import lessonbank.agent", "core imports nothing above it"),
        ("core/specimen.py", "from lessonbank.learn import fixtext", "core imports nothing above it"),
        ("learn/fixes.py", "import redis", "learn is pure"),
        ("learn/gate.py", "from lessonbank.core.embeddings import FastEmbedEmbedder", "learn is pure"),
        ("learn/credit.py", "from lessonbank.core.store.protocol import LessonStoreProtocol", "learn is pure"),
        ("learn/distill.py", "import openai", "learn is pure"),
        ("learn/view.py", "import lessonbank.workers.llm", "learn is pure"),
    ],
)
def test_a_lower_layer_reaching_up_breaks_the_build(tmp_path: Path, module: str, line: str, contract: str) -> None:
    root = copy_package(tmp_path)
    target = root / "lessonbank" / module
    target.write_text(target.read_text() + f"\n{line}  # reaching up\n")
    result = lint(root, root / "pyproject.toml")
    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout, result.stdout


# What smolagents writes around a step's code, output and errors: read by the adapter, and nowhere else.
SMOLAGENTS_TEXT = ("Code execution failed at line", "Execution logs:", "Last output from code snippet",
                   "Error executing tool")
ADAPTERS = ROOT / "lessonbank" / "learn" / "adapters"


def test_the_core_holds_no_learning_logic_and_only_the_adapter_reads_smolagents_text() -> None:
    core = ROOT / "lessonbank" / "core"
    assert not {"fixtext.py", "needs.py", "instructions.py"} & {p.name for p in core.rglob("*.py")}
    readers = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "lessonbank").rglob("*.py")
                     if any(marker in path.read_text() for marker in SMOLAGENTS_TEXT))
    assert readers and all(reader.startswith(str(ADAPTERS.relative_to(ROOT)) + "/") for reader in readers), readers


def test_every_module_of_the_package_imports_first_in_a_fresh_interpreter() -> None:
    """Whichever module of ``lessonbank`` a user or a worker imports first, it imports: a cycle between two modules
    that reads a name of the other at import time breaks only the one imported first."""
    script = ("import importlib, pkgutil, sys\n"
              "import lessonbank\n"
              "names = sorted(m.name for m in pkgutil.walk_packages(lessonbank.__path__, 'lessonbank.'))\n"
              "failed = []\n"
              "for name in names:\n"
              "    for loaded in [m for m in sys.modules if m == 'lessonbank' or m.startswith('lessonbank.')]:\n"
              "        del sys.modules[loaded]\n"
              "    try:\n"
              "        importlib.import_module(name)\n"
              "    except ImportError as e:\n"
              "        if 'partially initialized' in str(e) or 'circular' in str(e):\n"
              "            failed.append(f'{name}: {e}')\n"
              "    except AttributeError as e:\n"
              "        failed.append(f'{name}: {e}')\n"
              "print(len(names))\n"
              "print('\\n'.join(failed))\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    count, *failed = result.stdout.strip().split("\n")
    assert int(count) > 100 and not [line for line in failed if line], failed
