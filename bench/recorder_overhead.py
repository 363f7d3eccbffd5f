"""Time the recorder adds to a smolagents step, against a bare LPUSH of a same-size record in the same callback slot.

    python bench/recorder_overhead.py [--steps 200] [--repeats 3] [--processes 3] [--payload-steps 20]

Starts its own redis-server on a free loopback port. Figures, each printed next to its baseline measured in
the same run and its target (MISSED when missed):

- paired callback: in every action step of a scripted CodeAgent run, one callback times the recorder and a
  bare redis-py ``LPUSH`` of a record of the same size (the record the recorder stored for that step in a
  pilot run), in alternating order; p50 / p99 of each over ``--repeats`` runs of ``--steps`` steps;
- run close: the final-answer callback, which closes the run and waits until its records are in Redis;
- first callback and first run close of a fresh process (``--processes`` processes), against the first
  ``LPUSH`` of a fresh client in a fresh process that imported the same modules;
- CPU per record: the recorder's callbacks (the close's included) plus its writer thread (redaction,
  serialization, the pipeline; per-thread CPU clocks), against the CPU of the bare LPUSH calls;
- delivery lag: time from a step's hand-over to its record being readable in Redis (a poller process);
- Redis down (breaker open): the callback, and the records found in the spool against those produced;
- payload: bytes per step stored in Redis against ``json.dumps(step.dict())``.

Writes bench/results/recorder_overhead.json and one plot per figure (recorder_*.png).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import redis
from common import RESULTS, ROOT, free_port, plt_or_none, print_table, redis_server, row, save_plot, write_result
from smolagents import CodeAgent
from smolagents.memory import ActionStep, FinalAnswerStep

from lessonbank.core.settings import Settings
from lessonbank.recorder import StepRecorder
from lessonbank.recorder.ops import Op
from lessonbank.recorder.spool import spool_files
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code

TARGET_P99_US = 100.0
TARGET_CLOSE_MS = 20.0
TARGET_LAG_MS = 100.0
KEY = "bench:bare"


def stats(samples_ns: list[int]) -> dict[str, float]:
    us = sorted(s / 1000 for s in samples_ns)
    return {"p50_us": round(statistics.median(us), 1), "p99_us": round(us[min(len(us) - 1, int(len(us) * 0.99))], 1),
            "max_us": round(us[-1], 1), "n": len(us)}


def script(steps: int) -> list[str]:
    return [code_reply(f"x = {i}\nprint('value', x)") for i in range(steps - 1)] + [final_code("done")]


def scripted(steps: int, callbacks: Any) -> CodeAgent:
    return CodeAgent(tools=[], model=ScriptedModel(script(steps)), step_callbacks=callbacks, verbosity_level=0,
                     max_steps=steps + 1)


def settings_for(url: str, data_dir: Path) -> Settings:
    return Settings(_env_file=None, redis_url=url, data_dir=data_dir)


# -- in this process -------------------------------------------------------------------------------------


def pilot_records(recorder: StepRecorder, client: redis.Redis, steps: int) -> list[bytes]:
    """The records the recorder stores for each action step of the scripted run (the LPUSH payloads)."""
    agent = scripted(steps, recorder.step_callbacks)
    agent.run("Count.")
    raw = client.hgetall(f"lessonbank:run:{recorder.run_id(agent)}:steps")
    return [raw[str(seq).encode()] for seq in range(steps)]


def thread_cpu_ns(thread: threading.Thread | None) -> int:
    """CPU time a (running) thread has used so far (Linux per-thread clocks)."""
    if thread is None or thread.ident is None:
        return 0
    return time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))


def paired_run(recorder: StepRecorder, client: redis.Redis, records: list[bytes]) -> dict[str, Any]:
    """Recorder and bare LPUSH timed in the same callback of every action step, in alternating order; and the
    CPU each costs: the recorder's callbacks (the close's included) plus its writer thread, the LPUSH calls."""
    rec_ns: list[int] = []
    bare_ns: list[int] = []
    close_ns: list[int] = []
    cpu = {"callbacks": 0, "bare": 0}
    clock, thread_clock = time.perf_counter_ns, time.thread_time_ns

    def slot(step: Any, agent: Any = None) -> None:
        if not isinstance(step, ActionStep):
            started, started_cpu = clock(), thread_clock()
            recorder._on_step(step, agent=agent)
            close_ns.append(clock() - started)
            cpu["callbacks"] += thread_clock() - started_cpu
            return
        record = records[step.step_number - 1]
        for first in ((True, False) if step.step_number % 2 else (False, True)):
            started, started_cpu = clock(), thread_clock()
            if first:
                recorder._on_step(step, agent=agent)
                rec_ns.append(clock() - started)
                cpu["callbacks"] += thread_clock() - started_cpu
            else:
                client.lpush(KEY, record)
                bare_ns.append(clock() - started)
                cpu["bare"] += thread_clock() - started_cpu

    writer = recorder._writer._thread
    writer_before = thread_cpu_ns(writer)
    scripted(len(records), {ActionStep: slot, FinalAnswerStep: slot}).run("Count.")
    writer_cpu = thread_cpu_ns(writer) - writer_before
    client.delete(KEY)
    return {"rec_ns": rec_ns, "bare_ns": bare_ns, "close_ns": close_ns[0], "records": len(records) + 2,
            "lpushes": len(bare_ns), "callbacks_cpu_ns": cpu["callbacks"], "writer_cpu_ns": writer_cpu,
            "bare_cpu_ns": cpu["bare"]}


POLLER = textwrap.dedent("""
    import json, sys, time
    import redis
    key, count, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    client, seen = redis.Redis.from_url(sys.argv[4]), {}
    print("ready", flush=True)
    deadline = time.monotonic() + limit
    while len(seen) < count and time.monotonic() < deadline:
        now = time.monotonic()
        for field in client.hkeys(key):
            seen.setdefault(int(field), now)
        time.sleep(0.001)
    print(json.dumps(seen))
