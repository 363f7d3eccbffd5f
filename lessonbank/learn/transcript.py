"""A run's step records as a compact text transcript that fits the LLM's input budget.

Each step shows its thought, code or tool calls, observations, error and output. What costs many
tokens and teaches little is shortened first:

- observations and errors are compacted (``compact_output``): a line repeated back to back is kept
  once with a count, a long run of lines of the same shape (a table, a listing) keeps its first rows
  and its last one, a traceback keeps its last frame, and the code interpreter's empty trailer goes;
- the thought of a step that did not fail (and did not follow a failure) is cut to its first sentences;
- long fields are cut in the middle (the head says what was tried, the tail how it ended).

The budget is characters and, optionally, tokens (``estimate_tokens``: tokenizers split digits,
punctuation and rare words finely, so code and tables cost one token per 2-3 characters, prose one
per 4-5). When the whole run is still too long, the steps that teach the most are kept: the first one,
every step that failed, the step right after each failure (usually the fix) and the last ones; the
others become one omission line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable

from lessonbank.learn.view import RunView, Step

CUT_MARK = "\n[... {n} chars cut ...]\n"
REPEAT_MARK = "[the line above repeated {n} more times]"
ROWS_MARK = "[... {n} more rows like these ...]"
FRAMES_MARK = "  [... {n} other frames ...]"
TAIL_STEPS = 3
TABLE_MIN_ROWS = 5
TABLE_HEAD = 2
THOUGHT_CHARS = 160
TRACEBACK = "Traceback (most recent call last):"

# Token estimate: the pieces a byte-level BPE pre-tokenizer (GPT-4's, Qwen2.5's) cuts text into: a word
# with its leading space, one digit, a run of punctuation, a run of whitespace. A word costs one token per
# 6 letters, punctuation one per 2 characters. Against Qwen2.5's tokenizer this overestimates by ~10 %
# (code, tables, prose alike) and never underestimates by more than ~11 % (bench/prompt_tokens.py).
TOKEN_PIECE = re.compile(r" ?[^\W\d_]+|\d| ?[^\w\s]+|_+|\s+")
WORD_CHARS_PER_TOKEN = 6
PUNCT_CHARS_PER_TOKEN = 2
# Evidence and transcript of a run, in estimated tokens. With the distill prompt's instructions (~370
# tokens), its JSON schema (~255) and the task, a 10-step run's prompt stays under 3,000 real tokens.
PROMPT_DATA_TOKENS = 2200
MIN_TRANSCRIPT_TOKENS = 500


def estimate_tokens(text: str) -> int:
    """About how many tokens an LLM tokenizer makes of ``text`` (on the high side)."""
    count = 0
    for piece in TOKEN_PIECE.findall(text):
        core = piece[1:] if len(piece) > 1 and piece[0] == " " else piece
        first = core[0]
        if first.isdigit() or first.isspace():
            count += 1
        elif first.isalpha():
            count += math.ceil(len(core) / WORD_CHARS_PER_TOKEN)
        else:
            count += math.ceil(len(core) / PUNCT_CHARS_PER_TOKEN)
    return count


def transcript_tokens(evidence: Iterable[str]) -> int:
    """Estimated tokens left for the transcript once ``evidence`` (texts) is in the prompt."""
    return max(PROMPT_DATA_TOKENS - sum(estimate_tokens(text) for text in evidence), MIN_TRANSCRIPT_TOKENS)


def cut_middle(text: str, limit: int) -> str:
    """`text` within `limit` characters, keeping its head and tail around a cut mark."""
    text = text.strip()
    if len(text) <= limit:
        return text
    if limit < 40:
        return text[:limit]
    mark_len = len(CUT_MARK.format(n=len(text)))
    keep = max(limit - mark_len, 10)
    head = keep * 2 // 3
    tail = keep - head
    return text[:head] + CUT_MARK.format(n=len(text) - head - tail) + text[len(text) - tail :]


def _shape(line: str) -> str:
    """A line's shape: each run of letters, digits and ``_`` becomes ``a``, each run of whitespace one space."""
    out: list[str] = []
    for char in line.strip():
        kind = "a" if char.isalnum() or char == "_" else " " if char.isspace() else char
        if not out or out[-1] != kind or kind not in "a ":
            out.append(kind)
    return "".join(out)


def _library_frame(frame: list[str]) -> bool:
    line = frame[0]
    return "site-packages" in line or "/lib/python" in line or "<frozen " in line


