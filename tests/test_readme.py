"""The README stays true: its two set-up commands, and a settings table row for every setting."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from lessonbank.core.settings import Settings

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
    assert demo.endswith("lessonbank demo") and "pip install -e '.[local-llm]'" in demo  # the worker and the LLM
    assert tests.endswith("python -m pytest") and "'.[dev]'" in tests
    for command in commands:  # PEP 668: both make and use a virtual environment, with what Debian must add
        assert "python3 -m venv .venv && . .venv/bin/activate" in command
        assert "python3-venv" in command and "redis-server" in command
        assert "python3 -m pip" not in command


def test_ci_runs_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    commands = re.findall(r"^    \$ (.+)$", README, re.M)[:2]
    for name, expected in zip(("DEMO_COMMAND", "TEST_COMMAND"), commands, strict=True):
        extract = re.search(rf"^{name}=\$\((.+)\)$", script, re.M)
        assert extract, name
        found = subprocess.run(["bash", "-c", extract.group(1)], cwd=ROOT, capture_output=True, text=True).stdout
        assert found.strip() == expected
    assert 'eval "$TEST_COMMAND"' in script and 'eval "$INSTALL_COMMAND"' in script
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in script
