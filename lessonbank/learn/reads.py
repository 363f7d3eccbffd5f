"""What a recipe of another question hands over: how it got its data and read it, not what it computed from it.

A recipe's code was written for its own question. Handed whole to a different question about the same tools, a small
model copies its computation too: the code of "the highest number of story points" ran for "how many more points
does one project have than another", and answered the maximum. Another question keeps what any question about these
tools needs:

- the statements that call a tool (``result = search_tickets(project="FJOR", limit=100)``; a loop that pages
  through a tool's results, whole), a call written inside an expression taken out as ``result = <the call>``, and
  those that name a part of what one returned (``records = result["tickets"]``);
- for each loop over what a call returned (a ``for`` or a comprehension), the loop with the values it read from
  each element, with the conversions that made them usable (``amount = float(row["amount"].replace(",", "."))``),
  and a filter that uses no value of its question (``if row["status"] == "open"``): it says which records count;

and leaves out the rest (an aggregation, arithmetic between results, a filter on its question's threshold, its
answer). Nothing here knows a tool's, a field's or an argument's name: a tool is any name the code calls that is
no builtin, no conversion and not ``final_answer``.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Collection

from lessonbank.learn import code, handover

_NOT_TOOLS = frozenset({"final_answer", "print"})
MAX_READS = 6  # values read per loop
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _is_tool(node: ast.AST) -> bool:
    return handover.is_tool_call(node) and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
        and node.func.id not in _NOT_TOOLS


def calls_tool(node: ast.AST) -> bool:
    return any(_is_tool(inner) for inner in ast.walk(node))


def _read_of_call(node: ast.AST) -> bool:
    """Whether ``node`` is a tool call, or a path read from one's result with its conversions
    (``int(get_site(site="a")["goal"].replace(",", ""))``)."""
    while not _is_tool(node):
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and handover.is_conversion(node) and (
                isinstance(node.func, ast.Attribute) or node.args):
            node = node.func.value if isinstance(node.func, ast.Attribute) else node.args[0]
        else:
            return False
    return True


def _hoisted(body: list[ast.stmt], bound: set[str]) -> list[ast.stmt]:
    """``body`` with each simple statement that calls a tool inside an expression (``final_answer(max(... for t
    in search(...)["items"]))``), and each loop whose iterable calls one and whose body calls none, preceded by
    ``result = <the call>``, the call in it replaced by that name; a statement that is one call assigned to names,
    and any other compound statement, as they are."""
    out: list[ast.stmt] = []
    for stmt in body:
        value = stmt.value if isinstance(stmt, ast.Assign | ast.Expr | ast.AugAssign | ast.Return) else \
            stmt.iter if isinstance(stmt, ast.For) and not any(map(calls_tool, stmt.body)) else None
        if value is None or _read_of_call(value) and isinstance(stmt, ast.Assign) or not calls_tool(value):
            out.append(stmt)
            continue
        found = [node for node in ast.walk(value) if isinstance(node, ast.Call) and _is_tool(node)]
        texts = list(dict.fromkeys(ast.unparse(node) for node in found))
        names = {}
        for text in texts:
            name = next(name for at in range(len(bound) + 2)
                        if (name := handover.RESULT if not at else f"{handover.RESULT}_{at + 1}") not in bound)
            bound.add(name)
            names[text] = name
            call = next(node for node in found if ast.unparse(node) == text)
            out.append(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=copy.deepcopy(call), lineno=0))
        out.append(_Swap(names).visit(stmt))
    return out


class _Swap(ast.NodeTransformer):
    """Each tool call (by its text) replaced by the name its result was given."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def visit_Call(self, node: ast.Call) -> ast.AST:  # noqa: N802 (ast's naming)
        text = ast.unparse(node)
        if text in self.names:
            return ast.Name(id=self.names[text], ctx=ast.Load())
        self.generic_visit(node)
        return node


