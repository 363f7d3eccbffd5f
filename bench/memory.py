"""Memory an agent process pays for lessonbank: RSS growth with a ``StepRecorder`` attached, and with the whole
``lessonbank.remember(agent, bank=...)`` (recording, instructions from a store owner in another process, the
close of each run), against the same agent process without anything of lessonbank's.

    python bench/memory.py [--steps 100] [--repeats 3] [--with-otel] [--interned 5000]

By default the processes run as a default install would (``pip install lessonbank``, no ``otel`` extra):
opentelemetry, which the ``dev`` extra installs here and which redis-py imports when it finds it, is hidden from
them (both arms); ``--with-otel`` measures with it. Each arm reports the heavy modules it imported (Celery, kombu,
the Qdrant engines, the embedding model, onnxruntime: none is expected; redis-py is the agent's Redis client) and,
with ``remember``, whether the runs were given the owner's lessons. The target: ``remember`` adds at most 15 MB
to an agent that imports ``openai``.

Each measurement is a fresh process that imports smolagents (and, for the second agent kind, ``openai``, as
an agent talking to an OpenAI-compatible server does), then runs a scripted CodeAgent for ``--steps`` steps
in runs of 10 steps (each run closes). The baseline process imports nothing of lessonbank's and no redis-py
(checked); the recorder process builds a ``StepRecorder`` pushing to a real redis-server (importing it is
part of its cost). The growth is the difference of the medians of VmRSS after the steps; VmHWM (peak) is
reported too. Modes alternate to share the machine's noise. Writes bench/results/memory.json and memory.png.

CPython keeps interned strings (names in code, attribute names) in one table that doubles when it fills: the
import that crosses the threshold pays for the whole new table (about 2 MB here), whoever interned the
strings before it. A sensitivity variant measures (b) again with ``--interned`` strings interned first in
every arm, so the table has already grown; it shows how much of the growth is that step. The target is
judged on the default measurement only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import (
    RESULTS,
    ROOT,
    embed_model_path,
    plt_or_none,
    print_table,
    redis_server,
    row,
    save_plot,
    spread,
    write_result,
)

TARGET_MB = {"scripted": None, "openai": 15.0}
KINDS = {"scripted": "(a) scripted agent", "openai": "(b) agent that imports openai"}

CHILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path

    mode, kind, steps, url, data_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    # CPython's table of interned strings grows by doubling; the variant grows it first, in every arm
    grown = [sys.intern(f"lessonbank_bench_filler_{i}") for i in range(int(sys.argv[7]))]
    if sys.argv[6] == "no-otel":  # a default install: the otel extra is not there
        class NoOtel:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ModuleNotFoundError(name)
                return None

        sys.meta_path.insert(0, NoOtel())
    HEAVY = ("celery", "kombu", "qdrant_client", "qdrant_edge", "fastembed", "onnxruntime", "numpy", "tokenizers")

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
    settings = None
    if mode in ("recorder", "remember"):
        from lessonbank.core.settings import Settings

        settings = Settings(_env_file=None, redis_url=url, data_dir=Path(data_dir), store_timeout=60)
    if mode == "recorder":
        from lessonbank.recorder import StepRecorder

        recorder = StepRecorder(bank="bench-memory", settings=settings)
        callbacks = recorder.step_callbacks
    built = status_mb("VmRSS")
    per_run = 10
    replies = []
    for run in range(steps // per_run):
        replies += [code_reply(f"x = {i}\\nprint('value', x, 'of run', {run})") for i in range(per_run - 1)]
        replies.append(final_code(f"run {run} done"))
    agent = CodeAgent(tools=[], model=ScriptedModel(replies), step_callbacks=callbacks, verbosity_level=0,
                      max_steps=per_run + 1)
    if mode == "remember":
        import lessonbank
        from lessonbank.agent import lessons_given

        lessonbank.remember(agent, bank="bench-memory", settings=settings)
    for run in range(steps // per_run):
        agent.run(f"Count, run {run}.")
    given = mode == "remember" and "Counting runs print" in lessons_given(agent)
    foreign = sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("lessonbank", "redis")})
    heavy = sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in HEAVY})
    print(json.dumps({"rss_imported_mb": imported, "rss_built_mb": built, "rss_after_mb": status_mb("VmRSS"),
                      "peak_mb": status_mb("VmHWM"), "lessonbank_or_redis_imported": foreign,
                      "heavy": heavy, "lessons_given": given}))
""")