""")


def delivery_lag(url: str, tmp: Path, steps: int) -> tuple[list[float], float]:
    """Milliseconds from each step's hand-over to its record being readable in Redis, seen by a poller in a
    process of its own (monotonic clocks are shared between processes); and the longest garbage collection
    of the agent process meanwhile (no thread runs during one)."""
    recorder = StepRecorder(bank="bench-lag", settings=settings_for(url, tmp / "lag"))
    replies = [code_reply(f"x = {i}") for i in range(steps)]  # no final answer: nothing waits for the writer
    agent = CodeAgent(tools=[], model=ScriptedModel(replies, then=RuntimeError("end")), verbosity_level=0,
                      max_steps=steps + 5)
    run_id = recorder.prepare_run(agent)
    handed: list[float] = []
    key = f"lessonbank:run:{run_id}:steps"
    poller = subprocess.Popen([sys.executable, "-c", POLLER, key, str(steps + 1), "60", url],  # + the failed step
                              stdout=subprocess.PIPE, text=True)
    assert poller.stdout is not None and poller.stdout.readline().strip() == "ready"

    def note(step: Any, agent: Any = None) -> None:
        recorder._on_step(step, agent=agent)
        handed.append(time.monotonic())

    agent.step_callbacks.register(ActionStep, note)
    pauses: list[float] = []
    started: list[float] = [0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append((time.perf_counter() - started[0]) * 1000)

    gc.callbacks.append(collected)
    try:
        agent.run("Count.")
    except Exception:  # the scripted model ends the run
        pass
    finally:
        gc.callbacks.remove(collected)
    seen = {int(seq): at for seq, at in json.loads(poller.communicate(timeout=120)[0]).items()}
    recorder.close(interrupt_open_runs=False)
    lags = [(seen[seq] - at) * 1000 if seq in seen else float("inf") for seq, at in enumerate(handed)]
    return lags, max(pauses, default=0.0)


def redis_down(tmp: Path, steps: int) -> tuple[dict[str, Any], list[int]]:
    settings = Settings(_env_file=None, redis_url=f"redis://127.0.0.1:{free_port()}/0", data_dir=tmp / "down",
                        breaker_cooldown=3600)
    recorder = StepRecorder(bank="bench-down", settings=settings)
    callback_ns: list[int] = []

    def timed(step: Any, agent: Any = None) -> None:
        started = time.perf_counter_ns()
        recorder._on_step(step, agent=agent)
        if isinstance(step, ActionStep):
            callback_ns.append(time.perf_counter_ns() - started)

    scripted(steps, {ActionStep: timed, FinalAnswerStep: timed}).run("Count.")
    recorder.close(interrupt_open_runs=False)
    spooled = [Op.from_line(line) for path in spool_files(settings.resolved_spool_dir)
               for line in path.read_text().splitlines()]
    expected = steps + 2  # every action step, the final answer, the close
    info = {"callback": stats(callback_ns[1:]), "spooled": len(spooled), "expected": expected,
            "lost": expected - len(spooled)}
    return info, callback_ns[1:]


def payload_bytes(url: str, tmp: Path, steps: int) -> dict[str, Any]:
    recorder = StepRecorder(bank="bench-payload", settings=settings_for(url, tmp / "payload"))
    agent = scripted(steps, recorder.step_callbacks)
    agent.run("Count.")
    client = redis.Redis.from_url(url)
    stored = [len(v) for v in client.hgetall(f"lessonbank:run:{recorder.run_id(agent)}:steps").values()]
    recorder.close()
    client.close()
    dumped = [len(json.dumps(s.dict(), default=str)) for s in agent.memory.steps if isinstance(s, ActionStep)]
    return {"steps": steps, "redis_bytes_per_step": round(sum(stored) / len(stored)),
            "step_dict_bytes_per_step": round(sum(dumped) / len(dumped)),
            "smaller_by": round(sum(dumped) / sum(stored), 1)}


# -- in fresh processes ----------------------------------------------------------------------------------

FRESH = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import redis
    from smolagents import CodeAgent
    from smolagents.memory import ActionStep, FinalAnswerStep
    from lessonbank.core.settings import Settings
    from lessonbank.recorder import StepRecorder
    from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code

    mode, url, data_dir = sys.argv[1:4]
    if mode == "bare":
        client = redis.Redis.from_url(url)
        started = time.perf_counter_ns()
        client.lpush("bench:fresh", b"x" * 700)
        print(json.dumps({"first_lpush_ns": time.perf_counter_ns() - started}))
        sys.exit(0)
    recorder = StepRecorder(bank="bench-fresh", settings=Settings(_env_file=None, redis_url=url,
                                                                   data_dir=Path(data_dir)))
    times = {}

    def timed(step, agent=None):
        started = time.perf_counter_ns()
        recorder._on_step(step, agent=agent)
        name = "first_close_ns" if isinstance(step, FinalAnswerStep) else "first_callback_ns"
        times.setdefault(name, time.perf_counter_ns() - started)

    replies = [code_reply(f"x = {i}") for i in range(4)] + [final_code("done")]
    agent = CodeAgent(tools=[], model=ScriptedModel(replies), step_callbacks={ActionStep: timed,
                      FinalAnswerStep: timed}, verbosity_level=0, max_steps=10)
    agent.run("Count.")
    print(json.dumps(times))
""")


