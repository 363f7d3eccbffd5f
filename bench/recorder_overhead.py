"""Per-step time the recorder adds to a smolagents run, against a bare LPUSH of the same record.

    python bench/recorder_overhead.py [--steps 200] [--repeats 3] [--payload-steps 20]

Starts its own redis-server on a free loopback port, runs a scripted CodeAgent for ``--steps`` steps
with the recorder's callback timed around each call, then LPUSHes each recorded step's JSON with a
plain redis-py client in the same process: once from the step callback of an identical run (the
baseline of the ratio), once in a tight loop. Prints p50/p99 in microseconds and their ratio, plus the
per-step cost while Redis is down (breaker open, records going to the fsync'd spool) with the count of
records found in the spool against those the same run stored in Redis (lost = the difference). The
scripted run and its baselines are repeated ``--repeats`` times (spread of p50/p99 over repeats).
Also sizes a ``--payload-steps`` run: bytes per step stored in Redis against ``json.dumps(step.dict())``.
Writes bench/results/recorder_overhead.json and recorder_overhead.png.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from common import RESULTS, free_port, plt_or_none, print_table, redis_server, row, spread, write_result
from smolagents import CodeAgent
from smolagents.memory import ActionStep

from lessonbank.core.settings import Settings
from lessonbank.recorder import StepRecorder
from lessonbank.recorder.ops import Op
from lessonbank.recorder.spool import spool_files
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code


def percentiles(samples_ns: list[int]) -> dict[str, float]:
    us = sorted(s / 1000 for s in samples_ns)
    return {
        "p50_us": round(statistics.median(us), 1),
        "p99_us": round(us[min(len(us) - 1, int(len(us) * 0.99))], 1),
        "mean_us": round(statistics.fmean(us), 1),
        "n": len(us),
    }


def timed_run(recorder: StepRecorder, steps: int) -> tuple[list[int], str | None]:
    """Run a scripted CodeAgent; return the callback's duration for each action step (ns) and the run id."""
    durations: list[int] = []

    def timed(memory_step: Any, agent: Any = None) -> None:
        started = time.perf_counter_ns()
        recorder._on_step(memory_step, agent=agent)
        if isinstance(memory_step, ActionStep):
            durations.append(time.perf_counter_ns() - started)

    replies = [code_reply(f"x = {i}") for i in range(steps - 1)] + [final_code("done")]
    callbacks = {cls: timed for cls in recorder.step_callbacks}
    agent = CodeAgent(tools=[], model=ScriptedModel(replies), step_callbacks=callbacks, verbosity_level=0,
                      max_steps=steps + 1)
    agent.run("Count.")
    return durations, recorder.run_id(agent)


def bare_lpush_in_run(url: str, records: list[bytes]) -> list[int]:
    """The same records, LPUSHed by a bare step callback of an identical scripted run (same cache conditions)."""
    client = redis.Redis.from_url(url)
    client.ping()
    durations: list[int] = []
    pending = iter(records)

    def push(memory_step: Any, agent: Any = None) -> None:
        if isinstance(memory_step, ActionStep):
            record = next(pending, b"")
            started = time.perf_counter_ns()
            client.lpush("bench:bare-in-run", record)
            durations.append(time.perf_counter_ns() - started)

    steps = len(records)
    replies = [code_reply(f"x = {i}") for i in range(steps - 1)] + [final_code("done")]
    agent = CodeAgent(tools=[], model=ScriptedModel(replies), step_callbacks={ActionStep: push}, verbosity_level=0,
                      max_steps=steps + 1)
    agent.run("Count.")
    client.close()
    return durations


def bare_lpush(url: str, records: list[bytes]) -> list[int]:
    client = redis.Redis.from_url(url)
    client.ping()
    durations = []
    for record in records:
        started = time.perf_counter_ns()
        client.lpush("bench:bare", record)
        durations.append(time.perf_counter_ns() - started)
    client.close()
    return durations


