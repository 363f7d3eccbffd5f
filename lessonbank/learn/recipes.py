"""Recipes: the code that solved a task, taken from a run whose outcome verified it, without an LLM.

For a CodeAgent run, the code of the steps that did not fail, in order, minus what can be dropped
safely: ``print``/``display`` calls and bare inspection expressions, assignments nobody reads whose
value is computed without a call, with pure builtins only (``len(...)``) or repeats the same call later,
and imports nothing uses. What a
failed step ran before its error is kept where later code needs it (``result = get_invoice(...)``
before the line that raised), so the recipe does not use a name it never sets. The step that gave the
answer is kept as it ran: a ``try`` that reached ``final_answer`` loses its print-only handlers, and
nothing after the answer is kept. For a
ToolCallingAgent run, the sequence of tool calls with their arguments. Secrets are redacted, the size
capped, the code must parse.

Literals that come from the task (a date, an id, a file name) are the recipe's parameters: the next
run must adapt them. An answer the model copied from an observation (``final_answer(152.74)`` after
printing ``total``, or after a step that ended with ``total = ...``, which smolagents shows) is answered
with the variable it showed instead, or the recipe would hand the next run this run's answer; code that
still answers with a literal the task did not give leaves no recipe (``typed_answer``). A run whose right
answer was forced at the step limit leaves the code up to the
step that printed it. Either way, the code must hold every value the task gives (``ignored_values``). A date
converted from constants is kept as the text it gave (``fold_dates``). The
fingerprint hashes the code with its local names renamed in order of first
use and its parameters replaced, so the same code from several runs of similar tasks is one recipe.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import copy
import datetime
import hashlib
import json
import logging
import re
from collections.abc import Iterable
from typing import TypeGuard

from lessonbank.core.models import Recipe
from lessonbank.core.redact import Redactor
from lessonbank.learn import fixtext
from lessonbank.learn.shapes import read_literal
from lessonbank.learn.view import RunView, Step

logger = logging.getLogger(__name__)

MAX_CODE_CHARS = 3000
MAX_TASK_CHARS = 300
PRINTERS = frozenset({"print", "pprint", "display"})
INSPECTORS = frozenset({"head", "tail", "describe", "info", "keys", "values", "items", "sample", "dtypes"})
BUILTINS = frozenset(dir(builtins))


def _printer_call(node: ast.AST) -> TypeGuard[ast.Call]:
    """``print(...)``, ``pprint(...)`` or ``display(...)``."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PRINTERS


def _is_inspection(stmt: ast.stmt) -> bool:
    """A statement run only to look at something: ``print(x)``, ``df.head()``, a bare name."""
    if not isinstance(stmt, ast.Expr):
        return False
    value = stmt.value
    if _printer_call(value):
        return True
    if isinstance(value, ast.Call):
        return isinstance(value.func, ast.Attribute) and value.func.attr in INSPECTORS and not value.args
    return isinstance(value, ast.Name | ast.Attribute | ast.Subscript | ast.Constant)


def _names(node: ast.AST, ctx: type[ast.expr_context]) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def _calls(node: ast.AST) -> list[str]:
    return [ast.dump(n) for n in ast.walk(node) if isinstance(n, ast.Call)]


def _answer_calls(statements: list[ast.stmt]) -> list[ast.Call]:
    """Every ``final_answer(...)`` call in ``statements``, nested ones too, in walk order."""
    return [n for stmt in statements for n in ast.walk(stmt)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "final_answer"]


def _calls_final_answer(stmt: ast.stmt) -> bool:
    return bool(_answer_calls([stmt]))


def _droppable_assignment(stmt: ast.stmt, live: set[str], later_calls: set[str]) -> bool:
    """An assignment to names nobody reads later, whose value has no call, or only pure ones (``len(...)``),
    or repeats a later call."""
    if not isinstance(stmt, ast.Assign | ast.AnnAssign):
        return False
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    if not all(isinstance(t, ast.Name) for t in targets) or any(t.id in live for t in targets):  # type: ignore[attr-defined]
        return False
    if stmt.value is None or _reads(stmt.value) is not None:
        return True
    return all(call in later_calls for call in _calls(stmt.value))


