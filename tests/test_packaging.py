"""What the distribution installs: one top-level package, typed, licensed, versioned; and names that do
not collide with a user's own ``workers`` or ``recorder`` packages."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (path,) = out.glob("lessonbank-*.whl")
    return path


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package_typed_and_licensed(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"lessonbank"}
    assert "lessonbank/py.typed" in names
    for package in ("lessonbank/recorder/", "lessonbank/workers/", "lessonbank/core/", "lessonbank/core/store/"):
        assert f"{package}__init__.py" in names
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert any(n.endswith("dist-info/licenses/LICENSE") for n in names)
    assert "Project-URL: Source" in metadata and "Classifier: Typing :: Typed" in metadata


def test_license_file_matches_the_declared_license() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_a_users_own_workers_and_recorder_packages_stay_theirs(tmp_path: Path) -> None:
    for name in ("workers", "recorder"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("WHO = 'user'\n")
    code = (
        "import lessonbank.workers, lessonbank.recorder, workers, recorder\n"
        "assert workers.WHO == 'user' and recorder.WHO == 'user', (workers, recorder)\n"
        "assert lessonbank.workers.app.main == 'lessonbank'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    celery = subprocess.run([sys.executable, "-m", "celery", "-A", "lessonbank.workers", "report"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert celery.returncode == 0 and "lessonbank.workers.tasks" in celery.stdout, celery.stderr


def test_no_top_level_workers_or_recorder_is_installed(tmp_path: Path) -> None:
    code = (
        "import importlib.util, sys\n"
        "found = {n: importlib.util.find_spec(n) for n in ('workers', 'recorder')}\n"
        "print({n: s.origin for n, s in found.items() if s is not None})\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "{}", result.stdout + result.stderr
