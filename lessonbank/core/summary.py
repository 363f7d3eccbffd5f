"""Run summaries and tool statistics: what ``lessonbank report`` and ``lessonbank tools`` read.

A summary is computed once per finished run from its hash and step records, without an LLM, and kept
per bank (``bank_summaries_key`` / ``bank_runs_key``, the newest ``MAX_SUMMARIES`` runs), so reports
outlive the run's steps.

Which tools a step called:

- ToolCallingAgent: the names of the step's tool calls (smolagents keeps them only when they all
  succeed, so a failing call is taken from its ``Error executing tool 'name'`` message).
- CodeAgent: the calls in the step's code (parsed with ``ast``; code that does not parse calls nothing)
  whose function is a plain name in the run's tool list (the run hash's ``tools`` field, a JSON list).
  Without a tool list, every plain-name call that is neither a Python builtin nor defined by the run's
  own code so far (``def``, ``class``, assignment, import, parameter) counts as a tool: tools are the
  names the code calls without defining them. Call sites are counted, not executions (a call in a loop
  counts once).

A failing step's error goes to the tools named in its failing line (``Code execution failed at line
'...'``, ``Error executing tool 'name'``); a failing line that calls no tool is an error of the agent's
own code (``row['amount']`` on a row the tool returned whole) and goes to no tool; an error without a
failing line (a timeout, say) goes to the step's only tool. ``final_answer`` is blamed only when it
raised itself (the failing line names no other tool). Latency: the duration of the steps that
called exactly one tool; error messages are normalised (numbers, quoted strings, ids, paths replaced by
placeholders) and capped.
"""

from __future__ import annotations

import ast
import builtins
import json
import logging
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast, get_args

import redis
from pydantic import ValidationError

from lessonbank.core.constants import bank_runs_key, bank_summaries_key
from lessonbank.core.models import (
    Arm,
    RunOutcome,
    RunSummary,
    StepRecord,
    ToolStats,
    Verdict,
    VerdictSource,
)
from lessonbank.core.runs import Run

logger = logging.getLogger(__name__)

MAX_SUMMARIES = 10_000
MESSAGE_CHARS = 160
MESSAGES_PER_TOOL = 5
FINAL_ANSWER = "final_answer"
# A CodeAgent's own "tool call" carrying its code; the code's calls are what count.
CODE_TOOL = "python_interpreter"
# Most trusted first: a verdict is only replaced by one from a source at least as trusted.
VERDICT_TRUST: dict[str, int] = {"user": 4, "check": 3, "signals": 2, "llm": 1, "none": 0}

