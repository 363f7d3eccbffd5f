"""Per-step time the recorder adds to a smolagents run, against a bare LPUSH of the same record.

    python bench/recorder_overhead.py [--steps 200]

Starts its own redis-server on a free loopback port, runs a scripted CodeAgent for ``--steps`` steps
with the recorder's callback timed around each call, then LPUSHes each recorded step's JSON with a
plain redis-py client in the same process: once from the step callback of an identical run (the
baseline of the ratio), once in a tight loop. Prints p50/p99 in microseconds and their ratio, plus the
per-step cost while Redis is down (breaker open, records going to the fsync'd spool). Writes
bench/results/recorder_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from smolagents import CodeAgent  # noqa: E402
from smolagents.memory import ActionStep  # noqa: E402

from lessonbank.settings import Settings  # noqa: E402
from recorder import StepRecorder  # noqa: E402
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(workdir: Path) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir), "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            redis.Redis.from_url(url, socket_timeout=0.5).ping()
            return proc, url
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="Action steps per scripted run.")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "recorder_overhead.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the Redis-down run would log its (expected) outage warning

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_redis(Path(tmp))
        try:
            settings = Settings(_env_file=None, redis_url=url, data_dir=Path(tmp) / "data")
            recorder = StepRecorder(bank="bench", settings=settings)
            timed_run(recorder, 5)  # warm-up: connections, imports, Celery producer
            callback_ns, run_id = timed_run(recorder, args.steps)
            client = redis.Redis.from_url(url)
            raw = client.hgetall(f"lessonbank:run:{run_id}:steps")
            records = [raw[str(seq).encode()] for seq in range(len(callback_ns))]
            bare_ns = bare_lpush_in_run(url, records)
            loop_ns = bare_lpush(url, records)
            recorder.close()

            down = Settings(_env_file=None, redis_url=f"redis://127.0.0.1:{free_port()}/0",
                            data_dir=Path(tmp) / "down", breaker_cooldown=3600)
            down_recorder = StepRecorder(bank="bench", settings=down)
            down_ns, _ = timed_run(down_recorder, args.steps)
            down_recorder.close(interrupt_open_runs=False)
        finally:
            proc.terminate()
            proc.wait(10)

    recorder_stats, bare_stats = percentiles(callback_ns), percentiles(bare_ns)
    result = {
        "steps": args.steps,
        "record_bytes_p50": int(statistics.median(len(r) for r in records)),
        "recorder_callback": recorder_stats,
        "bare_lpush": bare_stats,
        "bare_lpush_tight_loop": percentiles(loop_ns),
        "ratio_p50": round(recorder_stats["p50_us"] / bare_stats["p50_us"], 2),
        "ratio_p99": round(recorder_stats["p99_us"] / bare_stats["p99_us"], 2),
        "redis_down_breaker_open": percentiles(down_ns[1:]),
        "redis_down_first_step_us": round(down_ns[0] / 1000, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.steps} steps, record ~{result['record_bytes_p50']} bytes")
    print(f"recorder callback : p50 {recorder_stats['p50_us']:8.1f} us   p99 {recorder_stats['p99_us']:8.1f} us")
    print(f"bare LPUSH        : p50 {bare_stats['p50_us']:8.1f} us   p99 {bare_stats['p99_us']:8.1f} us"
          "   (as the step callback of an identical run)")
    loop = result["bare_lpush_tight_loop"]
    print(f"bare LPUSH, loop  : p50 {loop['p50_us']:8.1f} us   p99 {loop['p99_us']:8.1f} us")
    print(f"ratio             : p50 {result['ratio_p50']:8.2f} x    p99 {result['ratio_p99']:8.2f} x")
    down_stats = result["redis_down_breaker_open"]
    print(f"Redis down (spool): p50 {down_stats['p50_us']:8.1f} us   p99 {down_stats['p99_us']:8.1f} us"
          f"   first step {result['redis_down_first_step_us']:.1f} us")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
