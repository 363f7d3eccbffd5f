"""The calls a piece of code makes, read with ``ast``: each call site of a tool with its constant arguments,
where each value came from, and the line it was made in.

Tools are the names a step's code calls that are in the run's tool list, or, without one, the plain names it
calls that are neither Python builtins nor defined by the run's own code so far (``def``, ``class``,
assignment, import, parameter). Code that does not parse calls nothing. Each argument's value is kept when
it is a constant, with where it came from: the task, the output of an earlier step (tool output, an error
message), or a literal of the agent's own.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from typing import Any

from lessonbank.learn.code import BUILTINS
from lessonbank.learn.view import Argument, Call, Source

MAX_OCCURRENCES = 64  # of a value in a text looked at for one standing alone
MAX_LINE = 400
MAX_CODE = 200_000  # characters of a step's code read for its calls


class _Definitions(ast.NodeVisitor):
    """Names a piece of code defines, and its calls of plain names (call sites, in order)."""

    def __init__(self) -> None:
        self.defined: set[str] = set()
        self.called: list[tuple[str, ast.Call]] = []

    def visit_Call(self, node: ast.Call) -> None:  # noqa: N802 (ast's naming)
        if isinstance(node.func, ast.Name):
            self.called.append((node.func.id, node))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:  # noqa: N802
        if isinstance(node.ctx, ast.Store | ast.Del):
            self.defined.add(node.id)

    def visit_arg(self, node: ast.arg) -> None:
        self.defined.add(node.arg)

    def _define(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.defined.add(node.name)
        self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _define  # noqa: N815

    def visit_alias(self, node: ast.alias) -> None:
        self.defined.add(node.asname or node.name.split(".")[0])

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:  # noqa: N802
        if node.name:
            self.defined.add(node.name)
        self.generic_visit(node)


class Sources:
    """Where a value came from: the task, what the run observed before, or the agent itself."""

    def __init__(self, task: str) -> None:
        self.task = task.lower()
        self.seen = ""

    def argument(self, name: str, value: str | None) -> Argument:
        return Argument(name, value, self.of(value))

    def of(self, value: str | None) -> Source:
        if value is None:
            return "unknown"
        text = value.strip().lower()
        if len(text) >= 2 and occurs(text, self.task):
            return "task"
        if text and occurs(text, self.seen):
            return "tool_output"
        return "literal"


def occurs(value: str, text: str) -> bool:
    """Whether ``value`` stands alone in ``text`` (not part of a longer word or number: "3" is not in "503")."""
    at = text.find(value)
    for _ in range(MAX_OCCURRENCES):
        if at < 0:
            return False
        before = text[at - 1] if at else " "
        after = text[at + len(value)] if at + len(value) < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        at = text.find(value, at + 1)
    return False


def constant(node: ast.expr) -> str | None:
    """A constant argument as text (None for anything computed, and for booleans and None)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float) and not isinstance(
            node.value, bool):
        return str(node.value)
    return None


def statement_lines(code: str, tree: ast.Module) -> dict[int, str]:
    """{id of each call node: the one line of code it was made in} (the smallest statement holding it, or its
    first line for a compound statement's header); a call in a statement of several lines gets its first."""
    lines = code.splitlines()
    found: dict[int, str] = {}
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:  # one walk, each node carrying the line of the innermost statement around it
        node, text = stack.pop()
        if isinstance(node, ast.stmt):
            text = lines[node.lineno - 1].strip()[:MAX_LINE] if 0 < node.lineno <= len(lines) else ""
        elif isinstance(node, ast.Call):
            found[id(node)] = text
        stack.extend((child, text) for child in ast.iter_child_nodes(node))
    return found


def code_calls(code: str, tools: Sequence[str] | None, defined: set[str], sources: Sources,
               failed_line: str = "") -> list[Call]:
    """The tool call sites of ``code`` (see the module); adds the names it defines to ``defined``. A call made in
    the line the step failed at (``failed_line``) is marked failed."""
    if len(code) > MAX_CODE:
        return []  # no agent writes a step this long; reading its calls would cost more than they tell
    visitor = _Definitions()
    try:
        tree = ast.parse(code)
        visitor.visit(tree)
        lines = statement_lines(code, tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # code nested deeper than a parser follows
        return []
    defined |= visitor.defined
    known = set(tools) if tools is not None else None
    failing = " ".join(failed_line.split())
    calls = []
    for name, node in visitor.called:
        if (name not in known) if known is not None else (name in BUILTINS or name in defined):
            continue
        arguments = [sources.argument(f"#{index}", constant(arg)) for index, arg in enumerate(node.args, start=1)]
        arguments += [sources.argument(keyword.arg, constant(keyword.value)) for keyword in node.keywords
                      if keyword.arg]
        line = lines.get(id(node), "")
        failed = bool(failing) and bool(line) and (" ".join(line.split()) in failing or failing in line)
        calls.append(Call(name, tuple(arguments), line, failed))
    return calls


def as_line(name: str, arguments: dict[str, Any]) -> str:
    """A tool call written as the one line of Python that makes it: ``fetch_rates(base="USD", day="...")``
    (values as JSON literals, which Python reads too, except ``true``/``false``/``null``)."""
    parts = []
    for key, value in arguments.items():
        try:
            text = repr(value) if isinstance(value, bool) or value is None else json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            text = repr(str(value))
        parts.append(f"{key}={text}" if str(key).isidentifier() else text)
    return f"{name}({', '.join(parts)})"[:MAX_LINE]


def argument_values(name: str, arguments: dict[str, Any], sources: Sources, failed: bool = False) -> Call:
    """A tool call given as a name and its arguments (a ToolCallingAgent's) as a call of the view."""
    kept = [sources.argument(str(key), str(value) if isinstance(value, str | int | float)
                             and not isinstance(value, bool) else None) for key, value in arguments.items()]
    return Call(name, tuple(kept), as_line(name, arguments), failed)
