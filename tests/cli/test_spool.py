"""``lessonbank spool list`` and ``lessonbank spool replay`` on spools left by a process that died."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from lessonbank.cli.main import cli
from lessonbank.recorder.spool import Spool, spool_files
from tests.fixtures.recorded import distill_args, run_records
from tests.fixtures.redis_server import free_port

# A process that records one run while Redis is refused, then exits without flushing.
DYING_AGENT = textwrap.dedent("""
    import os
    from smolagents import CodeAgent
    from lessonbank.recorder import StepRecorder
    from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code

    recorder = StepRecorder(bank="cli-bank")
    agent = CodeAgent(tools=[], model=ScriptedModel([code_reply("x = 1"), final_code(2)]),
                      step_callbacks=recorder.step_callbacks, verbosity_level=0)
    agent.run("Recorded while Redis was away.")
    print(recorder.run_id(agent), flush=True)
    os._exit(0)
""")


@pytest.fixture
def dead_spool(tmp_path: Path) -> tuple[Path, str]:
    data_dir = tmp_path / "data"
    env = {"PATH": "/usr/bin:/bin", "LESSONBANK_DATA_DIR": str(data_dir),
           "LESSONBANK_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "PYTHONPATH": str(Path.cwd())}
    result = subprocess.run([sys.executable, "-c", DYING_AGENT], capture_output=True, text=True, env=env, timeout=60,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    return data_dir, result.stdout.strip().splitlines()[-1]


def invoke(args: list[str], data_dir: Path, redis_url: str):
    return CliRunner().invoke(cli, ["--redis-url", redis_url, *args], env={"LESSONBANK_DATA_DIR": str(data_dir)})


def test_list_and_replay_a_dead_process_spool(dead_spool, redis_url, redis_client):
    data_dir, run_id = dead_spool
    listed = invoke(["spool", "list"], data_dir, redis_url)
    assert listed.exit_code == 0, listed.output
    assert "\tdead\t4 records\t1 runs" in listed.output

    replayed = invoke(["spool", "replay"], data_dir, redis_url)
    assert replayed.exit_code == 0, replayed.output
    assert "4 records of 1 runs, 1 runs closed" in replayed.output
    records = run_records(redis_client, run_id)
    assert [r.kind for r in records] == ["action", "action", "final", "run_end"]
    assert records[-1].outcome == "success" and {r.bank for r in records} == {"cli-bank"}
    assert distill_args(redis_client) == [["cli-bank", run_id]]
    assert spool_files(data_dir / "spool") == []

    again = invoke(["spool", "replay"], data_dir, redis_url)
    assert again.exit_code == 0 and "no spool files" in again.output
    assert len(distill_args(redis_client)) == 1


def test_replay_with_redis_unreachable_fails_in_one_line_and_keeps_the_file(dead_spool):
    data_dir, _ = dead_spool
    result = invoke(["spool", "replay"], data_dir, f"redis://127.0.0.1:{free_port()}/0")
    assert result.exit_code != 0
    assert "unreachable" in result.output and len(result.output.strip().splitlines()) == 1
    assert len(spool_files(data_dir / "spool")) == 1


def test_live_spool_is_listed_as_live_and_not_replayed(tmp_path, redis_url, redis_client):
    from tests.recorder.test_spool import make_ops

    data_dir = tmp_path / "data"
    spool = Spool(data_dir / "spool")
    spool.append(make_ops(steps=1, close=False)[0])
    try:
        listed = invoke(["spool", "list"], data_dir, redis_url).output
        assert "\tlive\t1 records" in listed and "last written 20" in listed and " UTC (" in listed
        [item] = json.loads(invoke(["spool", "list", "--json"], data_dir, redis_url).output)
        assert (item["state"], item["records"], item["runs"]) == ("live", 1, 1) and item["path"].endswith(".jsonl")
        result = invoke(["spool", "replay"], data_dir, redis_url)
        assert result.exit_code == 0 and "still running" in result.output
        assert redis_client.exists("lessonbank:run:run1:steps") == 0
    finally:
        spool.release()


def test_empty_directory(tmp_path, redis_url):
    result = invoke(["spool", "list", "--dir", str(tmp_path / "nothing")], tmp_path, redis_url)
    assert result.exit_code == 0 and "no spool files" in result.output
    as_json = invoke(["spool", "list", "--json", "--dir", str(tmp_path / "nothing")], tmp_path, redis_url)
    assert as_json.exit_code == 0 and json.loads(as_json.output) == []


def test_replay_of_a_spool_it_cannot_read_is_a_one_line_error(tmp_path, redis_url):
    unreadable = tmp_path / "unreadable"
    (unreadable / "spool-dir.jsonl").mkdir(parents=True)  # a folder where a spool file should be
    unmovable = tmp_path / "unmovable"
    unmovable.mkdir()
    (unmovable / "spool-1.jsonl").write_text("garbage\n")
    (unmovable / "spool-1.jsonl.rejected").mkdir()  # where its unreadable lines should go
    for directory in (unreadable, unmovable):
        result = invoke(["spool", "replay", "--dir", str(directory)], tmp_path / "data", redis_url)
        assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
        assert result.stderr.startswith(f"Error: cannot replay the spools in {directory} (files kept, run again "
                                        "later): [Errno 21] Is a directory: "), result.stderr