_BUILTINS = frozenset(dir(builtins))
_CODE_FAILED = "Code execution failed at line '"
_DUE_TO = "' due to: "
_TOOL_FAILED = "Error executing tool '"
# How a CodeAgent step's observation is framed ("Execution logs:\n...Last output from code snippet:\n...").
LOGS_HEADER = "Execution logs:"
LAST_OUTPUT = "Last output from code snippet:"
# Linear patterns only (no nested or overlapping quantifiers): error messages are untrusted text.
_IDS = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
    r"|\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"
)
_QUOTED = re.compile(r"(?<!\w)'[^'\n]*'|(?<!\w)\"[^\"\n]*\"")
_NUMBER = re.compile(r"(?<!\w)[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
_PATH_CHARS = re.compile(r"[\w.~:/\\-]+")
_EDGE_PUNCTUATION = "()[]{},;:!?"


def _is_path(token: str) -> bool:
    if not ("/" in token or "\\" in token) or not _PATH_CHARS.fullmatch(token):
        return False
    parts = [part for part in re.split(r"[/\\]", token) if part]
    if not parts:
        return False
    rooted = token[0] in "/\\~." or token[1:3] in (":/", ":\\")
    return rooted or len(parts) > 2 or "." in parts[-1].strip(".")


def _replace_paths(text: str) -> str:
    words = []
    for word in text.split():
        core = word.strip(_EDGE_PUNCTUATION)
        words.append(word.replace(core, "<path>", 1) if core and _is_path(core) else word)
    return " ".join(words)


def normalize_error(message: str, cap: int = MESSAGE_CHARS) -> str:
    """``message`` with numbers, quoted strings, hex/uuid ids and paths replaced by placeholders, capped."""
    text = _QUOTED.sub("<str>", _IDS.sub("<id>", message[: cap * 8]))
    text = _NUMBER.sub("<n>", _replace_paths(text)).strip()
    return text if len(text) <= cap else text[: cap - 1] + "…"


def step_failed(step: StepRecord) -> bool:
    """Whether the step ended in an error."""
    return bool(step.error_type or step.error_message)


def failing_line(message: str) -> str:
    """The code smolagents says a step failed at (``Code execution failed at line '...' due to: ``), or ""."""
    if message.startswith(_CODE_FAILED) and _DUE_TO in message:
        return message[len(_CODE_FAILED):].split(_DUE_TO, 1)[0]
    return ""


def logs(observation: str) -> str:
    """What a CodeAgent step printed, without smolagents' framing (or the observation as it is)."""
    return observation.partition(LAST_OUTPUT)[0].replace(LOGS_HEADER, "").strip()


def last_output(observation: str) -> str:
    """The value a CodeAgent step's code ended with, as smolagents showed it ("" when it showed None, or none)."""
    last = observation.partition(LAST_OUTPUT)[2].strip()
    return "" if last == "None" else last


def printed(observation: str) -> str:
    """What a CodeAgent step printed, without smolagents' framing, followed by the value its code ended
    with unless that was None (or the observation as it is)."""
    return f"{logs(observation)}\n{last_output(observation)}".strip()


def error_text(message: str) -> str:
    """The exception part of a smolagents error ("ValueError: ..."), without its wrapper."""
    if message.startswith(_CODE_FAILED) and _DUE_TO in message:
        return message.split(_DUE_TO, 1)[1]
    if message.startswith(_TOOL_FAILED):
        for part in _split_after(message, ": "):
            head = part.split(":", 1)[0]
            if head.isidentifier() and head.endswith(("Error", "Exception")):
                return part.split("\n", 1)[0]
    return message


def _split_after(text: str, separator: str) -> Iterable[str]:
    start = text.find(separator)
    while start != -1:
        yield text[start + len(separator):]
        start = text.find(separator, start + 1)


class _Definitions(ast.NodeVisitor):
    """Names a piece of code defines, and the plain names it calls (call sites, in order)."""

    def __init__(self) -> None:
        self.defined: set[str] = set()
        self.called: list[str] = []

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name):
            self.called.append(node.func.id)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del):
            self.defined.add(node.id)

    def visit_arg(self, node: ast.arg) -> None:
        self.defined.add(node.arg)

    def _define(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.defined.add(node.name)
        self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _define

    def visit_alias(self, node: ast.alias) -> None:
        self.defined.add(node.asname or node.name.split(".")[0])

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.defined.add(node.name)
        self.generic_visit(node)


def code_calls(code: str, tools: Sequence[str] | None, defined: set[str]) -> list[str]:
    """Tool call sites in ``code`` (see the module docstring); adds the names it defines to ``defined``."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    visitor = _Definitions()
    visitor.visit(tree)
    defined |= visitor.defined
    if tools is not None:
        known = set(tools)
        return [name for name in visitor.called if name in known]
    return [name for name in visitor.called if name not in _BUILTINS and name not in defined]


def step_calls(step: StepRecord, tools: Sequence[str] | None, defined: set[str]) -> list[str]:
    """The tool call sites of one step: its tool calls, else the calls in its code."""
    names = [call.name for call in step.tool_calls if call.name and call.name != CODE_TOOL]
    if names:
        return names
    if step.code:
        return code_calls(step.code, tools, defined)
    return []


def failed_tool(message: str) -> str | None:
    """The tool named by a ToolCallingAgent's ``Error executing tool 'name' ...``, else None."""
    if not message.startswith(_TOOL_FAILED):
        return None
    return message[len(_TOOL_FAILED):].split("'", 1)[0] or None


def blamed_tools(step: StepRecord, called: Sequence[str]) -> list[str]:
    """The tools a failing step's error is attributed to (possibly none)."""
    message = step.error_message
    names = sorted(set(called))
    failed = failed_tool(message)
    if failed in names:
        return [failed]
    line = failing_line(message)
    if line:
        named = [n for n in names if re.search(rf"\b{re.escape(n)}\s*\(", line)]
        others = [n for n in named if n != FINAL_ANSWER]
        return others or named  # none named: the agent's own code failed, not a tool
    if len(names) == 1 and names[0] != FINAL_ANSWER:
        return names
    return []


def tool_stats(steps: Iterable[StepRecord], tools: Sequence[str] | None = None) -> dict[str, ToolStats]:
    """Calls, errors, latencies and normalised error messages per tool over one run's steps."""
    stats: dict[str, ToolStats] = {}
    defined: set[str] = set()
    for step in steps:
        if step.kind != "action":
            continue
        called = step_calls(step, tools, defined)
        failed = failed_tool(step.error_message)
        if failed and failed not in called:
            called.append(failed)  # smolagents keeps a step's tool calls only when they all succeed
        for name in called:
            stats.setdefault(name, ToolStats()).calls += 1
        if len(set(called)) == 1 and step.duration is not None:
            stats[called[0]].seconds.append(round(step.duration, 6))
        if not step_failed(step):
            continue
        message = normalize_error(error_text(step.error_message) or step.error_type)
        for name in blamed_tools(step, called):
            entry = stats[name]
            entry.errors += 1
            if len(entry.error_messages) < MESSAGES_PER_TOOL:
                entry.error_messages.append(message)
    return stats


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _choice(value: Any, allowed: Any, default: str) -> Any:
    return value if value in get_args(allowed) else default


def _json_list(value: str | None) -> list[str] | None:
    try:
        loaded = json.loads(value) if value else None
    except ValueError:
        return None
    return [str(item) for item in loaded] if isinstance(loaded, list) else None


def _times(run: Run) -> tuple[float, float]:
    starts = [s.started_at for s in run.steps if s.started_at is not None]
    ends = [t for s in run.steps for t in (s.ended_at, s.recorded_at) if t is not None]
    candidates = [t for t in (_float(run.meta.get("started_at")), min(starts, default=None)) if t is not None]
    started = min(candidates, default=0.0)
    ended = _float(run.meta.get("closed_at")) or max(ends, default=started)
    return started, max(ended, started)


def summarize_run(
    run: Run, applied: Sequence[str] = (), verdict: Verdict | None = None, verdict_source: VerdictSource | None = None
) -> RunSummary:
    """The summary of one run from its hash and step records; ``applied`` comes from the credit code."""
    meta = run.meta
    actions = [s for s in run.steps if s.kind == "action"]
    usage = [s.token_usage for s in run.steps if s.token_usage is not None]
    started, ended = _times(run)
    return RunSummary(
        run_id=run.run_id,
        bank=meta.get("bank") or next((s.bank for s in run.steps), ""),
        task=run.task,
        agent=meta.get("agent") or next((s.agent for s in run.steps if s.agent), ""),
        arm=_choice(meta.get("arm"), Arm, "lessons"),
        outcome=_choice(run.outcome, RunOutcome, "unknown"),
        verdict=verdict or _choice(meta.get("verdict"), Verdict, "unknown"),
        verdict_source=verdict_source or _choice(meta.get("verdict_source"), VerdictSource, "none"),
        started_at=started,
        ended_at=ended,
        wall_s=round(ended - started, 6),
        steps=len(actions),
        errors=sum(1 for s in actions if step_failed(s)),
        input_tokens=sum(u.input_tokens for u in usage),
        output_tokens=sum(u.output_tokens for u in usage),
        given=_json_list(meta.get("given")) or [],
        applied=list(applied),
        tools=tool_stats(run.steps, _json_list(meta.get("tools"))),
    )


# KEYS: runs zset, summaries hash. ARGV: run id, started_at, summary JSON, how many to keep.
_SAVE = """
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
    keys = [bank_runs_key(summary.bank), bank_summaries_key(summary.bank)]
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


def update_verdict(client: redis.Redis, bank: str, run_id: str, verdict: Verdict, source: VerdictSource) -> bool:
    """Set a stored summary's verdict, unless it came from a more trusted source. True if it was written."""
    key = bank_summaries_key(bank)
    written: list[bool] = []

    def apply(pipe: Any) -> None:  # retried by redis-py if the summary changes meanwhile (WATCH)
        written.clear()
        raw = pipe.hget(key, run_id)
        if raw is None:
            return
        summary = RunSummary.from_json(raw)
        if VERDICT_TRUST[source] < VERDICT_TRUST[summary.verdict_source]:
            return
        pipe.multi()
        pipe.hset(key, run_id, summary.model_copy(update={"verdict": verdict, "verdict_source": source}).to_json())
        written.append(True)

    client.transaction(apply, key)
    return bool(written)


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
