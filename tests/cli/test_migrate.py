"""``lessonbank migrate`` on a store written by the previous release (``tests/fixtures/store_d7beb7d``)."""

from __future__ import annotations

import json
from pathlib import Path

import redis
from click.testing import CliRunner

from lessonbank.cli.main import cli
from lessonbank.core.constants import bank_rekeyed_key
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.store.edge import EdgeLessonStore
from lessonbank.learn import upgrade
from tests.test_migrate import BANK, EXPECTED, extract_stores
from tests.workers.test_fingerprints_upgraded import BANK as LOANS
from tests.workers.test_fingerprints_upgraded import stored_earlier
from tests.workers.test_malformed_lessons import stored_malformed


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
    assert json.loads(again.output) == {BANK: {"lessons": len(EXPECTED) + 2, "completed": 0, "moved": 0,
                                               "not_migrated": 0, "not_migrated_lessons": []}}
    listed = CliRunner().invoke(cli, ["lessons", "list", "--bank", BANK, "--all"], env=env)
    assert listed.exit_code == 0
    assert all(" ".join(item["text"].split())[:80] in listed.output for item in EXPECTED)


def test_lessonbank_migrate_names_a_lesson_it_cannot_read_and_migrates_the_others(
        tmp_path: Path, env: dict[str, str | None], redis_client: redis.Redis, embedder: FastEmbedEmbedder) -> None:
    store = EdgeLessonStore(Path(str(env["LESSONBANK_QDRANT_PATH"])), embedder)
    store.open()
    stored_earlier(store, "r1", "yes", ["late", "ok"])
    broken = stored_malformed(store)
    store.close()
    result = CliRunner().invoke(cli, ["migrate"], env=env)
    assert result.exit_code == 1
    assert result.stdout.strip() == (f"bank {LOANS!r}: 2 lesson(s) rewritten, 0 of them completed (what a fix changed, "
                                     "the tools a recipe calls), 1 observed fact(s) moved to their current "
                                     "fingerprint, 1 not migrated (left as they were)")
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith(f"bank {LOANS!r}: lesson {broken.id} not migrated, left as it was: its payload is not "
                               "one this release reads (ValueError: ")
    assert lines[1] == "Error: 1 lesson(s) could not be migrated and were left as they were; every other one was"
    assert not redis_client.exists(bank_rekeyed_key(LOANS))  # a worker reads it once
    again = CliRunner().invoke(cli, ["migrate", "--json"], env=env)
    assert again.exit_code == 1
    counts = json.loads(again.stdout)[LOANS]
    assert (counts["moved"], counts["not_migrated"]) == (0, 1)
    assert [item["id"] for item in counts["not_migrated_lessons"]] == [broken.id]
