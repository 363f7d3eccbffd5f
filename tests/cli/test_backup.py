"""``lessonbank banks export`` -> wipe -> ``banks import``: the report, the lesson list and every stored field are
the same before and after (on a store of the previous release, migrated, with run summaries and a tombstone)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import redis
from click.testing import CliRunner

from lessonbank.cli.main import cli
from lessonbank.core.constants import bank_purged_key, bank_rekeyed_key, bank_runs_key, bank_summaries_key
from lessonbank.core.models import RunSummary, ToolStats
from lessonbank.core.summary import save_summary
from lessonbank.learn import upgrade
from tests.test_migrate import BANK, EXPECTED, extract_stores

OTHER = "other bank"
MOVED = 2  # the previous release's shapes, moved by ``migrate`` to their current ids (the old ones superseded)


def invoke(env: dict[str, str | None], *args: str) -> str:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.output


def state(env: dict[str, str | None], client: redis.Redis) -> dict[str, Any]:
    """What a restore must give back: the report and the lesson list of each bank, and the banks' Redis keys."""
    seen: dict[str, Any] = {"banks": json.loads(invoke(env, "banks", "list", "--json"))}
    for bank in (BANK, OTHER):
        report = json.loads(invoke(env, "report", "--bank", bank, "--json"))
        report.pop("generated_at", None)
        for point in report["series"]["lessons"]:  # the lesson timeline runs up to now: its times are the clock's
            point.pop("t")
        seen[bank] = {
            "lessons": json.loads(invoke(env, "lessons", "list", "--bank", bank, "--all", "--json")),
            "report": report,
            "runs": client.zrange(bank_runs_key(bank), 0, -1, withscores=True),
            "summaries": client.hgetall(bank_summaries_key(bank)),
            "purged": client.smembers(bank_purged_key(bank)),
        }
    return seen


def add_runs(client: redis.Redis) -> None:
    now = time.time() - 3600
    for i, (arm, verdict) in enumerate([("lessons", "success"), ("control", "failure"), ("lessons", "unknown")]):
        save_summary(client, RunSummary(
            run_id=f"run-{i}", bank=BANK, task=f"task {i}", arm=arm, outcome="success", verdict=verdict,
            verdict_source="user" if verdict != "unknown" else "none", started_at=now + i, ended_at=now + i + 5,
            wall_s=5.0, steps=3 + i, errors=i, input_tokens=100 * i, output_tokens=10 * i,
            given=[EXPECTED[0]["id"]] if arm == "lessons" else [], tools={"read": ToolStats(calls=2, errors=i)}))
    save_summary(client, RunSummary(run_id="run-x", bank=OTHER, started_at=now, outcome="error"))
    client.sadd(bank_purged_key(BANK), "0b7c4c55-1d5e-5f3a-9d55-6f7c1f0a2b11")


def test_export_wipe_import_gives_back_the_report_and_every_lesson(
    tmp_path: Path, env: dict[str, str | None], redis_client: redis.Redis
) -> None:
    env = {**env, "LESSONBANK_QDRANT_PATH": str(extract_stores(tmp_path / "old") / "edge")}
    invoke(env, "migrate")
    invoke(env, "lessons", "add", "--bank", OTHER, "--kind", "fact",
           "The export API pages by cursor: pass next_cursor back until it is empty.")
    add_runs(redis_client)
    before = state(env, redis_client)
    assert len(before[BANK]["lessons"]) == len(EXPECTED) + MOVED and before[BANK]["report"]["runs"] == 3

    out = tmp_path / "backup"
    assert invoke(env, "banks", "export", "--all", "--out", str(out)).strip() == (
        f"Exported 2 bank(s), {len(EXPECTED) + MOVED + 1} lesson(s) and 4 run summary(ies) to {out}.")

    redis_client.flushall()  # the wipe: Redis emptied, the store replaced by an empty one
    redis_client.set(bank_rekeyed_key(BANK), upgrade.RULE)  # a marker left: what is imported is read again
    env = {**env, "LESSONBANK_QDRANT_PATH": str(tmp_path / "fresh")}
    assert json.loads(invoke(env, "banks", "list", "--json")) == []

    assert invoke(env, "banks", "import", str(out)).strip() == (
        f"Imported 2 bank(s), {len(EXPECTED) + MOVED + 1} lesson(s) and 4 run summary(ies) from {out}.")
    after = state(env, redis_client)
    assert after == before, _diff(before, after)
    assert redis_client.get(bank_rekeyed_key(BANK)).startswith(b"unread:")  # type: ignore[union-attr]

    again = CliRunner().invoke(cli, ["banks", "import", str(out)], env=env)
    assert again.exit_code != 0 and "hold lessons or runs already; nothing imported" in again.output
    assert state(env, redis_client) == before


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON-like values differ (for the failure message)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in set(a) | set(b) for d in _diff(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {str(a)[:150]} != {str(b)[:150]}"]
