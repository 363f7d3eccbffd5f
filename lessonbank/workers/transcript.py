"""A run's step records as a compact text transcript that fits the LLM's input budget.

Each step shows its thought, code or tool calls, observations, error and output; long fields are
cut in the middle (the head says what was tried, the tail how it ended). When the whole run is still
too long, the steps that teach the most are kept: the first one, every step that failed, the step
right after each failure (usually the fix) and the last ones; the others become one omission line.
"""

from __future__ import annotations

from collections.abc import Iterable

from lessonbank.core.models import StepRecord

CUT_MARK = "\n[... {n} chars cut ...]\n"
TAIL_STEPS = 3


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


def _field(label: str, value: str, limit: int) -> str:
    return f"{label}: {cut_middle(value, limit)}" if value and value.strip() else ""


def render_step(record: StepRecord, field_limit: int) -> str:
    """One step as text; each field cut to `field_limit` characters."""
    if record.kind == "planning":
        plan = record.plan or record.model_output
        lines = [f"## Plan (step {record.step_number or record.seq})", _field("Plan", plan, field_limit)]
    elif record.kind == "final":
        lines = ["## Final answer", cut_middle(record.action_output or record.model_output, field_limit)]
    else:
        calls = "; ".join(f"{c.name}({c.arguments})" for c in record.tool_calls)
        lines = [
            f"## Step {record.step_number if record.step_number is not None else record.seq}",
            _field("Thought", record.model_output, field_limit),
            _field("Code", record.code, field_limit),
            _field("Tool calls", calls, field_limit),
            _field("Observation", record.observations, field_limit),
            _field("Error", f"{record.error_type}: {record.error_message}".strip(": ") if record.error_type
                   or record.error_message else "", field_limit),
            _field("Output", record.action_output if not record.is_final else "", field_limit),
        ]
        if record.is_final and record.action_output:
            lines.append(_field("Final answer", record.action_output, field_limit))
    return "\n".join(line for line in lines if line)


def _failed(record: StepRecord) -> bool:
    return bool(record.error_type or record.error_message)


def select_steps(steps: list[StepRecord], tail: int = TAIL_STEPS) -> list[int]:
    """Indices of the steps to keep, most instructive first: first, failures and their fixes, the last ones."""
    order: list[int] = []

    def add(indices: Iterable[int]) -> None:
        for i in indices:
            if 0 <= i < len(steps) and i not in order:
                order.append(i)

    add([0])
    add(range(len(steps) - 1, len(steps) - 1 - tail, -1))
    for i, step in enumerate(steps):
        if _failed(step):
            add([i, i + 1])
    add(range(len(steps)))
    return order


def _header(task: str, outcome: str, budget: int) -> str:
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


def build_transcript(task: str, outcome: str, steps: list[StepRecord], budget: int) -> str:
    """The run as text of at most `budget` characters (run_end records only contribute the outcome)."""
    steps = [s for s in steps if s.kind != "run_end" and s.kind in ("action", "planning", "final")]
    header = _header(task, outcome, budget)
    field_limit = max(budget // 4, 200)
    while True:
        rendered = [render_step(s, field_limit) for s in steps]
        full = _assemble(header, rendered, set(range(len(steps))))
        if len(full) <= budget:
            return full
        if field_limit <= 400:
            break
        field_limit //= 2
    keep: set[int] = set()
    for index in select_steps(steps):
        candidate = keep | {index}
        if len(_assemble(header, rendered, candidate)) > budget:
            continue
        keep = candidate
    return cut_middle(_assemble(header, rendered, keep), budget)
