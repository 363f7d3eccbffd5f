"""Memory an agent process pays for the recorder: RSS with the recorder attached against the same agent without.

    python bench/memory.py [--steps 200] [--repeats 3]

Each measurement is a fresh subprocess that imports smolagents, builds a scripted CodeAgent and runs it
for ``--steps`` steps, with or without a ``StepRecorder`` (importing ``recorder`` is part of its cost)
pushing to a real redis-server. The child reports VmRSS after the run and VmHWM (peak). Modes alternate
to share the machine's noise; the baseline is the no-recorder process. Writes bench/results/memory.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import RESULTS, ROOT, print_table, ratio, redis_server, row, spread, write_result

TARGET_MB = 10.0


def proc_status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(mode: str, steps: int, redis_url: str, data_dir: str) -> None:
    """One agent process: build, run, report memory as JSON on stdout."""
    import logging

    logging.basicConfig(level=logging.ERROR)
    from smolagents import CodeAgent

    from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code

    callbacks: Any = None
    recorder = None
    if mode == "recorder":
        from lessonbank.core.settings import Settings
        from lessonbank.recorder import StepRecorder

        recorder = StepRecorder(bank="bench-memory",
                                settings=Settings(_env_file=None, redis_url=redis_url, data_dir=Path(data_dir)))
        callbacks = recorder.step_callbacks
    replies = [code_reply(f"x = {i}\nprint('value', x, 'of', {steps})") for i in range(steps - 1)]
    agent = CodeAgent(tools=[], model=ScriptedModel([*replies, final_code("done")]), step_callbacks=callbacks,
                      verbosity_level=0, max_steps=steps + 1)
    before = proc_status_mb("VmRSS")
    agent.run("Count.")
    report = {"rss_before_run_mb": before, "rss_after_run_mb": proc_status_mb("VmRSS"),
              "peak_rss_mb": proc_status_mb("VmHWM"), "steps": len(agent.memory.steps)}
    if recorder is not None:
        recorder.close()
    print(json.dumps(report))


def measure(mode: str, steps: int, url: str, tmp: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", mode, "--steps", str(steps), "--redis-url", url,
                          "--data-dir", str(tmp / "data")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="Steps of the scripted run.")
    parser.add_argument("--repeats", type=int, default=3, help="Processes per mode.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    samples: dict[str, list[dict[str, float]]] = {"none": [], "recorder": []}
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp) / "redis") as url:
        for _ in range(args.repeats):
            for mode in ("none", "recorder"):
                samples[mode].append(measure(mode, args.steps, url, Path(tmp)))
    figures: dict[str, Any] = {}
    for key in ("rss_before_run_mb", "rss_after_run_mb", "peak_rss_mb"):
        figures[key] = {mode: spread([s[key] for s in samples[mode]], 1) for mode in samples}
    after = figures["rss_after_run_mb"]
    peak = figures["peak_rss_mb"]
    added_after = round(after["recorder"]["median"] - after["none"]["median"], 1)
    added_peak = round(peak["recorder"]["median"] - peak["none"]["median"], 1)
    result: dict[str, Any] = {
        "benchmark": "memory", "seconds": round(time.perf_counter() - started, 1), "steps": args.steps,
        "repeats": args.repeats, **figures, "added_after_run_mb": added_after, "added_peak_mb": added_peak,
        "samples": samples,
    }
    spread_note = (f"(rec {after['recorder']['min']:.1f}-{after['recorder']['max']:.1f}, "
                   f"none {after['none']['min']:.1f}-{after['none']['max']:.1f})")
    before = figures["rss_before_run_mb"]
    added_before = round(before["recorder"]["median"] - before["none"]["median"], 1)
    result["added_before_run_mb"] = added_before
    result["rows"] = [
        row("agent RSS before the run: imports + recorder built (MB)",
            f"{before['recorder']['median']:.1f} (+{added_before:.1f})", f"no recorder {before['none']['median']:.1f}",
            ratio(before["recorder"]["median"], before["none"]["median"])),
        row(f"agent RSS after a {args.steps}-step run, recorder attached (MB)",
            f"{after['recorder']['median']:.1f} (+{added_after:.1f}) {spread_note}",
            f"no recorder {after['none']['median']:.1f}", ratio(after["recorder"]["median"], after["none"]["median"]),
            "< 10 MB added", added_after < TARGET_MB),
        row("agent peak RSS, recorder attached (MB)", f"{peak['recorder']['median']:.1f} (+{added_peak:.1f})",
            f"no recorder {peak['none']['median']:.1f}", ratio(peak["recorder"]["median"], peak["none"]["median"]),
            "< 10 MB added", added_peak < TARGET_MB),
    ]
    write_result("memory", result, args.out)
    return result


def main() -> None:
    if "--child" in sys.argv:
        parser = argparse.ArgumentParser()
        parser.add_argument("--child", choices=["none", "recorder"])
        parser.add_argument("--steps", type=int)
        parser.add_argument("--redis-url")
        parser.add_argument("--data-dir")
        a = parser.parse_args()
        child(a.child, a.steps, a.redis_url, a.data_dir)
        return
    result = run()
    print(f"median of {result['repeats']} processes per mode, {result['seconds']} s")
    print_table(result["rows"])


if __name__ == "__main__":
    main()
