"""Evidence mined from a run's steps, deterministically, before any LLM sees it.

A small distiller writes far better lessons from a few focused facts than from a raw transcript. Each
piece of evidence names the steps it rests on (record ``seq`` numbers), which become the provenance of
the lessons that cite it:

- ``error_fix``: a step that failed (its code, its error) and the next step that got past it (the lines
  that changed, what it then observed) — the strongest evidence an approach or failure lesson can have;
- ``error``: a failure nothing got past;
- ``shape``: what an observation revealed about the data — JSON keys, pagination fields, a header line
  and its separator, lines about formats, units, counts or pages;
- ``ending``: how the run ended, its final answer, and whether it was judged a success;
- ``contrast``: what a run of a similar task with the opposite verdict did (supplied by the caller).

Everything here is untrusted text the agent observed: it is capped, never interpreted, and the
distiller fences it as data.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field

from lessonbank.learn import walk
from lessonbank.learn.view import RunView, Step

MAX_EVIDENCE = 12
MAX_SHAPES = 5
EXCERPT = 240
SHAPE_WORDS = re.compile(
    r"\b(?:page|pages|next|cursor|offset|limit|total|count|per_page|has_more|cents?|currency|format|expected|"
    r"delimiter|separator|sep|columns?|keys?|encoding|unit|units|timezone|utc|iso)\b",
    re.IGNORECASE,
)
PAGINATION_KEYS = frozenset({"page", "pages", "next", "next_page", "cursor", "next_cursor", "offset", "limit",
                             "total", "total_pages", "per_page", "has_more", "more"})
MAX_FAILING_LINE = 400


@dataclass
class Evidence:
    """One numbered piece of evidence and the steps (record ``seq``) it rests on."""

    id: str
    kind: str
    steps: list[int]
    text: str


@dataclass
class _Miner:
    steps: list[Step]
    found: list[Evidence] = field(default_factory=list)

    def add(self, kind: str, steps: list[int], text: str) -> None:
        if len(self.found) < MAX_EVIDENCE:
            self.found.append(Evidence(f"E{len(self.found) + 1}", kind, sorted(set(steps)), text))


def one_line(text: str, limit: int = EXCERPT) -> str:
    """``text`` on one line, at most ``limit`` characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


RESULT_CHARS = 20_000  # of a step's printed output read for what it got back
_NONEMPTY_LIST = re.compile(r"\[\s*[^\]\s]")
_EMPTY_CONTAINER = re.compile(r"[\[{(]\s*[\]})]")
_KEYED = re.compile(r"\{\s*['\"]")


def result(printed: str) -> str:
    """What a step's printed output (``Step.printed``) shows of the data it got back: ``"data"`` (a list with
    something in it, or a keyed record holding no empty container), ``"empty"`` (containers, every list in them
    empty: ``{'sensor': 'T-7', 'readings': []}``; or a bare ``None``), or ``""`` (nothing printed, plain text:
    unknown)."""
    text = printed[:RESULT_CHARS]
    if _NONEMPTY_LIST.search(text):
        return "data"
    if _EMPTY_CONTAINER.search(text) or text in ("None", "''", '""'):
        return "empty"
    return "data" if _KEYED.search(text) else ""


def call_results(run: RunView) -> list[tuple[str, str]]:
    """(code, what it got back) of each action step: ``"failed"``, or its ``result``."""
    return [(action(step), "failed" if step.failed else result(step.printed)) for step in run.actions]


def action(step: Step) -> str:
    """The code of a step, or its tool calls as ``name(arguments)``."""
    if step.code.strip():
        return step.code
    return "; ".join(f"{call.name}({call.arguments})" for call in step.requests)


def _error(step: Step) -> str:
    return one_line(f"{step.error_type}: {step.error}".strip(": "), 200)


def named_failing_line(step: Step) -> str:
    """The one line the executor says the step failed at ("" when it names none, or a statement of
    several lines)."""
    line = step.failed_line
    return line.strip() if line and "\n" not in line and len(line) <= MAX_FAILING_LINE else ""


def _failing_line(step: Step) -> str:
    named = named_failing_line(step)
    if named:
        return named
    lines = [line for line in step.code.splitlines() if line.strip()]
    return lines[-1] if lines else action(step)


