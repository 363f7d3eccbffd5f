"""The package root exports what the README documents, and every name in ``__all__`` resolves."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import lessonbank

README = Path(__file__).resolve().parents[1] / "README.md"
DOCUMENTED = {"StepRecorder", "Settings", "Lesson", "StepRecord", "build_instructions", "remember", "memory_tools"}


def readme_names() -> set[str]:
    """Names the README imports from ``lessonbank`` or calls as ``lessonbank.<name>``."""
    text = README.read_text(encoding="utf-8")
    names = set(re.findall(r"\blessonbank\.([A-Za-z_]\w*)\(", text))
    for group in re.findall(r"from lessonbank import ([^\n]+)", text):
        names.update(name.strip() for name in group.split(","))
    return names


def test_readme_names_are_exported() -> None:
    names = readme_names()
    assert {"remember", "build_instructions", "memory_tools", "StepRecorder"} <= names
    assert names | DOCUMENTED <= set(lessonbank.__all__)


@pytest.mark.parametrize("name", sorted(lessonbank.__all__))
def test_every_exported_name_resolves(name: str) -> None:
    assert getattr(lessonbank, name) is not None
    assert name in dir(lessonbank) or name in lessonbank.__dict__


def test_exported_callables_are_the_real_ones() -> None:
    from lessonbank.instructions import build_instructions
    from lessonbank.memory import remember
    from lessonbank.tools import RecallLessonsTool, RememberLessonTool, memory_tools
    from recorder import StepRecorder

    assert lessonbank.build_instructions is build_instructions
    assert lessonbank.remember is remember
    assert lessonbank.memory_tools is memory_tools
    assert lessonbank.RecallLessonsTool is RecallLessonsTool and lessonbank.RememberLessonTool is RememberLessonTool
    assert lessonbank.StepRecorder is StepRecorder
    with pytest.raises(AttributeError):
        lessonbank.not_a_name  # noqa: B018


def test_importing_the_package_stays_light() -> None:
    code = (
        "import sys, lessonbank\n"
        "heavy = [m for m in ('qdrant_client', 'fastembed', 'celery', 'smolagents') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
