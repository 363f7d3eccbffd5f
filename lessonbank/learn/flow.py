"""Data flow in a piece of code: which of its calls give values that reach its answer.

A call contributes to the answer when its value flows, through assignments, mutations (``rows.append(x)``),
loops and conditions, into an argument of ``final_answer`` (or of another sink the caller names: what a step
printed is what its model read on the way to an answer it typed). A call whose value nothing reads on the way to the
answer (``delete_all_orders()`` as a statement of its own, ``r = http_post(...)`` with ``r`` unused) does not:
what it did, it did for something other than the task's answer.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterable

from lessonbank.learn import code as pycode

MAX_ROUNDS = 50


ANSWER = frozenset({"final_answer"})
SHOWN = frozenset({"final_answer", "print", "pprint", "display"})


def _sinks(node: ast.AST, sinks: frozenset[str]) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in sinks for n in ast.walk(node))


def _stored(target: ast.AST) -> set[str]:
    """The names an assignment target changes: ``x``, and the ``d`` of ``d['k'] = ...`` or ``o.attr = ...``."""
    names = pycode.names(target, ast.Store)
    node = target
    while isinstance(node, ast.Subscript | ast.Attribute):
        node = node.value
    if isinstance(node, ast.Name):
        names.add(node.id)
    return names


def _header(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions a compound statement evaluates itself (a loop's iterable and target, a test, items)."""
    if isinstance(stmt, ast.For | ast.AsyncFor):
        return [stmt.iter, stmt.target]
    if isinstance(stmt, ast.If | ast.While):
        return [stmt.test]
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return [part for item in stmt.items for part in (item.context_expr, item.optional_vars) if part is not None]
    return []


def _bodies(stmt: ast.stmt) -> list[ast.stmt]:
    found: list[ast.stmt] = []
    for name in ("body", "orelse", "finalbody"):
        found += getattr(stmt, name, None) or []
    for handler in getattr(stmt, "handlers", None) or []:
        found += handler.body
    return found


def _simple(stmt: ast.stmt) -> bool:
    return not _bodies(stmt) and not isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)


def _feeds(stmt: ast.stmt, live: set[str], sinks: frozenset[str]) -> bool:
    """Whether a simple statement gives the answer or changes a name the answer reads (an assignment to it, a
    method call on it)."""
    if isinstance(stmt, ast.Assign):
        return any(_stored(target) & live for target in stmt.targets)
    if isinstance(stmt, ast.AugAssign | ast.AnnAssign):
        return bool(_stored(stmt.target) & live)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        if _sinks(stmt.value, sinks):
            return True
        func = stmt.value.func
        while isinstance(func, ast.Attribute | ast.Subscript):
            func = func.value
        return isinstance(func, ast.Name) and func.id in live and isinstance(stmt.value.func, ast.Attribute)
    return False


def answering_calls(statements: Iterable[ast.stmt], sinks: frozenset[str] = ANSWER,
                    seeds: Collection[int] = ()) -> set[int]:
    """The ``id()`` of the call nodes of ``statements`` whose value reaches an argument of a call of ``sinks``
    (or a statement of ``seeds``, by ``id()``: a step's last expression, which its model is shown)."""
    every = [node for stmt in statements for node in ast.walk(stmt) if isinstance(node, ast.stmt)]
    live: set[str] = set()
    feeding: set[int] = set()
    for stmt in every:
        if id(stmt) in seeds:
            feeding.add(id(stmt))
            live |= pycode.names(stmt, ast.Load)
    for _ in range(MAX_ROUNDS):
        before = (len(live), len(feeding))
        for stmt in every:
            if id(stmt) in feeding:
                continue
            if _simple(stmt):
                if _feeds(stmt, live, sinks):
                    feeding.add(id(stmt))
                    live |= pycode.names(stmt, ast.Load)
                continue
            header = _header(stmt)
            targets = set().union(*(_stored(part) for part in header[1:2])) if isinstance(
                stmt, ast.For | ast.AsyncFor) else set()
            if targets & live or any(id(inner) in feeding for inner in _bodies(stmt)):
                feeding.add(id(stmt))
                live |= set().union(*(pycode.names(part, ast.Load) for part in header)) if header else set()
        if (len(live), len(feeding)) == before:
            break
    calls: set[int] = set()
    for stmt in every:
        if id(stmt) not in feeding:
            continue
        parts: list[ast.AST] = [stmt] if _simple(stmt) else _header(stmt)
        calls |= {id(node) for part in parts for node in ast.walk(part) if isinstance(node, ast.Call)}
    return calls