MODES = ("none", "recorder", "remember")
LABELS = {"recorder": "StepRecorder attached", "remember": "lessonbank.remember (recording, instructions, closes)"}
OWNER = textwrap.dedent("""
    import signal, sys
    from pathlib import Path
    from lessonbank.core.models import Lesson
    from lessonbank.core.settings import Settings
    from lessonbank.workers.owner import StoreOwner

    settings = Settings(_env_file=None, redis_url=sys.argv[1], data_dir=Path(sys.argv[2]),
                        embed_model_path=Path(sys.argv[3]))
    owner = StoreOwner(settings)
    assert owner.start(), "the store path is held"
    lessons = [Lesson.new("bench-memory", "fact", text, origin="added") for text in (
        "Counting runs print the value of x at every step before the final answer.",
        "A count is done when the run prints its last value; answer with the run's number.",
    )]
    assert owner.store is not None
    owner.store.upsert(lessons)
    print("ready", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    owner.stop()
""")


def measure(mode: str, kind: str, steps: int, url: str, tmp: Path, otel: bool, interned: int = 0) -> dict[str, Any]:
    argv = [sys.executable, "-c", CHILD, mode, kind, str(steps), url, str(tmp / "data"), "otel" if otel else "no-otel",
            str(interned)]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


@contextmanager
def store_owner(url: str, data_dir: Path) -> Iterator[None]:
    """The worker side of ``remember``'s instructions: a store owner in a process of its own, holding two lessons."""
    proc = subprocess.Popen([sys.executable, "-c", OWNER, url, str(data_dir), str(embed_model_path())], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", "the store owner did not start"
        yield
    finally:
        proc.terminate()
        proc.wait(30)


def figures(kind: str, samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    median = {mode: {key: spread([s[key] for s in found], 1) for key in ("rss_after_mb", "peak_mb", "rss_built_mb")}
              for mode, found in samples.items()}
    base = median["none"]
    arms = {}
    for mode in MODES[1:]:
        arms[mode] = {
            "growth_mb": round(median[mode]["rss_after_mb"]["median"] - base["rss_after_mb"]["median"], 1),
            "peak_growth_mb": round(median[mode]["peak_mb"]["median"] - base["peak_mb"]["median"], 1),
            "imports_and_build_mb": round(median[mode]["rss_built_mb"]["median"] - base["rss_built_mb"]["median"], 1),
            "heavy": sorted({name for s in samples[mode] for name in s.get("heavy", [])}),
            "lessons_given": all(s.get("lessons_given") for s in samples[mode]),
        }
    return {"kind": kind, "arms": arms, "target_mb": TARGET_MB[kind], "medians": median,
            "baseline_clean": all(not s["lessonbank_or_redis_imported"] for s in samples["none"])}


def plot(results: list[dict[str, Any]], path: Path) -> Path | None:
    plt = plt_or_none()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    results = [r for r in results if not r.get("interned")]
    labels = [KINDS[r["kind"]] for r in results]
    for offset, (mode, color) in zip((-0.2, 0.2), (("recorder", "C0"), ("remember", "C2")), strict=True):
        ax.barh([y + offset for y in range(len(results))], [r["arms"][mode]["growth_mb"] for r in results],
                height=0.38, color=color, label=LABELS[mode])
    for y, r in enumerate(results):
        if r["target_mb"] is not None:
            ax.plot([r["target_mb"]] * 2, [y - 0.45, y + 0.45], color="C3", ls="--", lw=1.2,
                    label=f"target {r['target_mb']:.0f} MB")
    ax.set_yticks(range(len(results)), labels)
    ax.set(xlabel="RSS added after the steps (MB), against no lessonbank at all",
           title="Agent process memory with lessonbank")
    return save_plot(fig, ax, path)


def _rows(results: list[dict[str, Any]], steps: int, otel: bool) -> list[dict[str, Any]]:
    rows = []
    env = "otel extra installed" if otel else "default install"
    for r in results:
        none = r["medians"]["none"]["rss_after_mb"]
        for mode in MODES[1:]:
            arm, found = r["arms"][mode], r["medians"][mode]["rss_after_mb"]
            target = f"<= {r['target_mb']:.0f} MB" if r["target_mb"] is not None and mode == "remember" else ""
            met = arm["growth_mb"] <= r["target_mb"] if target else None
            heavy = f"; heavy modules: {', '.join(arm['heavy']) or 'none'}"
            if mode == "remember":
                heavy += "; lessons given" if arm["lessons_given"] else "; NO LESSONS GIVEN"
            grown = (f", interned-string table grown first ({r['interned']:,} strings in every arm)"
                     if r.get("interned") else "")
            rows.append(row(f"agent RSS growth, {KINDS[r['kind']]}, {LABELS[mode]}, {steps} steps, {env}{grown} (MB)",
                            f"+{arm['growth_mb']:.1f} (peak +{arm['peak_growth_mb']:.1f}{heavy})",
                            f"no lessonbank {none['median']:.1f} ({none['min']:.1f}-{none['max']:.1f})",
                            found["median"] / none["median"], target, met))
    return rows


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="Steps per process (runs of 10 steps).")
    parser.add_argument("--repeats", type=int, default=3, help="Processes per mode and agent kind.")
    parser.add_argument("--with-otel", action="store_true", help="Let the processes import opentelemetry.")
    parser.add_argument("--interned", type=int, default=5000,
                        help="Also measure (b) with this many strings interned first in every arm (0: not).")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp) / "redis") as url, \
            store_owner(url, Path(tmp) / "data"):
        variants = [(kind, 0) for kind in KINDS] + ([("openai", args.interned)] if args.interned else [])
        for kind, interned in variants:
            samples: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
            for _ in range(args.repeats):
                for mode in samples:
                    samples[mode].append(measure(mode, kind, args.steps, url, Path(tmp), args.with_otel, interned))
            found = figures(kind, samples)
            if interned:  # a sensitivity figure, not the target's measurement
                found["target_mb"] = None
            results.append({**found, "interned": interned, "samples": samples})
    rows = _rows(results, args.steps, args.with_otel)
    result: dict[str, Any] = {"benchmark": "memory", "seconds": round(time.perf_counter() - started, 1),
                              "steps": args.steps, "repeats": args.repeats, "with_otel": args.with_otel,
                              "results": results, "rows": rows}
    png = plot(results, args.out / "memory.png")
    result["plot"] = str(png) if png else None
    write_result("memory", result, args.out)
    return result


def main() -> None:
    result = run()
    print(f"median of {result['repeats']} processes per mode and agent kind, {result['seconds']} s")
    clean = all(r["baseline_clean"] for r in result["results"])
    for line in result["rows"]:
        verdict = "(no target)" if line["met"] == "" else "ok" if line["met"] == "yes" else "MISSED"
        print(f"{line['figure']:60s} {line['value']} | baseline {line['baseline']} | target {line['target'] or '-'}"
              f" | {verdict}{'' if clean else '  (baseline imported lessonbank or redis!)'}")
    for r in result["results"]:
        if r["target_mb"] is not None:
            arm = r["arms"]["remember"]
            print(f"\n{KINDS[r['kind']]}: lessonbank.remember adds {arm['growth_mb']:+.1f} MB against a target of "
                  f"{r['target_mb']:.0f} MB ({'met' if arm['growth_mb'] <= r['target_mb'] else 'MISSED'}); heavy "
                  f"modules imported: {', '.join(arm['heavy']) or 'none'}")
    print()
    print_table(result["rows"])


if __name__ == "__main__":
    main()
