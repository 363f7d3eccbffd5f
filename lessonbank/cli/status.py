"""``lessonbank status``: workers alive (their LLM and whether it answered), the queue, runs in progress, waiting
for distillation and for a retry, the spool, dead letters, the quality gate's drops, the recorder's counts and
lessons per bank; and what in Redis puts them at risk: keys it may evict, nothing kept on disk, writes it refuses
(full, or a read-only replica: then the runs waiting for distillation wait for it).

Workers are known by the heartbeat each one writes (``lessonbank.workers.observe``); retries by the due
times of their jobs (``lessonbank.workers.jobs``); the recorder's counts by what agent processes under
``remember`` add up. ``--json`` prints all of it as one document.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, cast

import click
import redis

from lessonbank.cli.context import CliContext, fail, pass_cli
from lessonbank.cli.credentials import credentials
from lessonbank.cli.store_access import cli_store
from lessonbank.core.connections import masked_url, redis_text, redis_time
from lessonbank.core.constants import (
    BEAT_LOCK_KEY,
    DEAD_LETTERS_KEY,
    DROPPED_KEY,
    JOBS_DUE_KEY,
    LLM_STATS_KEY,
    OPEN_RUNS_KEY,
    RECORDER_STATS_KEY,
    SUPERSEDED_KEY,
    WAITING_RUNS_KEY,
    WORKERS_KEY,
    job_key,
    worker_key,
)
from lessonbank.core.models import MAX_BANK_CHARS
from lessonbank.core.redis_health import eviction_risk, persistence_risk, writes_refused

MAX_LISTED = 20  # retries listed one by one (all are counted)


def spooled_records(spool_dir: Path) -> tuple[int, int]:
    """(records, files) waiting in the local spool: one record per line of each ``*.jsonl`` file."""
    if not spool_dir.is_dir():
        return 0, 0
    records = files = 0
    for path in sorted(spool_dir.glob("*.jsonl")):
        try:
            with path.open("rb") as f:
                records += sum(1 for line in f if line.strip())
        except OSError:  # rotated or replayed while counting
            continue
        files += 1
    return records, files


def redis_counts(client: redis.Redis, queue: str) -> dict[str, Any]:
    """Queue length, runs in progress, dead letters, runs distilled without the LLM's lessons, the quality gate's
    drops and the recorder's counts."""
    pipe = client.pipeline(transaction=False)
    pipe.llen(queue)
    pipe.zcard(OPEN_RUNS_KEY)
    pipe.hlen(DEAD_LETTERS_KEY)
    pipe.hgetall(DROPPED_KEY)
    pipe.hgetall(RECORDER_STATS_KEY)
    pipe.hget(LLM_STATS_KEY, "unusable")
    pipe.zcard(WAITING_RUNS_KEY)
    pipe.hgetall(SUPERSEDED_KEY)
    queued, open_runs, dead, dropped, recorder, unusable, waiting, superseded = pipe.execute()
    counts = {redis_text(k): int(v) for k, v in recorder.items()}
    return {"queued": int(queued), "runs_in_progress": int(open_runs), "runs_waiting": int(waiting),
            "dead_letters": int(dead),
            "distilled_without_llm_lessons": int(unusable or 0),
            "dropped_by_gate": {redis_text(k): int(v) for k, v in sorted(dropped.items())},
            "superseded": {redis_text(k): int(v) for k, v in sorted(superseded.items())},
            "recorder": {"delivered": counts.get("delivered", 0), "spooled": counts.get("spooled", 0)}}


def workers(client: redis.Redis, now: float) -> list[dict[str, Any]]:
    """Every worker seen in the last day: alive while its heartbeat lasts, with what it reported."""
    seen: list[tuple[bytes, float]] = client.zrange(WORKERS_KEY, 0, -1, withscores=True)  # type: ignore[assignment]
    if not seen:
        return []
    beats = client.mget([worker_key(redis_text(name)) for name, _ in seen])
    found = []
    for (name, last), beat in zip(seen, beats, strict=True):
        info: dict[str, Any] = {}
        if beat is not None:
            try:
                info = json.loads(beat)
            except ValueError:
                info = {}
        found.append({**info, "name": redis_text(name), "alive": beat is not None,
                      "last_seen_s": round(max(now - float(last), 0.0), 1)})
    return sorted(found, key=lambda w: (not w["alive"], w["name"]))


