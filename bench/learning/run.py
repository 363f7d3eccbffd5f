"""Does run N+1 of a real agent do better with memory? A CodeAgent on the local Qwen2.5-Coder, by arm.

    python bench/learning/run.py --runs-per-task 4 --tasks all --arms none,memory [--model 1.5b] [--quick]

For each task, run 1..N meet variants of the same trap (other ids and values, same trap), in the
same order and with the same sampling seeds in every arm. Arm ``none`` is a plain agent; arm
``memory`` is the same agent given ``lessonbank.remember(agent, bank=<per-task bank>,
check=<the task's checker>)``, and the real worker distills each run with the same model before the
next run of that arm starts; arm ``memory-one-bank`` keeps every task in one bank, as one agent doing
several jobs would, and the runs then go run index by run index across the tasks. Writes
``results/learning.json`` and ``results/learning.png`` (``learning-quick.*`` with ``--quick``);
``--arms none --runs-per-task 5`` measures the unaided rates.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import redis  # noqa: E402
from common import machine  # noqa: E402
from harness import ARMS, AgentConfig, Arm, RunResult, run_once, wait_distilled  # noqa: E402
from report import format_tables, plot, summarize, write_json  # noqa: E402
from services import Services, services  # noqa: E402
from trap_tasks import ALL_TASKS, REWORDINGS, TASKS, TrapTask  # noqa: E402

from lessonbank.core.constants import DEAD_LETTERS_KEY, run_key  # noqa: E402
from lessonbank.core.settings import Settings  # noqa: E402

logger = logging.getLogger("bench.learning")

RESULTS = HERE / "results"
QUICK_TASK = "invoice_cents"
DISTILL_TIMEOUT = 1800.0
RUN_FIELDS = ("state", "outcome", "verdict", "verdict_source", "lessons", "credited", "distill_attempts")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-per-task", type=int, default=4, help="Runs of each task per arm (default 4).")
    extra = ", ".join(n for n in ALL_TASKS if n not in TASKS)
    parser.add_argument("--tasks", default="all",
                        help=f"Comma-separated task names, or 'all' ({', '.join(TASKS)}); also: {extra}.")
    parser.add_argument("--arms", default="none,memory", help=f"Comma-separated arms: {', '.join(ARMS)}.")
    parser.add_argument("--model", default="1.5b", help="Local model (lessonbank llm): 0.5b or 1.5b.")
    parser.add_argument("--quick", action="store_true",
                        help=f"Smoke check: task {QUICK_TASK} only, 2 runs per arm (a few minutes).")
    parser.add_argument("--temperature", type=float, default=0.7, help="Sampling temperature of the agent.")
    parser.add_argument("--max-steps", type=int, default=6, help="The agent's max_steps.")
    parser.add_argument("--n-ctx", type=int, default=8192, help="Context window of the llama.cpp server.")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of the llama.cpp server.")
    parser.add_argument("--seed", type=int, default=0,
                        help="Another set of variants (ids, values) and sampling seeds behind the same traps; "
                             "0, the default, is the set every earlier result used.")
    parser.add_argument("--reworded", action="store_true",
                        help="Ask each run's task in another wording than the run before it (invoice_cents, "
                             "date_format, nested_catalog): recipes come with values to adapt, not put in.")
    parser.add_argument("--out", type=Path, default=RESULTS, help="Directory for the JSON and the plot.")
    parser.add_argument("--name", default="", help="File name stem (default: learning, or learning-quick).")
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.runs_per_task = QUICK_TASK, 2
    names = list(TASKS) if args.tasks == "all" else [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [n for n in names if n not in ALL_TASKS]
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(ALL_TASKS)}")
    plain = [n for n in names if n not in REWORDINGS]
    if args.reworded and plain:
        parser.error(f"--reworded: {', '.join(plain)} has no other wordings; reworded tasks: {', '.join(REWORDINGS)}")
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or any(a not in ARMS for a in arms):
        parser.error(f"--arms {args.arms!r}: choose from {', '.join(ARMS)}")
    if args.runs_per_task < 1:
        parser.error("--runs-per-task must be at least 1")
    args.task_names, args.arm_names = names, arms
    return args


def bank_name(arm: Arm, task: TrapTask) -> str:
    return f"learning-{arm.name}" if arm.one_bank else f"learning-{arm.name}-{task.name}"


def run_order(tasks: list[TrapTask], runs: int, arms: list[Arm]) -> list[tuple[TrapTask, int, Arm]]:
    """(task, run index, arm) in the order they run: task by task, or, when an arm keeps every task in one
    bank, run index by run index, so that its bank holds the lessons of the other tasks' runs before each
    run (a bank per task sees the same runs in either order)."""
    if any(a.one_bank for a in arms):
        return [(t, i, a) for i in range(runs) for t in tasks for a in arms]
    return [(t, i, a) for t in tasks for i in range(runs) for a in arms]


def run_meta(client: redis.Redis, run_id: str) -> dict[str, str]:
    """What lessonbank wrote about the run (state, outcome, verdict, lesson counts, ...)."""
    raw = client.hgetall(run_key(run_id))
    meta = {k.decode(): v.decode(errors="replace") for k, v in raw.items()}
    found = {k: meta[k] for k in RUN_FIELDS if k in meta}
    dead = client.hget(DEAD_LETTERS_KEY, run_id)
    if dead:
        found["dead_letter"] = dead.decode(errors="replace")
    return found


def one_run(
    config: AgentConfig, svc: Services, client: redis.Redis | None, task: TrapTask, index: int, arm: Arm
) -> dict[str, Any]:
    variants = task.variants(seed=config.seed, reworded=config.reworded)
    variant = variants[index % len(variants)]
    result: RunResult = run_once(config, task, variant, arm, index, bank_name(arm, task), svc.settings)
    row = result.to_dict()
    if arm.memory and client is not None:
        if result.run_id:
            result.distill_state, result.distill_seconds = wait_distilled(client, result.run_id, DISTILL_TIMEOUT)
            row = result.to_dict()
            row["lessonbank"] = run_meta(client, result.run_id)
        else:
            row["distill_state"] = "no run id"
    logger.info(
        "%-15s run %d %-8s %-7s answer %-14s expected %-8s %d steps %6d/%4d tok %5.0f s%s", task.name, index + 1,
        arm.name, "OK" if result.correct else "wrong", row["answer"][:14], variant.answer, result.steps,
        result.input_tokens, result.output_tokens, result.seconds,
        f"  distill: {result.distill_state} in {result.distill_seconds:.0f} s" if arm.memory else "",
    )
    return row


def bank_lessons(settings: Settings, banks: list[str]) -> dict[str, Any]:
    """Each bank's lessons, inactive ones included, read through the worker that owns the store."""
    from lessonbank.core.store.remote import connect_store

    out: dict[str, Any] = {}
    store = connect_store(settings)
    try:
        for bank in banks:
            try:
                lessons = [lesson.model_dump(mode="json") for lesson in store.list(bank, 200, True)]
            except Exception as e:  # a store error is reported with the figures, not raised
                out[bank] = {"lessons": [], "retired": 0, "error": f"{type(e).__name__}: {e}"}
                continue
            rows = [{
                "kind": lesson.get("kind"), "status": lesson.get("status"), "origin": lesson.get("origin"),
                "evidence": lesson.get("evidence", 0), "given": lesson.get("given", lesson.get("injected", 0)),
                "applied": lesson.get("applied", 0), "helpful": lesson.get("helpful", 0),
                "harmful": lesson.get("harmful", 0), "recipe": bool(lesson.get("recipe")),
                "status_reason": lesson.get("status_reason", ""), "text": lesson.get("text", ""),
            } for lesson in lessons]
            out[bank] = {"lessons": rows, "retired": sum(1 for r in rows if r["status"] == "retired")}
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()
    return out


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("lessonbank", "smolagents"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for handler in logging.getLogger().handlers:  # httpx and openai log every request at INFO
        handler.addFilter(lambda record: not record.name.startswith(("httpx", "openai")))


def run_all(args: argparse.Namespace, tasks: list[TrapTask], arms: list[Arm], workdir: Path,
            payload: dict[str, Any], partial: Path) -> str:
    """Every (task, run index, arm) in ``run_order``, the banks' lessons at the end; returns the model's name."""
    rows: list[dict[str, Any]] = payload["runs"]
    with services(workdir, args.model, any(a.memory for a in arms), args.n_ctx, args.threads) as svc:
        config = AgentConfig(svc.llm_url, svc.llm_model, temperature=args.temperature, max_steps=args.max_steps,
                             seed=args.seed, reworded=args.reworded)
        client = redis.Redis.from_url(svc.settings.redis_url) if svc.settings else None
        for task, index, arm in run_order(tasks, args.runs_per_task, arms):
            rows.append(one_run(config, svc, client, task, index, arm))
            write_json(partial, payload)
        banks = list(dict.fromkeys(bank_name(a, t) for a in arms if a.memory for t in tasks))
        payload["banks"] = bank_lessons(svc.settings, banks) if svc.settings and banks else {}
        return svc.llm_model


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging()
    tasks = [ALL_TASKS[n] for n in args.task_names]
    arms = [ARMS[a] for a in args.arm_names]
    workdir = Path(tempfile.mkdtemp(prefix="lessonbank-learning-"))
    logger.info("tasks %s, arms %s, %d runs per task; work directory %s", ", ".join(args.task_names),
                ", ".join(args.arm_names), args.runs_per_task, workdir)
    started = time.time()
    stem = args.name or ("learning-quick" if args.quick else "learning")
    payload: dict[str, Any] = {
        "benchmark": "learning", "args": {k: v for k, v in vars(args).items() if k not in ("out", "name")},
        "machine": machine(), "tasks": {t.name: {"trap": t.trap, "hint": t.hint} for t in tasks},
        "arms": {a.name: a.description for a in arms}, "runs": [], "banks": {},
    }
    partial = args.out / f"{stem}.partial.json"
    model = run_all(args, tasks, arms, workdir, payload, partial)
    payload["seconds"] = round(time.time() - started)
    payload["summary"] = summarize(payload["runs"], args.arm_names, args.task_names, args.runs_per_task)
    print(format_tables(payload["summary"], args.arm_names, payload["banks"]))
    write_json(args.out / f"{stem}.json", payload)
    partial.unlink(missing_ok=True)
    title = (f"{model}, {len(tasks)} task(s) x {args.runs_per_task} runs, temperature {args.temperature}, "
             f"max_steps {args.max_steps}" + (", tasks reworded" if args.reworded else ""))
    if plot(payload["summary"], args.arm_names, args.out / f"{stem}.png", title):
        logger.info("plot: %s", args.out / f"{stem}.png")
    logger.info("results: %s (%.0f min); worker log and store in %s", args.out / f"{stem}.json",
                payload["seconds"] / 60, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