def _frames(lines: list[str]) -> list[str]:
    """A traceback keeps one frame (the last one in the agent's own code, else the last one) and the exception."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        if lines[i].strip() != TRACEBACK:
            i += 1
            continue
        i += 1
        frames: list[list[str]] = []
        while i < len(lines) and lines[i].startswith("  "):
            if lines[i].lstrip().startswith("File ") or not frames:
                frames.append([])
            frames[-1].append(lines[i])
            i += 1
        own = [frame for frame in frames if not _library_frame(frame)]
        if frames:
            out.extend((own or frames)[-1])
        if len(frames) > 1:
            out.append(FRAMES_MARK.format(n=len(frames) - 1))
    return out


def _repeats(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        j = i + 1
        while j < len(lines) and lines[j] == lines[i]:
            j += 1
        out.append(lines[i])
        if j - i > 1 and lines[i].strip():
            out.append(REPEAT_MARK.format(n=j - i - 1))
        elif j - i > 1:
            out.extend(lines[i + 1 : j])
        i = j
    return out


def _tables(lines: list[str]) -> list[str]:
    out: list[str] = []
    shapes = [_shape(line) for line in lines]
    i = 0
    while i < len(lines):
        j = i + 1
        while j < len(lines) and shapes[j] == shapes[i] and shapes[i]:
            j += 1
        if j - i >= TABLE_MIN_ROWS:
            out.extend(lines[i : i + TABLE_HEAD])
            out.append(ROWS_MARK.format(n=j - i - TABLE_HEAD - 1))
            out.append(lines[j - 1])
        else:
            out.extend(lines[i:j])
        i = j
    return out


def compact_output(text: str) -> str:
    """``text`` (an observation, an error) without the lines that repeat what is already shown."""
    return "\n".join(_tables(_repeats(_frames(text.strip().splitlines())))).strip()


def brief(thought: str, limit: int = THOUGHT_CHARS) -> str:
    """The first sentences of ``thought`` that fit in ``limit`` characters (at least its start)."""
    text = " ".join(thought.split())
    if len(text) <= limit:
        return text
    end = max(text.rfind(". ", 0, limit), text.rfind("? ", 0, limit), text.rfind("! ", 0, limit))
    return text[: end + 1] if end >= limit // 3 else text[:limit].rstrip() + " [...]"


def _field(label: str, value: str, limit: int) -> str:
    return f"{label}: {cut_middle(value, limit)}" if value and value.strip() else ""


def render_step(step: Step, field_limit: int, compact: bool = False, brief_thought: bool = False) -> str:
    """One step as text; each field cut to `field_limit` characters. ``compact``: observations (without the
    executor's empty framing) and errors compacted; ``brief_thought``: the thought cut to its first sentences."""
    shown: Callable[[str], str] = compact_output if compact else str
    if step.kind == "planning":
        plan = step.plan or step.model_output
        lines = [f"## Plan (step {step.number or step.seq})", _field("Plan", plan, field_limit)]
    elif step.kind == "final":
        lines = ["## Final answer", cut_middle(step.answer or step.model_output, field_limit)]
    else:
        calls = "; ".join(f"{c.name}({c.arguments})" for c in step.requests)
        thought = step.thought if compact else step.model_output
        error = f"{step.error_type}: {step.error_message}".strip(": ") if step.failed else ""
        lines = [
            f"## Step {step.number if step.number is not None else step.seq}",
            _field("Thought", brief(thought) if brief_thought else thought, field_limit),
            _field("Code", step.code, field_limit),
            _field("Tool calls", calls, field_limit),
            _field("Observation", compact_output(step.output) if compact else step.observation, field_limit),
            _field("Error", shown(error) if error else "", field_limit),
            _field("Output", step.answer if not step.is_final else "", field_limit),
        ]
        if step.is_final and step.answer:
            lines.append(_field("Final answer", step.answer, field_limit))
    return "\n".join(line for line in lines if line)


def select_steps(steps: list[Step], tail: int = TAIL_STEPS) -> list[int]:
    """Indices of the steps to keep, most instructive first: first, failures and their fixes, the last ones."""
    order: list[int] = []

    def add(indices: Iterable[int]) -> None:
        for i in indices:
            if 0 <= i < len(steps) and i not in order:
                order.append(i)

    add([0])
    add(range(len(steps) - 1, len(steps) - 1 - tail, -1))
    for i, step in enumerate(steps):
        if step.failed:
            add([i, i + 1])
    add(range(len(steps)))
    return order


def _header(task: str, outcome: str, budget: int, repeat_task: bool) -> str:
    if not repeat_task:
        return f"# Recorded outcome: {outcome}"
    return f"# Task\n{cut_middle(task, max(budget // 5, 200))}\n\n# Recorded outcome: {outcome}"


def _assemble(header: str, rendered: list[str], keep: set[int]) -> str:
    parts = [header]
    skipped = 0
    for i, text in enumerate(rendered):
        if i in keep:
            if skipped:
                parts.append(f"[... {skipped} step(s) omitted ...]")
                skipped = 0
            parts.append(text)
        else:
            skipped += 1
    if skipped:
        parts.append(f"[... {skipped} step(s) omitted ...]")
    return "\n\n".join(parts)


def _cut_to(text: str, budget: int, max_tokens: int | None) -> str:
    text = cut_middle(text, budget)
    if max_tokens is not None:
        tokens = estimate_tokens(text)
        while tokens > max_tokens and len(text) > 40:
            text = cut_middle(text, max(int(len(text) * max_tokens / tokens) - 20, 40))
            tokens = estimate_tokens(text)
    return text


def build_transcript(run: RunView, budget: int, max_tokens: int | None = None, compact: bool = True,
                     repeat_task: bool = True) -> str:
    """The run as text of at most `budget` characters and about `max_tokens` tokens (``estimate_tokens``).
    ``compact`` False keeps observations, errors and thoughts whole (within the budget); ``repeat_task`` False
    leaves the task out (the prompt has it)."""
    steps = list(run.steps)
    header = _header(run.task, run.outcome, budget, repeat_task)
    brief_of = [compact and not s.failed for s in steps]

    def fits(text: str) -> bool:
        return len(text) <= budget and (max_tokens is None or estimate_tokens(text) <= max_tokens)

    field_limit = max(budget // 4, 200)
    while True:
        rendered = [render_step(s, field_limit, compact, brief_of[i]) for i, s in enumerate(steps)]
        full = _assemble(header, rendered, set(range(len(steps))))
        if fits(full):
            return full
        if field_limit <= 400:
            break
        field_limit //= 2
    keep: set[int] = set()
    for index in select_steps(steps):
        candidate = keep | {index}
        if not fits(_assemble(header, rendered, candidate)):
            continue
        keep = candidate
    return _cut_to(_assemble(header, rendered, keep), budget, max_tokens)
