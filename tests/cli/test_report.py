"""``lessonbank report`` on runs written the way the recorder and the distill pipeline write them (real
redis-server, real embedded store): exact arms, success rates, tokens and scripted tool errors; the files
``--out`` writes; tables only without matplotlib."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result
from PIL import Image, ImageStat
from qdrant_client import QdrantClient

from lessonbank.cli.main import cli
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson, StepRecord, TokenUsageRecord
from lessonbank.core.runs import RunRef, close_run, load_run, record_step
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.core.summary import save_summary
from lessonbank.workers.summaries import summarize_run
from tests.test_report import BLOCK_MATPLOTLIB

BANK = "shop"
TOOLS = ["fetch_orders", "final_answer"]
BASE = 1_700_000_000.0
FAILED_FETCH = ("Code execution failed at line 'orders = fetch_orders(page=3)' due to: "
                "HTTPError: 429 Too Many Requests for page 3 of 'orders'")
LESSON = Lesson.new(BANK, "failure", "fetch_orders answers 429 above page 2; wait one second between pages.")
# arm -> (verdicts, input tokens per action step, output tokens per action step, runs with a tool error)
SCENARIO = {
    "lessons": ("ssssfsssfs", 200, 20, {4}),
    "control": ("sfsfsfsfss", 300, 30, {0, 3, 6, 9}),
}


def step(run_id: str, seq: int, code: str, tokens: tuple[int, int], at: float, error: str = "") -> StepRecord:
    return StepRecord(
        id=f"{run_id}:{seq}", bank=BANK, run_id=run_id, agent="shopper", task="Total the May orders", kind="action",
        seq=seq, step_number=seq + 1, code=code, observations="" if error else f"42 orders (step {seq})",
        error_type="AgentExecutionError" if error else "", error_message=error,
        token_usage=TokenUsageRecord(input_tokens=tokens[0], output_tokens=tokens[1]),
        started_at=at, ended_at=at + 0.5, duration=0.5,
    )


def record_run(client: redis.Redis, run_id: str, arm: str, verdict: str, tokens: tuple[int, int],
               failing: bool, at: float) -> None:
    """Steps through the recorder's writes (record_step, close_run), then the summary as the pipeline saves it."""
    extra = {"arm": arm, "given": json.dumps([LESSON.id] if arm == "lessons" else []), "tools": json.dumps(TOOLS),
             "verdict": "success" if verdict == "s" else "failure", "verdict_source": "user"}
    ref = RunRef(BANK, run_id, agent="shopper", task="Total the May orders", extra=extra)
    codes = ["orders = fetch_orders(page=1)\nprint(len(orders))"]
    if failing:
        codes.append("orders = fetch_orders(page=3)")
    codes.append("total = sum(o['amount'] for o in orders)\nfinal_answer(total)")
    for seq, code in enumerate(codes):
        error = FAILED_FETCH if failing and seq == 1 else ""
        record_step(client, ref, seq, step(run_id, seq, code, tokens, at + seq, error).to_json(), at + seq)
    end = StepRecord(id=f"{run_id}:{len(codes)}", bank=BANK, run_id=run_id, kind="run_end", seq=len(codes),
                     outcome="success")
    close_run(client, ref, len(codes), end.to_json(), "success", at + len(codes), "test-queue")
    applied = [LESSON.id] if arm == "lessons" and verdict == "s" else []
    save_summary(client, summarize_run(load_run(client, run_id), applied=applied))


def write_scenario(client: redis.Redis, arms: tuple[str, ...] = ("lessons", "control")) -> None:
    for a, arm in enumerate(arms):
        verdicts, tokens_in, tokens_out, failing = SCENARIO[arm]
        for i, verdict in enumerate(verdicts):
            at = BASE + 600 * i + 60 * a
            record_run(client, f"{arm}-{i}", arm, verdict, (tokens_in, tokens_out), i in failing, at)


@pytest.fixture
def scenario(
    env: dict[str, str | None], redis_client: redis.Redis, embedder: FastEmbedEmbedder
) -> dict[str, str | None]:
    write_scenario(redis_client)
    lesson = LESSON.model_copy(update={"given": 10, "applied": 8, "helpful": 8, "harmful": 0,
                                       "source_run_ids": ["control-0"], "first_seen": BASE})
    client = QdrantClient(path=str(env["LESSONBANK_QDRANT_PATH"]))
    LessonStore(client, embedder).upsert([lesson])
    client.close()
    return env


def invoke(env: dict[str, str | None], *args: str) -> Result:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result


def test_report_json_has_both_arms_and_the_scripted_tool_errors(scenario: dict[str, str | None]) -> None:
    document = json.loads(invoke(scenario, "report", "--bank", BANK, "--json").stdout)
    lessons, control = document["arms"]["lessons"], document["arms"]["control"]
    assert document["comparison"] == "arms" and document["runs"] == 20
    assert (lessons["runs"], control["runs"]) == (10, 10)
    assert (lessons["success_rate"], control["success_rate"]) == (0.8, 0.6)
    assert lessons["mean_steps"] == 2.1 and control["mean_steps"] == 2.4  # failing runs take one more step
    assert lessons["mean_tokens"] == pytest.approx(2.1 * 220) and control["mean_tokens"] == pytest.approx(2.4 * 330)
    assert lessons["mean_wall_s"] == pytest.approx(2.1) and control["mean_wall_s"] == pytest.approx(2.4)
    assert document["difference"]["success_rate"]["estimate"] == pytest.approx(0.2)
    assert document["difference"]["tokens_saved_per_run"]["estimate"] == pytest.approx(2.4 * 330 - 2.1 * 220)
    assert lessons["lessons_applied_per_run"] == 0.8
    tools = {row["name"]: row for row in document["tools"]}
    assert (tools["fetch_orders"]["calls"], tools["fetch_orders"]["errors"]) == (25, 5)
    assert tools["fetch_orders"]["top_errors"] == [
        {"message": "HTTPError: <n> Too Many Requests for page <n> of <str>", "count": 5}]
    assert (tools["final_answer"]["calls"], tools["final_answer"]["errors"]) == (20, 0)
    assert [(row["id"], row["given"], row["helpful"]) for row in document["lessons"]] == [(LESSON.id, 10, 8)]