def _needed(stmt: ast.stmt, live: set[str]) -> bool:
    """Whether ``stmt`` sets a name in ``live``, or (not an assignment: ``rows.extend(...)``, a loop) uses
    one as data: calling a function that later code also calls does not make a statement needed."""
    if _names(stmt, ast.Store) & live:
        return True
    if isinstance(stmt, ast.Assign | ast.AnnAssign):
        return False
    called = {n.func.id for n in ast.walk(stmt) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return bool((_names(stmt, ast.Load) - called) & live)


def prune(statements: list[ast.stmt], optional: frozenset[int] = frozenset()) -> list[ast.stmt]:
    """Drop inspection, dead assignments and unused imports (a backward pass over the statements).

    ``optional``: the ``id()`` of statements kept only when later code needs them (what a failed step ran
    before its error): one that neither sets nor uses a name the code after it reads is dropped, call or not.
    """
    statements = [s for s in statements if not _is_inspection(s)]
    kept: list[ast.stmt] = []
    live: set[str] = set()
    later_calls: set[str] = set()
    for stmt in reversed(statements):
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            kept.append(stmt)
            continue
        if id(stmt) in optional and not _needed(stmt, live):
            continue
        if not _calls_final_answer(stmt) and _droppable_assignment(stmt, live, later_calls):
            continue
        kept.append(stmt)
        live -= _names(stmt, ast.Store) if isinstance(stmt, ast.Assign | ast.AnnAssign) else set()
        live |= _names(stmt, ast.Load)
        later_calls.update(_calls(stmt))
    kept.reverse()
    used = set().union(*(_names(s, ast.Load) for s in kept)) if kept else set()
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


MAX_FOLDED_CHARS = 64


def _datetime_names(statements: list[ast.stmt]) -> tuple[set[str], set[str]]:
    """Names the code binds to the ``datetime`` class (``from datetime import datetime``) and to the module
    (``import datetime``), leaving out any name the code also assigns."""
    classes: set[str] = set()
    modules: set[str] = set()
    for stmt in statements:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "datetime" and not stmt.level:
            classes.update(alias.asname or alias.name for alias in stmt.names if alias.name == "datetime")
        elif isinstance(stmt, ast.Import):
            modules.update(alias.asname or alias.name for alias in stmt.names if alias.name == "datetime")
    assigned = set().union(*(_names(s, ast.Store) for s in statements)) if statements else set()
    return classes - assigned, modules - assigned


class _DateFolder(ast.NodeTransformer):
    """``datetime.strptime('2024-01-28', '%Y-%m-%d').strftime('%d.%m.%Y')`` -> ``'28.01.2024'``, when the text
    it gives is the constant's parts in another order or with other separators."""

    def __init__(self, classes: set[str], modules: set[str]) -> None:
        self.classes, self.modules = classes, modules
        self.folded = 0

    def _is_class(self, node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id in self.classes) or (
            isinstance(node, ast.Attribute) and node.attr == "datetime" and isinstance(node.value, ast.Name)
            and node.value.id in self.modules)

    def visit_Call(self, node: ast.Call) -> ast.AST:  # noqa: N802 (ast's naming)
        self.generic_visit(node)
        inner = node.func.value if isinstance(node.func, ast.Attribute) and node.func.attr == "strftime" else None
        if not (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "strptime"
                and self._is_class(inner.func.value) and not node.keywords and not inner.keywords):
            return node
        texts = [arg.value for arg in (*inner.args, *node.args)
                 if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and len(arg.value) <= MAX_FOLDED_CHARS]
        if len(inner.args) != 2 or len(node.args) != 1 or len(texts) != 3:
            return node
        try:
            folded = datetime.datetime.strptime(texts[0], texts[1]).strftime(texts[2])
        except (ValueError, OverflowError, re.error):  # re.error: a format repeating a directive
            return node
        # only the same date written another way (its parts reordered, other separators), as a task's date
        # rewritten by the code would be; '%Y' alone would leave a recipe that ignores the task's date
        if len(folded) > MAX_FOLDED_CHARS or fixtext.rewritten_from(folded, texts[0]) != texts[0]:
            return node
        self.folded += 1
        return ast.copy_location(ast.Constant(folded), node)


def fold_dates(statements: list[ast.stmt]) -> list[ast.stmt]:
    """The recipe with each date the code converted from constants (``strptime(...).strftime(...)``) written as
    the text it gave (``statements`` itself when there is none); the import it needed for that goes with
    ``prune``. Seen in the learning benchmark: a
    1.5B model copied such a recipe line for line but for ``from datetime import datetime``, twice, and
    failed on the undefined name; a recipe passing the date as text is copied whole, and its value is put
    in for the next task like any value the task gives written another way."""
    classes, modules = _datetime_names(statements)
    if not classes and not modules:
        return statements
    folder = _DateFolder(classes, modules)
    try:
        folded = [folder.visit(copy.deepcopy(stmt)) for stmt in statements]
    except RecursionError:  # code nested deeper than the copy can go: kept as it ran
        return statements
    return folded if folder.folded else statements


def _parse(code: str) -> list[ast.stmt] | None:
    try:
        return ast.parse(code).body
    except (SyntaxError, ValueError, RecursionError):
        return None


def ran_before_failure(step: Step) -> list[ast.stmt]:
    """The top-level statements a failed step ran before the one smolagents says it failed at (``Code
    execution failed at line '<statement>'``): what they set is still there for the next step
    (``result = get_invoice(...)`` before a ``print(result['total'])`` that raised). Empty when the
    error names no statement of the code."""
    named = step.failed_line
    parsed = _parse(step.code) if named else None
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
               isinstance(stmt, ast.Pass | ast.Raise) or _is_inspection(stmt) for stmt in handler.body)


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
    return _calls_final_answer(stmt) and not (_final_answer_call(stmt) and _constant_answer(stmt, answer))