def payload_bytes(url: str, settings: Settings, steps: int) -> dict[str, Any]:
    """Bytes per step the recorder stores in Redis against ``json.dumps(step.dict())`` of the same steps."""
    recorder = StepRecorder(bank="bench-payload", settings=settings)
    replies = [code_reply(f"x = {i}\nprint('value', x)") for i in range(steps - 1)] + [final_code("done")]
    agent = CodeAgent(tools=[], model=ScriptedModel(replies), step_callbacks=recorder.step_callbacks,
                      verbosity_level=0, max_steps=steps + 1)
    agent.run("Count.")
    run_id = recorder.run_id(agent)
    recorder.close()
    client = redis.Redis.from_url(url)
    stored = [len(v) for v in client.hgetall(f"lessonbank:run:{run_id}:steps").values()]
    client.close()
    dumped = [len(json.dumps(step.dict(), default=str)) for step in agent.memory.steps
              if isinstance(step, ActionStep)]
    return {"steps": steps, "redis_bytes_total": sum(stored), "step_dict_bytes_total": sum(dumped),
            "redis_bytes_per_step": round(sum(stored) / max(len(stored), 1)),
            "step_dict_bytes_per_step": round(sum(dumped) / max(len(dumped), 1)),
            "records": len(stored), "action_steps": len(dumped),
            "smaller_by": round(sum(dumped) / max(sum(stored), 1), 1)}


def as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def spooled_ops(directory: Path) -> int:
    """Ops (step records and run closes) waiting in the spool files of ``directory``."""
    ops: list[Op] = []
    for path in spool_files(directory):
        ops.extend(Op.from_line(line) for line in path.read_text().splitlines() if line.strip())
    return len(ops)


def plot(callback_ns: list[int], bare_ns: list[int], down_ns: list[int], path: Path) -> Path | None:
    plt = plt_or_none()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for samples, label in ((callback_ns, "recorder callback"), (bare_ns, "bare LPUSH in the step callback"),
                           (down_ns, "recorder, Redis down (breaker open, spool)")):
        ax.plot(range(1, len(samples) + 1), [x / 1000 for x in samples], lw=0.8, label=label)
    ax.axhline(100, color="grey", lw=0.8, ls="-.", label="target p99 100 us")
    ax.set_yscale("log")
    ax.set_xlabel("step of the scripted run")
    ax.set_ylabel("time in the step callback (us)")
    ax.set_title("Recorder overhead per step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def measure(args: argparse.Namespace, tmp: Path, url: str) -> dict[str, Any]:
    settings = Settings(_env_file=None, redis_url=url, data_dir=tmp / "data")
    recorder = StepRecorder(bank="bench", settings=settings)
    timed_run(recorder, 5)  # warm-up: connections, imports, Celery producer
    client = redis.Redis.from_url(url)
    rounds: list[tuple[list[int], list[int], list[int]]] = []
    for _ in range(args.repeats):
        callback_ns, run_id = timed_run(recorder, args.steps)
        raw = client.hgetall(f"lessonbank:run:{run_id}:steps")
        records = [as_bytes(raw[str(seq).encode()]) for seq in range(len(callback_ns))]
        expected_ops = len(raw)
        rounds.append((callback_ns, bare_lpush_in_run(url, records), bare_lpush(url, records)))
    recorder.close()
    client.close()

    down = Settings(_env_file=None, redis_url=f"redis://127.0.0.1:{free_port()}/0",
                    data_dir=tmp / "down", breaker_cooldown=3600)
    down_recorder = StepRecorder(bank="bench", settings=down)
    down_ns, _ = timed_run(down_recorder, args.steps)
    spooled = spooled_ops(down.resolved_spool_dir)
    down_recorder.close(interrupt_open_runs=False)
    return {"rounds": rounds, "records": records, "down_ns": down_ns, "spooled": spooled,
            "expected_ops": expected_ops, "payload": payload_bytes(url, settings, args.payload_steps)}


def summarize(args: argparse.Namespace, m: dict[str, Any]) -> dict[str, Any]:
    rounds = m["rounds"]
    callback_ns = [x for r in rounds for x in r[0]]
    bare_ns = [x for r in rounds for x in r[1]]
    loop_ns = [x for r in rounds for x in r[2]]
    recorder_stats, bare_stats = percentiles(callback_ns), percentiles(bare_ns)
    per_round = [(percentiles(r[0]), percentiles(r[1])) for r in rounds]
    return {
        "steps": args.steps,
        "repeats": args.repeats,
        "record_bytes_p50": int(statistics.median(len(r) for r in m["records"])),
        "recorder_callback": recorder_stats,
        "bare_lpush": bare_stats,
        "bare_lpush_tight_loop": percentiles(loop_ns),
        "ratio_p50": round(recorder_stats["p50_us"] / bare_stats["p50_us"], 2),
        "ratio_p99": round(recorder_stats["p99_us"] / bare_stats["p99_us"], 2),
        "recorder_p50_us_spread": spread([r[0]["p50_us"] for r in per_round], 1),
        "recorder_p99_us_spread": spread([r[0]["p99_us"] for r in per_round], 1),
        "ratio_p99_spread": spread([r[0]["p99_us"] / r[1]["p99_us"] for r in per_round], 2),
        "redis_down_breaker_open": percentiles(m["down_ns"][1:]),
        "redis_down_first_step_us": round(m["down_ns"][0] / 1000, 1),
        "redis_down_spooled_ops": m["spooled"],
        "redis_down_expected_ops": m["expected_ops"],
        "redis_down_lost": m["expected_ops"] - m["spooled"],
        "payload": m["payload"],
    }


def rows_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    rec, bare, down = result["recorder_callback"], result["bare_lpush"], result["redis_down_breaker_open"]
    sp, pay = result["recorder_p99_us_spread"], result["payload"]
    p99_ok = rec["p99_us"] <= 100 and result["ratio_p99"] <= 2
    return [
        row(f"recorder us/step p50 / p99, {result['steps']}-step run",
            f"{rec['p50_us']:.0f} / {rec['p99_us']:.0f} (p99 {sp['min']:.0f}-{sp['max']:.0f})",
            f"bare LPUSH {bare['p50_us']:.0f} / {bare['p99_us']:.0f}", result["ratio_p99"],
            "p99 <= 100 us and <= 2x bare", p99_ok),
        row("recorder us/step, Redis down (breaker open)", f"{down['p50_us']:.0f} / {down['p99_us']:.0f}, "
            f"lost {result['redis_down_lost']}", f"bare LPUSH {bare['p50_us']:.0f} / {bare['p99_us']:.0f}",
            round(down["p99_us"] / bare["p99_us"], 2), "p99 <= 5 ms, 0 lost",
            down["p99_us"] <= 5000 and result["redis_down_lost"] == 0),
        row(f"payload bytes/step in Redis, {pay['steps']}-step run", f"{pay['redis_bytes_per_step']}",
            f"step.dict() {pay['step_dict_bytes_per_step']}",
            round(pay["redis_bytes_total"] / max(pay["step_dict_bytes_total"], 1), 3), ">= 10x smaller",
            pay["smaller_by"] >= 10),
    ]


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="Action steps per scripted run.")
    parser.add_argument("--repeats", type=int, default=3, help="Scripted runs (each with its bare baseline).")
    parser.add_argument("--payload-steps", type=int, default=20, help="Steps of the run whose payload is sized.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the Redis-down run would log its (expected) outage warning
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp) / "redis") as url:
        m = measure(args, Path(tmp), url)
    result = summarize(args, m)
    result["rows"] = rows_of(result)
    write_result("recorder_overhead", {"benchmark": "recorder_overhead", **result}, args.out)
    png = plot(m["rounds"][-1][0], m["rounds"][-1][1], m["down_ns"], args.out / "recorder_overhead.png")
    result["plot"] = str(png) if png else None
    result["out"] = str(args.out / "recorder_overhead.json")
    return result


