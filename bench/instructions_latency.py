"""``build_instructions`` latency by lesson count: through the agent's path and in process, against one task embedding.

    python bench/instructions_latency.py [--sizes 1000 10000] [--large] [--queries 10] [--repeats 3]

For each size, one bank of that many synthetic lessons (plus 10 % in another bank) goes into the embedded
store (a Qdrant Edge shard, ``EdgeLessonStore``) through ``upsert``. Lesson vectors: a pool of ``--real``
lessons embedded with the real MiniLM model; beyond the pool, pool vectors with small Gaussian
perturbations (sigma ``--noise``, renormalized), because embedding 100k texts on 2 cores takes too long.
Task queries are always embedded by the real model, with the embedder's cache off (every query pays
one embedding).

Measured per query, 10 tasks x 3 rounds:

- agent path: a separate agent process calls ``build_instructions`` with the ``RemoteLessonStore`` (the
  default set-up) -> Redis -> a store-owner process (``StoreOwner``, as in the worker) -> reply. The agent
  process reports which heavy modules it loaded (it must load none of qdrant-client, qdrant-edge,
  fastembed, onnxruntime, numpy);
- in process: ``build_instructions`` on the store itself;
- baseline: one task embedding alone (MiniLM, uncached, with the threads the store's embedder has,
  ``EMBED_THREADS``: the embedding ``build_instructions`` itself does) in this process, paired: just before each
  call on either path, the same task is embedded once, so a call and its baseline share the moment and the
  setting. The embedding with 1 and with onnxruntime's default threads (one per core: faster for one text,
  slower for a worker's batches), unpaired, is kept too, and at 10k lessons the calls are also judged against
  the faster of the two, in a row of their own; also the bare engine query of the same
  vector without the bank filter, and, up to 10k lessons, ``build_instructions`` on qdrant-client's local mode
  (the previous embedded engine) with the overlap of the lessons both hand out;
- ``delete_bank`` of a 50-lesson bank in the store (copies the live points into a fresh shard).

Targets: p50 <= 2x the paired task embedding's p50 at 10k lessons, <= 50 ms at 100k (``--large``), on both paths.
Writes bench/results/instructions_latency.json and instructions_latency.png.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    RESULTS,
    ROOT,
    embed_model_path,
    latency_stats,
    plt_or_none,
    print_table,
    redis_server,
    row,
    save_plot,
    spread,
    write_result,
)

from lessonbank.core.embeddings import EMBED_THREADS, FastEmbedEmbedder
from lessonbank.core.models import Lesson
from lessonbank.core.settings import Settings
from lessonbank.core.store.edge import EdgeLessonStore
from lessonbank.instructions import compose_instructions

BANK = "bench"
OTHER_BANK = "bench-other"
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
EMBED_FACTOR_AT_10K = 2.0
TARGET_MS_AT_100K = 50.0
HEAVY = ("qdrant_client", "qdrant_edge", "fastembed", "onnxruntime", "numpy")

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

OWNER_SCRIPT = """
import signal, sys, threading
from pathlib import Path
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.settings import Settings
from lessonbank.core.store.edge import EdgeLessonStore
from lessonbank.workers.owner import StoreOwner

settings = Settings(_env_file=None, redis_url=sys.argv[1], qdrant_path=Path(sys.argv[2]))
embedder = FastEmbedEmbedder(sys.argv[4], model_path=sys.argv[3], cache_size=0)
store = EdgeLessonStore(settings.resolved_qdrant_path, embedder, settings.collection)
store.open()
owner = StoreOwner(settings, store=store)
owner.start()
embedder.embed(["warm up"])
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *args: stop.set())
print("serving", flush=True)
stop.wait()
owner.stop()
store.close()
"""

AGENT_SCRIPT = """
import json, sys, time
from lessonbank.block import lessons_block
from lessonbank.core.settings import Settings
from lessonbank.core.store.remote import RemoteLessonStore