def retries(client: redis.Redis, now: float) -> dict[str, Any]:
    """Jobs waiting for a retry (no holder) with when they are due (``now`` on Redis's clock, which their due
    times are on), and how many are in a worker's hands."""
    due: list[tuple[bytes, float]] = client.zrange(JOBS_DUE_KEY, 0, -1, withscores=True)  # type: ignore[assignment]
    pipe = client.pipeline(transaction=False)
    for job_id, _ in due:
        pipe.hmget(job_key(redis_text(job_id)), ["task", "args", "retries", "holder"])
    waiting, in_hand = [], 0
    for (job_id, at), (task, args, tries, holder) in zip(due, pipe.execute() if due else [], strict=True):
        if task is None:
            continue  # finished meanwhile
        if holder is not None:
            in_hand += 1
            continue
        try:
            values = [str(v) for v in json.loads(args or b"[]")]
        except ValueError:
            values = []
        waiting.append({"job": redis_text(job_id), "task": redis_text(task), "bank": values[0] if values else "",
                        "run_id": values[1] if len(values) > 1 else "", "retries": int(tries or 0),
                        "due_in_s": round(float(at) - now, 1)})
    return {"waiting_for_retry": len(waiting), "retrying": waiting[:MAX_LISTED], "in_hand": in_hand}


def _llm_line(llm: dict[str, Any]) -> str:
    where = f"LLM {llm.get('model', '?')} at {llm.get('base_url', '?')}"
    reachable, status = llm.get("reachable"), llm.get("status")
    if reachable is None:
        return f"{where} (not checked yet)"
    if not reachable:
        return f"{where} did NOT answer its last probe: {llm.get('detail', '')}"
    if status == 200:
        return f"{where} answered its last probe ({llm.get('detail', '')})"
    return f"{where} answered HTTP {status} to its last probe"


def _worker_lines(found: list[dict[str, Any]]) -> list[str]:
    alive = [w for w in found if w["alive"]]
    lines = [f"workers alive: {len(alive)}" + ("" if alive else " (start one: `lessonbank worker`)")]
    for w in found:
        if not w["alive"]:
            lines.append(f"  {w['name']}: gone, last seen {w['last_seen_s']:.0f}s ago")
            continue
        store = {"owner": "serves the embedded store", "server": "Qdrant server"}.get(w.get("store", ""),
                                                                                    "store through the owner")
        extra = f"; metrics {w['metrics']}" if w.get("metrics") else ""
        lines.append(f"  {w['name']} (pid {w.get('pid', '?')}, beat {w['last_seen_s']:.0f}s ago): "
                     f"{_llm_line(w.get('llm') or {})}; {store}{extra}")
    return lines


def _text(report: dict[str, Any]) -> str:
    """The report as text; what Redis and the store hold (bank names, job and run ids, what workers reported)
    is data: printed without control characters, ids capped."""
    from lessonbank.cli.provenance import RUN_ID_CHARS, clean, one_line

    lines = _worker_lines(report["workers"])
    for risk in ("redis_eviction", "redis_persistence"):
        if report.get(risk):
            lines.append(f"warning: {report[risk]}")
    if (report.get("credentials") or {}).get("warning"):
        lines.append(f"warning: {report['credentials']['warning']}")
    if report.get("redis_refuses_writes"):
        lines.append(f"warning: Redis refuses writes ({report['redis_refuses_writes']}): "
                     f"{report['runs_waiting']} run(s) wait for distillation until it takes them again; agents "
                     "spool their records meanwhile")
    lines += [
        f"queue {report['queue']!r}: {report['queued']} task(s) waiting",
        f"runs in progress: {report['runs_in_progress']}",
        f"runs waiting for distillation: {report['runs_waiting']}",
        f"tasks in a worker's hands: {report['in_hand']}",
        f"waiting for a retry: {report['waiting_for_retry']}",
    ]
    for job in report["retrying"]:
        subject = (f"run {one_line(job['run_id'], RUN_ID_CHARS)} (bank {one_line(job['bank'], MAX_BANK_CHARS)})"
                   if job["run_id"] else one_line(job["job"], RUN_ID_CHARS))
        when = f"in {job['due_in_s']:.0f}s" if job["due_in_s"] > 0 else "due now"
        lines.append(f"  {subject}: {job['task']}, retry {job['retries']}, {when}")
    lines += [
        f"spool: {report['spooled']} record(s) in {report['spool_files']} file(s) at {report['spool_dir']}",
        f"dead letters: {report['dead_letters']}",
        f"runs distilled without the LLM's lessons (its reply unusable after a repair; the reason is the run's "
        f"llm_error): {report['distilled_without_llm_lessons']}",
        f"recorder (agent processes): {report['recorder']['delivered']} record(s) delivered, "
        f"{report['recorder']['spooled']} spooled",
    ]
    dropped = report.get("dropped_by_gate") or {}
    if dropped:
        lines.append(f"lessons dropped by the quality gate: {sum(dropped.values())} "
                     f"({', '.join(f'{reason} {n}' for reason, n in dropped.items())})")
    superseded = report.get("superseded") or {}
    if superseded:
        lines.append(f"lessons superseded by another the observations support: {sum(superseded.values())} "
                     f"({', '.join(f'{cause} {n}' for cause, n in superseded.items())})")
    banks = report.get("lessons")
    if banks is None:
        lines.append(f"lessons: unavailable ({report.get('store_error')})")
    elif not banks:
        lines.append("lessons: none yet")
    else:
        lines.append("lessons (active, per bank):")
        lines.extend(f"  {one_line(bank, MAX_BANK_CHARS)}: {count}" for bank, count in sorted(banks.items()))
    held = report.get("held") or {}
    if held:
        lines.append(f"lessons and recipes held for a user (quarantined: `lessonbank lessons list --status quarantined "
                     f"--bank B`): {sum(held.values())}")
        lines.extend(f"  {one_line(bank, MAX_BANK_CHARS)}: {count}" for bank, count in sorted(held.items()))
    return "\n".join(clean(line) for line in lines)