def _constant_answer(stmt: ast.stmt, answer: str) -> bool:
    """``final_answer(<constant>)`` (a statement of its own) of a constant other than the run's answer: it did
    not give the answer."""
    args = stmt.value.args  # type: ignore[attr-defined]
    return len(args) == 1 and isinstance(args[0], ast.Constant) and str(args[0].value).strip() != answer


def kept_task(task: str, redactor: Redactor) -> str:
    """A run's task as a lesson keeps it (a recipe's, an observed fix's): capped, then redacted."""
    return redactor.redact(task[:MAX_TASK_CHARS])


def is_param(literal: str, task: str) -> bool:
    """A literal the task itself supplied: it appears in the task and looks like a value (a date, an id,
    a number, a path), not a word any code would use (``'orders'``)."""
    if len(literal) < 2 or literal.lower() not in task.lower():
        return False
    return any(ch.isdigit() for ch in literal) or any(ch in "./-_@:\\" for ch in literal) or (
        f"'{literal}'" in task or f'"{literal}"' in task)


def _call_words(tree: Iterable[ast.AST], task: str) -> set[str]:
    """Strings passed to a call that the task names as a whole word (``get_weather(city='Graz')`` for
    "... in Graz on ..."): the next task names another."""
    words: set[str] = set()
    for node in tree:
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and 3 <= len(arg.value) <= 40 and (
                        re.search(rf"(?<!\w){re.escape(arg.value)}(?!\w)", task)):
                    words.add(arg.value)
    return words


def params_of(tree: Iterable[ast.AST], task: str) -> list[str]:
    """Literals of the code that the task supplied: what the next run must adapt. A task's value the code
    wrote another way (the task's "2024-03-17" as "17.03.2024") is one too."""
    tree = list(tree)
    words = _call_words(tree, task)
    found: list[str] = []
    for node in tree:
        for n in ast.walk(node):
            if isinstance(n, ast.Constant) and isinstance(n.value, str | int | float) and not isinstance(n.value, bool):
                text = str(n.value)
                if (is_param(text, task) or text in words or (
                        isinstance(n.value, str) and fixtext.rewritten_from(text, task))) and text not in found:
                    found.append(text)
    return found[:8]


