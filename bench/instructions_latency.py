"""``build_instructions`` latency against a bare qdrant-client query of the same vector, by lesson count.

    python bench/instructions_latency.py [--sizes 1000 10000] [--large] [--queries 20] [--repeats 3]

For each size, one bank of that many synthetic lessons goes into the embedded store
(``QdrantClient(path=tmp)``) through ``LessonStore.upsert``. Lesson vectors: a pool of ``--real``
lessons embedded with the real MiniLM model; beyond the pool, pool vectors with small Gaussian
perturbations (sigma ``--noise``, renormalized), because embedding 100k texts on 2 cores takes too long.
Task queries are always embedded by the real model inside ``build_instructions``.

Per query, interleaved: ``build_instructions`` (embed the task, dense search, hybrid search, rank, format,
record the injection), ``compose_instructions`` (the same without recording the injection), the task's
embedding alone, the bare baseline: ``client.query_points`` of the same vector on the dense vector, no
filter, same limit, and that query with the store's bank filter (where the time goes). ``--large`` adds 100k lessons.
Writes bench/results/instructions_latency.json and instructions_latency.png.
"""

from __future__ import annotations

import argparse
import logging
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    RESULTS,
    embed_model_path,
    latency_stats,
    plt_or_none,
    print_table,
    ratio,
    row,
    spread,
    write_result,
)

from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.instructions import build_instructions, compose_instructions
from lessonbank.core.models import Lesson
from lessonbank.core.settings import Settings
from lessonbank.core.store.qdrant import DENSE, LessonStore

BANK = "bench"
TARGET_P50_MS_AT_10K = 20.0
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"

SUBJECTS = ["sales.csv", "the billing API", "the orders table", "customers.xlsx", "the S3 bucket", "the ETL job",
            "the geocoding service", "the inventory endpoint", "transactions.parquet", "the SMTP relay",
            "the log archive", "the Postgres replica", "the pricing page", "the events stream", "the PDF contracts",
            "the weather feed", "the ticket export", "the CRM import", "the image folder", "the churn model"]
FACTS = ["is semicolon separated", "paginates with a cursor", "times out on large ranges", "needs an API key header",
         "stores dates as epoch milliseconds", "is encoded in latin-1", "rejects files over 10 MB",
         "returns 429 above 5 requests per second", "has a header row on line 3", "uses UTC timestamps",
         "lists amounts in cents", "is only reachable on port 5433", "drops rows with null ids",
         "needs the openpyxl engine", "is gzip compressed", "caches results for one hour"]
ADVICE = ["so read it with explicit options", "so retry with backoff", "so split the request by month",
          "so check the first rows before parsing", "so convert before joining", "so stream it in chunks",
          "so validate the schema first", "so pin the client version"]
KINDS = ["fact", "approach", "failure"]
TASKS = ["Load sales.csv and sum the revenue per region.", "Download the March invoices from the billing API.",
         "Join the orders table with customers.xlsx by customer id.", "Upload the cleaned report to the S3 bucket.",
         "Check that the nightly ETL job finished.", "Geocode every address in the shipping file.",
         "Fetch all products from the inventory endpoint.", "Average basket value from transactions.parquet.",
         "Email the weekly report through the SMTP relay.", "Find the most frequent error in the log archive.",
         "Count yesterday's signups in the Postgres replica.", "Scrape competitor prices from the pricing page.",
         "Aggregate the events stream per hour.", "Count the words in the PDF contracts.",
         "Plot last week's temperatures from the weather feed.", "Translate the ticket export into English.",
         "Deduplicate contacts before the CRM import.", "Resize the pictures in the image folder.",
         "Retrain the churn model on last month's data.", "Compare refunds between two regions in sales.csv."]