def probe(client: redis.Redis, role: str, host: str) -> tuple[bool, str]:
    """A container's health check, from Redis alone (no Celery started): ``worker``: a worker on ``host`` has a
    current heartbeat; ``beat``: a beat holds the schedule's lock (it is the one sending the schedule)."""
    if role == "beat":
        held = client.exists(BEAT_LOCK_KEY)
        return bool(held), "a beat holds the schedule's lock" if held else "no beat holds the schedule's lock"
    names = [redis_text(name) for name in cast(list[bytes], client.zrange(WORKERS_KEY, 0, -1))]
    ours = [name for name in names if name.rsplit("@", 1)[-1] == host]
    alive = [name for name, beat in zip(ours, client.mget([worker_key(n) for n in ours]) if ours else [],
                                        strict=True) if beat is not None]
    return bool(alive), f"worker {alive[0]} is alive" if alive else f"no worker on {host} has a current heartbeat"


def health_problems(found: list[dict[str, Any]]) -> list[str]:
    """What keeps the service from distilling runs now: no live worker, or no live worker whose LLM answered
    its last probe (the workers probe it at start-up and every ``LLM_PROBE_INTERVAL`` seconds)."""
    alive = [w for w in found if w["alive"]]
    if not alive:
        return ["no live worker (start one: `lessonbank worker`)"]
    if any((w.get("llm") or {}).get("status") == 200 for w in alive):
        return []
    llm = alive[0].get("llm") or {}
    return [f"no live worker's LLM answered: {_llm_line(llm)}"]


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
@click.option("--worker", "role", flag_value="worker", default=None,
              help="Health check: exit 0 if a worker on this host has a current heartbeat, else 1.")
@click.option("--beat", "role", flag_value="beat", help="Health check: exit 0 if a beat sends the schedule, else 1.")
@click.option("--check", is_flag=True,
              help="Exit 1 unless a worker is alive and its LLM answered (a health check for scripts and compose).")
@pass_cli
def status(cli: CliContext, as_json: bool, role: str | None, check: bool) -> None:
    """How the service is doing: workers and their LLM, queue, runs in progress and waiting for a retry,
    spool, dead letters, gate drops, recorder counts, lessons per bank and those held for a user. With --check,
    exits 1 when no worker is alive or no live worker's LLM answered (Redis unreachable exits 1 as well)."""
    settings = cli.settings
    if role is not None:
        try:
            healthy, line = probe(cli.redis(), role, socket.gethostname())
        except redis.RedisError as e:
            raise fail(f"Redis at {masked_url(settings.redis_url)} is unreachable", e) from e
        click.echo(line)
        raise SystemExit(0 if healthy else 1)
    try:
        client = cli.redis()
        now = redis_time(client)  # the clock the heartbeats and the jobs' due times are on
        found = workers(client, now)
        report: dict[str, Any] = {"queue": settings.queue, "workers_alive": sum(1 for w in found if w["alive"]),
                                  "workers": found, **redis_counts(client, settings.queue), **retries(client, now),
                                  "redis_eviction": eviction_risk(client),
                                  "redis_persistence": persistence_risk(client),
                                  "redis_refuses_writes": writes_refused(client),
                                  "credentials": credentials(client, settings)}
    except redis.exceptions.NoPermissionError as e:
        raise fail(f"the Redis user of {masked_url(settings.redis_url)} may not read the service's state (an "
                   "agent's user, which cannot delete banks either): run status with the worker or admin user") from e
    except redis.RedisError as e:
        raise fail(f"Redis at {masked_url(settings.redis_url)} is unreachable", e) from e
    spooled, files = spooled_records(settings.resolved_spool_dir)
    report.update(spooled=spooled, spool_files=files, spool_dir=str(settings.resolved_spool_dir))
    error: click.ClickException | None = None
    try:
        with cli_store(cli) as store:
            report["lessons"] = store.banks()
            report["held"] = store.banks("quarantined")
    except click.ClickException as e:
        error = e
        report["lessons"] = None
        report["held"] = None
        report["store_error"] = e.message
    problems = health_problems(report["workers"]) if check else []
    if check:
        report["check"] = {"ok": not problems, "problems": problems}
    click.echo(json.dumps(report, indent=2) if as_json else _text(report))
    if problems:
        raise fail(f"check failed: {'; '.join(problems)}")
    if error is not None:
        raise error