class _Normalizer(ast.NodeTransformer):
    """Local names -> v0, v1, ... in order of first use; parameters -> a placeholder."""

    def __init__(self, keep: set[str], params: set[str]) -> None:
        self.keep, self.params = keep, params
        self.names: dict[str, str] = {}

    def visit_Name(self, node: ast.Name) -> ast.AST:  # noqa: N802 (ast's naming)
        if node.id not in self.keep:
            node.id = self.names.setdefault(node.id, f"v{len(self.names)}")
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:  # noqa: N802
        if isinstance(node.value, str | int | float) and str(node.value) in self.params:
            return ast.Constant(value="<param>")
        return node


def fingerprint(statements: list[ast.stmt], tools: Iterable[str], params: Iterable[str]) -> str:
    """Hash of the normalised code: renamed locals and replaced parameters make runs comparable."""
    keep = set(tools) | BUILTINS | {"final_answer"}
    module = ast.Module(body=[copy.deepcopy(s) for s in statements], type_ignores=[])
    for node in ast.walk(module):
        if isinstance(node, ast.Import | ast.ImportFrom):
            keep.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
    normalized = _Normalizer(keep, set(params)).visit(module)
    return hashlib.sha256(ast.dump(normalized, annotate_fields=False).encode()).hexdigest()[:32]


PURE_CALLS = frozenset({"round", "float", "int", "str", "abs", "len", "sum", "min", "max", "sorted", "any", "all",
                        "bool", "list", "tuple", "set", "dict", "enumerate", "zip", "range", "reversed"})
PURE_METHODS = frozenset({"get", "keys", "values", "items", "lower", "upper", "strip"})
REPLAYABLE_NODES = (ast.Name, ast.Constant, ast.Subscript, ast.Slice, ast.Attribute, ast.BinOp, ast.UnaryOp,
                    ast.BoolOp, ast.Compare, ast.IfExp, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.ListComp,
                    ast.SetComp, ast.GeneratorExp, ast.DictComp, ast.comprehension, ast.keyword, ast.JoinedStr,
                    ast.FormattedValue, ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)
MAX_REPLAY_NODES = 200


def _reads(expr: ast.expr) -> set[str] | None:
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
            bound |= _names(node.target, ast.Store)
        elif not isinstance(node, REPLAYABLE_NODES):
            return None
    return _names(expr, ast.Load) - bound - called


def _replayable(expr: ast.expr | None, assigned: set[str]) -> bool:
    """``expr`` may be evaluated again, and reads at least one variable, every one of them set by the run."""
    reads = _reads(expr) if expr is not None else None
    return bool(reads) and reads is not None and reads <= assigned


FIXED_DECIMALS = re.compile(r"\.([0-9])f")
Piece = str | ast.expr | None  # printed text, a value shown (its expression), or a value that cannot be replayed


def _shown_value(part: ast.FormattedValue) -> ast.expr | None:
    """The expression giving the text an f-string field printed: the value itself, or ``round(value, n)``
    for ``{value:.nf}``; None for other conversions and formats."""
    spec = part.format_spec
    if part.conversion not in (-1, ord("s")) or spec is not None and not (
            isinstance(spec, ast.JoinedStr) and len(spec.values) == 1 and isinstance(spec.values[0], ast.Constant)):
        return None
    if spec is None:
        return part.value
    decimals = FIXED_DECIMALS.fullmatch(str(spec.values[0].value))  # type: ignore[attr-defined]
    if decimals is None:
        return None
    return ast.Call(func=ast.Name(id="round", ctx=ast.Load()), args=[part.value, ast.Constant(int(decimals[1]))],
                    keywords=[])


