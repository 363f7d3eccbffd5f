"""Does memory carry what was learnt about a family's tools to a different question? By family and arm.

    python bench/learning/families_run.py --seed 1 --name families-seed1                 # the planned run
    python bench/learning/families_run.py --families ledger --arms none,memory --runs 3   # a part of it

Six tool families (``families_records.py``, ``families_text.py``), one bank per family and arm, a
different question at every run index (``families.py``). Arms (``family_agents.py``): ``none``,
``memory``, ``memory-nocheck`` on every family; ``memory-late``, ``tca-*`` and ``tb-*`` on the families
:data:`PLAN` gives them (``--everywhere``: on every family). Runs go run index by run index, family by
family within one, every arm of a (family, run index) in a row (same variant, seeds, temperature): a run cut
short has measured every family and arm up to the same run index.

Resumable: every finished run is appended to ``results/<name>.json`` at once, and a run of the same
name starts with the runs it holds (same seed, temperature, step limit and model, or it refuses).
The services' state (Redis with an append-only file, the embedded store) lives in
``results/<name>.work/``, so banks carry on where they were. A run cut short between its agent and its
distillation is done again, and the lessons its first attempt left in the bank stay: every run of an
invocation that carried on a file says ``"resumed": true``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import redis  # noqa: E402
from common import free_port, machine, redis_server  # noqa: E402
from families import HELD_OUT_SEED, TUNING_SEEDS, Family, all_families  # noqa: E402
from family_agents import ARMS, Endpoints, FamilyArm, after_run, run_once  # noqa: E402
from family_report import format_tables, summarize  # noqa: E402
from report import write_json  # noqa: E402
from run import bank_lessons, configure_logging  # noqa: E402
from services import EMBED_MODEL_DIR, QUEUE, WORKER_ENV, llama, worker  # noqa: E402
from tool_server import ToolServer  # noqa: E402

from lessonbank import local_llm  # noqa: E402
from lessonbank.core.settings import Settings  # noqa: E402

logger = logging.getLogger("bench.learning")

RESULTS = HERE / "results"
CORE_ARMS = ("none", "memory", "memory-nocheck")
# Which families the other arms run on: a full run must fit in ~3 hours of an idle 2-core machine.
PLAN: dict[str, tuple[str, ...]] = {
    "memory-late": ("ledger", "traffic"),
    "tca-none": ("tickets", "ledger"), "tca-memory": ("tickets", "ledger"),
    "tb-none": ("exports", "traffic"), "tb-memory": ("exports", "traffic"),
}
SAME_ARGS = ("seed", "temperature", "max_steps", "model", "runs", "lesson_holdout")
SEED_MARK = "seed"  # the work directory's seed: its banks are never carried over to another seed


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = ", ".join(all_families())
    parser.add_argument("--families", default="all", help=f"Comma-separated families, or 'all' ({names}).")
    parser.add_argument("--arms", default="all", help=f"Comma-separated arms, or 'all' ({', '.join(ARMS)}).")
    parser.add_argument("--everywhere", action="store_true", help="Run every chosen arm on every chosen family "
                        "(default: memory-late, tca-* and tb-* only on the families PLAN gives them).")
    parser.add_argument("--runs", type=int, default=5, help="Runs (questions) per family and arm (default 5).")
    parser.add_argument("--seed", type=int, default=TUNING_SEEDS[0],
                        help=f"Variant and sampling seed. Tuning seeds: {TUNING_SEEDS}; held-out: {HELD_OUT_SEED} "
                             "(run once on finished code, never tuned on).")
    parser.add_argument("--model", default="1.5b", help="Local model (lessonbank llm): 0.5b or 1.5b.")
    parser.add_argument("--temperature", type=float, default=0.7, help="Sampling temperature of the agents.")
    parser.add_argument("--max-steps", type=int, default=6, help="The agents' max_steps.")
    parser.add_argument("--n-ctx", type=int, default=8192, help="Context window of the llama.cpp servers.")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of each llama.cpp server.")
    parser.add_argument("--out", type=Path, default=RESULTS, help="Directory of the results and the work directory.")
    parser.add_argument("--name", default="", help="File name stem (default: families-seed<SEED>).")
    args = parser.parse_args(argv)
    families = list(all_families()) if args.families == "all" else [f.strip() for f in args.families.split(",")]
    arms = list(ARMS) if args.arms == "all" else [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := [f for f in families if f not in all_families()]:
        parser.error(f"unknown famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; choose from {names}")
    if not arms or any(a not in ARMS for a in arms):
        parser.error(f"--arms {args.arms!r}: choose from {', '.join(ARMS)}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    args.family_names, args.arm_names = families, arms
    args.name = args.name or f"families-seed{args.seed}"
    return args


def planned(args: argparse.Namespace) -> list[tuple[Family, FamilyArm]]:
    """The (family, arm) pairs this invocation runs."""
    families = all_families()
    return [(families[f], ARMS[a]) for f in args.family_names for a in args.arm_names
            if args.everywhere or a in CORE_ARMS or f in PLAN.get(a, ())]


def run_order(pairs: list[tuple[Family, FamilyArm]], runs: int) -> list[tuple[Family, int, FamilyArm]]:
    return [(family, index, arm) for index in range(runs) for family in dict.fromkeys(f for f, _ in pairs)
            for f, arm in pairs if f is family]


def bank_name(family: Family, arm: FamilyArm) -> str:
    return f"families-{arm.name}-{family.name}"


@contextmanager
def services(args: argparse.Namespace, workdir: Path, memory: bool, tool_calling: bool) -> Iterator[
        tuple[Endpoints, Settings | None]]:
    """The agents' llama.cpp server, the tool-calling one when a ``tca`` arm runs, Redis and a worker with memory."""
    with ExitStack() as stack:
        code_url, alias = stack.enter_context(llama(args.model, workdir, args.n_ctx, args.threads))
        tool_url = ""
        if tool_calling:
            spec = local_llm.model_spec(args.model)
            server = ToolServer(local_llm.model_path(Settings().data_dir, spec), free_port(), n_threads=args.threads,
                                n_ctx=args.n_ctx, alias=spec.alias, log_path=workdir / "tool-server.log")
            stack.enter_context(server)
            tool_url = server.base_url
        endpoints = Endpoints(code_url, tool_url, alias, args.temperature, args.max_steps, seed=args.seed)
        if not memory:
            yield endpoints, None
            return
        redis_url = stack.enter_context(redis_server(workdir / "redis", persistent=True))
        data_dir, qdrant = workdir / "data", workdir / "qdrant"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "OPENAI_"))}
        env.update(WORKER_ENV)
        env.update({
            "LESSONBANK_REDIS_URL": redis_url, "LESSONBANK_QUEUE": QUEUE, "LESSONBANK_DATA_DIR": str(data_dir),
            "LESSONBANK_QDRANT_PATH": str(qdrant), "LESSONBANK_EMBED_MODEL_PATH": str(EMBED_MODEL_DIR),
            "OPENAI_BASE_URL": code_url, "OPENAI_API_KEY": "local", "LESSONBANK_DISTILL_MODEL": alias,
        })
        stack.enter_context(worker(env, workdir / "worker.log"))
        yield endpoints, Settings(redis_url=redis_url, queue=QUEUE, data_dir=data_dir, qdrant_path=qdrant,
                                  embed_model_path=EMBED_MODEL_DIR, store_timeout=120.0, redis_timeout=2.0)


