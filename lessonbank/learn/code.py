"""Reading and normalising the code a run wrote: parsing a step or a line, the names it binds and calls, and the
one normaliser that takes out of code what differs between runs doing the same thing.

The normaliser renames names and folds constants by a policy its caller gives (``Normaliser``): a recipe's
fingerprint renames local names in order of first use and replaces its parameters (``recipes``); a fix's
fingerprint renames local names and folds the values the correction changed to their shape, subscript keys
kept (``fixes``); credit compares statements with assigned names renamed and constants folded, subscript keys
kept (``credit``). Code that does not parse is no code: the helpers say so instead of raising.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable

BUILTINS = frozenset(dir(builtins))
UNPARSABLE = (SyntaxError, ValueError, RecursionError, MemoryError)


def parse(code: str) -> list[ast.stmt] | None:
    """The statements of ``code``; None when it does not parse."""
    try:
        return ast.parse(code).body
    except (SyntaxError, ValueError, RecursionError):
        return None


def parse_line(line: str) -> ast.Module | None:
    """One line of code as a module; a block header (``for x in y:``) gets a body to parse."""
    for source in (line, line + " pass"):
        try:
            return ast.parse(source)
        except (SyntaxError, ValueError, RecursionError):
            continue
    return None


def names(node: ast.AST, ctx: type[ast.expr_context]) -> set[str]:
    """The names ``node`` reads (``ast.Load``) or binds (``ast.Store``)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def called(code: str) -> set[str] | None:
    """Names ``code`` calls that it neither defines nor imports, builtins aside; None if it does not parse."""
    try:
        tree = ast.parse(code)
    except UNPARSABLE:
        return None
    calls: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            calls.add(node.func.id)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return calls - bound - BUILTINS


POSITION = "#"  # an argument passed by position: ``fetch_rates#2`` is the call's second argument


def string_arguments(line: str) -> dict[str, str]:
    """``name=value`` of the string constants passed in one line of code: by keyword (``date``), or by position
    (``fetch_rates#2``, the call's second argument: ``fetch_rates("USD", "2024-09-13")``)."""
    try:
        tree = ast.parse(line)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg and isinstance(node.value, ast.Constant) and isinstance(
                node.value.value, str):
            found.setdefault(node.arg, node.value.value)
        elif isinstance(node, ast.Call):
            callee = ast.unparse(node.func)
            for index, arg in enumerate(node.args, start=1):
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.setdefault(f"{callee}{POSITION}{index}", arg.value)
    return found


PURE_CALLS = frozenset({"round", "float", "int", "str", "abs", "len", "sum", "min", "max", "sorted", "any", "all",
                        "bool", "list", "tuple", "set", "dict", "enumerate", "zip", "range", "reversed"})
PURE_METHODS = frozenset({"get", "keys", "values", "items", "lower", "upper", "strip"})
REPLAYABLE_NODES = (ast.Name, ast.Constant, ast.Subscript, ast.Slice, ast.Attribute, ast.BinOp, ast.UnaryOp,
                    ast.BoolOp, ast.Compare, ast.IfExp, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.ListComp,
                    ast.SetComp, ast.GeneratorExp, ast.DictComp, ast.comprehension, ast.keyword, ast.JoinedStr,
                    ast.FormattedValue, ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)
MAX_REPLAY_NODES = 200


def reads(expr: ast.expr) -> set[str] | None:
    """The variables ``expr`` reads, when evaluating it again is safe: reads, arithmetic, comparisons,
    comprehensions and calls of a few pure builtins and methods (``len([i for i in r['items'] if i['price'] <
    21])``, ``total / 100``); None when it calls anything else, assigns, or is too big. Names a comprehension
    binds are not counted."""
    nodes = list(ast.walk(expr))
    if len(nodes) > MAX_REPLAY_NODES:
        return None
    called: set[str] = set()
    bound: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in PURE_CALLS:
                called.add(func.id)
            elif not (isinstance(func, ast.Attribute) and func.attr in PURE_METHODS):
                return None
            if any(keyword.arg is None for keyword in node.keywords):
                return None
        elif isinstance(node, ast.comprehension):
            bound |= names(node.target, ast.Store)
        elif not isinstance(node, REPLAYABLE_NODES):
            return None
    return names(expr, ast.Load) - bound - called



class Normaliser(ast.NodeTransformer):
    """Code with names and constants replaced as the caller's policy says (see the module).

    ``name`` and ``constant`` give each name and constant node its replacement; with ``keys``, a subscript's key
    (``row['amount']``) is kept as it is; with ``text``, the text parts of an f-string become the text it gives.
    """

    def __init__(self, name: Callable[[ast.Name], ast.AST], constant: Callable[[ast.Constant], ast.AST],
                 keys: bool = False, text: Callable[[ast.Constant], str] | None = None) -> None:
        self.name, self.constant, self.keys, self.text = name, constant, keys, text

    def visit_Name(self, node: ast.Name) -> ast.AST:  # noqa: N802 (ast's naming)
        return self.name(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:  # noqa: N802
        return self.constant(node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:  # noqa: N802
        if not self.keys:
            return self.generic_visit(node)
        node.value = self.visit(node.value)
        if not isinstance(node.slice, ast.Constant):
            node.slice = self.visit(node.slice)
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:  # noqa: N802
        """An f-string holds only text and ``{...}`` parts: with ``text``, its text stays text."""
        if self.text is None:
            return self.generic_visit(node)
        values: list[ast.expr] = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                values.append(ast.Constant(value=self.text(part)))
            else:
                values.append(self.visit(part))
        node.values = values
        return node