redis_url, bank = sys.argv[1], sys.argv[2]
settings = Settings(_env_file=None, redis_url=redis_url, store_timeout=30.0)
store = RemoteLessonStore(settings)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:  # one task per line; the reply follows at once, so the bench can pair it with its baseline
    task = json.loads(line)
    started = time.perf_counter()
    text = lessons_block(task, bank, store=store, settings=settings).text
    ms = (time.perf_counter() - started) * 1000
    print(json.dumps({"ms": ms, "given": text.count("\\n- ")}), flush=True)
heavy = [name for name in HEAVY if name in sys.modules]
print(json.dumps({"heavy_modules": heavy}), flush=True)
""".replace("HEAVY", repr(HEAVY))


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
    """Precomputed vectors for the synthetic lessons; the real model (uncached) for anything else."""

    def __init__(self, real: FastEmbedEmbedder, known: dict[str, list[float]]) -> None:
        self.real = real
        self.known = known

    @property
    def dim(self) -> int:
        return self.real.dim

    def embed(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in texts if t not in self.known]
        found = dict(zip(missing, self.real.embed(missing), strict=True)) if missing else {}
        return [self.known.get(t) or found[t] for t in texts]


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


def bank_lessons(texts: list[str], bank: str) -> list[Lesson]:
    return [Lesson.new(bank, KINDS[i % 3], t, tags=["bench"]).model_copy(update={"evidence": 2})  # type: ignore[arg-type]
            for i, t in enumerate(texts)]


def fill(store: Any, lessons: list[Lesson]) -> float:
    started = time.perf_counter()
    for start in range(0, len(lessons), 512):
        store.upsert(lessons[start:start + 512])
    return time.perf_counter() - started


def timed(rounds: int, tasks: list[str], call: Any) -> list[list[float]]:
    samples = []
    for _ in range(rounds):
        per_round = []
        for task in tasks:
            started = time.perf_counter()
            call(task)
            per_round.append((time.perf_counter() - started) * 1000)
        samples.append(per_round)
    return samples


def summary(samples: list[list[float]], digits: int = 2) -> dict[str, Any]:
    return {**latency_stats([x for r in samples for x in r], digits),
            "p50_spread": spread([statistics.median(r) for r in samples], digits)}


def paired(rounds: int, tasks: list[str], baseline: Any, call: Any) -> tuple[list[list[float]], list[list[float]]]:
    """Per task, one baseline embedding and then one ``call``, alternating: (baseline samples, call samples)."""
    embedded: list[list[float]] = []
    called: list[list[float]] = []
    for _ in range(rounds):
        embedded.append([])
        called.append([])
        for task in tasks:
            started = time.perf_counter()
            baseline.embed([task])
            embedded[-1].append((time.perf_counter() - started) * 1000)
            called[-1].append(call(task))
    return embedded, called


def elapsed_ms(call: Any) -> Any:
    def timed_call(task: str) -> float:
        started = time.perf_counter()
        call(task)
        return (time.perf_counter() - started) * 1000
    return timed_call


def agent_path(args: argparse.Namespace, path: Path, redis_url: str, tasks: list[str],
               baseline: FastEmbedEmbedder) -> dict[str, Any]:
    """build_instructions in a separate agent process, through Redis to a separate store-owner process, each call
    paired with one baseline embedding in this process just before it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    owner = subprocess.Popen([sys.executable, "-c", OWNER_SCRIPT, redis_url, str(path), str(embed_model_path()),
                              MODEL_NAME], env=env, stdout=subprocess.PIPE, text=True)
    agent = None
    try:
        assert owner.stdout is not None
        if owner.stdout.readline().strip() != "serving":
            raise SystemExit("the store owner did not start")
        agent = subprocess.Popen([sys.executable, "-c", AGENT_SCRIPT, redis_url, BANK], env=env, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert agent.stdin is not None and agent.stdout is not None
        given = 0

        def ask(task: str) -> dict[str, Any]:
            assert agent is not None and agent.stdin is not None and agent.stdout is not None
            agent.stdin.write(json.dumps(task) + "\n")
            agent.stdin.flush()
            line = agent.stdout.readline()
            if not line:
                raise SystemExit(f"the agent process failed: {agent.stderr.read()[-2000:] if agent.stderr else ''}")
            return dict(json.loads(line))

        if not json.loads(agent.stdout.readline() or "{}").get("ready"):
            raise SystemExit("the agent process did not start")
        ask(tasks[0])  # warm up: connections, first call

        def call(task: str) -> float:
            nonlocal given
            reply = ask(task)
            given += int(reply["given"])
            return float(reply["ms"])

        embedded, samples = paired(args.repeats, tasks, baseline, call)
        out, err = agent.communicate(timeout=60)  # closes its stdin: it prints what it loaded and exits
        if agent.returncode != 0:
            raise SystemExit(f"the agent process failed: {err[-2000:]}")
        return {"samples": samples, "embedding": embedded, "given": given,
                "heavy_modules": json.loads(out.strip().splitlines()[-1])["heavy_modules"]}
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
        owner.terminate()
        owner.wait(60)


def previous_engine(lessons: list[Lesson], embedder: PooledEmbedder, tmp: Path, tasks: list[str],
                    args: argparse.Namespace, settings: Settings) -> tuple[dict[str, Any], list[set[str]]]:
    """build_instructions on qdrant-client's local mode, the embedded engine this store replaced."""
    from qdrant_client import QdrantClient

    from lessonbank.core.store.qdrant import LessonStore

    store = LessonStore(QdrantClient(path=str(tmp / "local-mode")), embedder)
    fill(store, lessons)
    given = [{x.id for x in compose_instructions(store, task, BANK, min_relevance=settings.min_relevance)[1]}
             for task in tasks]
    samples = timed(args.repeats, tasks, lambda task: compose_instructions(
        store, task, BANK, min_relevance=settings.min_relevance))
    store.close()
    return summary(samples), given


def baseline_embedder(model: Path, tmp: Path, threads: int | None) -> FastEmbedEmbedder:
    embedder = FastEmbedEmbedder(MODEL_NAME, model_path=model, cache_dir=tmp / "fastembed", threads=threads,
                                 cache_size=0)
    embedder.embed(["warm up"])
    return embedder


def threads_label(threads: int | str | None) -> str:
    if threads in (None, "default"):
        return "default threads"
    return f"{threads} thread" + ("" if str(threads) == "1" else "s")


def embedding_baseline(model: Path, tmp: Path, tasks: list[str], rounds: int) -> dict[str, Any]:
    """One task embedding alone, with 1 onnxruntime thread and with the default (unpaired; for the record)."""
    by_threads = {}
    for threads in (1, None):
        embedder = baseline_embedder(model, tmp, threads)
        by_threads["1" if threads else "default"] = summary(timed(rounds, tasks, lambda t: embedder.embed([t]))) # noqa: B023
    return by_threads


def measure_size(size: int, args: argparse.Namespace, real: FastEmbedEmbedder, cache: dict[str, list[float]],
                 tmp: Path, redis_url: str) -> dict[str, Any]:
    texts = lesson_texts(size + size // 10 + 50)
    known, really_embedded = vectors_for(texts, real, args.real, args.noise, cache)
    pooled = PooledEmbedder(real, known)
    lessons = bank_lessons(texts[:size], BANK)
    others = bank_lessons(texts[size:size + size // 10], OTHER_BANK)
    doomed = bank_lessons(texts[size + size // 10:], "doomed")
    path = tmp / f"edge-{size}"
    store = EdgeLessonStore(path, pooled)
    load_s = fill(store, lessons + others + doomed)
    store.close()
    settings = Settings(_env_file=None, data_dir=tmp / "data")
    tasks = (TASKS * (args.queries // len(TASKS) + 1))[: args.queries]

    baseline = baseline_embedder(embed_model_path(), tmp, EMBED_THREADS)
    agent = agent_path(args, path, redis_url, tasks, baseline)
    store = EdgeLessonStore(path, pooled)
    given_edge = [{x.id for x in compose_instructions(store, task, BANK, min_relevance=settings.min_relevance)[1]}
                  for task in tasks]
    from lessonbank.block import lessons_block

    in_process_embedding, in_process = paired(args.repeats, tasks, baseline, elapsed_ms(
        lambda t: lessons_block(t, BANK, store=store, settings=settings).text))
    rank_only = timed(args.repeats, tasks, lambda t: store.rank(BANK, t, limit=24, min_similarity=0.2))
    vector = real.embed([tasks[0]])[0]
    import qdrant_edge as qe

    bare = timed(args.repeats, tasks, lambda t: store.shard.query(qe.QueryRequest(
        limit=24, query=qe.Query.Nearest(vector, using="dense"), with_payload=True)))
    started = time.perf_counter()
    deleted = store.delete_bank("doomed")
    delete_s = time.perf_counter() - started
    store.close()
    result: dict[str, Any] = {
        "lessons": size, "other_bank": len(others), "really_embedded": really_embedded,
        "perturbed": size + len(others) + len(doomed) - really_embedded, "load_seconds": round(load_s, 1),
        "agent_path_ms": summary(agent["samples"]), "agent_paired_embedding_ms": summary(agent["embedding"]),
        "agent_heavy_modules": agent["heavy_modules"],
        "lessons_given_per_query": round(agent["given"] / max(args.repeats * len(tasks), 1), 1),
        "in_process_ms": summary(in_process), "in_process_paired_embedding_ms": summary(in_process_embedding),
        "rank_only_ms": summary(rank_only), "bare_query_ms": summary(bare),
        "task_embedding_ms": summary(agent["embedding"] + in_process_embedding),
        "task_embedding_unpaired_ms": embedding_baseline(embed_model_path(), tmp, tasks, args.repeats),
        "delete_bank": {"lessons": deleted, "seconds": round(delete_s, 2)},
    }
    if size <= args.previous_up_to:
        result["previous_engine_ms"], given_local = previous_engine(lessons + others, pooled, tmp / str(size), tasks,
                                                                    args, settings)
        shared = sum(len(a & b) for a, b in zip(given_edge, given_local, strict=True))
        result["same_lessons_as_previous"] = round(shared / max(sum(len(b) for b in given_local), 1), 3)
    return result


def target_of(size: int, embed_p50: float) -> tuple[str, float | None]:
    if size == 10_000:
        return f"<= {EMBED_FACTOR_AT_10K:.0f}x embedding ({EMBED_FACTOR_AT_10K * embed_p50:.1f} ms)", \
            EMBED_FACTOR_AT_10K * embed_p50
    if size == 100_000:
        return f"<= {TARGET_MS_AT_100K:.0f} ms", TARGET_MS_AT_100K
    return "", None


def rows_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for s in result["sizes"]:
        for key, label, pair in (("agent_path_ms", "agent -> Redis -> owner", "agent_paired_embedding_ms"),
                                 ("in_process_ms", "in process", "in_process_paired_embedding_ms")):
            embed = s[pair]["p50"]
            target, limit = target_of(s["lessons"], embed)
            b = s[key]
            sp = b["p50_spread"]
            previous = s.get("previous_engine_ms")
            before = f"; qdrant-client local mode {previous['p50']:.0f}" if previous and key == "in_process_ms" else ""
            figure = f"build_instructions p50/p95 ms, {s['lessons']:,} lessons, {label}"
            value = f"{b['p50']:.1f} / {b['p95']:.1f} (p50 {sp['min']:.1f}-{sp['max']:.1f})"
            out.append(row(figure, value, f"task embedding {embed:.1f} ({threads_label(EMBED_THREADS)}, as the "
                           f"store embeds), paired{before}", round(b["p50"] / embed, 2), target,
                           b["p50"] <= limit if limit is not None else None))
            if s["lessons"] == 10_000:  # the same calls against the fastest embedding of one text, measured apart
                threads, fastest = min(s["task_embedding_unpaired_ms"].items(), key=lambda item: item[1]["p50"])
                target, limit = target_of(s["lessons"], fastest["p50"])
                out.append(row(f"{figure}, against the fastest embedding", value,
                               f"task embedding {fastest['p50']:.1f} ({threads_label(threads)}), unpaired",
                               round(b["p50"] / fastest["p50"], 2), target, b["p50"] <= (limit or 0.0)))
    for s in result["sizes"]:
        deleted = s["delete_bank"]
        total = s["lessons"] + s["other_bank"] + deleted["lessons"]
        out.append(row(f"delete_bank of {deleted['lessons']} lessons in a store of {total:,} (files rewritten)",
                       f"{deleted['seconds']:.2f} s", f"writing the {total:,} lessons {s['load_seconds']:.1f} s",
                       round(deleted["seconds"] / s["load_seconds"], 2) if s["load_seconds"] else None))
    return out


def plot(sizes: list[dict[str, Any]], path: Path) -> Path | None:
    plt = plt_or_none()
    if plt is None:
        return None
    xs = [s["lessons"] for s in sizes]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    lines = [("agent_path_ms", "build_instructions, agent -> Redis -> owner", "o-"),
             ("in_process_ms", "build_instructions, in process", "d-"),
             ("task_embedding_ms", "one task embedding (baseline)", "^:"),
             ("bare_query_ms", "bare engine query, no bank filter", "s--")]
    for key, label, style in lines:
        ax.plot(xs, [s[key]["p50"] for s in sizes], style, label=f"{label}, p50")
        ax.fill_between(xs, [s[key]["p50"] for s in sizes], [s[key]["p95"] for s in sizes], alpha=0.15)
    previous = [s for s in sizes if "previous_engine_ms" in s]
    if previous:
        ax.plot([s["lessons"] for s in previous], [s["previous_engine_ms"]["p50"] for s in previous], "x--",
                color="grey", label="before: qdrant-client local mode, p50")
    for s in sizes:
        _, limit = target_of(s["lessons"], s["task_embedding_ms"]["p50"])
        if limit is not None:
            ax.plot([s["lessons"]], [limit], marker="_", markersize=22, color="red", linestyle="none")
    ax.plot([], [], marker="_", markersize=12, color="red", linestyle="none", label="target")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("lessons in the bank (embedded store)")
    ax.set_ylabel("latency per call (ms; line p50, band to p95)")
    ax.set_title("Instructions latency vs lesson count")
    return save_plot(fig, ax, path)


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="Lesson counts to measure.")
    parser.add_argument("--large", action="store_true", help="Also measure 100k lessons (minutes).")
    parser.add_argument("--queries", type=int, default=10, help="Task queries per round.")
    parser.add_argument("--repeats", type=int, default=3, help="Rounds over the queries.")
    parser.add_argument("--real", type=int, default=1000, help="Lessons embedded with the real model (the pool).")
    parser.add_argument("--noise", type=float, default=0.02, help="Sigma of the perturbation of pooled vectors.")
    parser.add_argument("--previous-up-to", type=int, default=10_000,
                        help="Also measure qdrant-client's local mode up to this many lessons (0: never).")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sizes = sorted(set(args.sizes + ([100_000] if args.large else [])))
    logging.basicConfig(level=logging.ERROR)
    cache: dict[str, list[float]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp) / "redis") as redis_url:
        real = FastEmbedEmbedder(MODEL_NAME, model_path=embed_model_path(), cache_dir=Path(tmp) / "fastembed",
                                 cache_size=0)
        real.embed(lesson_texts(64))
        results = []
        for size in sizes:
            results.append(measure_size(size, args, real, cache, Path(tmp), redis_url))
            s = results[-1]
            print(f"  {size:>7,} lessons: agent path p50 {s['agent_path_ms']['p50']:.1f} ms, in process "
                  f"{s['in_process_ms']['p50']:.1f} ms, embedding {s['task_embedding_ms']['p50']:.1f} ms, "
                  f"load {s['load_seconds']} s, agent loaded {s['agent_heavy_modules'] or 'no heavy module'}",
                  flush=True)
    result: dict[str, Any] = {
        "benchmark": "instructions_latency", "seconds": round(time.perf_counter() - started, 1),
        "vector_note": f"{args.real} lessons embedded with MiniLM; the rest reuse those vectors with Gaussian noise "
                       f"sigma {args.noise} (renormalized). Queries always use the real model, uncached.",
        "sizes": results,
    }
    result["rows"] = rows_of(result)
    write_result("instructions_latency", result, args.out)
    png = plot(results, args.out / "instructions_latency.png")
    result["plot"] = str(png) if png else None
    return result


def main() -> None:
    result = run(sys.argv[1:])
    print(result["vector_note"])
    print_table(result["rows"])


if __name__ == "__main__":
    main()
