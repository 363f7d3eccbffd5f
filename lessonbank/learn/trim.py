"""What a recipe keeps of a run's code: the steps that did not fail, less what can be dropped safely.

Dropped: ``print``/``display`` calls and bare inspection expressions, assignments nobody reads whose value is
computed without a call, with pure builtins only (``len(...)``), or repeats the same call later or tries it
again with one argument changed or added (``tried_again``), and imports nothing uses (``prune``). What a failed
step ran before its error is kept where later code needs it (``ran_before_failure``). The step that gave the
answer is kept as it ran: a ``try`` that reached ``final_answer`` loses its print-only handlers, and nothing
after the answer is kept (``answering_path``).
"""

from __future__ import annotations

import ast
import copy
from typing import TypeGuard

from lessonbank.learn import code as pycode
from lessonbank.learn.view import Step

MAX_CODE_CHARS = 3000
MAX_TASK_CHARS = 300
PRINTERS = frozenset({"print", "pprint", "display"})
INSPECTORS = frozenset({"head", "tail", "describe", "info", "keys", "values", "items", "sample", "dtypes"})


def printer_call(node: ast.AST) -> TypeGuard[ast.Call]:
    """``print(...)``, ``pprint(...)`` or ``display(...)``."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PRINTERS


def is_inspection(stmt: ast.stmt) -> bool:
    """A statement run only to look at something: ``print(x)``, ``df.head()``, a bare name."""
    if not isinstance(stmt, ast.Expr):
        return False
    value = stmt.value
    if printer_call(value):
        return True
    if isinstance(value, ast.Call):
        return isinstance(value.func, ast.Attribute) and value.func.attr in INSPECTORS and not value.args
    return isinstance(value, ast.Name | ast.Attribute | ast.Subscript | ast.Constant)


def _calls(node: ast.AST) -> list[str]:
    return [ast.dump(n) for n in ast.walk(node) if isinstance(n, ast.Call)]


def answer_calls(statements: list[ast.stmt]) -> list[ast.Call]:
    """Every ``final_answer(...)`` call in ``statements``, nested ones too, in walk order."""
    return [n for stmt in statements for n in ast.walk(stmt)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "final_answer"]


def calls_final_answer(stmt: ast.stmt) -> bool:
    return bool(answer_calls([stmt]))


def tried_again(before: tuple[str, dict[str, object]], after: tuple[str, dict[str, object]]) -> bool:
    """Whether the call ``after`` (a name and its arguments by keyword, ``#N`` by position) is ``before`` tried
    again: the same function, the same arguments but one, changed or added (``limit=100`` after none)."""
    (name, old), (again, new) = before, after
    if name != again or not set(old) <= set(new):
        return False
    return sum(old.get(key) != value for key, value in new.items()) == 1


def _signature(call: ast.Call) -> tuple[str, dict[str, object]] | None:
    if not isinstance(call.func, ast.Name) or any(keyword.arg is None for keyword in call.keywords):
        return None
    arguments: dict[str, object] = {f"#{at}": ast.dump(arg) for at, arg in enumerate(call.args, start=1)}
    arguments.update({str(keyword.arg): ast.dump(keyword.value) for keyword in call.keywords})
    return call.func.id, arguments


def _repeated(call: ast.Call, later_calls: set[str], later: list[tuple[str, dict[str, object]]]) -> bool:
    """The same call made later, or the same call tried again later with one argument changed or added."""
    if ast.dump(call) in later_calls:
        return True
    mine = _signature(call)
    return mine is not None and any(tried_again(mine, other) for other in later)


def _droppable_assignment(stmt: ast.stmt, live: set[str], later_calls: set[str],
                          later: list[tuple[str, dict[str, object]]]) -> bool:
    """An assignment to names nobody reads later, whose value has no call, or only pure ones (``len(...)``),
    or repeats a later call, or one tried again later with one argument changed or added (its result was not
    what the run went on with)."""
    if not isinstance(stmt, ast.Assign | ast.AnnAssign):
        return False
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    if not all(isinstance(t, ast.Name) for t in targets) or any(t.id in live for t in targets):  # type: ignore[attr-defined]
        return False
    if stmt.value is None or pycode.reads(stmt.value) is not None:
        return True
    return all(_repeated(call, later_calls, later) for call in ast.walk(stmt.value) if isinstance(call, ast.Call))


def _needed(stmt: ast.stmt, live: set[str]) -> bool:
    """Whether ``stmt`` sets a name in ``live``, or (not an assignment: ``rows.extend(...)``, a loop) uses
    one as data: calling a function that later code also calls does not make a statement needed."""
    if pycode.names(stmt, ast.Store) & live:
        return True
    if isinstance(stmt, ast.Assign | ast.AnnAssign):
        return False
    called = {n.func.id for n in ast.walk(stmt) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return bool((pycode.names(stmt, ast.Load) - called) & live)


def prune(statements: list[ast.stmt], optional: frozenset[int] = frozenset()) -> list[ast.stmt]:
    """Drop inspection, dead assignments and unused imports (a backward pass over the statements).

    ``optional``: the ``id()`` of statements kept only when later code needs them (what a failed step ran
    before its error): one that neither sets nor uses a name the code after it reads is dropped, call or not.
    """
    statements = [s for s in statements if not is_inspection(s)]
    kept: list[ast.stmt] = []
    live: set[str] = set()
    later_calls: set[str] = set()
    later: list[tuple[str, dict[str, object]]] = []
    for stmt in reversed(statements):
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            kept.append(stmt)
            continue
        if id(stmt) in optional and not _needed(stmt, live):
            continue
        if not calls_final_answer(stmt) and _droppable_assignment(stmt, live, later_calls, later):
            continue
        kept.append(stmt)
        live -= pycode.names(stmt, ast.Store) if isinstance(stmt, ast.Assign | ast.AnnAssign) else set()
        live |= pycode.names(stmt, ast.Load)
        later_calls.update(_calls(stmt))
        later += [found for node in ast.walk(stmt) if isinstance(node, ast.Call) and (found := _signature(node))]
    kept.reverse()
    used = set().union(*(pycode.names(s, ast.Load) for s in kept)) if kept else set()
    return _imported_once([s for s in kept if not isinstance(s, ast.Import | ast.ImportFrom) or _import_used(s, used)])


def _imported_once(statements: list[ast.stmt]) -> list[ast.stmt]:
    """Each import once: a step that failed and the step that redid its work both import ``csv``."""
    seen: set[tuple[str | int | None, ...]] = set()
    out: list[ast.stmt] = []
    for stmt in statements:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            source = ("from", stmt.module, stmt.level) if isinstance(stmt, ast.ImportFrom) else ("import",)
            fresh = [alias for alias in stmt.names if (*source, alias.name, alias.asname) not in seen]
            seen.update((*source, alias.name, alias.asname) for alias in fresh)
            if not fresh:
                continue
            if len(fresh) < len(stmt.names):
                stmt = copy.copy(stmt)
                stmt.names = fresh
        out.append(stmt)
    return out


def _import_used(stmt: ast.Import | ast.ImportFrom, used: set[str]) -> bool:
    return any((alias.asname or alias.name.split(".")[0]) in used for alias in stmt.names)


def ran_before_failure(step: Step) -> list[ast.stmt]:
    """The top-level statements a failed step ran before the one smolagents says it failed at (``Code
    execution failed at line '<statement>'``): what they set is still there for the next step
    (``result = get_user(...)`` before a ``print(result['email'])`` that raised). Empty when the
    error names no statement of the code."""
    named = step.failed_line
    parsed = pycode.parse(step.code) if named else None
    if not parsed:
        return []
    for index, stmt in enumerate(parsed):
        if ast.get_source_segment(step.code, stmt) == named:
            return parsed[:index]
    return []


def _final_answer_call(stmt: ast.stmt) -> bool:
    """``final_answer(...)`` as a statement of its own: the code after it does not run."""
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id == "final_answer")


def _only_reports(handler: ast.ExceptHandler, answer: str) -> bool:
    """A handler that only prints, passes, raises or answers a constant other than the run's answer."""
    return all(_constant_answer(stmt, answer) if _final_answer_call(stmt) else
               isinstance(stmt, ast.Pass | ast.Raise) or is_inspection(stmt) for stmt in handler.body)


def answering_path(statements: list[ast.stmt], answer: str) -> list[ast.stmt]:
    """The statements of the step that gave the run's answer, as they ran: a ``try`` whose body ends with
    ``final_answer(...)`` and whose handlers only report (print, pass, answer another constant) ran its
    body to the answer, so the body replaces it; nothing after the answer ran. Anything else is kept."""
    out: list[ast.stmt] = []
    for index, stmt in enumerate(statements):
        if (answer and isinstance(stmt, ast.Try) and not stmt.orelse and not stmt.finalbody and stmt.body
                and _final_answer_call(stmt.body[-1]) and all(_only_reports(h, answer) for h in stmt.handlers)
                and not any(_may_answer(later, answer) for later in statements[index + 1:])):
            out.extend(stmt.body)
        else:
            out.append(stmt)
        if _final_answer_call(out[-1]):
            break
    return out


def _may_answer(stmt: ast.stmt, answer: str) -> bool:
    """Whether ``stmt`` could have given the run's answer: it calls ``final_answer`` anywhere in it (``if x:
    final_answer(y)`` too), unless it is ``final_answer`` of another constant."""
    return calls_final_answer(stmt) and not (_final_answer_call(stmt) and _constant_answer(stmt, answer))


def _constant_answer(stmt: ast.stmt, answer: str) -> bool:
    """``final_answer(<constant>)`` (a statement of its own) of a constant other than the run's answer: it did
    not give the answer."""
    args = stmt.value.args  # type: ignore[attr-defined]
    return len(args) == 1 and isinstance(args[0], ast.Constant) and str(args[0].value).strip() != answer
