"""Retrieval quality: recall@1, recall@5 and MRR of dense-only against hybrid search, on task -> lesson pairs.

    python bench/retrieval_quality.py [--pairs N] [--no-distractors]

bench/data/retrieval_pairs.jsonl holds task -> lesson pairs written for this benchmark (not the test
set): the task a later run gets and the one lesson an earlier run learnt that it needs.
bench/data/retrieval_distractors.jsonl adds lessons that no task needs (same topics, wrong answer).
Every lesson goes into one bank of the embedded store (a Qdrant Edge shard, ``EdgeLessonStore``) with the
real MiniLM model; each task is then looked up with ``similar`` (dense cosine, the baseline) and
``search`` (dense + lexical fused with RRF), and with the instructions builder's ranking (``rank_lessons``,
the lessons a run is actually handed, 8 at most). Deterministic, so one pass; no spread to report.
Writes bench/results/retrieval_quality.json and retrieval_quality.png.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import RESULTS, embed_model_path, plt_or_none, print_table, ratio, row, save_plot, write_result

from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson
from lessonbank.core.store.base import LessonStoreBase
from lessonbank.core.store.edge import EdgeLessonStore
from lessonbank.instructions import rank_lessons

DATA = Path(__file__).resolve().parent / "data"
BANK = "bench-quality"
DEPTH = 10
HANDED = 8
TARGET_RECALL5 = 0.9
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def metrics(ranks: list[int | None]) -> dict[str, float]:
    """recall@1, recall@5 and MRR (over the first DEPTH results) from the 1-based rank of each target."""
    n = len(ranks)
    return {
        "recall@1": round(sum(1 for r in ranks if r is not None and r <= 1) / n, 3),
        "recall@5": round(sum(1 for r in ranks if r is not None and r <= 5) / n, 3),
        "mrr": round(sum(1.0 / r for r in ranks if r is not None) / n, 3),
        "missed_top10": sum(1 for r in ranks if r is None),
    }


def rank_of(target: str, ids: list[str]) -> int | None:
    return ids.index(target) + 1 if target in ids else None


def evaluate(store: LessonStoreBase, pairs: list[tuple[str, Lesson]]) -> dict[str, Any]:
    methods: dict[str, Callable[[str], list[str]]] = {
        "dense": lambda task: [lesson.id for lesson, _ in store.similar(BANK, task, limit=DEPTH)],
        "hybrid": lambda task: [lesson.id for lesson, _ in store.search(BANK, task, limit=DEPTH)],
        "builder": lambda task: [lesson.id for lesson in rank_lessons(store, BANK, task, max_lessons=HANDED)],
    }
    ranks: dict[str, list[int | None]] = {name: [] for name in methods}
    misses: dict[str, list[str]] = {name: [] for name in methods}
    for task, lesson in pairs:
        for name, method in methods.items():
            rank = rank_of(lesson.id, method(task))
            ranks[name].append(rank)
            if rank is None or rank > 5:
                misses[name].append(task)
    out: dict[str, Any] = {name: metrics(r) for name, r in ranks.items()}
    out["builder"]["handed_to_run"] = round(sum(1 for r in ranks["builder"] if r is not None) / len(pairs), 3)
    out["misses_at_5"] = misses
    return out


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=0, help="Use only the first N pairs (0: all).")
    parser.add_argument("--no-distractors", action="store_true", help="Leave the distractor lessons out.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    raw = load_jsonl(DATA / "retrieval_pairs.jsonl")
    raw = raw[: args.pairs] if args.pairs else raw
    distractors = [] if args.no_distractors else load_jsonl(DATA / "retrieval_distractors.jsonl")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        embedder = FastEmbedEmbedder(MODEL_NAME, model_path=embed_model_path(), cache_dir=Path(tmp) / "fastembed")
        store = EdgeLessonStore(Path(tmp) / "store", embedder)
        # evidence 2: lessons two runs confirmed, which the builder may hand out (``instructions.eligible``)
        pairs = [(p["task"], Lesson.new(BANK, p["kind"], p["lesson"]).model_copy(update={"evidence": 2})) for p in raw]
        others = [Lesson.new(BANK, d["kind"], d["lesson"]).model_copy(update={"evidence": 2}) for d in distractors]
        store.upsert([lesson for _, lesson in pairs] + others)
        result = evaluate(store, pairs)
        store.close()
    dense, hybrid, builder = result["dense"], result["hybrid"], result["builder"]
    out = {
        "benchmark": "retrieval_quality",
        "seconds": round(time.perf_counter() - started, 1),
        "pairs": len(pairs),
        "lessons_in_bank": len(pairs) + len(others),
        **result,
        "rows": [
            row("retrieval recall@1 (hybrid)", f"{hybrid['recall@1']:.3f}", f"dense {dense['recall@1']:.3f}",
                ratio(hybrid["recall@1"], dense["recall@1"])),
            row("retrieval recall@5 (hybrid)", f"{hybrid['recall@5']:.3f}", f"dense {dense['recall@5']:.3f}",
                ratio(hybrid["recall@5"], dense["recall@5"]), ">= 0.9", hybrid["recall@5"] >= TARGET_RECALL5),
            row("retrieval MRR (hybrid)", f"{hybrid['mrr']:.3f}", f"dense {dense['mrr']:.3f}",
                ratio(hybrid["mrr"], dense["mrr"])),
            row(f"lesson handed to the run (builder, <= {HANDED})", f"{builder['handed_to_run']:.3f}",
                f"dense recall@5 {dense['recall@5']:.3f}",
                ratio(builder["handed_to_run"], dense["recall@5"])),
        ],
    }
    write_result("retrieval_quality", out, args.out)
    png = plot(out, args.out / "retrieval_quality.png")
    out["plot"] = str(png) if png else None
    return out


def plot(result: dict[str, Any], path: Path) -> Path | None:
    plt = plt_or_none()
    if plt is None:
        return None
    metrics_shown = ["recall@1", "recall@5", "mrr"]
    methods = [("dense", "dense only (baseline)"), ("hybrid", "hybrid: dense + lexical, RRF")]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.38
    for i, (key, label) in enumerate(methods):
        xs = [m + (i - 0.5) * width for m in range(len(metrics_shown))]
        bars = ax.bar(xs, [result[key][m] for m in metrics_shown], width, label=label)
        ax.bar_label(bars, fmt="%.3f", fontsize=7)
    ax.axhline(TARGET_RECALL5, color="red", lw=0.8, ls="-.", label=f"target recall@5 >= {TARGET_RECALL5}")
    ax.set_xticks(range(len(metrics_shown)), ["recall@1", "recall@5", "MRR (top 10)"])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("fraction of tasks (MRR: mean 1/rank)")
    ax.set_title(f"Retrieval quality, {result['pairs']} tasks, {result['lessons_in_bank']} lessons in the bank")
    return save_plot(fig, ax, path)


def main() -> None:
    result = run()
    print(f"{result['pairs']} task -> lesson pairs, {result['lessons_in_bank']} lessons in the bank, "
          f"{result['seconds']} s")
    for name in ("dense", "hybrid", "builder"):
        print(f"  {name:<8} {result[name]}")
    print_table(result["rows"])


if __name__ == "__main__":
    main()
