"""Worker throughput (runs/s) by concurrency, with the runs over several banks and all on one bank.

    python bench/worker_throughput.py [--concurrency 1 2 4] [--runs 128] [--banks 16] [--repeats 3] [--latency 0.2]

A real ``celery -A lessonbank.workers worker --pool prefork -c N`` process per case (fresh data dir, the
embedded store owned by its main process), a real redis-server, the real MiniLM model, and an HTTP
server speaking OpenAI's protocol that answers every chat completion after a fixed ``--latency``
(200 ms): the distill call with two lessons per run (drawn from a few topics, so later runs of a bank
hit related lessons and the consolidation decision is asked for), the consolidation call with "add"
for each new lesson. Runs are 10 steps (9 actions and a final answer), written to Redis as the
recorder lays them out. Each repeat enqueues ``--runs`` runs at once and times until the last of them was
marked distilled; every case gets the same runs in a repeat (the same lessons from the scripted LLM, so the
same consolidation decisions to ask for), only their ids differ. The fake server sends its replies with
TCP_NODELAY: without it, headers and body as two writes met the client's delayed ACK and every call took
~45 ms more than ``--latency``.
Every case's worker runs from the start (each with its own queue, data dir and Redis database, so each
owns its own store) and the cases' batches alternate, repeat by repeat: the speedup over the baseline is the
median of the repeats' ratios (a batch against the baseline's batch of the same repeat), so a drift of the
machine over the minutes of the run moves both sides of each ratio. The idle workers cost the running one a
little (Celery's polling, the owners' housekeeping), the same for every case.

A batch is 128 runs by default: every batch ends with processes idle while the last runs finish (at -c 4 the
pool is busy ~90 % of a 32-run batch), a cost of the batch's end, not of the worker, that a service under steady
load does not pay; the longer the batch, the less of it. The runs are spread over 16 banks, 8 runs a bank a
batch, so that each bank holds what it held with 32 runs over 4 banks, and runs ask the consolidation decision
as often.

Cases: ``--banks`` banks (runs spread over them) at each concurrency, and one bank at the lowest and
highest concurrency (its consolidations queue for the bank's lock). The baseline is the lowest
concurrency in the same run. Also reported: CPU seconds per run of the worker's main process (Celery's
consumer and the store owner: every store call, every embedding) and of the pool processes, from
/proc, and the LLM calls per distilled run.
Writes bench/results/worker_throughput.json and worker_throughput.png.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import redis
from common import (
    RESULTS,
    embed_model_path,
    plt_or_none,
    print_table,
    redis_server,
    row,
    save_plot,
    spread,
    write_result,
)

from lessonbank.core.constants import run_key
from lessonbank.core.models import StepRecord
from tests.fixtures.celery_worker import CeleryWorker, enqueue, producer, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply
from tests.fixtures.runs import make_steps, write_run

QUEUE = "lessonbank-bench"
MARK = re.compile(r"job-[0-9a-f]{8}-c\d+b\d+")  # the work (its hex) and the case the run is of
TARGET_SPEEDUP = 3.5
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
        if fmt == "lesson_decisions" or "New lessons:" in text:
            new = text.split("New lessons:", 1)[-1]
            n = len(re.findall(r"^\d+\. ", new, flags=re.M))
            content = json.dumps({"decisions": [{"new": i, "action": "add", "existing": None, "text": ""}
                                                 for i in range(1, n + 1)]})
            kind, mark = "consolidate", marks[-1] if marks else ""
        else:
            mark = marks[0] if marks else ""
            rng = int(mark[4:12], 16) if mark else 0
            picks = [TOPICS[rng % len(TOPICS)], TOPICS[(rng // 7) % len(TOPICS)]]
            lessons = [{"kind": k, "text": t.format(m=mark) + VARIANTS[(rng // 3 + i) % len(VARIANTS)],
                        "evidence": ["E1"], "tags": ["bench"]} for i, (k, t) in enumerate(picks)]
            content = json.dumps({"outcome": "success", "lessons": lessons})
            kind = "distill"
        with self.lock:
            self.calls.append({"kind": kind, "mark": mark})
        return Reply(content=content, delay=self.latency, prompt_tokens=len(text) // 4,
                     completion_tokens=len(content) // 4)


def ten_step_run(bank: str, mark: str) -> tuple[str, list[StepRecord]]:
    run_id = uuid.uuid4().hex
    return run_id, make_steps(bank, run_id, f"Sum the sales of {mark} in sales.csv", n_actions=9, error_at=2)


def batch_marks(label: str, n: int, conc: int, banks: int) -> list[str]:
    """The marks of a batch's runs. A mark decides the lessons the scripted LLM answers with (and so which runs
    need a consolidation decision): drawn from the batch's label, every case's batch of a repeat gets the same
    work, run for run; the case's suffix keeps the LLM's ledger per case."""
    return [f"job-{hashlib.sha256(f'{label}-{i}'.encode()).hexdigest()[:8]}-c{conc}b{banks}" for i in range(n)]


def wait_all(client: redis.Redis, run_ids: list[str], timeout: float) -> dict[str, int]:
    """Counts of the runs' states once all are distilled or dead (one pipelined poll every 50 ms, so the
    watching costs the workers' Redis little)."""
    deadline = time.monotonic() + timeout
    while True:
        pipe = client.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hget(run_key(run_id), "state")
        states = Counter((state or b"").decode() for state in pipe.execute())
        if states["distilled"] + states["dead"] == len(run_ids) or time.monotonic() > deadline:
            return dict(states)
        time.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far (/proc/<pid>/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Case:
    """One worker (-c ``conc``, runs over ``banks`` banks) with its own data dir, queue and Redis database, kept
    running while the other cases' batches run, so that the cases' batches can alternate."""

    def __init__(self, conc: int, banks: int, db: int, args: argparse.Namespace, url: str, llm: FakeOpenAI,
                 tmp: Path) -> None:
        self.conc, self.banks, self.args = conc, banks, args
        label = f"c{conc}-b{banks}"
        self.queue = f"{QUEUE}-{label}"
        self.url = f"{url.rsplit('/', 1)[0]}/{db}"  # the store owner's keys are per database: one per worker
        env = worker_env(self.url, self.queue, tmp / f"data-{label}", llm.url, embed_model_path(), llm_timeout=10)
        self.worker = CeleryWorker(env, self.queue, tmp / f"worker-{label}.log", concurrency=conc)
        self.client = redis.Redis.from_url(self.url)
        self.app = producer(self.url)
        self.names = [f"bench-{label}-{i}" for i in range(banks)]
        self.rates: list[float] = []
        self.states: Counter[str] = Counter()
        self.cpu = {"main_process": 0.0, "pool": 0.0}
        self.start_s = 0.0

    def start(self) -> None:
        started = time.monotonic()
        self.worker.start()
        self.start_s = time.monotonic() - started
        self._batch(self.conc, "warm-up")  # every pool child builds its clients

    def batch(self, repeat: int) -> None:
        """One timed batch of ``--runs`` runs, the same for every case in a repeat; the CPU its worker's processes
        spent meanwhile is counted."""
        assert self.worker.process is not None
        main_pid, children = self.worker.process.pid, self.worker.child_pids()
        cpu_main, cpu_pool = cpu_seconds(main_pid), sum(cpu_seconds(p) for p in children)
        seconds, done = self._batch(self.args.runs, f"repeat-{repeat}")
        self.cpu["main_process"] += cpu_seconds(main_pid) - cpu_main
        self.cpu["pool"] += sum(cpu_seconds(p) for p in children) - cpu_pool
        self.states.update(done)
        self.rates.append(self.args.runs / seconds)

    def _batch(self, n: int, label: str) -> tuple[float, dict[str, int]]:
        marks = batch_marks(label, n, self.conc, self.banks)
        runs = [ten_step_run(self.names[i % len(self.names)], marks[i]) for i in range(n)]
        for run_id, steps in runs:
            write_run(self.client, steps[0].bank, task=steps[0].task, run_id=run_id, steps=steps)
        t0 = time.time()
        for run_id, steps in runs:
            enqueue(self.app, self.queue, steps[0].bank, run_id)
        done = wait_all(self.client, [r for r, _ in runs], self.args.timeout)
        polled = time.time()
        # the batch ends when its last run was marked distilled (the worker's clock, this machine's), not at the
        # poll that saw it: 0-50 ms later, a bias a short batch (-c 4) would pay more of than a long one
        pipe = self.client.pipeline(transaction=False)
        for run_id, _ in runs:
            pipe.hget(run_key(run_id), "distilled_at")
        marked = [float(v) for v in pipe.execute() if v]
        end = max(marked) if len(marked) == n else polled
        return end - t0, done

    def stop(self) -> None:
        self.worker.stop()
        self.client.close()

    def result(self) -> dict[str, Any]:
        runs_done = max(self.args.runs * len(self.rates), 1)
        return {"concurrency": self.conc, "banks": self.banks, "worker_start_seconds": round(self.start_s, 1),
                "runs_per_s": spread(self.rates, 2), "rates": [round(r, 3) for r in self.rates],
                "states": dict(self.states),
                "cpu_ms_per_run": {k: round(v / runs_done * 1000, 1) for k, v in self.cpu.items()}}


def paired_speedup(case: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """``case``'s rate over ``base``'s, repeat by repeat (the two batches of a repeat ran minutes apart at most,
    in alternation), and their median: the speedup, with less of the machine's drift than a ratio of medians."""
    per_repeat = [a / b for a, b in zip(case["rates"], base["rates"], strict=True) if b > 0]
    return {"median": round(statistics.median(per_repeat), 2) if per_repeat else 0.0, "repeats": per_repeat}


def calls_per_run(calls: list[dict[str, Any]]) -> dict[str, Any]:
    per_run: dict[str, Counter[str]] = {}
    for call in calls:
        per_run.setdefault(call["mark"], Counter())[call["kind"]] += 1
    distill = [c["distill"] for c in per_run.values()]
    consolidate = [c["consolidate"] for c in per_run.values()]
    return {
        "runs": len(per_run),
        "distill_calls": dict(Counter(distill)),
        "consolidation_calls": dict(Counter(consolidate)),
        "max_calls_per_run": max((d + c for d, c in zip(distill, consolidate, strict=True)), default=0),
    }


def rows_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for banks in sorted({case["banks"] for case in result["cases"]}, reverse=True):
        cases = [case for case in result["cases"] if case["banks"] == banks]
        base = cases[0]
        base_rate = base["runs_per_s"]["median"]
        where = "one bank" if banks == 1 else f"{banks} banks"
        for case in cases:
            r, cpu = case["runs_per_s"], case["cpu_ms_per_run"]
            top = case is cases[-1] and case is not base
            speedup = paired_speedup(case, base)
            repeats = "/".join(f"{x:.2f}" for x in speedup["repeats"])
            out.append(row(f"worker runs/s, {result['runs_per_batch']}-run batches, {where}, -c {case['concurrency']}",
                           f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f}); CPU/run main {cpu['main_process']:.0f}"
                           f" ms, pool {cpu['pool']:.0f} ms", f"-c {base['concurrency']} {base_rate:.2f}"
                           + (f"; paired by repeat {repeats}" if case is not base else ""),
                           speedup["median"], f">= {TARGET_SPEEDUP}x -c {base['concurrency']}"
                           if top and banks > 1 else "", speedup["median"] >= TARGET_SPEEDUP
                           if top and banks > 1 else None))
    calls = result["llm_calls"]
    # The consolidation decision is asked before the bank's lock; under it, only a bank that changed
    # meanwhile (another run of it wrote related lessons) makes the run ask a second time.
    consolidations = {int(k): v for k, v in calls["consolidation_calls"].items()}
    again = sum(v for k, v in consolidations.items() if k >= 2) / max(calls["runs"], 1)
    out.append(row("LLM calls per distilled run (distill / consolidation)",
                   f"{calls['distill_calls']} / {calls['consolidation_calls']}; asked again under the lock "
                   f"{again:.1%}", "", None, "1 distill; 1 consolidation, 2 if the bank changed before the lock",
                   set(calls["distill_calls"]) == {1} and max(consolidations, default=0) <= 2))
    return out


