"""The README and the docs stay true: the two set-up commands CI runs, the settings they name, every
``lessonbank`` command they show (parsed by the real CLI), and every Python block marked ``<!-- runs -->``
(run here, or by the test named next to it)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
import redis

from lessonbank.cli.main import cli
from lessonbank.core.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = {path.relative_to(ROOT).as_posix(): path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}
PAGES = {"README.md": README, **DOCS}  # the dated experiment log (docs/benchmarks/) is history, not checked
RUNS = "<!-- runs -->\n```python\n"


def env_name(field: str) -> str:
    alias = Settings.model_fields[field].validation_alias
    return alias.choices[0] if alias is not None else f"LESSONBANK_{field.upper()}"  # type: ignore[union-attr]


def test_the_readmes_settings_are_real_and_the_docs_table_is_generated_from_every_one() -> None:
    table = README[README.index("## The settings that matter"):]
    rows = re.findall(r"^\| `([A-Z_]+)` \|", table, re.M)
    assert len(rows) == 10 and set(rows) <= {env_name(f) for f in Settings.model_fields}
    assert "<!-- settings-table -->" in DOCS["docs/configuration.md"]
    sys.path.insert(0, str(ROOT / "scripts"))
    from mkdocs_hooks import settings_table

    generated = settings_table()
    for name, field in Settings.model_fields.items():
        assert field.description, f"{name} has no description for docs/configuration.md"
        assert f"| `{env_name(name)}` |" in generated


def shown_commands(text: str) -> list[str]:
    """Every ``$ lessonbank ...`` command a page shows (indented ``$`` lines), without its comment."""
    found = []
    for line in re.findall(r"^\s+\$ (.+)$", text, re.M):
        for part in line.split(" && "):
            part = part.split("  #")[0].strip()
            if part.startswith("lessonbank "):
                found.append(part)
    return found


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_lessonbank_command_shown_parses(page: str) -> None:
    """Each command resolves to a real (sub)command, and its options and arguments parse as written."""
    for command in shown_commands(PAGES[page]):
        args = shlex.split(command, comments=True)[1:]
        target: click.Command = cli
        name = "lessonbank"
        with click.Context(cli) as ctx:
            while isinstance(target, click.Group) and args and args[0] in target.list_commands(ctx):
                name, target = args[0], target.get_command(ctx, args[0])  # type: ignore[assignment]
                args = args[1:]
        assert target is not cli, f"{page}: {command}"
        assert not isinstance(target, click.Group) or not args or args[0].startswith("-"), f"{page}: {command}"
        if name in ("worker",):  # Celery's own options
            continue
        # The root's context as parent, as the real CLI has: click caches a command's help option from the first
        # context it sees, and a parentless one would leave `-h` unknown to later tests.
        root = click.Context(cli, info_name="lessonbank", **cli.context_settings)
        try:
            target.make_context(name, list(args), parent=root)  # raises on an unknown option or a missing argument
        except click.BadParameter as e:  # a path the example names need not exist on this machine
            if not (e.param is not None and isinstance(e.param.type, click.Path) and "does not exist" in str(e)):
                raise


def test_every_python_block_of_the_readme_is_marked_and_run() -> None:
    """The README claims each of its Python blocks runs: each is marked, and each has its test."""
    blocks = re.findall(r"```python\n", README)
    marked = re.findall(re.escape(RUNS) + r"(.*?)```", README, re.S)
    assert len(marked) == len(blocks) == 2
    assert "OpenAIServerModel" in marked[0]  # run by tests/test_agent.py::test_the_readme_quickstart_runs_as_written
    assert "lessonbank.Bank(" in marked[1]  # run below


@pytest.mark.slow
def test_the_readmes_bank_block_runs_as_written(redis_url: str, redis_client: redis.Redis,
                                                embed_model_path: Path, tmp_path: Path) -> None:
    block = [b for b in re.findall(re.escape(RUNS) + r"(.*?)```", README, re.S) if "lessonbank.Bank(" in b][0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "OPENAI_"))}
    env.update({"LESSONBANK_REDIS_URL": redis_url, "LESSONBANK_DATA_DIR": str(tmp_path / "data"),
                "LESSONBANK_EMBED_MODEL_PATH": str(embed_model_path)})
    done = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fact: The sales CSV files separate columns with ';'" in done.stdout
    assert (tmp_path / "sales-reports.jsonl").read_text().count("\n") == 1


def test_two_setup_commands_at_the_top() -> None:
    top = README[: README.index("## Install")]
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
