"""Worker throughput (runs/s) by concurrency, LLM calls per distilled run, prompt tokens by run length.

    python bench/worker_throughput.py [--concurrency 1 2 4] [--runs 8] [--repeats 3] [--latency 0.2]

A real ``celery -A lessonbank.workers worker --pool prefork -c N`` process per concurrency level (fresh data dir),
a real redis-server, the real MiniLM model in the worker, and an HTTP server speaking OpenAI's
protocol that answers every chat completion after a fixed ``--latency`` (200 ms): the distill call
with two lessons per run (drawn from a few topics, so later runs of a bank hit related lessons and the
consolidation decision is asked for), the consolidation call with "add" for each new lesson. Runs are
10 steps (9 actions and a final answer), written to Redis as the recorder lays them out, spread over
``--banks`` banks. Each repeat enqueues ``--runs`` runs at once and times until all are distilled.
The baseline is concurrency 1 in the same run.

Prompt tokens are estimated as characters / 4 of the messages sent. Their growth with run length is
measured on the real transcript builder and distill prompt (no worker needed) for 5 to 320 steps.
Writes bench/results/worker_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import redis
from common import RESULTS, embed_model_path, print_table, ratio, redis_server, row, spread, write_result

from lessonbank.core.models import StepRecord
from lessonbank.core.settings import Settings
from lessonbank.workers.distiller import build_messages
from lessonbank.workers.transcript import build_transcript
from tests.fixtures.celery_worker import CeleryWorker, enqueue, producer, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply
from tests.fixtures.runs import make_steps, run_state, write_run

QUEUE = "lessonbank-bench"
MARK = re.compile(r"job-[0-9a-f]{8}")
TOPICS = [
    ("fact", "The {m} export file is semicolon separated, so read it with pandas.read_csv(path, sep=';')."),
    ("failure", "Calling the {m} billing API without timeout=30 hangs on large date ranges."),
    ("approach", "Paginate the {m} inventory endpoint with its cursor field until it returns no cursor."),
    ("fact", "Timestamps in the {m} orders table are epoch milliseconds; convert with unit='ms'."),
    ("approach", "Read only the needed columns of the {m} parquet file with pyarrow to stay within memory."),
    ("failure", "The {m} SMTP relay rejects attachments above 10 MB; link to the report instead."),
]

# Endings that make a later run's lesson related to, not a duplicate of, an earlier one.
VARIANTS = ["", " This matters for the monthly revenue report.", " Check it on a sample of ten rows first.",
            " It cost two failed attempts before it was noticed.", " The same holds in the staging environment."]


def tokens_of(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content", ""))) for m in messages) // 4


class ScriptedLLM:
    """Answers distill and consolidation requests after a fixed latency and keeps a ledger per run."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body.get("messages", [])
        text = " ".join(str(m.get("content", "")) for m in messages)
        fmt = (body.get("response_format") or {}).get("json_schema", {}).get("name", "")
        marks = MARK.findall(text)
        prompt = tokens_of(messages)
        if fmt == "lesson_decisions" or "New lessons:" in text:
            new = text.split("New lessons:", 1)[-1]
            n = len(re.findall(r"^\d+\. ", new, flags=re.M))
            content = json.dumps({"decisions": [{"new": i, "action": "add", "existing": None, "text": ""}
                                                 for i in range(1, n + 1)]})
            kind, mark = "consolidate", marks[-1] if marks else ""
        else:
            mark = marks[0] if marks else ""
            rng = int(mark[4:], 16) if mark else 0
            picks = [TOPICS[rng % len(TOPICS)], TOPICS[(rng // 7) % len(TOPICS)]]
            lessons = [{"kind": k, "text": t.format(m=mark) + VARIANTS[(rng // 3 + i) % len(VARIANTS)],
                        "tags": ["bench"]} for i, (k, t) in enumerate(picks)]
            content = json.dumps({"outcome": "success", "lessons": lessons})
            kind = "distill"
        with self.lock:
            self.calls.append({"kind": kind, "mark": mark, "prompt_tokens": prompt})
        return Reply(content=content, delay=self.latency, prompt_tokens=prompt, completion_tokens=len(content) // 4)


def ten_step_run(bank: str) -> tuple[str, list[StepRecord]]:
    mark = f"job-{uuid.uuid4().hex[:8]}"
    run_id = uuid.uuid4().hex
    return run_id, make_steps(bank, run_id, f"Sum the sales of {mark} in sales.csv", n_actions=9, error_at=2)


def wait_all(client: redis.Redis, run_ids: list[str], timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        states = Counter(run_state(client, r).get("state", "") for r in run_ids)
        if states["distilled"] + states["dead"] == len(run_ids) or time.monotonic() > deadline:
            return dict(states)
        time.sleep(0.02)


def measure_level(conc: int, args: argparse.Namespace, url: str, llm: FakeOpenAI, tmp: Path) -> dict[str, Any]:
    env = worker_env(url, QUEUE, tmp / f"data-c{conc}", llm.url, embed_model_path(), llm_timeout=10)
    worker = CeleryWorker(env, QUEUE, tmp / f"worker-c{conc}.log", concurrency=conc)
    client = redis.Redis.from_url(url)
    app = producer(url)
    banks = [f"bench-c{conc}-{i}" for i in range(args.banks)]
    rates: list[float] = []
    states: Counter[str] = Counter()
    try:
        started = time.monotonic()
        worker.start()
        start_s = time.monotonic() - started

        def batch(n: int) -> tuple[float, dict[str, int]]:
            runs = [ten_step_run(banks[i % len(banks)]) for i in range(n)]
            for run_id, steps in runs:
                write_run(client, steps[0].bank, task=steps[0].task, run_id=run_id, steps=steps)
            t0 = time.monotonic()
            for run_id, steps in runs:
                enqueue(app, QUEUE, steps[0].bank, run_id)
            done = wait_all(client, [r for r, _ in runs], args.timeout)
            return time.monotonic() - t0, done

        batch(conc)  # warm-up: every pool child builds its clients
        for _ in range(args.repeats):
            seconds, done = batch(args.runs)
            states.update(done)
            rates.append(args.runs / seconds)
    finally:
        worker.stop()
        client.close()
    return {"concurrency": conc, "worker_start_seconds": round(start_s, 1), "runs_per_s": spread(rates, 2),
            "states": dict(states)}


def calls_per_run(calls: list[dict[str, Any]]) -> dict[str, Any]:
    per_run: dict[str, Counter[str]] = {}
    tokens: dict[str, int] = {}
    for call in calls:
        per_run.setdefault(call["mark"], Counter())[call["kind"]] += 1
        tokens[call["mark"]] = tokens.get(call["mark"], 0) + call["prompt_tokens"]
    distill = [c["distill"] for c in per_run.values()]
    consolidate = [c["consolidate"] for c in per_run.values()]
    return {
        "runs": len(per_run),
        "distill_calls": dict(Counter(distill)),
        "consolidation_calls": dict(Counter(consolidate)),
        "max_calls_per_run": max((d + c for d, c in zip(distill, consolidate, strict=True)), default=0),
        "prompt_tokens_per_run_p50": int(statistics.median(tokens.values())) if tokens else 0,
    }


def token_growth(budget: int) -> list[dict[str, Any]]:
    """Estimated prompt tokens of the distill call by run length (the real transcript builder and prompt)."""
    out = []
    for n in (5, 10, 20, 40, 80, 160, 320):
        run_id = uuid.uuid4().hex
        steps = make_steps("bench", run_id, "Sum the sales in sales.csv", n_actions=n - 1, error_at=n // 3)
        for s in steps:  # realistic step sizes: ~600 chars of observation per action
            if s.kind == "action" and s.observations:
                s.observations = (s.observations + " | row data 1;2;3;4 ") * 30
        transcript = build_transcript(steps[0].task, "success", steps, budget)
        raw = sum(len(s.to_json()) for s in steps)
        out.append({"steps": n, "record_chars": raw, "transcript_chars": len(transcript),
                    "prompt_tokens": tokens_of(build_messages(transcript, 5))})
    return out


def rows_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    levels = result["levels"]
    base = levels[0]["runs_per_s"]["median"]
    out = []
    for level in levels:
        r = level["runs_per_s"]
        linear = level["concurrency"] / levels[0]["concurrency"]
        target = f"~{linear:.0f}x (linear)" if level is not levels[0] else ""
        out.append(row(f"worker runs/s, 10-step runs, 200 ms LLM, -c {level['concurrency']}",
                       f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})", f"-c {levels[0]['concurrency']} "
                       f"{base:.2f}", ratio(r["median"], base), target,
                       (r["median"] / base >= 0.75 * linear) if target else None))
    calls = result["llm_calls"]
    out.append(row("LLM calls per distilled run (distill / consolidation)",
                   f"{calls['distill_calls']} / {calls['consolidation_calls']}", "", None,
                   "1 distill + <= 1 consolidation", calls["max_calls_per_run"] <= 2
                   and set(calls["distill_calls"]) == {1}))
    growth = result["prompt_tokens_by_steps"]
    first = next(g for g in growth if g["steps"] == 40)
    last = growth[-1]
    out.append(row(f"distill prompt tokens, {first['steps']} -> {last['steps']} steps",
                   f"{first['prompt_tokens']} -> {last['prompt_tokens']}",
                   f"steps x{last['steps'] / first['steps']:.0f}", ratio(last["prompt_tokens"], first["prompt_tokens"]),
                   "sub-linear past the budget", last["prompt_tokens"] / first["prompt_tokens"]
                   < last["steps"] / first["steps"]))
    return out


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4], help="Worker -c levels.")
    parser.add_argument("--runs", type=int, default=8, help="Runs enqueued at once per repeat.")
    parser.add_argument("--repeats", type=int, default=3, help="Batches per concurrency level.")
    parser.add_argument("--banks", type=int, default=4, help="Banks the runs are spread over.")
    parser.add_argument("--latency", type=float, default=0.2, help="Seconds the fake LLM takes per call.")
    parser.add_argument("--timeout", type=float, default=120.0, help="Seconds a batch may take.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    scripted = ScriptedLLM(args.latency)
    llm = FakeOpenAI().start()
    llm.handler = scripted
    levels = []
    try:
        with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp) / "redis") as url:
            for conc in args.concurrency:
                levels.append(measure_level(conc, args, url, llm, Path(tmp)))
                r = levels[-1]["runs_per_s"]
                print(f"  -c {conc}: {r['median']:.2f} runs/s ({r['min']:.2f}-{r['max']:.2f}), "
                      f"states {levels[-1]['states']}", flush=True)
    finally:
        llm.stop()
    result: dict[str, Any] = {
        "benchmark": "worker_throughput", "seconds": round(time.perf_counter() - started, 1),
        "llm_latency_s": args.latency, "runs_per_batch": args.runs, "banks": args.banks, "levels": levels,
        "llm_calls": calls_per_run(scripted.calls),
        "prompt_tokens_by_steps": token_growth(Settings(_env_file=None).transcript_budget_chars),
        "token_note": "prompt tokens estimated as characters / 4 of the messages",
    }
    result["rows"] = rows_of(result)
    write_result("worker_throughput", result, args.out)
    return result


def main() -> None:
    result = run()
    print(f"LLM calls: {result['llm_calls']}")
    for g in result["prompt_tokens_by_steps"]:
        print(f"  {g['steps']:>4} steps: records {g['record_chars']:>7} chars -> transcript {g['transcript_chars']:>6}"
              f" chars, ~{g['prompt_tokens']} prompt tokens")
    print_table(result["rows"])


if __name__ == "__main__":
    main()
