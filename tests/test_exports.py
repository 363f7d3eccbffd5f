"""The package root exports exactly what the README documents, and every exported name resolves."""

from __future__ import annotations

import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lessonbank

README = Path(__file__).resolve().parents[1] / "README.md"


SUBMODULES = {module.name for module in pkgutil.iter_modules(lessonbank.__path__)}


def readme_names() -> set[str]:
    """Names the README imports from ``lessonbank`` or uses as ``lessonbank.<name>`` (submodules aside)."""
    text = README.read_text(encoding="utf-8").split("## Changelog")[0]  # old names are history
    names = set(re.findall(r"\blessonbank\.([A-Za-z_]\w*)\b(?![./\w-])", text))
    for group in re.findall(r"from lessonbank import ([^\n]+)", text):
        names.update(name.strip() for name in group.split("#")[0].split(","))
    return {name for name in names if not name.startswith("_") and name not in SUBMODULES}


def test_all_is_exactly_what_the_readme_documents() -> None:
    assert set(lessonbank.__all__) == readme_names()
    assert len(lessonbank.__all__) == len(set(lessonbank.__all__))


@pytest.mark.parametrize("name", sorted(lessonbank.__all__))
def test_every_exported_name_resolves(name: str) -> None:
    assert getattr(lessonbank, name) is not None
    assert name in dir(lessonbank)


def test_exported_callables_are_the_real_ones() -> None:
    from lessonbank.agent import remember
    from lessonbank.block import build_instructions, lessons_block
    from lessonbank.recorder.callback import StepRecorder
    from lessonbank.tools import memory_tools

    assert lessonbank.build_instructions is build_instructions and lessonbank.lessons_block is lessons_block
    assert lessonbank.remember is remember
    assert lessonbank.memory_tools is memory_tools
    assert lessonbank.StepRecorder is StepRecorder
    with pytest.raises(AttributeError):
        lessonbank.not_a_name  # noqa: B018


def test_version_is_the_installed_distribution() -> None:
    from importlib.metadata import version

    assert lessonbank.__version__ == version("lessonbank")
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", lessonbank.__version__)


def test_importing_the_package_stays_light() -> None:
    code = (
        "import sys, lessonbank\n"
        "heavy = [m for m in ('qdrant_client', 'fastembed', 'celery', 'smolagents', 'openai') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