def changed_lines(before: str, after: str, limit: int = 6) -> list[str]:
    """Lines of ``after`` that are new relative to ``before`` (what the fix changed)."""
    old = [line.strip() for line in before.splitlines() if line.strip()]
    new = [line.strip() for line in after.splitlines() if line.strip()]
    added = [line for line in difflib.ndiff(old, new) if line.startswith("+ ")]
    lines = [line[2:] for line in added if not line[2:].startswith(("#", "print("))]
    return lines[:limit] or new[-limit:]


def _error_fixes(miner: _Miner) -> set[int]:
    actions = [s for s in miner.steps if s.action]
    used: set[int] = set()
    for index, step in enumerate(actions):
        if not step.failed:
            continue
        fix = next((later for later in actions[index + 1:] if not later.failed), None)
        where = f"step {step.seq} failed at `{one_line(_failing_line(step), 160)}` with {_error(step)}"
        if fix is None:
            miner.add("error", [step.seq], f"{where}; no later step got past it.")
            continue
        lines = " / ".join(one_line(line, 120) for line in changed_lines(action(step), action(fix)))
        seen = one_line(fix.printed, 160)
        text = f"{where}. Step {fix.seq} then succeeded with: `{lines}`" + (f" and printed: {seen}" if seen else "")
        miner.add("error_fix", [step.seq, fix.seq], text)
        used.update({step.seq, fix.seq})
    return used


def _shape_of(text: str) -> str:
    """What one printed observation reveals about the data's shape ("" when nothing stands out)."""
    data = walk.first_json(text)
    if isinstance(data, dict | list):
        shape = walk.outline(data)
        keys = set(data) if isinstance(data, dict) else set()
        hints = sorted(keys & PAGINATION_KEYS)
        extra = f" (pagination fields: {', '.join(hints)} = " + ", ".join(
            one_line(json.dumps(data[k]), 40) for k in hints) + ")" if hints and isinstance(data, dict) else ""
        return one_line(f"JSON {shape}{extra}")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    notes = []
    if lines and any(lines[0].count(sep) >= 2 for sep in (";", ",", "|", "\t")):
        notes.append(f"header line `{one_line(lines[0], 120)}`")
    notes += [f"`{one_line(line, 140)}`" for line in lines[1:] if SHAPE_WORDS.search(line)][:2]
    return "; ".join(notes)


def _shapes(miner: _Miner) -> None:
    seen: set[str] = set()
    count = 0
    for step in miner.steps:
        if not step.action or step.failed or count >= MAX_SHAPES:
            continue
        shape = _shape_of(step.printed)
        if shape and shape not in seen:
            seen.add(shape)
            count += 1
            miner.add("shape", [step.seq], f"step {step.seq} observed {shape}")


def _ending(miner: _Miner, outcome: str, verdict: str, source: str) -> None:
    final = next((s for s in reversed(miner.steps) if s.kind == "final" or s.is_final), None)
    answer = one_line(final.answer, 120) if final is not None and final.answer else ""
    judged = f"judged {verdict} (by {source})" if verdict != "unknown" else "not judged by anyone"
    steps = [final.seq] if final is not None else []
    text = f"the run ended with recorded outcome {outcome}, {judged}"
    miner.add("ending", steps, text + (f"; final answer: {answer}" if answer else "; no final answer"))


def mine(run: RunView, verdict: str, source: str, contrast: Evidence | None = None) -> list[Evidence]:
    """The evidence of one run, most instructive first (at most ``MAX_EVIDENCE`` pieces)."""
    miner = _Miner([s for s in run.steps if s.kind in ("action", "final")])
    _error_fixes(miner)
    if contrast is not None:
        miner.add(contrast.kind, contrast.steps, contrast.text)
    _shapes(miner)
    _ending(miner, run.outcome, verdict, source)
    return miner.found


def observed_text(run: RunView) -> str:
    """Everything the run wrote or observed (code, tool calls, observations, errors): what a grounded
    lesson may quote."""
    parts: list[str] = []
    for step in run.steps:
        parts += [step.code, step.observation, step.error_message, step.answer]
        parts += [f"{call.name} {call.arguments}" for call in step.requests]
    return "\n".join(part for part in parts if part)