def _data_names(kept: list[ast.stmt]) -> set[str]:
    """The names the kept statements bind: what holds a tool's results."""
    return {name for stmt in kept for name in code.names(stmt, ast.Store)}


def _reads(element: str, nodes: list[ast.AST], skip: list[ast.expr]) -> list[ast.expr]:
    """The values read from ``element`` in ``nodes`` but not in ``skip`` (the filters kept): each subscript path
    from it, with the conversions around it (``_widen``), each once and not inside another."""
    skipped = {id(inner) for test in skip for inner in ast.walk(test)}
    found: dict[str, ast.expr] = {}
    for node in nodes:
        up = handover.parents(node)
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and inner.id == element and id(inner) not in skipped \
                    and isinstance(up.get(id(inner)), ast.Subscript):
                widened = _widen(handover.read_path(inner, up), up)
                if isinstance(widened, ast.expr):
                    found.setdefault(ast.unparse(widened), widened)
    return [read for text, read in found.items() if not any(text != other and text in other for other in found)][
        :MAX_READS]


def _widen(node: ast.AST, up: dict[int, ast.AST]) -> ast.AST:
    """``node`` with the conversions around it (``handover.widen``), a method's too (``x.replace(...)``)."""
    while True:
        parent = up.get(id(node))
        method = up.get(id(parent)) if isinstance(parent, ast.Attribute) and parent.value is node else None
        if isinstance(method, ast.Call) and method.func is parent and handover.is_conversion(method):
            node = method
            continue
        wider = handover.widen(node, up)
        if wider is node:
            return node
        node = wider


def _name_for(read: ast.expr, taken: set[str]) -> str:
    """A name for a value read: its last key when that is a word (``points``), else ``value``."""
    keys = [node.slice.value for node in ast.walk(read) if isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)]
    word = keys[0] if keys and _WORD.fullmatch(keys[0]) and keys[0] not in code.BUILTINS else "value"
    name, at = word, 1
    while name in taken:
        at += 1
        name = f"{word}_{at}"
    taken.add(name)
    return name


def _loop(target: ast.expr, iterable: ast.expr, filters: list[ast.expr], reads: list[ast.expr],
          taken: set[str]) -> ast.For | None:
    if not reads and not filters:
        return None
    body: list[ast.stmt] = [ast.Assign(targets=[ast.Name(id=_name_for(read, taken), ctx=ast.Store())], value=read,
                                       lineno=0) for read in reads] or [ast.Expr(value=ast.Constant(value=...))]
    if filters:
        test = filters[0] if len(filters) == 1 else ast.BoolOp(op=ast.And(), values=filters)
        body = [ast.If(test=test, body=body, orelse=[])]
    return ast.For(target=target, iter=iterable, body=body, orelse=[], lineno=0)


def _filters(ifs: list[ast.expr], element: str, values: Collection[str]) -> list[ast.expr]:
    """The filters on ``element`` that use no value of the question (``values``: its parameters as written); of
    ``a and b``, each part alone."""
    parts = [part for test in ifs for part in (test.values if isinstance(test, ast.BoolOp)
                                                and isinstance(test.op, ast.And) else [test])]
    return [test for test in parts if element in code.names(test, ast.Load)
            and not any(isinstance(node, ast.Constant) and _among(node.value, values) for node in ast.walk(test))]


def _among(constant: object, values: Collection[str]) -> bool:
    """Whether ``constant`` is one of ``values`` (a number by its value: ``21.0`` is ``21``)."""
    if str(constant) in values:
        return True
    if isinstance(constant, bool) or not isinstance(constant, int | float):
        return False
    for value in values:
        try:
            if float(value) == constant:
                return True
        except ValueError:
            continue
    return False