def _print_pieces(stmt: ast.stmt) -> list[Piece] | None:
    """What a ``print(...)`` statement writes, in order: its texts and the values it shows (``print(f"Total of
    {inv['id']}:", total / 100)``: text, value, text, value). A ``pprint``/``display`` of one value shows just
    that value. None for anything else, or a ``sep``/``end``/``file`` it cannot follow."""
    if not (isinstance(stmt, ast.Expr) and _printer_call(stmt.value)):
        return None
    call = stmt.value
    if call.func.id != "print":  # type: ignore[attr-defined]
        return [call.args[0]] if len(call.args) == 1 and not call.keywords else None
    options = {keyword.arg: keyword.value for keyword in call.keywords}
    sep = options.pop("sep", ast.Constant(" "))
    end = options.pop("end", ast.Constant("\n"))
    options.pop("flush", None)
    if options or not (isinstance(sep, ast.Constant) and isinstance(sep.value, str)) or not (
            isinstance(end, ast.Constant) and end.value == "\n"):
        return None
    pieces: list[Piece] = []
    for index, arg in enumerate(call.args):
        if index:
            pieces.append(sep.value)
        if isinstance(arg, ast.Constant):
            pieces.append(str(arg.value))
        elif isinstance(arg, ast.JoinedStr):
            pieces += [str(part.value) if isinstance(part, ast.Constant) else _shown_value(part)  # type: ignore[arg-type]
                       for part in arg.values]
        elif isinstance(arg, ast.Starred):
            return None
        else:
            pieces.append(arg)
    return pieces


def _holes(pieces: list[Piece], text: str) -> list[str] | None:
    """The text each value of ``pieces`` printed, when ``text`` is what they print; None when it is not, or
    when where a value ends is a guess: two values side by side, or a text between values seen twice."""
    texts: list[str] = [""]
    values = 0
    for piece in pieces:
        if isinstance(piece, str):
            texts[-1] += piece
        else:
            if values and not texts[-1]:
                return None
            texts.append("")
            values += 1
    if not values:
        return None
    head, tail = texts[0].lstrip(), texts[-1].rstrip()  # what was printed is read stripped
    if len(text) < len(head) + len(tail) or not text.startswith(head) or not text.endswith(tail):
        return None
    inner = text[len(head):len(text) - len(tail)]
    holes, position = [], 0
    for between in texts[1:-1]:
        found = inner.find(between, position)
        if found < 0 or inner.find(between, found + 1) >= 0:  # twice: where the value ends is a guess
            return None
        holes.append(inner[position:found])
        position = found + len(between)
    holes.append(inner[position:])
    return holes


def shown_values(statements: list[ast.stmt], step: Step) -> list[tuple[ast.expr | None, str]]:
    """The values ``step`` showed (``statements``: its code, as kept), each with the text it showed: what it
    printed, and the value its code ended with (``last_value``)."""
    return _printed_values(statements, step) + last_value(statements, step)


def last_value(statements: list[ast.stmt], step: Step) -> list[tuple[ast.expr | None, str]]:
    """The value a step's code ended with, which the agent is shown after the step (``Step.last_output``): the
    name its last statement assigned (``highest = max(...)``) or the expression it ended with (not a print or
    an answer), with the text shown; none when that was None. A model reads the number there as readily as a
    printed one and types it into ``final_answer``."""
    text = step.last_output
    if not text or not statements:
        return []
    stmt = statements[-1]
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return [(ast.Name(id=stmt.targets[0].id, ctx=ast.Load()), text)]
    if isinstance(stmt, ast.Expr) and not _calls_final_answer(stmt) and not _printer_call(stmt.value):
        return [(stmt.value, text)]
    return []


def _printed_values(statements: list[ast.stmt], step: Step) -> list[tuple[ast.expr | None, str]]:
    """The values a step printed, each with the text it printed. Only where which text came from which print
    is certain: every print of the step is one of its statements (none in a loop, a branch or a function),
    and either there is one, whose whole output (or else one line of it, the rest printed by tools) is what
    it writes, or each wrote one line, in order."""
    prints = [node for stmt in statements for node in ast.walk(stmt) if _printer_call(node)]
    printing = [stmt for stmt in statements if isinstance(stmt, ast.Expr) and stmt.value in prints]
    all_pieces = [pieces for stmt in printing if (pieces := _print_pieces(stmt)) is not None]
    if not prints or len(all_pieces) != len(prints):
        return []
    text = step.logs  # what was printed, not the value the code ended with
    lines = [line.strip() for line in text.splitlines()]
    if len(prints) == 1:  # its whole output, else the one line of it that is what it writes
        found = [holes] if (holes := _holes(all_pieces[0], text)) is not None else [
            holes for line in lines if (holes := _holes(all_pieces[0], line)) is not None]
        all_holes = found if len(found) == 1 else []
    elif len(lines) == len(prints):  # a line each, in order
        all_holes = [holes for pieces, line in zip(all_pieces, lines, strict=True)
                     if (holes := _holes(pieces, line)) is not None]
    else:
        return []
    if len(all_holes) != len(prints):
        return []
    return [pair for pieces, holes in zip(all_pieces, all_holes, strict=True)
            for pair in zip([piece for piece in pieces if not isinstance(piece, str)], holes, strict=True)]


