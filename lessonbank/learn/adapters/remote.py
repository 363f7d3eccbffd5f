"""A CodeAgent step run by a remote executor (smolagents' E2B, Docker, Modal and other kernels): its error is
the kernel's traceback, not the local executor's ``Code execution failed at line '...'``.

What such an executor raises and this reads::

    <what the step printed>
    Executing code yielded an error:
    <exception name>
    <exception value>
    Traceback (most recent call last):
      File "<cell 3>", line 2, in <module>
        total = sum(r["amount"] for r in rows)
    ...

(E2B; a Jupyter kernel sends its traceback alone, with terminal colours and ``Cell In[3], line 2`` frames). The
line the step failed at is the line of the step's code named by the innermost frame that runs the agent's code
(a file named ``<...>`` or a notebook cell), read from the step's own code, never from the traceback's text;
the exception is the name and value after the executor's marker, or the traceback's last line.
"""

from __future__ import annotations

import ast
import re

MARKER = "Executing code yielded an error:"
TRACEBACK = "Traceback (most recent call last)"
MAX_MESSAGE = 20_000
_ANSI = re.compile(r"\x1b\[[0-9;]{0,20}[A-Za-z]")
# a frame of the agent's code: File "<cell 3>", line 2 / File "<string>", line 2 / Cell In[3], line 2
_FRAME = re.compile(r'File "<(?!frozen )[^>\n]{1,80}>", line ([0-9]{1,6})|Cell In ?\[[0-9]{1,6}\], line ([0-9]{1,6})')
_LAST_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_.]{0,80}(?:Error|Exception|Warning|Exit|Interrupt))(?::\s?(.{0,300}))?")


def is_traceback(message: str) -> bool:
    """Whether ``message`` is a remote executor's error (its marker, or a bare traceback)."""
    head = message[:MAX_MESSAGE]
    return MARKER in head or TRACEBACK in _ANSI.sub("", head)


def _clean(message: str) -> str:
    return _ANSI.sub("", message[:MAX_MESSAGE])


def logs(message: str) -> str:
    """What the step printed before it failed (the text before the executor's marker)."""
    return message.partition(MARKER)[0].strip() if MARKER in message else ""


def error_text(message: str) -> str:
    """The exception as ``Name: value``: the name and value after the marker, else the traceback's last line."""
    text = _clean(message)
    if MARKER in text:
        lines = text.partition(MARKER)[2].strip("\n").splitlines()
        if lines and _LAST_LINE.fullmatch(lines[0].strip()):
            value = lines[1].strip() if len(lines) > 1 and not lines[1].startswith(TRACEBACK) else ""
            return f"{lines[0].strip()}: {value}" if value else lines[0].strip()
    for line in reversed(text.strip().splitlines()):
        match = _LAST_LINE.match(line.strip())
        if match:
            return line.strip()
    return text.strip().splitlines()[-1].strip() if text.strip() else ""


def failed_line_number(message: str) -> int | None:
    """The line of the agent's code the innermost frame of the traceback names (None when it names none)."""
    found = None
    for match in _FRAME.finditer(_clean(message)):
        found = int(match.group(1) or match.group(2))
    return found


def failing_line(message: str, code: str) -> str:
    """The line of ``code`` the traceback says the step failed at: the smallest statement holding it, as one
    line ("" when the traceback names no line of the agent's code, or the code does not parse)."""
    number = failed_line_number(message)
    lines = code.splitlines()
    if number is None or not 0 < number <= len(lines):
        return ""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return lines[number - 1].strip()
    best: ast.stmt | None = None
    for node in ast.walk(tree):
        end = getattr(node, "end_lineno", None)
        if isinstance(node, ast.stmt) and end is not None and node.lineno <= number <= end and (
                best is None or node.lineno >= best.lineno):
            best = node
    if best is None or best.lineno != number or (best.end_lineno or number) > number:
        return lines[number - 1].strip()  # a header of a compound statement, or a line inside a longer one
    return (ast.get_source_segment(code, best) or lines[number - 1]).strip()
