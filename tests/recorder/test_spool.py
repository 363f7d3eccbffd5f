"""The local spool: durable appends, per-process lock, and idempotent replay into the real Redis."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from lessonbank.core.constants import OPEN_RUNS_KEY
from lessonbank.core.models import StepRecord
from lessonbank.recorder.ops import Op
from lessonbank.recorder.spool import Spool, describe, replay_directory, replay_file, spool_files
from lessonbank.recorder.transport import RedisSink
from tests.fixtures.recorded import distill_args, run_hash, run_records


def make_ops(run_id: str = "run1", steps: int = 3, close: bool = True) -> list[Op]:
    ops = []
    for seq in range(steps):
        record = StepRecord(id=f"{run_id}:{seq}", bank="b", run_id=run_id, task="t", kind="action", seq=seq,
                            observations=f"obs {seq}")
        ops.append(Op("step", "b", run_id, "agent", "t", seq, record.to_json(), 1000.0 + seq))
    if close:
        end = StepRecord(id=f"{run_id}:{steps}", bank="b", run_id=run_id, kind="run_end", seq=steps, outcome="success")
        ops.append(Op("close", "b", run_id, "agent", "t", steps, end.to_json(), 2000.0, "success", "tok-" + run_id))
    return ops


def write_dead_spool(directory: Path, ops: list[Op], extra_lines: list[str] = (), name: str = "spool-1-dead.jsonl"):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("".join(op.to_line() + "\n" for op in ops) + "".join(extra_lines))
    return path


@pytest.fixture
def sink(settings, redis_client):
    return RedisSink(redis_client, settings.queue)


def replay_apply(sink: RedisSink):
    return lambda op: sink.apply(op, replay=True)


def test_append_is_durable_locked_and_ordered(tmp_path):
    spool = Spool(tmp_path / "spool")
    assert not (tmp_path / "spool").exists()  # nothing happens before the first append
    ops = make_ops()
    for op in ops:
        spool.append(op)
    assert spool.path is not None and spool.path.exists()
    lines = spool.path.read_text().splitlines()
    assert [Op.from_line(line) for line in lines] == ops
    assert describe(spool.path).live and describe(spool.path).ops == 4
    assert spool.peek() == ops[0]
    path = spool.path
    for expected in ops:
        assert spool.peek() == expected
        spool.delivered()
    assert len(spool) == 0 and not path.exists()


def test_release_keeps_undelivered_ops_on_disk(tmp_path):
    spool = Spool(tmp_path)
    spool.append(make_ops(steps=1, close=False)[0])
    path = spool.path
    spool.release()
    assert path is not None and path.exists() and not describe(path).live


def test_only_the_oldest_ops_wait_in_memory_the_rest_are_read_back_from_disk_in_order(tmp_path):
    spool = Spool(tmp_path, in_memory=4)
    ops = [op for run in range(5) for op in make_ops(f"run{run}", steps=2)]  # 15 ops
    spool.append_many(ops[:3])
    for op in ops[3:9]:
        spool.append(op)
    spool.append_many(ops[9:])
    assert len(spool) == 15 and len(spool._pending) == 4  # the other 11 are in the file only
    assert [Op.from_line(line) for line in spool.path.read_text().splitlines()] == ops
    path, sent = spool.path, []
    while len(spool):
        batch = spool.head(3)
        assert batch and len(spool._pending) <= 4
        sent += batch
        spool.delivered(len(batch))
    assert sent == ops and not path.exists()
    spool.append_many(ops[:6])  # a new outage: a new file, the memory filled first again
    assert len(spool) == 6 and len(spool._pending) == 4 and spool.path != path
    spool.delivered(6)  # delivered past what memory held (a spilled batch): read back and counted
    assert len(spool) == 0 and spool.path is None


def test_a_spooled_line_that_does_not_read_back_leaves_its_file_for_replay(tmp_path, sink, redis_client):
    spool = Spool(tmp_path, in_memory=2)
    ops = make_ops("cut-run", steps=4)  # 5 ops: 2 in memory, 3 on disk
    spool.append_many(ops)
    path = spool.path
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + lines[3][:20] + "\n" + lines[4])  # line 4 cut short, as by a full disk
    sent = []
    while len(spool):
        batch = spool.head(2)
        sent += batch
        spool.delivered(len(batch))
    assert [op.seq for op in sent] == [0, 1, 2, 4]  # the cut line is not sent...
    assert path.exists() and not describe(path).live  # ...and its file stays, unlocked, for the replay
    reports = replay_directory(tmp_path, replay_apply(sink))
    assert reports[0].rejected == 1 and path.with_name(path.name + ".rejected").read_text().startswith(lines[3][:20])
    assert [r.seq for r in run_records(redis_client, "cut-run")] == [0, 1, 2, 4]


def test_a_spool_file_gone_from_disk_is_let_go_and_the_next_ops_start_another(tmp_path, caplog):
    spool = Spool(tmp_path, in_memory=2)
    ops = make_ops("lost-run", steps=4)
    spool.append_many(ops)
    first = spool.path
    first.unlink()  # removed by hand while the agent runs
    assert spool.head(5) == ops[:2]  # what memory holds still goes
    with caplog.at_level("WARNING", logger="lessonbank.recorder.spool"):
        spool.delivered(2)
        assert spool.head(5) == []  # the 3 on disk cannot be read back
    assert "cannot read 3 spooled ops back" in caplog.text and len(spool) == 0
    spool.append(ops[-1])
    assert spool.path is not None and spool.path != first and len(spool) == 1


def test_op_lines_round_trip_and_reject_garbage():
    op = make_ops()[-1]
    assert Op.from_line(op.to_line()) == op
    for bad in ['{"op": "step"}', "[1, 2]", "not json", '{"op": "drop", "run_id": "x"}']:
        with pytest.raises(ValueError):
            Op.from_line(bad)


def test_replay_of_a_dead_process_spool_delivers_exactly_once(tmp_path, sink, redis_client):
    ops = make_ops()
    path = write_dead_spool(tmp_path, ops, extra_lines=['{"op": "step", "truncat'])
    report = replay_file(path, replay_apply(sink))
    assert report.complete and report.delivered == 4 and report.closes == 1 and report.rejected == 1
    assert not path.exists()
    assert (tmp_path / (path.name + ".rejected")).read_text() == '{"op": "step", "truncat\n'
    assert [r.observations for r in run_records(redis_client, "run1")[:3]] == ["obs 0", "obs 1", "obs 2"]
    state = run_hash(redis_client, "run1")
    assert state["state"] == "closed" and state["enqueued"] == "1" and state["started_at"] == "1000.0"
    assert distill_args(redis_client) == [["b", "run1"]]
    assert redis_client.zscore(OPEN_RUNS_KEY, "run1") is None

    # the same file again (a replay that crashed before deleting it): nothing doubles, nothing reopens
    path = write_dead_spool(tmp_path, ops)
    assert replay_file(path, replay_apply(sink)).delivered == 4
    assert redis_client.hlen("lessonbank:run:run1:steps") == 4
    assert distill_args(redis_client) == [["b", "run1"]]
    assert run_hash(redis_client, "run1")["state"] == "closed"
    assert redis_client.zscore(OPEN_RUNS_KEY, "run1") is None


def test_replay_skips_the_file_of_a_live_process(tmp_path, sink, redis_client):
    spool = Spool(tmp_path)
    spool.append(make_ops(steps=1, close=False)[0])
    report = replay_file(spool.path, replay_apply(sink))
    assert report.skipped_live and report.delivered == 0 and spool.path.exists()
    assert redis_client.exists("lessonbank:run:run1:steps") == 0
    spool.release()


def test_replay_stops_at_the_first_error_and_keeps_the_file(tmp_path):
    path = write_dead_spool(tmp_path, make_ops())
    seen = []

    def flaky(op: Op) -> None:
        if len(seen) == 2:
            raise ConnectionError("redis went away")
        seen.append(op.seq)

    report = replay_file(path, flaky)
    assert report.error == "ConnectionError: redis went away" and report.delivered == 2 and path.exists()
    assert json.loads(path.read_text().splitlines()[0])["seq"] == 0


def test_replay_directory_goes_oldest_first(tmp_path, sink, redis_client):
    import os

    old = write_dead_spool(tmp_path, make_ops("older"), name="spool-1-a.jsonl")
    new = write_dead_spool(tmp_path, make_ops("newer"), name="spool-2-b.jsonl")
    os.utime(old, (1000, 1000))
    assert spool_files(tmp_path) == [old, new]
    reports = replay_directory(tmp_path, replay_apply(sink))
    assert [r.runs for r in reports] == [{"older"}, {"newer"}]
    assert distill_args(redis_client) == [["b", "older"], ["b", "newer"]]


def test_an_op_with_a_lone_surrogate_neither_keeps_its_batch_out_nor_poisons_the_replay(tmp_path, sink,
                                                                                          redis_client):
    """Text decoded with ``surrogateescape`` cannot be encoded: that op is spooled with the character replaced,
    and the rest of its batch with it; the replay delivers all of them."""
    label = b"caf\xe9".decode("utf-8", "surrogateescape")
    clean = make_ops("clean-run")
    dirty = [dataclasses.replace(op, agent=label, extra={"source": label}) for op in make_ops("dirty-run")]
    spool = Spool(tmp_path / "spool")
    spool.append_many([*clean, *dirty])
    assert len(spool) == 8
    lines = spool.path.read_text(encoding="utf-8").splitlines()
    assert [Op.from_line(line).run_id for line in lines] == ["clean-run"] * 4 + ["dirty-run"] * 4
    assert spool.head(8)[4].extra == {"source": "caf?"} and spool.head(8)[4].agent == "caf?"
    for op in spool.head(8):
        sink.apply(op)
    assert run_hash(redis_client, "dirty-run")["source"] == "caf?"
    assert [r.seq for r in run_records(redis_client, "dirty-run")] == [0, 1, 2, 3]
    spool.release()