def load_previous(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The results file of an earlier invocation with the same name (refused if it ran other settings)."""
    import json

    if not path.exists():
        return {}
    payload: dict[str, Any] = json.loads(path.read_text())
    before = payload.get("args", {})
    changed = [k for k in SAME_ARGS if k in before and before[k] != getattr(args, k)]
    if changed:
        raise SystemExit(f"{path} was run with other {', '.join(changed)}; use another --name")
    return payload


def claim_workdir(workdir: Path, seed: int) -> None:
    """Mark ``workdir`` as ``seed``'s, or refuse it: the banks of one seed never carry over to another, and the
    held-out seed starts from a work directory of its own (empty, or marked with it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    mark = workdir / SEED_MARK
    if mark.exists():
        found = mark.read_text().strip()
        if found != str(seed):
            raise SystemExit(f"{workdir} holds the banks of seed {found}, not {seed}; use another --name")
        return
    if seed == HELD_OUT_SEED and any(workdir.iterdir()):
        raise SystemExit(f"{workdir} holds banks of an unknown seed; the held-out seed {seed} needs a work directory "
                         "of its own: use another --name")
    mark.write_text(f"{seed}\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging()
    # a SIGTERM unwinds like Ctrl-C: the services stop, and the runs done so far are already written
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    pairs = planned(args)
    if not pairs:
        raise SystemExit("nothing to run: no chosen arm runs on the chosen families (see --everywhere)")
    path = args.out / f"{args.name}.json"
    workdir = args.out / f"{args.name}.work"
    args.lesson_holdout = Settings().lesson_holdout  # LESSONBANK_LESSON_HOLDOUT: lessons withheld from memory arms
    payload = load_previous(path, args)
    claim_workdir(workdir, args.seed)
    payload = payload or {"benchmark": "families", "runs": [], "banks": {}}
    payload.update({"args": {k: getattr(args, k) for k in ("seed", "temperature", "max_steps", "model", "runs",
                                                          "n_ctx", "threads", "lesson_holdout")},
                    "machine": machine(), "held_out_seed": HELD_OUT_SEED, "tuning_seeds": list(TUNING_SEEDS),
                    "families": {f.name: {"trap": f.trap, "hint": f.hint} for f in all_families().values()},
                    "arms": {a.name: a.description for a in ARMS.values()}})
    done = {(r["family"], r["arm"], r["run_index"]) for r in payload["runs"]}
    todo = [(f, i, a) for f, i, a in run_order(pairs, args.runs) if (f.name, a.name, i) not in done]
    logger.info("%d runs to do (%d already in %s); work directory %s; lessons withheld from memory arms: %.0f %%",
                len(todo), len(done), path, workdir, 100 * args.lesson_holdout)
    started = time.time()
    with services(args, workdir, any(a.memory for _, a in pairs), any(a.agent == "tca" for _, a in pairs)) as (
            endpoints, settings):
        client = redis.Redis.from_url(settings.redis_url) if settings else None
        for family, index, arm in todo:
            variant = family.variant(index, args.seed)
            row = run_once(endpoints, arm, family, variant, bank_name(family, arm), settings)
            row["resumed"] = bool(done)
            if arm.memory and client is not None and settings is not None:
                after_run(client, arm, row, settings)
            logger.info("%-8s run %d %-15s %-5s %-12s answer %-14s expected %-10s %d steps %6d tok %5.0f s %s",
                        family.name, index + 1, arm.name, "OK" if row["correct"] else "wrong", variant.kind,
                        row["answer"][:14], variant.answer, row["steps"], row["input_tokens"], row["seconds"],
                        row.get("distill_state", ""))
            payload["runs"].append(row)
            write_json(path, payload)
        banks = sorted({bank_name(f, a) for f, a in pairs if a.memory})
        if settings is not None and banks:
            payload["banks"].update(bank_lessons(settings, banks))
    payload["seconds"] = payload.get("seconds", 0) + round(time.time() - started)
    arms = {a.name: a.baseline for a in ARMS.values() if any(r["arm"] == a.name for r in payload["runs"])}
    payload["summary"] = summarize(payload["runs"], arms)
    write_json(path, payload)
    print(format_tables(payload["summary"]))
    logger.info("results: %s (%.0f min this invocation)", path, (time.time() - started) / 60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