def fresh_processes(url: str, tmp: Path, processes: int) -> dict[str, list[float]]:
    """First callback and first close of a fresh process, and the first LPUSH of a fresh process (alternated)."""
    found: dict[str, list[float]] = {"first_callback_ns": [], "first_close_ns": [], "first_lpush_ns": []}
    for index in range(processes):
        for mode in ("bare", "recorder"):
            out = subprocess.run([sys.executable, "-c", FRESH, mode, url, str(tmp / f"fresh-{index}")], cwd=ROOT,
                                 capture_output=True, text=True, timeout=120, check=True)
            for name, value in json.loads(out.stdout.strip().splitlines()[-1]).items():
                found[name].append(value)
    return found


# -- report ----------------------------------------------------------------------------------------------


def verdict(ok: bool | None) -> str:
    return "(no target)" if ok is None else "ok" if ok else "MISSED"


def figures(m: dict[str, Any]) -> list[dict[str, Any]]:
    """Every figure with its same-run baseline and its target."""
    rec, bare = m["recorder"], m["bare"]
    fresh = {name: statistics.median(values) / 1e6 for name, values in m["fresh"].items()}
    cpu = m["cpu_us"]
    lag = sorted(m["lag_ms"])
    close_ms = statistics.median(m["close_ns"]) / 1e6
    down, pay = m["down"], m["payload"]
    p99_ok = rec["p99_us"] <= TARGET_P99_US or rec["p99_us"] <= bare["p99_us"]
    return [
        {"figure": "recorder callback p50 (us), paired with a bare LPUSH", "value": rec["p50_us"],
         "baseline": f"bare LPUSH {bare['p50_us']}", "ratio": rec["p50_us"] / bare["p50_us"],
         "target": "<= 1x bare LPUSH", "met": rec["p50_us"] <= bare["p50_us"]},
        {"figure": "recorder callback p99 (us), paired with a bare LPUSH", "value": rec["p99_us"],
         "baseline": f"bare LPUSH {bare['p99_us']}", "ratio": rec["p99_us"] / bare["p99_us"],
         "target": f"<= {TARGET_P99_US:.0f} us or <= 1x bare LPUSH", "met": p99_ok},
        {"figure": "run close, final-answer callback (ms, p50)", "value": round(close_ms, 2),
         "baseline": f"bare LPUSH {bare['p50_us'] / 1000:.2f}", "ratio": close_ms * 1000 / bare["p50_us"],
         "target": f"<= {TARGET_CLOSE_MS:.0f} ms", "met": close_ms <= TARGET_CLOSE_MS},
        {"figure": "first run close of a fresh process (ms)", "value": round(fresh["first_close_ns"], 2),
         "baseline": f"first LPUSH of a fresh process {fresh['first_lpush_ns']:.2f}",
         "ratio": fresh["first_close_ns"] / fresh["first_lpush_ns"], "target": f"<= {TARGET_CLOSE_MS:.0f} ms",
         "met": fresh["first_close_ns"] <= TARGET_CLOSE_MS},
        {"figure": "first callback of a fresh process (ms)", "value": round(fresh["first_callback_ns"], 3),
         "baseline": f"first LPUSH of a fresh process {fresh['first_lpush_ns']:.2f}",
         "ratio": fresh["first_callback_ns"] / fresh["first_lpush_ns"], "target": "<= 1x first LPUSH",
         "met": fresh["first_callback_ns"] <= fresh["first_lpush_ns"]},
        {"figure": "CPU per record (us): callbacks + writer thread", "value": round(cpu["recorder"], 1),
         "baseline": f"bare LPUSH {cpu['bare']:.1f} (callbacks {cpu['callbacks']:.1f}, writer {cpu['writer']:.1f})",
         "ratio": cpu["recorder"] / cpu["bare"], "target": "<= 1x bare LPUSH", "met": cpu["recorder"] <= cpu["bare"]},
        {"figure": "delivery lag, hand-over to Redis (ms, p50 / p99 / max)",
         "value": f"{statistics.median(lag):.1f} / {lag[int(len(lag) * 0.99)]:.1f} / {lag[-1]:.1f}",
         "baseline": f"longest GC pause of the agent meanwhile {m['gc_pause_ms']:.1f}", "ratio": None,
         "target": f"max <= {TARGET_LAG_MS:.0f} ms + interpreter pauses",
         "met": lag[-1] <= TARGET_LAG_MS + m["gc_pause_ms"]},
        {"figure": "callback with Redis down (us, p50 / p99), records lost",
         "value": f"{down['callback']['p50_us']} / {down['callback']['p99_us']}, lost {down['lost']}",
         "baseline": f"{down['spooled']} of {down['expected']} in the spool; bare LPUSH p99 {bare['p99_us']}",
         "ratio": None, "target": f"p99 <= {TARGET_P99_US:.0f} us or <= 1x bare LPUSH, 0 lost",
         "met": down["callback"]["p99_us"] <= max(TARGET_P99_US, bare["p99_us"]) and down["lost"] == 0},
        {"figure": f"payload bytes per step in Redis ({pay['steps']}-step run)", "value": pay["redis_bytes_per_step"],
         "baseline": f"step.dict() {pay['step_dict_bytes_per_step']}", "ratio": 1 / pay["smaller_by"],
         "target": ">= 10x smaller", "met": pay["smaller_by"] >= 10},
    ]


