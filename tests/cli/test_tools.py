"""``lessonbank tools``: the tool statistics of a bank from its run summaries in a real redis-server."""

from __future__ import annotations

import json
from pathlib import Path

import redis
from click.testing import CliRunner

from lessonbank.cli.main import cli
from lessonbank.core.settings import Settings
from tests.cli.test_report import BANK, write_scenario


def env_for(settings: Settings, tmp_path: Path) -> dict[str, str | None]:
    return {"LESSONBANK_REDIS_URL": settings.redis_url, "LESSONBANK_DATA_DIR": str(tmp_path / "data"),
            "LESSONBANK_BANK": None}


def test_tools_counts_calls_and_errors_per_tool(settings: Settings, tmp_path: Path, redis_client: redis.Redis) -> None:
    write_scenario(redis_client)
    env = env_for(settings, tmp_path)
    result = CliRunner().invoke(cli, ["tools", "--bank", BANK, "--json"], env=env)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["bank"] == BANK and document["runs"] == 20
    rows = {row["name"]: row for row in document["tools"]}
    assert set(rows) == {"fetch_orders", "final_answer"}
    assert (rows["fetch_orders"]["calls"], rows["fetch_orders"]["errors"]) == (25, 5)
    assert rows["fetch_orders"]["error_rate"] == 0.2 and rows["fetch_orders"]["p50_s"] == 0.5
    assert rows["fetch_orders"]["top_errors"][0]["count"] == 5

    text = CliRunner().invoke(cli, ["tools", "--bank", BANK], env=env).stdout
    assert "fetch_orders" in text and "20.0 %" in text and "5× HTTPError: <n> Too Many Requests" in text
    since = CliRunner().invoke(cli, ["tools", "--bank", BANK, "--json", "--since", "1d"], env=env).stdout
    assert json.loads(since)["runs"] == 0  # the scenario's runs are from 2023


def test_tools_of_an_empty_bank_and_bad_input(settings: Settings, tmp_path: Path) -> None:
    env = env_for(settings, tmp_path)
    empty = CliRunner().invoke(cli, ["tools", "--bank", "nothing-yet"], env=env)
    assert empty.exit_code == 0 and "No tool calls recorded." in empty.stdout
    bad = CliRunner().invoke(cli, ["tools", "--bank", " "], env=env)
    assert bad.exit_code != 0 and bad.stderr.strip() == "Error: --bank must not be empty"
    down = CliRunner().invoke(cli, ["--redis-url", "redis://127.0.0.1:1/0", "tools", "--bank", BANK], env=env)
    assert down.exit_code != 0 and len(down.stderr.strip().splitlines()) == 1 and "unreachable" in down.stderr