def plot(result: dict[str, Any], path: Path) -> Path | None:
    plt = plt_or_none()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for banks, style in ((max(c["banks"] for c in result["cases"]), "o-"), (1, "s--")):
        cases = [c for c in result["cases"] if c["banks"] == banks]
        if not cases:
            continue
        xs = [c["concurrency"] for c in cases]
        ax.errorbar(xs, [c["runs_per_s"]["median"] for c in cases],
                    yerr=[[c["runs_per_s"]["median"] - c["runs_per_s"]["min"] for c in cases],
                          [c["runs_per_s"]["max"] - c["runs_per_s"]["median"] for c in cases]],
                    fmt=style, capsize=3, label=f"{'one bank' if banks == 1 else f'{banks} banks'} (median, range)")
    spread_cases = [c for c in result["cases"] if c["banks"] > 1]
    if spread_cases:
        base = spread_cases[0]
        xs = [c["concurrency"] for c in spread_cases]
        ax.plot(xs, [base["runs_per_s"]["median"] * x / base["concurrency"] for x in xs], ":", color="grey",
                label="linear in -c (from -c 1)")
        ax.plot([xs[-1]], [base["runs_per_s"]["median"] * TARGET_SPEEDUP], marker="_", markersize=22, color="red",
                linestyle="none", label=f"target: {TARGET_SPEEDUP}x -c 1")
    ax.set_xticks(sorted({c["concurrency"] for c in result["cases"]}))
    ax.set_xlabel("worker concurrency (-c, prefork pool processes)")
    ax.set_ylabel("runs distilled per second")
    ax.set_title(f"Worker throughput, {result['llm_latency_s'] * 1000:.0f} ms scripted LLM, 2 CPUs")
    return save_plot(fig, ax, path)


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4], help="Worker -c levels.")
    parser.add_argument("--runs", type=int, default=128, help="Runs enqueued at once per repeat.")
    parser.add_argument("--repeats", type=int, default=3, help="Batches per case.")
    parser.add_argument("--banks", type=int, default=16, help="Banks the runs are spread over.")
    parser.add_argument("--no-one-bank", action="store_true", help="Skip the one-bank cases.")
    parser.add_argument("--latency", type=float, default=0.2, help="Seconds the fake LLM takes per call.")
    parser.add_argument("--timeout", type=float, default=300.0, help="Seconds a batch may take.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    scripted = ScriptedLLM(args.latency)
    llm = FakeOpenAI().start()
    llm.handler = scripted
    levels = sorted(args.concurrency)
    plan = [(c, args.banks) for c in levels]
    if not args.no_one_bank:
        plan += [(levels[0], 1), (levels[-1], 1)]
    cases: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp) / "redis") as url:
            workers = [Case(conc, banks, db, args, url, llm, Path(tmp)) for db, (conc, banks) in enumerate(plan)]
            try:
                for case in workers:
                    case.start()
                for repeat in range(args.repeats):  # the cases' batches alternate: each repeat sees every case
                    for case in workers:
                        case.batch(repeat)
                        print(f"  repeat {repeat + 1}, -c {case.conc}, {case.banks} bank(s): "
                              f"{case.rates[-1]:.2f} runs/s", flush=True)
            finally:
                for case in workers:
                    case.stop()
            cases = [case.result() for case in workers]
    finally:
        llm.stop()
    result: dict[str, Any] = {
        "benchmark": "worker_throughput", "seconds": round(time.perf_counter() - started, 1),
        "llm_latency_s": args.latency, "runs_per_batch": args.runs, "banks": args.banks, "cases": cases,
        "llm_calls": calls_per_run(scripted.calls),
    }
    result["rows"] = rows_of(result)
    write_result("worker_throughput", result, args.out)
    png = plot(result, args.out / "worker_throughput.png")
    result["plot"] = str(png) if png else None
    return result


def main() -> None:
    result = run(sys.argv[1:])
    print(f"LLM calls: {result['llm_calls']}")
    print_table(result["rows"])


if __name__ == "__main__":
    main()