def _cdf(ax: Any, samples: list[float], label: str) -> None:
    values = sorted(samples)
    ax.plot(values, [100 * (i + 1) / len(values) for i in range(len(values))], lw=1.2, label=label)


def plots(m: dict[str, Any], out: Path) -> list[str]:
    plt = plt_or_none()
    if plt is None:
        return []
    written = []
    fig, ax = plt.subplots(figsize=(7, 3.6))
    _cdf(ax, [x / 1000 for x in m["rec_ns"]], "recorder callback")
    _cdf(ax, [x / 1000 for x in m["bare_ns"]], "bare LPUSH, same callback")
    ax.axvline(TARGET_P99_US, color="grey", ls="--", lw=0.8, label=f"target p99 {TARGET_P99_US:.0f} us")
    ax.set(xscale="log", xlabel="time in the step callback (us)", ylabel="steps at or below (%)",
           title="Recorder callback against a bare LPUSH, paired per step")
    written.append(save_plot(fig, ax, out / "recorder_overhead.png"))

    fig, ax = plt.subplots(figsize=(7, 3.2))
    fresh = {name: statistics.median(values) / 1e6 for name, values in m["fresh"].items()}
    bars = [("run close, p50", statistics.median(m["close_ns"]) / 1e6, "C0"),
            ("first run close, fresh process", fresh["first_close_ns"], "C0"),
            ("first callback, fresh process", fresh["first_callback_ns"], "C0"),
            ("bare LPUSH, p50", m["bare"]["p50_us"] / 1000, "C1"),
            ("first LPUSH, fresh process", fresh["first_lpush_ns"], "C1")]
    ax.barh([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
    ax.axvline(TARGET_CLOSE_MS, color="grey", ls="--", lw=0.8, label=f"target run close {TARGET_CLOSE_MS:.0f} ms")
    ax.bar(0, 0, color="C0", label="recorder")
    ax.bar(0, 0, color="C1", label="bare LPUSH (baseline)")
    ax.set(xscale="log", xlabel="time (ms)", title="Run close and first callback")
    written.append(save_plot(fig, ax, out / "recorder_close.png"))

    fig, ax = plt.subplots(figsize=(7, 2.6))
    cpu = m["cpu_us"]
    ax.barh(["recorder", "bare LPUSH"], [cpu["callbacks"], cpu["bare"]], color=["C0", "C1"],
            label="agent's thread (callback, LPUSH call)")
    ax.barh(["recorder"], [cpu["writer"]], left=[cpu["callbacks"]], color="C9", label="recorder's writer thread")
    ax.set(xlabel="CPU time per record (us)", title="CPU cost of a record, all threads")
    written.append(save_plot(fig, ax, out / "recorder_cpu.png"))

    fig, ax = plt.subplots(figsize=(7, 3.4))
    _cdf(ax, m["lag_ms"], "hand-over to readable in Redis")
    ax.axvline(TARGET_LAG_MS, color="grey", ls="--", lw=0.8, label=f"promise {TARGET_LAG_MS:.0f} ms")
    ax.set(xlabel="delivery lag (ms)", ylabel="records at or below (%)", title="Delivery lag of step records")
    written.append(save_plot(fig, ax, out / "recorder_delivery.png"))

    fig, ax = plt.subplots(figsize=(7, 3.4))
    _cdf(ax, [x / 1000 for x in m["down_ns"]], "recorder callback, Redis down")
    ax.axvline(TARGET_P99_US, color="grey", ls="--", lw=0.8, label=f"target p99 {TARGET_P99_US:.0f} us")
    ax.set(xscale="log", xlabel="time in the step callback (us)", ylabel="steps at or below (%)",
           title=f"Redis down: {m['down']['spooled']} of {m['down']['expected']} records in the spool")
    written.append(save_plot(fig, ax, out / "recorder_redis_down.png"))

    fig, ax = plt.subplots(figsize=(7, 2.6))
    pay = m["payload"]
    ax.barh(["step record in Redis", "json.dumps(step.dict())"],
            [pay["redis_bytes_per_step"], pay["step_dict_bytes_per_step"]], color=["C0", "C1"], label="per step")
    ax.set(xscale="log", xlabel="bytes per step", title=f"Payload, {pay['steps']}-step run")
    written.append(save_plot(fig, ax, out / "recorder_payload.png"))
    plt.close("all")
    return [str(path) for path in written]


def measure(args: argparse.Namespace, tmp: Path, url: str) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    recorder = StepRecorder(bank="bench", settings=settings_for(url, tmp / "data"))
    records = pilot_records(recorder, client, args.steps)
    runs = [paired_run(recorder, client, records) for _ in range(args.repeats)]
    rec_ns = [x for r in runs for x in r["rec_ns"]]
    bare_ns = [x for r in runs for x in r["bare_ns"]]
    close_ns = [r["close_ns"] for r in runs]
    produced = sum(r["records"] for r in runs)
    cpu_us = {"callbacks": sum(r["callbacks_cpu_ns"] for r in runs) / produced / 1000,
              "writer": sum(r["writer_cpu_ns"] for r in runs) / produced / 1000,
              "bare": sum(r["bare_cpu_ns"] for r in runs) / sum(r["lpushes"] for r in runs) / 1000}
    cpu_us["recorder"] = cpu_us["callbacks"] + cpu_us["writer"]
    recorder.close()
    client.close()
    down, down_ns = redis_down(tmp, args.steps)
    lag_ms, gc_pause = delivery_lag(url, tmp, args.steps)
    return {
        "rec_ns": rec_ns, "bare_ns": bare_ns, "close_ns": close_ns, "recorder": stats(rec_ns),
        "bare": stats(bare_ns), "record_bytes_p50": int(statistics.median(len(r) for r in records)),
        "cpu_us": cpu_us,
        "lag_ms": lag_ms, "gc_pause_ms": gc_pause, "down": down, "down_ns": down_ns,
        "fresh": fresh_processes(url, tmp, args.processes), "payload": payload_bytes(url, tmp, args.payload_steps),
    }


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="Action steps per scripted run.")
    parser.add_argument("--repeats", type=int, default=3, help="Scripted runs per measurement.")
    parser.add_argument("--processes", type=int, default=3, help="Fresh processes for the first-call figures.")
    parser.add_argument("--payload-steps", type=int, default=20, help="Steps of the run whose payload is sized.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the Redis-down run would log its (expected) outage warning
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp) / "redis") as url:
        m = measure(args, Path(tmp), url)
    found = figures(m)
    rows = [row(f["figure"], str(f["value"]), f["baseline"], f["ratio"], f["target"], f["met"]) for f in found]
    lag = sorted(m["lag_ms"])
    result: dict[str, Any] = {
        "benchmark": "recorder_overhead", "seconds": round(time.perf_counter() - started, 1), "steps": args.steps,
        "repeats": args.repeats, "processes": args.processes, "record_bytes_p50": m["record_bytes_p50"],
        "recorder_callback": m["recorder"], "bare_lpush": m["bare"],
        "close_ms": [round(x / 1e6, 3) for x in m["close_ns"]],
        "fresh_ms": {name: [round(v / 1e6, 3) for v in values] for name, values in m["fresh"].items()},
        "cpu_us_per_record": {name: round(value, 1) for name, value in m["cpu_us"].items()},
        "delivery_lag_ms": {"p50": round(statistics.median(lag), 2), "p99": round(lag[int(len(lag) * 0.99)], 2),
                            "max": round(lag[-1], 2), "n": len(lag), "gc_pause_max": round(m["gc_pause_ms"], 1)},
        "redis_down": m["down"], "payload": m["payload"], "figures": found, "rows": rows,
    }
    result["plots"] = plots(m, args.out)
    write_result("recorder_overhead", result, args.out)
    result["out"] = str(args.out / "recorder_overhead.json")
    return result


def main() -> None:
    result = run()
    print(f"{result['steps']} steps x {result['repeats']} runs, record ~{result['record_bytes_p50']} bytes, "
          f"{result['processes']} fresh processes per mode, {result['seconds']} s")
    for f in result["figures"]:
        ratio = f" ({f['ratio']:.2f}x)" if isinstance(f["ratio"], float) else ""
        baseline = f" | baseline {f['baseline']}{ratio}" if f["baseline"] else ""
        print(f"{f['figure']:58s} {f['value']!s:>16}{baseline} | target {f['target']} | {verdict(f['met'])}")
    print()
    print_table(result["rows"])
    print(f"written to {result['out']} and {len(result['plots'])} plots")


if __name__ == "__main__":
    main()