def lesson_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct synthetic lesson texts built from templates."""
    rng = random.Random(seed)
    texts: list[str] = []
    seen: set[str] = set()
    while len(texts) < n:
        text = f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(FACTS)}, {rng.choice(ADVICE)} (case {len(texts)})."
        if text not in seen:
            seen.add(text)
            texts.append(text)
    return texts


class PooledEmbedder:
    """The real model for queries; precomputed vectors for the synthetic lessons."""

    def __init__(self, real: FastEmbedEmbedder, known: dict[str, list[float]]) -> None:
        self.real = real
        self.known = known

    @property
    def dim(self) -> int:
        return self.real.dim

    def embed(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in texts if t not in self.known]
        if missing:
            self.known.update(zip(missing, self.real.embed(missing), strict=True))
        return [self.known[t] for t in texts]


def perturbed(base: list[float], rng: random.Random, sigma: float) -> list[float]:
    vector = [x + rng.gauss(0.0, sigma) for x in base]
    norm = sum(x * x for x in vector) ** 0.5
    return [x / norm for x in vector]


def vectors_for(texts: list[str], real: FastEmbedEmbedder, pool_size: int, noise: float,
                cache: dict[str, list[float]]) -> tuple[dict[str, list[float]], int]:
    """Vectors for ``texts``: the first ``pool_size`` really embedded, the rest perturbed pool vectors."""
    pool = [t for t in texts[:pool_size] if t not in cache]
    for start in range(0, len(pool), 256):
        batch = pool[start:start + 256]
        cache.update(zip(batch, real.embed(batch), strict=True))
    pooled = [cache[t] for t in texts[:pool_size]]
    rng = random.Random(1)
    out = {t: cache[t] for t in texts[:pool_size]}
    for i, text in enumerate(texts[pool_size:]):
        out[text] = perturbed(pooled[i % len(pooled)], rng, noise)
    return out, min(pool_size, len(texts))


def fill_store(store: LessonStore, texts: list[str]) -> float:
    started = time.perf_counter()
    for start in range(0, len(texts), 512):
        batch = texts[start:start + 512]
        store.upsert([Lesson.new(BANK, KINDS[(start + i) % 3], t, tags=["bench"])  # type: ignore[arg-type]
                      for i, t in enumerate(batch)])
    return time.perf_counter() - started


def measure_size(size: int, args: argparse.Namespace, real: FastEmbedEmbedder, cache: dict[str, list[float]],
                 tmp: Path) -> dict[str, Any]:
    texts = lesson_texts(size)
    known, really_embedded = vectors_for(texts, real, args.real, args.noise, cache)
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(tmp / f"qdrant-{size}"))
    store = LessonStore(client, PooledEmbedder(real, known), "lessons")
    load_s = fill_store(store, texts)
    settings = Settings(_env_file=None, data_dir=tmp / "data")
    build_ms: list[list[float]] = []
    bare_ms: list[list[float]] = []
    filtered_ms: list[list[float]] = []
    embed_ms: list[list[float]] = []
    compose_ms: list[list[float]] = []
    given = 0
    tasks = (TASKS * (args.queries // len(TASKS) + 1))[: args.queries]
    build_instructions(tasks[0], BANK, store=store, settings=settings)  # warm-up
    for _ in range(args.repeats):
        b_round, q_round, e_round, c_round, f_round = [], [], [], [], []
        for task in tasks:
            started = time.perf_counter()
            compose_instructions(store, task, BANK, min_relevance=settings.min_relevance)
            c_round.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            text = build_instructions(task, BANK, store=store, settings=settings)
            b_round.append((time.perf_counter() - started) * 1000)
            given += text.count("\n- ")
            started = time.perf_counter()
            vector = real.embed([task])[0]
            e_round.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            client.query_points("lessons", query=vector, using=DENSE, limit=24, with_payload=True)
            q_round.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            client.query_points("lessons", query=vector, using=DENSE, limit=24, with_payload=True,
                                query_filter=LessonStore._filter(BANK, active_only=True))
            f_round.append((time.perf_counter() - started) * 1000)
        build_ms.append(b_round)
        bare_ms.append(q_round)
        embed_ms.append(e_round)
        compose_ms.append(c_round)
        filtered_ms.append(f_round)
    client.close()
    flat_b = [x for r in build_ms for x in r]
    flat_q = [x for r in bare_ms for x in r]
    flat_e = [x for r in embed_ms for x in r]
    import statistics

    return {
        "lessons": size,
        "really_embedded": really_embedded,
        "perturbed": size - really_embedded,
        "load_seconds": round(load_s, 1),
        "build_instructions_ms": latency_stats(flat_b, 2),
        "build_p50_spread_ms": spread([statistics.median(r) for r in build_ms], 2),
        "bare_query_ms": latency_stats(flat_q, 3),
        "bare_p50_spread_ms": spread([statistics.median(r) for r in bare_ms], 3),
        "bank_filtered_query_ms": latency_stats([x for r in filtered_ms for x in r], 3),
        "task_embedding_ms": latency_stats(flat_e, 2),
        "compose_without_injection_ms": latency_stats([x for r in compose_ms for x in r], 2),
        "ratio_p50": ratio(statistics.median(flat_b), statistics.median(flat_q)),
        "lessons_given_per_query": round(given / max(len(flat_b), 1), 1),
    }


def plot(sizes: list[dict[str, Any]], path: Path) -> Path | None:
    plt = plt_or_none()
    if plt is None:
        return None
    xs = [s["lessons"] for s in sizes]
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for key, label, style in (("build_instructions_ms", "build_instructions", "o-"),
                              ("compose_without_injection_ms", "same, injection not recorded", "d-"),
                              ("bare_query_ms", "bare query_points (same vector)", "s--"),
                              ("bank_filtered_query_ms", "same query, bank filter", "v--"),
                              ("task_embedding_ms", "task embedding alone (MiniLM)", "^:")):
        ax.plot(xs, [s[key]["p50"] for s in sizes], style, label=f"{label} p50")
        ax.fill_between(xs, [s[key]["p50"] for s in sizes], [s[key]["p95"] for s in sizes], alpha=0.15)
    ax.axhline(TARGET_P50_MS_AT_10K, color="grey", lw=0.8, ls="-.", label="target p50 at 10k (20 ms)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("lessons in the bank (embedded store)")
    ax.set_ylabel("ms (line p50, band up to p95)")
    ax.set_title("Instructions latency vs lesson count")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def rows_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for s in result["sizes"]:
        b, q = s["build_instructions_ms"], s["bare_query_ms"]
        sp = s["build_p50_spread_ms"]
        target = "<= 20 ms p50" if s["lessons"] == 10_000 else ""
        out.append(row(f"build_instructions p50/p95 ms, {s['lessons']:,} lessons",
                       f"{b['p50']:.1f} / {b['p95']:.1f} (p50 {sp['min']:.1f}-{sp['max']:.1f})",
                       f"bare query {q['p50']:.2f} / {q['p95']:.2f} (bank-filtered "
                       f"{s['bank_filtered_query_ms']['p50']:.1f})", s["ratio_p50"], target,
                       b["p50"] <= TARGET_P50_MS_AT_10K if target else None))
    return out


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="Lesson counts to measure.")
    parser.add_argument("--large", action="store_true", help="Also measure 100k lessons (minutes).")
    parser.add_argument("--queries", type=int, default=10, help="Task queries per round.")
    parser.add_argument("--repeats", type=int, default=3, help="Rounds over the queries.")
    parser.add_argument("--real", type=int, default=1000, help="Lessons embedded with the real model (the pool).")
    parser.add_argument("--noise", type=float, default=0.02, help="Sigma of the perturbation of pooled vectors.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sizes = sorted(set(args.sizes + ([100_000] if args.large else [])))
    logging.basicConfig(level=logging.ERROR)
    cache: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        real = FastEmbedEmbedder(MODEL_NAME, model_path=embed_model_path(), cache_dir=Path(tmp) / "fastembed")
        started = time.perf_counter()
        real.embed(lesson_texts(64))
        results = []
        for size in sizes:
            results.append(measure_size(size, args, real, cache, Path(tmp)))
            s = results[-1]
            print(f"  {size:>7,} lessons ({s['perturbed']:,} perturbed): build p50 "
                  f"{s['build_instructions_ms']['p50']:.1f} ms, bare {s['bare_query_ms']['p50']:.2f} ms, "
                  f"load {s['load_seconds']} s", flush=True)
    result = {"benchmark": "instructions_latency", "seconds": round(time.perf_counter() - started, 1),
              "vector_note": f"{args.real} lessons embedded with MiniLM; the rest reuse those vectors with "
                             f"Gaussian noise sigma {args.noise} (renormalized). Queries always use the real model.",
              "sizes": results}
    result["rows"] = rows_of(result)
    write_result("instructions_latency", result, args.out)
    png = plot(results, args.out / "instructions_latency.png")
    result["plot"] = str(png) if png else None
    return result


def main() -> None:
    result = run()
    print(result["vector_note"])
    print_table(result["rows"])


if __name__ == "__main__":
    main()
