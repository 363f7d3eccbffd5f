"""``pip install lessonbank`` (no extras) into a fresh venv: the agent process works against a real Redis, and
the worker's engine (Celery, the store, embeddings, the LLM client) is not there."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.fixtures.recorded import distill_args, run_hash, run_records

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

AGENT = """
import json, sys
sys.path.insert(0, {fixtures!r})
from scripted_model import ScriptedModel, code_reply, final_code
from smolagents import CodeAgent
import lessonbank

settings = lessonbank.Settings(redis_url={redis_url!r}, data_dir={data_dir!r}, store_timeout=0.5)
agent = CodeAgent(tools=[], model=ScriptedModel([code_reply("x = 6 * 7\\nprint(x)"), final_code(42)]))
recorder = lessonbank.remember(agent, bank="light", settings=settings, judge=lambda answer: answer == 42)
answer = agent.run("Multiply six by seven")
print(json.dumps({{"answer": answer, "run_id": recorder.run_id(agent)}}))
recorder.close()
"""


@pytest.fixture(scope="module")
def light_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv holding ``pip install <this repo>`` and nothing else."""
    root = tmp_path_factory.mktemp("light") / "venv"
    venv.EnvBuilder(with_pip=True).create(root)
    python = root / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT)],
                          capture_output=True, text=True, timeout=1100, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    yield python


def test_without_extras_a_recorded_agent_runs_and_the_worker_engine_is_absent(
        light_venv: Path, redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    for engine in ("celery", "kombu", "qdrant_client", "qdrant_edge", "fastembed", "onnxruntime", "openai"):
        found = subprocess.run([str(light_venv), "-c", f"import {engine}"], capture_output=True, text=True,
                               check=False)
        assert found.returncode == 1 and "ModuleNotFoundError" in found.stderr, engine
    script = AGENT.format(fixtures=str(FIXTURES), redis_url=redis_url, data_dir=str(tmp_path / "data"))
    done = subprocess.run([str(light_venv), "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=300, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["answer"] == 42
    state = run_hash(redis_client, result["run_id"])
    assert state["verdict"] == "success" and state["arm"] == "lessons"
    assert len(run_records(redis_client, result["run_id"])) >= 2
    queued = distill_args(redis_client)
    assert len(queued) == 1 and queued[0][:2] == ["light", result["run_id"]]  # queued for a worker
    assert "no worker answered" in done.stderr  # said once, plainly: runs are recorded, nothing distills them


def test_without_extras_the_cli_says_which_extra_a_command_needs(light_venv: Path, tmp_path: Path) -> None:
    lessonbank = str(light_venv.parent / "lessonbank")
    listed = subprocess.run([lessonbank, "--help"], capture_output=True, text=True, check=False)
    assert listed.returncode == 0 and "demo" in listed.stdout and "needs pip install 'lessonbank[worker]'" in \
        listed.stdout, listed.stderr
    worker = subprocess.run([lessonbank, "worker"], capture_output=True, text=True, check=False, cwd=tmp_path,
                            env={"PATH": "/usr/bin:/bin", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert worker.returncode == 1 and "pip install 'lessonbank[worker]'" in worker.stderr, worker.stderr
    assert "Traceback" not in worker.stderr
    assert sys.version_info >= (3, 11)
