"""The README stays true: its two set-up commands, and a settings table row for every setting."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from lessonbank.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def env_name(field: str) -> str:
    alias = Settings.model_fields[field].validation_alias
    return alias.choices[0] if alias is not None else f"LESSONBANK_{field.upper()}"  # type: ignore[union-attr]


def test_every_setting_has_a_row_in_the_settings_table() -> None:
    table = README[README.index("## Settings"):]
    rows = set(re.findall(r"^\| `([A-Z_]+)` \|", table, re.M))
    assert {env_name(f) for f in Settings.model_fields} <= rows


def test_two_setup_commands_at_the_top() -> None:
    top = README[: README.index("## Usage")]
    commands = re.findall(r"^    \$ (.+)$", top, re.M)
    assert len(commands) == 2
    demo, tests = commands
    assert demo.endswith("lessonbank demo") and "pip install -e ." in demo
    assert tests.endswith("python3 -m pytest") and "'.[dev]'" in tests


def test_ci_runs_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    extract = re.search(r"TEST_COMMAND=\$\((.+)\)$", script, re.M)
    assert extract and 'eval "$TEST_COMMAND"' in script
    command = subprocess.run(["bash", "-c", extract.group(1)], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert command == re.findall(r"^    \$ (.+)$", README, re.M)[1]
