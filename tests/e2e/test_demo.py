"""`lessonbank demo` end to end, with the OpenAI-protocol test server standing in for the LLM.

(The demo on the real local model is what the README's first command runs; here the same command runs
against the scripted server so that it is checked on every CI run in seconds.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.fixtures.celery_worker import REPO
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json

pytestmark = pytest.mark.slow

LESSON = "The sales CSV files use ';' as separator: read them with csv.DictReader(f, delimiter=';')."


def test_demo_runs_twice_and_run_two_starts_with_the_lesson(
    redis_url: str, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path
) -> None:
    openai_server.script(Reply(content=lessons_json(("fact", LESSON))), Reply(content=lessons_json(("fact", LESSON))))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "OPENAI_"))}
    env.update({
        "LESSONBANK_REDIS_URL": redis_url,
        "LESSONBANK_DATA_DIR": str(tmp_path / "data"),
        "LESSONBANK_EMBED_MODEL_PATH": str(embed_model_path),
        "OPENAI_BASE_URL": openai_server.url,
        "OPENAI_API_KEY": "test-key",
        "LESSONBANK_DISTILL_MODEL": "fake-model",
    })
    result = subprocess.run(
        [sys.executable, "-m", "lessonbank.cli.main", "demo", "--timeout", "120"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "Redis: reusing" in out and "SCRIPTED trajectory" in out

    run_one, run_two = out.split("\nRun 1 ", 1)[1].split("\nRun 2 ", 1)
    assert "started with no lessons" in run_one
    assert "KeyError" in run_one and "steps: 4   errors: 1" in run_one
    assert "## Lessons from earlier runs" in run_two and "delimiter=';'" in run_two
    assert "steps: 2   errors: 0" in run_two
    after = out.rsplit("after run 2:", 1)[1]
    # run 2 was given the lesson: repeating it is no evidence, but applying it and ending well is helpful credit
    assert "[fact] evidence 1, helpful 1, harmful 0" in after
    assert "[recipe] evidence 1" in after and "delimiter=';'" in after  # run 1's working code
    assert re.search(r"lessons at start\s+0\s+3", out)  # the lesson, the recipe and the text result's shape
    report = re.search(r"Report of bank 'demo-csv': (\S+report\.html)", out)
    assert report and Path(report.group(1)).is_file()
    assert len(openai_server.chat_requests()) == 2

    worker_pid = int(re.search(r"Worker: celery -A lessonbank.workers worker \(pid (\d+)", out).group(1))  # type: ignore[union-attr]
    assert not Path(f"/proc/{worker_pid}").exists()  # everything the demo started is stopped


def test_the_report_example_runs_both_arms_and_screenshots_the_report(
    redis_url: str, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path
) -> None:
    # scripts/report_example.py makes the README's screenshot; here on the scripted server, six runs
    openai_server.default = Reply(content=lessons_json(("fact", LESSON)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "OPENAI_"))}
    env.update({
        "LESSONBANK_REDIS_URL": redis_url, "LESSONBANK_DATA_DIR": str(tmp_path / "data"),
        "LESSONBANK_EMBED_MODEL_PATH": str(embed_model_path), "OPENAI_BASE_URL": openai_server.url,
        "OPENAI_API_KEY": "test-key", "LESSONBANK_DISTILL_MODEL": "fake-model",
    })
    shot = tmp_path / "docs" / "report.png"
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "report_example.py"), "--runs", "6", "--holdout", "0.5", "--seed", "7",
         "--out", str(shot), "--size", "900x1400", "--timeout", "120"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    runs = re.findall(r"run \d+: (\d+) steps, (\d+) errors, (with|without) lessons, distilled", result.stdout)
    assert len(runs) == 6
    given = [r for r in runs if r[2] == "with"]
    assert given and all(r[:2] == ("2", "0") for r in given)  # a run given the lessons reads the file right at once
    assert all(r[:2] == ("4", "1") for r in runs if r[2] == "without")

    document = json.loads((shot.with_suffix("") / "report.json").read_text())
    arms = document["arms"]
    assert arms["lessons"]["runs"] + arms["control"]["runs"] == 6 and arms["control"]["runs"] > 0
    assert arms["lessons"]["runs"] == len(given)  # seed 7 holds the first run out: every lessons-arm run had some
    assert arms["control"]["mean_steps"] == 4 and arms["lessons"]["mean_steps"] == 2
    image = Image.open(shot)
    assert image.size == (900, 1400)
    assert len(image.convert("RGB").getcolors(maxcolors=1 << 16) or range(1 << 16)) > 50  # a painted page