def main() -> None:
    result = run()
    recorder_stats, bare_stats = result["recorder_callback"], result["bare_lpush"]
    print(f"{result['steps']} steps x {result['repeats']} runs, record ~{result['record_bytes_p50']} bytes")
    print(f"recorder callback : p50 {recorder_stats['p50_us']:8.1f} us   p99 {recorder_stats['p99_us']:8.1f} us")
    print(f"bare LPUSH        : p50 {bare_stats['p50_us']:8.1f} us   p99 {bare_stats['p99_us']:8.1f} us"
          "   (as the step callback of an identical run)")
    loop = result["bare_lpush_tight_loop"]
    print(f"bare LPUSH, loop  : p50 {loop['p50_us']:8.1f} us   p99 {loop['p99_us']:8.1f} us")
    print(f"ratio             : p50 {result['ratio_p50']:8.2f} x    p99 {result['ratio_p99']:8.2f} x")
    down_stats = result["redis_down_breaker_open"]
    print(f"Redis down (spool): p50 {down_stats['p50_us']:8.1f} us   p99 {down_stats['p99_us']:8.1f} us"
          f"   first step {result['redis_down_first_step_us']:.1f} us, {result['redis_down_spooled_ops']} ops "
          f"spooled of {result['redis_down_expected_ops']} ({result['redis_down_lost']} lost)")
    pay = result["payload"]
    print(f"payload           : {pay['redis_bytes_per_step']} bytes/step in Redis vs {pay['step_dict_bytes_per_step']}"
          f" for json.dumps(step.dict()) ({pay['smaller_by']}x smaller, {pay['steps']}-step run)")
    print_table(result["rows"])
    print(f"written to {result['out']}")


if __name__ == "__main__":
    main()
