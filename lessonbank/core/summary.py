"""Run summaries kept per bank: what ``lessonbank report`` and ``lessonbank tools`` read.

A summary is computed once per finished run (``lessonbank.workers.summaries``: its hash, its step records and
``lessonbank.learn.usage`` for the tools), without an LLM, and kept per bank (``bank_summaries_key`` /
``bank_runs_key``, the newest ``MAX_SUMMARIES`` runs), so reports outlive the run's steps.
"""

from __future__ import annotations

import logging
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import redis
from pydantic import ValidationError

from lessonbank.core.constants import bank_runs_key, bank_summaries_key, run_key
from lessonbank.core.exceptions import ServiceUnavailable
from lessonbank.core.models import RunSummary, Verdict, VerdictSource

logger = logging.getLogger(__name__)

MAX_SUMMARIES = 10_000
# Most trusted first: a verdict is only replaced by one from a source at least as trusted.
VERDICT_TRUST: dict[str, int] = {"user": 4, "check": 3, "signals": 2, "llm": 1, "none": 0}
VERDICT_TRIES = 5  # reads of a summary that keeps changing under a verdict's write


# KEYS: runs zset, summaries hash, the run's hash. ARGV: run id, started_at, summary JSON, how many to keep. A run
# a user forgot keeps no summary (a credit that read the run before it was forgotten may save one after).
_SAVE = """
if redis.call('HEXISTS', KEYS[3], 'forgotten') == 1 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local extra = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[4])
if extra > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[1], 0, extra - 1)) do
    redis.call('HDEL', KEYS[2], old)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, extra - 1)
  return extra
end
return 0
"""


def save_summary(client: redis.Redis, summary: RunSummary, keep: int = MAX_SUMMARIES) -> int:
    """Store (or replace) a run's summary in its bank, keeping the newest ``keep``; returns how many were dropped."""
    keys = [bank_runs_key(summary.bank), bank_summaries_key(summary.bank), run_key(summary.run_id)]
    return int(client.eval(_SAVE, len(keys), *keys, summary.run_id, repr(summary.started_at), summary.to_json(), keep))


def load_summaries(client: redis.Redis, bank: str, since: float | None = None) -> list[RunSummary]:
    """The bank's run summaries that started at or after ``since``, oldest first (malformed ones skipped)."""
    ids = cast(list[bytes], client.zrangebyscore(bank_runs_key(bank), "-inf" if since is None else since, "+inf"))
    if not ids:
        return []
    summaries: list[RunSummary] = []
    for run_id, raw in zip(ids, client.hmget(bank_summaries_key(bank), ids), strict=True):
        if raw is None:
            continue
        try:
            summaries.append(RunSummary.from_json(raw))
        except ValidationError:
            logger.warning("bank %s: skipping malformed summary of run %r", bank, run_id)
    return summaries


def load_summary(client: redis.Redis, bank: str, run_id: str) -> RunSummary | None:
    """The summary of one run of ``bank`` (None when none is kept, or it is malformed)."""
    raw = client.hget(bank_summaries_key(bank), run_id)
    try:
        return RunSummary.from_json(raw) if raw is not None else None
    except ValidationError:
        logger.warning("bank %s: malformed summary of run %r", bank, run_id)
        return None


def remove_summary(client: redis.Redis, bank: str, run_id: str) -> bool:
    """Drop the summary of one run of ``bank`` (its reports count it no more); whether there was one."""
    pipe = client.pipeline(transaction=True)
    pipe.hdel(bank_summaries_key(bank), run_id)
    pipe.zrem(bank_runs_key(bank), run_id)
    removed, _ = pipe.execute()
    return bool(removed)


# KEYS: summaries hash. ARGV: run id, the summary as read, the summary to write: written only over what was read.
_REPLACE = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""


def update_verdict(client: redis.Redis, bank: str, run_id: str, verdict: Verdict, source: VerdictSource) -> bool:
    """Set a stored summary's verdict, unless it came from a more trusted source. True if it was written.

    A summary changed between the read and the write is read again, ``VERDICT_TRIES`` times at most (then
    ServiceUnavailable); a Redis error is raised as it comes, the write never sent again here."""
    key = bank_summaries_key(bank)
    for _ in range(VERDICT_TRIES):
        raw = client.hget(key, run_id)
        if raw is None:
            return False
        summary = RunSummary.from_json(raw)
        if VERDICT_TRUST[source] < VERDICT_TRUST[summary.verdict_source]:
            return False
        updated = summary.model_copy(update={"verdict": verdict, "verdict_source": source}).to_json()
        if client.eval(_REPLACE, 1, key, run_id, raw, updated):
            return True
    raise ServiceUnavailable(f"the summary of run {run_id} of bank {bank} kept changing; its verdict is not written")


@dataclass
class ToolRow:
    """One tool's statistics over many runs of a bank."""

    name: str
    runs: int = 0
    calls: int = 0
    errors: int = 0
    seconds: list[float] = field(default_factory=list, repr=False)
    messages: Counter[str] = field(default_factory=Counter, repr=False)

    @property
    def error_rate(self) -> float:
        return self.errors / self.calls if self.calls else 0.0

    @property
    def p50_s(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    def top_errors(self, limit: int = 3) -> list[tuple[str, int]]:
        return self.messages.most_common(limit)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["seconds"], data["messages"]
        data.update(error_rate=self.error_rate, p50_s=self.p50_s)
        data["top_errors"] = [{"message": m, "count": c} for m, c in self.top_errors()]
        return data


def tool_table(summaries: Iterable[RunSummary]) -> list[ToolRow]:
    """Per-tool statistics summed over runs, most errors first (then most calls, then name)."""
    rows: dict[str, ToolRow] = {}
    for summary in summaries:
        for name, stats in summary.tools.items():
            row = rows.setdefault(name, ToolRow(name))
            row.runs += 1
            row.calls += stats.calls
            row.errors += stats.errors
            row.seconds.extend(stats.seconds)
            row.messages.update(stats.error_messages)
    return sorted(rows.values(), key=lambda r: (-r.errors, -r.calls, r.name))
