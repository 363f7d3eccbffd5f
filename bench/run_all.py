"""Run every benchmark with small sizes (about 10 minutes on 2 cores), print one table, write bench/results/.

    python bench/run_all.py [--large] [--only NAME ...] [--out DIR]

``--large`` uses the bigger sizes: 1000-step recorder runs, more queries, more runs per worker batch
and more repeats. Each script can also be run alone with its own flags.
Every figure is printed next to its baseline from the same run and its target ("MISSED" when missed).
Writes bench/results/<benchmark>.json, summary.json, summary.md and the PNG plots.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import instructions_latency
import memory
import prompt_tokens
import recorder_overhead
import retrieval_quality
import worker_throughput
from common import RESULTS, machine, print_table

BENCHMARKS: dict[str, tuple[Callable[[list[str] | None], dict[str, Any]], list[str], list[str]]] = {
    # name: (run, small args, large args)
    "recorder_overhead": (recorder_overhead.run, ["--steps", "200", "--repeats", "3"],
                          ["--steps", "1000", "--repeats", "5"]),
    "retrieval_quality": (retrieval_quality.run, [], []),
    "memory": (memory.run, ["--steps", "200", "--repeats", "3"], ["--steps", "1000", "--repeats", "5"]),
    "instructions_latency": (instructions_latency.run, ["--sizes", "1000", "10000", "100000"],
                             ["--sizes", "1000", "10000", "100000", "--queries", "20", "--repeats", "5"]),
    "worker_throughput": (worker_throughput.run, ["--runs", "128", "--banks", "16", "--repeats", "3"],
                          ["--runs", "256", "--banks", "32", "--repeats", "5"]),
    "prompt_tokens": (prompt_tokens.run, [], []),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--large", action="store_true", help="Bigger sizes and more repeats (tens of minutes).")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="Run only these benchmarks.")
    parser.add_argument("--out", type=Path, default=RESULTS, help="Folder for the JSON results and plots.")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    timings: dict[str, float] = {}
    failed: list[str] = []
    for name, (run, small, large) in BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        try:
            result = run([*(large if args.large else small), "--out", str(args.out)])
        except Exception:  # one broken benchmark must not hide the others' figures
            traceback.print_exc()
            failed.append(name)
            continue
        timings[name] = round(time.perf_counter() - started, 1)
        rows.extend(result["rows"])
        print(f"   {timings[name]} s", flush=True)
    print()
    print_table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"machine": machine(), "large": args.large, "seconds": timings, "failed": failed, "rows": rows}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with (args.out / "summary.md").open("w") as handle:
        note = summary["machine"]
        handle.write(f"Measured {note['date']}, {note['cpus']} CPUs, Python {note['python']}, "
                     f"load {note['load_1m']} at the end.\n\n")
        print_table(rows, file=handle)
    print(f"\nwritten to {args.out} (total {sum(timings.values()):.0f} s)")
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