def test_report_out_writes_a_page_with_plots_and_the_json(scenario: dict[str, str | None], tmp_path: Path) -> None:
    out = tmp_path / "report"
    printed = invoke(scenario, "report", "--bank", BANK, "--out", str(out)).stdout
    assert "report.html" in printed
    assert {p.name for p in out.iterdir()} == {"report.html", "report.json", "success_rate.png", "tokens.png",
                                               "lessons.png", "tool_errors.png"}
    for png in out.glob("*.png"):
        image = Image.open(io.BytesIO(png.read_bytes())).convert("L")
        assert min(image.size) > 100 and max(ImageStat.Stat(image).var) > 100, png.name
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 4 and "fetch_orders" in page and "Runs by arm" in page
    written = json.loads((out / "report.json").read_text())
    assert written["arms"]["lessons"]["success_rate"] == 0.8 and written["tools"][0]["name"] == "fetch_orders"


def test_report_prints_tables_in_the_terminal(scenario: dict[str, str | None]) -> None:
    text = invoke(scenario, "report", "--bank", BANK).stdout
    for expected in ("Runs by arm", "80.0 %", "60.0 %", "fetch_orders", "Lessons", LESSON.id[:8], "--out DIR"):
        assert expected in text, expected
    later = json.loads(invoke(scenario, "report", "--bank", BANK, "--json", "--since", "2024-01-01").stdout)
    assert later["runs"] == 0 and later["arms"]["lessons"]["success_rate"] is None


def test_a_bank_without_runs_or_lessons_gets_a_line_naming_the_known_banks(scenario: dict[str, str | None]) -> None:
    typo = invoke(scenario, "report", "--bank", "shpo")
    assert typo.stderr.strip().splitlines() == [
        "Bank 'shpo' has no runs and no lessons (banks: 'shop'; see lessonbank banks list)."]
    assert "0 runs" in typo.stdout
    assert "no runs and no lessons" not in invoke(scenario, "report", "--bank", BANK).stderr


def test_without_a_control_arm_it_says_so(env: dict[str, str | None], redis_client: redis.Redis) -> None:
    write_scenario(redis_client, arms=("lessons",))
    text = invoke(env, "report", "--bank", BANK).stdout
    assert "can only compare early and late runs" in text and "early third" in text
    document = json.loads(invoke(env, "report", "--bank", BANK, "--json").stdout)
    assert document["comparison"] == "early_late" and document["arms"]["control"]["runs"] == 0
    assert document["early_late"]["early"]["runs"] == 3


@pytest.mark.parametrize("since", ["yesterday", "7x", "2024-13-01"])
def test_a_bad_since_is_a_one_line_error(env: dict[str, str | None], since: str) -> None:
    result = CliRunner().invoke(cli, ["report", "--bank", BANK, "--since", since], env=env)
    assert result.exit_code != 0 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("Error: --since: expected a date")


def test_a_since_out_of_range_is_a_one_line_error(env: dict[str, str | None], tmp_path: Path) -> None:
    for since in ("99999999999d", "9" * 400 + "s", "0001-01-01", "1969-12-31T23:59", "0001-01-01T00:00+01:00",
                  "9999-12-31", "2999-01-01"):
        result = CliRunner().invoke(cli, ["report", "-b", BANK, "--since", since, "--out", str(tmp_path)], env=env)
        assert result.exit_code != 0 and len(result.stderr.strip().splitlines()) == 1, result.output
        assert result.stderr.startswith(f"Error: --since: {since!r} is out of range"), result.stderr
    tomorrow = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=23)).strftime("%Y-%m-%dT%H:%M")
    for since in ("1970-01-01", tomorrow, "52w"):  # the edges are taken
        assert json.loads(invoke(env, "report", "--bank", BANK, "--json", "--since", since).stdout)["runs"] == 0


def test_without_matplotlib_the_command_writes_tables_and_the_hint(
    scenario: dict[str, str | None], tmp_path: Path
) -> None:
    out = tmp_path / "plain"
    script = BLOCK_MATPLOTLIB + "from lessonbank.cli.main import cli\ncli()\n"
    environ = {k: v for k, v in {**os.environ, **scenario}.items() if v is not None}
    for name in [k for k, v in scenario.items() if v is None]:
        environ.pop(name, None)
    result = subprocess.run([sys.executable, "-c", script, "report", "--bank", BANK, "--out", str(out)],
                            capture_output=True, text=True, env=environ, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "pip install 'lessonbank[report]'" in result.stderr
    assert {p.name for p in out.iterdir()} == {"report.html", "report.json"}
    assert "Runs by arm" in (out / "report.html").read_text()
