"""How a run used its tools: calls, errors, latencies and normalised error messages per tool, from its view.

What ``lessonbank report`` and ``lessonbank tools`` show. A failing step's error goes to the tools named in its
failing line (or the tool its error names); a failing line that calls no tool is an error of the agent's own
code (``row['amount']`` on a row the tool returned whole) and goes to no tool; an error without a failing line
(a timeout, say) goes to the step's only tool. ``final_answer`` is blamed only when it raised itself (the
failing line names no other tool). Latency: the duration of the steps that called exactly one tool; error
messages are normalised (numbers, quoted strings, ids, paths replaced by placeholders) and capped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lessonbank.core.models import ToolStats
from lessonbank.learn.view import RunView, Step

MESSAGE_CHARS = 160
MESSAGES_PER_TOOL = 5
FINAL_ANSWER = "final_answer"
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


def blamed_tools(step: Step, called: Sequence[str]) -> list[str]:
    """The tools a failing step's error is attributed to (possibly none)."""
    names = sorted(set(called))
    if step.failed_tool in names:
        return [step.failed_tool]
    line = step.failed_line
    if line:
        named = [n for n in names if re.search(rf"\b{re.escape(n)}\s*\(", line)]
        others = [n for n in named if n != FINAL_ANSWER]
        return others or named  # none named: the agent's own code failed, not a tool
    if len(names) == 1 and names[0] != FINAL_ANSWER:
        return names
    return []


def tool_stats(run: RunView) -> dict[str, ToolStats]:
    """Calls, errors, latencies and normalised error messages per tool over one run."""
    stats: dict[str, ToolStats] = {}
    for step in run.actions:
        called = [call.tool for call in step.calls]
        failed = step.failed_tool
        if failed and failed not in called:
            called.append(failed)  # a ToolCallingAgent's step keeps its tool calls only when they all succeed
        for name in called:
            stats.setdefault(name, ToolStats()).calls += 1
        if len(set(called)) == 1 and step.duration is not None:
            stats[called[0]].seconds.append(round(step.duration, 6))
        if not step.failed:
            continue
        message = normalize_error(step.error or step.error_type)
        for name in blamed_tools(step, called):
            entry = stats[name]
            entry.errors += 1
            if len(entry.error_messages) < MESSAGES_PER_TOOL:
                entry.error_messages.append(message)
    return stats
