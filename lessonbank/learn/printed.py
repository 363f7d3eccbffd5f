"""Which tool's result a step printed: the printed name's last binding before the print, read from the code's
syntax tree, so that what a step printed of a tool's result can be read as that result (``shapes``, ``types_claims``).

A printed name is the result of the tool whose direct call it was last bound to before the print (``x = a(); x =
b(); print(x)``: ``b``). Bound since to anything else, part of the result included (``rows = [r for r in rows if
...]``, ``r = r["items"]``), it shows no tool's result as it came back: no tool is named for it, and a reader that
needs the result's structure takes it from the recorder's specimen, which keeps it whole.
"""

from __future__ import annotations

import ast

from lessonbank.learn.code import BUILTINS

SKIPPED = frozenset({"final_answer"})
_SCOPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)  # their names stay inside


def _nodes(node: ast.AST) -> list[ast.AST]:
    """``node`` and what is under it, less what a comprehension or a lambda binds for itself."""
    found, todo = [], [node]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(child for child in ast.iter_child_nodes(current) if not isinstance(child, _SCOPES))
    return found


def _bindings(tree: ast.Module, tools: set[str]) -> list[tuple[tuple[int, int], str, str | None]]:
    """(where it takes effect, name, the tool whose result it holds or None) of every binding of a name in
    ``tree``: ``r = search(...)`` holds ``search``'s result from the end of its line; any other binding
    (``r = r["items"]``, ``for r in ...``, ``r += ...``, ``del r``) holds none."""
    found: list[tuple[tuple[int, int], str, str | None]] = []
    assigned: set[int] = set()
    for node in _nodes(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            tool = value.func.id if len(targets) == 1 and isinstance(value, ast.Call) and isinstance(
                value.func, ast.Name) and is_tool(value.func.id, tools) else None
            end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
            for target in targets:
                for name in (n for n in _nodes(target) if isinstance(n, ast.Name)):
                    found.append((end, name.id, tool if name is target else None))
                    assigned.add(id(name))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del) and id(node) not in assigned:
            found.append(((node.end_lineno or node.lineno, node.end_col_offset or 0), node.id, None))
    return sorted(found, key=lambda binding: binding[0])


def _held(bindings: list[tuple[tuple[int, int], str, str | None]], at: tuple[int, int]) -> dict[str, str]:
    """{name: tool} of the names whose last binding before ``at`` holds a tool's result."""
    last: dict[str, str | None] = {}
    for where, name, tool in bindings:
        if where > at:
            break
        last[name] = tool
    return {name: tool for name, tool in last.items() if tool is not None}


def is_tool(name: str, tools: set[str]) -> bool:
    """Whether a called name is a tool's: one of ``tools``, or, none known, any name but Python's own."""
    return name not in SKIPPED and (name in tools if tools else name not in BUILTINS)


def _shown(expr: ast.expr, names: dict[str, str], tools: set[str]) -> str | None:
    """The tool whose result ``expr`` shows: the result's name, the call itself, or an f-string holding one."""
    if isinstance(expr, ast.Name):
        return names.get(expr.id)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and is_tool(expr.func.id, tools):
        return expr.func.id
    if isinstance(expr, ast.JoinedStr):
        shown = [tool for part in expr.values if isinstance(part, ast.FormattedValue)
                 and (tool := _shown(part.value, names, tools)) is not None]
        return shown[0] if len(shown) == 1 else None
    return None


def printed_tool(code: str, tools: set[str]) -> tuple[str, bool] | None:
    """(the tool whose result the step printed, whether the print showed it alone), when exactly one print of the
    step shows one tool's result: a name bound to it (see the module), the call itself or an f-string holding
    one; None otherwise."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    bindings = _bindings(tree, tools)
    prints = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "print" and not node.keywords]
    shown = [(tool, len(node.args) == 1 and not isinstance(node.args[0], ast.JoinedStr))
             for node in prints for arg in node.args
             if (tool := _shown(arg, _held(bindings, (node.lineno, node.col_offset)), tools)) is not None]
    if len(shown) != 1:
        return None
    tool, alone = shown[0]
    return tool, alone and len(prints) == 1