def same_value(printed: str, literal: str) -> bool:
    """``printed`` is ``literal``, as text or as the same number (``235.40`` and ``235.4``)."""
    if printed == literal:
        return True
    try:
        return float(printed) == float(literal)
    except ValueError:
        return False


MAX_PATH = 6


def _equals(value: object, literal: str) -> bool:
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float):
        try:
            return float(literal) == value
        except ValueError:
            return False
    return isinstance(value, str) and value.strip() == literal


def _paths(value: object, literal: str, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Where ``literal`` sits in a printed dict or list, as key and index paths (at most two are looked for)."""
    if isinstance(value, dict | list):
        if len(path) >= MAX_PATH:
            return []
        found: list[tuple[str | int, ...]] = []
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if not isinstance(key, str | int) or isinstance(key, bool):
                continue
            found += _paths(item, literal, (*path, key))
            if len(found) > 1:
                break
        return found
    return [path] if _equals(value, literal) else []


def _read_back(expr: ast.expr, printed: str, literal: str) -> ast.expr | None:
    """The expression that gives ``literal`` again, from ``expr`` whose printing gave ``printed``: ``expr``
    itself when it printed the literal, ``expr['records'][0]['max_c']`` when it printed a dict or list
    holding it at one place; None otherwise."""
    printed = printed.strip()
    if isinstance(value := read_literal(printed), dict | list):
        paths = _paths(value, literal)
        if len(paths) != 1:
            return None
        read = copy.deepcopy(expr)
        for key in paths[0]:
            read = ast.Subscript(value=read, slice=ast.Constant(value=key), ctx=ast.Load())
        return read
    return copy.deepcopy(expr) if same_value(printed, literal) else None


def _answer_literal(value: object, task: str) -> str | None:
    """An answer literal that may be read back from what a run printed: a short scalar the task did not give."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    literal = str(value).strip()
    if not literal or len(literal) > 100 or "\n" in literal or is_param(literal, task):
        return None
    return literal


def typed_answer(statements: list[ast.stmt], task: str) -> str | None:
    """The literal every ``final_answer`` of the code passes, when each passes one the task did not give (the
    model typed the answer it had read or worked out): such code does not compute the answer. None otherwise."""
    literals = [_answer_literal(node.args[0].value, task) if len(node.args) == 1 and not node.keywords
                and isinstance(node.args[0], ast.Constant) else None for node in _answer_calls(statements)]
    return literals[0] if literals and all(literal is not None for literal in literals) else None


def _computes_answer(statements: list[ast.stmt], task: str) -> bool:
    """Whether the code reaches ``final_answer`` with something it computed (``typed_answer``)."""
    if not statements or not any(_calls_final_answer(stmt) for stmt in statements):
        return False
    if (typed := typed_answer(statements, task)) is not None:
        logger.info("recipe not kept: it answers with %r, which it does not compute and no step showed (a recipe "
                    "would hand the next run this run's answer)", typed[:40])
        return False
    return True


def answer_from_variables(steps: list[tuple[list[ast.stmt], Step]], task: str) -> None:
    """``final_answer(152.74)`` after an earlier step printed ``total`` as 152.74 becomes ``final_answer(total)``.

    The model often copies the value it read from an observation into its answer; kept as is, the recipe
    would hand the next run this run's answer. Only a literal the task did not supply, equal to what one value
    printed by an EARLIER step printed (``total``, ``result['total']``, ``cents / 100``, ``len([...])``: an
    expression of the run's variables safe to evaluate again), is replaced by that expression, or, when it
    printed a dict or list holding the literal at one place, by the path to it
    (``result['records'][0]['max_c']``). ``steps``: each step's statements and the step, in order;
    changed in place.
    """
    printed: list[list[tuple[ast.expr | None, str]]] = []  # per step: the values it printed, with their text
    assigned: set[str] = set()
    for statements, step in steps:
        for node in _answer_calls(statements):
            if not (len(node.args) == 1 and isinstance(node.args[0], ast.Constant)):
                continue
            literal = _answer_literal(node.args[0].value, task)
            if literal is None:
                continue
            for shown in reversed(printed):  # the latest step that printed it
                reads = _reads_back(shown, literal, assigned)
                if reads:
                    if len(reads) == 1:  # two values of that step printed it: which one was copied is a guess
                        node.args[0] = reads[0]
                    break
        for stmt in statements:
            assigned |= _names(stmt, ast.Store)
        printed.append(shown_values(statements, step))


def _reads_back(shown: list[tuple[ast.expr | None, str]], literal: str, assigned: set[str]) -> list[ast.expr]:
    """The distinct expressions that give ``literal`` again among the values one step printed."""
    reads = {ast.dump(read): read for expr, text in shown if expr is not None and _replayable(expr, assigned)
             and (read := _read_back(expr, text, literal)) is not None}
    return list(reads.values())


def answer_where_printed(steps: list[tuple[list[ast.stmt], Step]], answer: str,
                         task: str) -> list[tuple[list[ast.stmt], Step]] | None:
    """The steps of a run whose right answer was never passed to ``final_answer`` by its code (smolagents
    forced it after the step limit), up to the first step that printed it, ending with ``final_answer`` of
    what printed it; None when no step printed it at one readable place.

    Only for an answer a user or a check judged right: the code then computed the verified answer."""
    literal = _answer_literal(answer, task)
    if literal is None:
        return None
    assigned: set[str] = set()
    for index, (statements, step) in enumerate(steps):
        for stmt in statements:
            assigned |= _names(stmt, ast.Store)
        reads = _reads_back(shown_values(statements, step), literal, assigned)
        if len(reads) == 1:  # two values of the step printed it: which one the answer is, is a guess
            answer_stmt = ast.Expr(value=ast.Call(func=ast.Name(id="final_answer", ctx=ast.Load()), args=reads,
                                                  keywords=[]))
            return [*steps[:index], ([*statements, ast.fix_missing_locations(answer_stmt)], step)]
    return None


JUDGES = ("user", "check")  # who may find an answer right that the run's own code never gave


_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def _constants(code: str) -> set[str]:
    """The constants of ``code`` as text, numbers also as their float (``25`` and ``25.0`` are one)."""
    tree = _parse(code) or []
    found: set[str] = set()
    for node in (n for stmt in tree for n in ast.walk(stmt)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float) \
                and not isinstance(node.value, bool):
            found.add(str(node.value))
            if isinstance(node.value, int | float):
                with contextlib.suppress(OverflowError):  # an int past a float's range is only its digits
                    found.add(repr(float(node.value)))
    return found


def ignored_values(code: str, params: list[str], task: str) -> list[str]:
    """The task's values (ids, numbers, dates, quoted words: ``is_param``) that ``code`` neither holds nor
    wrote another way. Code that gave the right answer without using them got it by chance: seen in the
    learning benchmark, ``len(result)`` counted the keys of the search result, 3, for "how many 'chair'
    products cost less than 25 euros?", whose answer was 3, and the next run given it answered 13.

    A number counts only as a constant of its own: code that computes with "less than 21" holds ``21``,
    while ``search_catalog(query='mug price < 21 euro')`` only asked a tool that ignores the limit (seed 4:
    it counted every mug, 7, which was the answer, and the next run given it answered 6 for 3)."""
    rewritten = {fixtext.rewritten_from(param, task) for param in params}
    constants = _constants(code)
    held = [word for word in dict.fromkeys(fixtext.WORD.findall(task[:MAX_TASK_CHARS])) if is_param(word, task)]
    return [word for word in held if word not in rewritten and (
        word not in constants and repr(float(word)) not in constants if _NUMBER.fullmatch(word) else word not in code)]


def _code_recipe(run: RunView, tools: list[str], redactor: Redactor, verified_by: str) -> Recipe | None:
    task = run.task
    checks: list[str] = []
    parsed_steps: list[tuple[list[ast.stmt], Step]] = []
    optional: set[int] = set()  # what failed steps ran before their error: kept only where later code needs it
    answer = run.final_answer
    for step in run.actions:
        if not step.code.strip():
            continue
        if step.failed:
            ran = ran_before_failure(step)
            optional.update(id(stmt) for stmt in ran)
            if ran:
                parsed_steps.append((ran, step))
            continue
        parsed = _parse(step.code)
        if parsed is not None:
            parsed_steps.append((answering_path(parsed, answer) if step.is_final else parsed, step))
    answer_from_variables(parsed_steps, task)
    if not any(_calls_final_answer(stmt) for statements, _ in parsed_steps for stmt in statements):
        answered = (answer_where_printed(parsed_steps, answer, task)
                    if verified_by in JUDGES else None)
        if answered is None:
            return None
        parsed_steps = answered
        checks.append("answer:printed")
    kept = prune([stmt for statements, _ in parsed_steps for stmt in statements], frozenset(optional))
    if (folded := fold_dates(kept)) is not kept:
        kept = prune(folded)  # the import a folded date needed goes
    if not _computes_answer(kept, task):
        return None
    code = redactor.redact("\n".join(ast.unparse(s) for s in kept))
    tree = _parse(code) if len(code) <= MAX_CODE_CHARS else None
    if tree is None:
        logger.info("recipe not kept: %d chars of code, or it no longer parses after redaction", len(code))
        return None
    params = params_of(kept, task)
    if ignored := ignored_values(code, params, task):
        logger.info("recipe not kept: the code that %s ignores the task's %s (a right answer without it is "
                    "chance)", "printed the forced answer" if "answer:printed" in checks else "answered",
                    ", ".join(repr(value) for value in ignored[:3]))
        return None
    return Recipe(language="python", code=code, task=kept_task(task, redactor), params=params,
                  checks=["syntax", *checks], fingerprint=fingerprint(tree, tools, params))


def _tool_call_recipe(run: RunView, redactor: Redactor) -> Recipe | None:
    task = run.task
    calls = []
    for step in run.actions:
        if step.failed:
            continue
        for call in step.requests:
            try:
                arguments = json.loads(call.arguments) if call.arguments else {}
            except ValueError:
                arguments = call.arguments
            calls.append({"name": call.name, "arguments": arguments})
    if not calls or calls[-1]["name"] != "final_answer":
        return None
    code = redactor.redact(json.dumps(calls, ensure_ascii=False))
    if len(code) > MAX_CODE_CHARS:
        return None
    params = list(dict.fromkeys(p for p in _json_literals(calls) if is_param(p, task)))[:8]
    shape = json.dumps([(c["name"], sorted(c["arguments"]) if isinstance(c["arguments"], dict) else "")
                        for c in calls])
    return Recipe(language="tool_calls", code=code, task=kept_task(task, redactor), params=params,
                  checks=["json"], fingerprint=hashlib.sha256(shape.encode()).hexdigest()[:32])


def _json_literals(value: object) -> list[str]:
    if isinstance(value, dict):
        return [item for v in value.values() for item in _json_literals(v)]
    if isinstance(value, list):
        return [item for v in value for item in _json_literals(v)]
    return [str(value)] if isinstance(value, str | int | float) and not isinstance(value, bool) else []


def extract(run: RunView, redactor: Redactor, verified_by: str) -> Recipe | None:
    """The recipe of a run that ended well (``verified_by``: user, check or signals), or None."""
    has_code = any(step.code.strip() for step in run.actions)
    if has_code:
        recipe = _code_recipe(run, list(run.tools or ()), redactor, verified_by)
    else:
        recipe = _tool_call_recipe(run, redactor)
    if recipe is not None:
        recipe.checks.append(f"outcome:{verified_by}")
    return recipe


def recipe_text(recipe: Recipe) -> str:
    """The lesson text of a recipe: the task it solved (what similar tasks are matched on)."""
    task = " ".join(recipe.task.split())
    return f"Working code for a task like: {task}"
