"""Memory an agent process pays for the recorder: RSS growth with a ``StepRecorder`` attached, against the same
agent process without anything of lessonbank's.

    python bench/memory.py [--steps 100] [--repeats 3]

Each measurement is a fresh process that imports smolagents (and, for the second agent kind, ``openai``, as
an agent talking to an OpenAI-compatible server does), then runs a scripted CodeAgent for ``--steps`` steps
in runs of 10 steps (each run closes). The baseline process imports nothing of lessonbank's and no redis-py
(checked); the recorder process builds a ``StepRecorder`` pushing to a real redis-server (importing it is
part of its cost). The growth is the difference of the medians of VmRSS after the steps; VmHWM (peak) is
reported too. Modes alternate to share the machine's noise. Writes bench/results/memory.json and memory.png.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from common import RESULTS, ROOT, plt_or_none, print_table, redis_server, row, spread, write_result

TARGET_MB = {"scripted": None, "openai": 8.0}
KINDS = {"scripted": "(a) scripted agent", "openai": "(b) agent that imports openai"}

CHILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path

    mode, kind, steps, url, data_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]

    def status_mb(field):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024

    from smolagents import CodeAgent
    if kind == "openai":
        import openai  # noqa: F401
    from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code

    imported = status_mb("VmRSS")
    callbacks = None
    if mode == "recorder":
        from lessonbank.core.settings import Settings
        from lessonbank.recorder import StepRecorder

        recorder = StepRecorder(bank="bench-memory", settings=Settings(_env_file=None, redis_url=url,
                                                                        data_dir=Path(data_dir)))
        callbacks = recorder.step_callbacks
    built = status_mb("VmRSS")
    per_run = 10
    replies = []
    for run in range(steps // per_run):
        replies += [code_reply(f"x = {i}\\nprint('value', x, 'of run', {run})") for i in range(per_run - 1)]
        replies.append(final_code(f"run {run} done"))
    agent = CodeAgent(tools=[], model=ScriptedModel(replies), step_callbacks=callbacks, verbosity_level=0,
                      max_steps=per_run + 1)
    for run in range(steps // per_run):
        agent.run(f"Count, run {run}.")
    foreign = sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("lessonbank", "redis")})
    print(json.dumps({"rss_imported_mb": imported, "rss_built_mb": built, "rss_after_mb": status_mb("VmRSS"),
                      "peak_mb": status_mb("VmHWM"), "lessonbank_or_redis_imported": foreign}))
""")


def measure(mode: str, kind: str, steps: int, url: str, tmp: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode, kind, str(steps), url, str(tmp / "data")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def figures(kind: str, samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    median = {mode: {key: spread([s[key] for s in found], 1) for key in ("rss_after_mb", "peak_mb", "rss_built_mb")}
              for mode, found in samples.items()}
    growth = round(median["recorder"]["rss_after_mb"]["median"] - median["none"]["rss_after_mb"]["median"], 1)
    peak = round(median["recorder"]["peak_mb"]["median"] - median["none"]["peak_mb"]["median"], 1)
    imports = round(median["recorder"]["rss_built_mb"]["median"] - median["none"]["rss_built_mb"]["median"], 1)
    return {"kind": kind, "growth_mb": growth, "peak_growth_mb": peak, "imports_and_build_mb": imports,
            "target_mb": TARGET_MB[kind], "medians": median,
            "baseline_clean": all(not s["lessonbank_or_redis_imported"] for s in samples["none"])}


def plot(results: list[dict[str, Any]], path: Path) -> Path | None:
    plt = plt_or_none()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.2))
    labels = [KINDS[r["kind"]] for r in results]
    ax.barh([y - 0.2 for y in range(len(results))], [r["imports_and_build_mb"] for r in results], height=0.4,
            color="C7", label="imports + StepRecorder built")
    ax.barh([y + 0.2 for y in range(len(results))], [r["growth_mb"] for r in results], height=0.4, color="C0",
            label="after the steps (the figure)")
    for y, r in enumerate(results):
        if r["target_mb"] is not None:
            ax.plot([r["target_mb"]] * 2, [y - 0.45, y + 0.45], color="C3", ls="--", lw=1.2,
                    label=f"target {r['target_mb']:.0f} MB")
    ax.set_yticks(range(len(results)), labels)
    ax.set(xlabel="RSS added by the recorder (MB), against no lessonbank at all",
           title="Agent process memory with the recorder attached")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8, frameon=False)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="Steps per process (runs of 10 steps).")
    parser.add_argument("--repeats", type=int, default=3, help="Processes per mode and agent kind.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp) / "redis") as url:
        for kind in KINDS:
            samples: dict[str, list[dict[str, Any]]] = {"none": [], "recorder": []}
            for _ in range(args.repeats):
                for mode in samples:
                    samples[mode].append(measure(mode, kind, args.steps, url, Path(tmp)))
            results.append({**figures(kind, samples), "samples": samples})
    rows = []
    for r in results:
        none, rec = r["medians"]["none"]["rss_after_mb"], r["medians"]["recorder"]["rss_after_mb"]
        target = f"<= {r['target_mb']:.0f} MB" if r["target_mb"] is not None else ""
        met = r["growth_mb"] <= r["target_mb"] if r["target_mb"] is not None else None
        rows.append(row(f"agent RSS growth, {KINDS[r['kind']]}, {args.steps} steps (MB)",
                        f"+{r['growth_mb']:.1f} (peak +{r['peak_growth_mb']:.1f}; "
                        f"recorder {rec['min']:.1f}-{rec['max']:.1f})",
                        f"no lessonbank {none['median']:.1f} ({none['min']:.1f}-{none['max']:.1f})",
                        rec["median"] / none["median"], target, met))
    result: dict[str, Any] = {"benchmark": "memory", "seconds": round(time.perf_counter() - started, 1),
                              "steps": args.steps, "repeats": args.repeats, "results": results, "rows": rows}
    png = plot(results, args.out / "memory.png")
    result["plot"] = str(png) if png else None
    write_result("memory", result, args.out)
    return result


def main() -> None:
    result = run()
    print(f"median of {result['repeats']} processes per mode and agent kind, {result['seconds']} s")
    for r, line in zip(result["results"], result["rows"], strict=True):
        verdict = "(no target)" if line["met"] == "" else "ok" if line["met"] == "yes" else "MISSED"
        clean = "" if r["baseline_clean"] else "  (baseline imported lessonbank or redis!)"
        print(f"{line['figure']:60s} {line['value']} | baseline {line['baseline']} | target {line['target'] or '-'}"
              f" | {verdict}{clean}")
    print()
    print_table(result["rows"])


if __name__ == "__main__":
    main()