def _loops(tree: ast.AST, data: set[str], values: Collection[str], taken: set[str]) -> list[ast.For]:
    """For each loop or comprehension of ``tree`` over what a tool returned (its iterable reads a name in ``data``),
    the loop with what it read of each element (see the module); each once."""
    out: dict[str, ast.For] = {}
    for node in ast.walk(tree):
        pairs: list[tuple[ast.expr, ast.expr, list[ast.expr], list[ast.AST]]] = []
        if isinstance(node, ast.comprehension):
            holder = next((parent for parent in ast.walk(tree) if isinstance(
                parent, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) and node in parent.generators),
                None)
            parts: list[ast.AST] = [] if holder is None else [
                *([holder.key, holder.value] if isinstance(holder, ast.DictComp) else [holder.elt])]
            pairs.append((node.target, node.iter, node.ifs, parts))
        elif isinstance(node, ast.For):
            tests = [stmt.test for stmt in node.body if isinstance(stmt, ast.If)]
            pairs.append((node.target, node.iter, tests, list(node.body)))
        for target, iterable, ifs, parts in pairs:
            if not isinstance(target, ast.Name) or not code.names(iterable, ast.Load) & data:
                continue
            kept = _filters(ifs, target.id, values)
            loop = _loop(target, iterable, kept, _reads(target.id, [*parts, *ifs], kept), taken)
            if loop is not None:
                out.setdefault(ast.unparse(loop), loop)
    return list(out.values())


def reduced(tree: ast.Module, values: Collection[str] = ()) -> ast.Module | None:
    """The part of ``tree`` (a recipe's code, its values placed or named) that gets and reads its data (see the
    module); None when it calls no tool, or when nothing of it is left out (the code is all data)."""
    bound = code.names(tree, ast.Store)
    body = _hoisted(list(tree.body), bound)
    keep: list[bool] = []
    data: set[str] = set()  # the names the statements kept so far bind (``_data_names``)
    for stmt in body:  # in order: an alias of an alias is kept too
        keep.append(isinstance(stmt, ast.Import | ast.ImportFrom) or calls_tool(stmt) or _alias(stmt, data))
        data |= code.names(stmt, ast.Store) if keep[-1] else set()
    kept = _with_inputs(body, keep)
    if not any(calls_tool(stmt) for stmt in kept):
        return None
    taken = set(bound)
    loops = _loops(ast.Module(body=body, type_ignores=[]), _data_names(kept), values, taken)
    done = [stmt for stmt in kept if not isinstance(stmt, ast.Import | ast.ImportFrom)]
    if len(kept) == len(body) and not loops:
        return None
    out = ast.Module(body=[*kept, *[loop for loop in loops if not _inside(loop, done)]], type_ignores=[])
    return ast.fix_missing_locations(out)


def _alias(stmt: ast.stmt, data: set[str]) -> bool:
    """Whether ``stmt`` gives a part of a result a name of its own (``records = result["tickets"]``): what a loop
    over that name reads is read from the result."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return False
    node: ast.expr = stmt.value
    if not isinstance(node, ast.Subscript):
        return False
    while isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, ast.Name) and node.id in data


def _with_inputs(body: list[ast.stmt], keep: list[bool]) -> list[ast.stmt]:
    """The statements of ``body`` marked in ``keep``, with the earlier statements that bind a name they read
    (``page = 1`` before a paging loop), and theirs in turn."""
    keep = list(keep)
    for at in range(len(body) - 1, -1, -1):
        if keep[at]:
            continue
        bound = code.names(body[at], ast.Store)
        keep[at] = any(keep[later] and _used(body[later]) & bound for later in range(at + 1, len(body)))
    return [stmt for stmt, kept in zip(body, keep, strict=True) if kept]


def _used(stmt: ast.stmt) -> set[str]:
    """The names ``stmt`` reads, an augmented assignment's target too (``items += ...``)."""
    return code.names(stmt, ast.Load) | {node.target.id for node in ast.walk(stmt)
                                         if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name)}


def _inside(loop: ast.For, kept: list[ast.stmt]) -> bool:
    """Whether ``loop`` reads an element of a loop kept whole (a paging loop)."""
    return any(isinstance(node, ast.For) and ast.unparse(node.iter) == ast.unparse(loop.iter)
               for stmt in kept for node in ast.walk(stmt))
