"""``lessonbank migrate`` on a store written by the previous release (``tests/fixtures/store_d7beb7d``)."""

from __future__ import annotations

import json
from pathlib import Path

import redis
from click.testing import CliRunner

from lessonbank.cli.main import cli
from lessonbank.core.constants import bank_rekeyed_key
from lessonbank.learn import upgrade
from tests.test_migrate import BANK, EXPECTED, extract_stores


def test_lessonbank_migrate_rewrites_every_bank(tmp_path: Path, env: dict[str, str | None],
                                                redis_client: redis.Redis) -> None:
    env = {**env, "LESSONBANK_QDRANT_PATH": str(extract_stores(tmp_path / "old") / "edge")}
    assert not redis_client.exists(bank_rekeyed_key(BANK))
    result = CliRunner().invoke(cli, ["migrate"], env=env)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (f"bank 'old': {len(EXPECTED)} lesson(s) rewritten, 9 of them completed "
                                     "(what a fix changed, the tools a recipe calls), 2 observed fact(s) moved to "
                                     "their current fingerprint")
    assert redis_client.get(bank_rekeyed_key(BANK)) == upgrade.RULE.encode()  # the workers need not read it for them
    again = CliRunner().invoke(cli, ["migrate", "--bank", BANK, "--json"], env=env)
    assert again.exit_code == 0
    assert json.loads(again.output) == {BANK: {"lessons": len(EXPECTED) + 2, "completed": 0, "moved": 0}}
    listed = CliRunner().invoke(cli, ["lessons", "list", "--bank", BANK, "--all"], env=env)
    assert listed.exit_code == 0
    assert all(" ".join(item["text"].split())[:80] in listed.output for item in EXPECTED)
