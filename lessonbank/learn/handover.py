"""What an observed fix hands to another question: the change that made its line work, not the line.

A fix's corrected line was written for one question: ``total_oslo = float(get_sales(region="Oslo")[-1]
["amount"].replace(",", "."))`` holds, besides the conversion that made it work, that question's variable name and
its own selection (``[-1]``: one record), which may be what made its answer wrong. Handed whole to another question,
a small model copies all of it. So a fix is handed over as what changed between the failing line and the one that
worked, found by comparing their syntax trees:

- an argument's value or form: the tool call itself (``result = get_sales(region="North")``);
- a key or a path: the path read from the result (``record["amount"]``);
- a conversion: the conversion applied to the value (``float(record["amount"].replace(",", "."))``);

with neutral names (the tool's result is ``result``; an element the question picked by position is any ``record``
of what it was picked from, never that position), and the call's values bound to the next task by where they flow
(``params.for_task``). What is left of the question's expression (its indexing, aggregation, arithmetic, names) is
not handed over. ``same_question`` tells the one case where the whole line is this task's own: the same question
with other values. ``text`` says a fix from a run not judged right is an example to adapt (its line ran; its answer
was not verified), and so is one of a question that used tools this task will not (``own_tools``).

The call that got a shape's result (``call_line``) follows the same rules: given as ``result = <the call>`` with this
task's values, only for a tool this task will use, and as an example to adapt when its question used other tools,
with a larger value of an argument its result's records may have been cut at (``said.widened``: ``limit=10`` that
got 10 records), and why.
"""

from __future__ import annotations

import ast
import copy
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from lessonbank.core.models import FailurePayload, FixPayload, Lesson
from lessonbank.learn import adapt, code, failures, fixtext, needs, params, render, said, shapes

RESULT = "result"
RECORD = "record"
# Python's own conversions of a value: what a correction that made a value usable adds around it.
CONVERSIONS = frozenset({
    "int", "float", "str", "bool", "Decimal", "replace", "strip", "lstrip", "rstrip", "lower", "upper", "casefold",
    "title", "removeprefix", "removesuffix", "strptime", "strftime", "fromisoformat", "isoformat", "date", "loads",
    "decode", "encode", "split", "join", "round", "abs", "to_numeric", "astype", "fsum",
})
MAKERS = frozenset({"strptime", "fromisoformat", "loads", "to_numeric"})  # called on a module or class, kept


@dataclass(frozen=True)
class Handover:
    """What a fix hands over: the tool ``call`` its value comes from (``""``: none), what the question picked an
    element of (``loop``: ``record`` is each element of it; ``""``: nothing picked), the ``failed`` and ``fixed``
    expressions with neutral names, and ``kind`` (``call``, ``key`` or ``conversion``)."""

    kind: str
    call: str
    loop: str
    failed: str
    fixed: str


def _value(line: str) -> ast.expr | None:
    """The expression a one-statement line computes (an assignment's value, an expression, a return)."""
    tree = code.parse_line(line)
    if tree is None or len(tree.body) != 1:
        return None
    stmt = tree.body[0]
    if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Expr | ast.Return):
        return stmt.value
    return None


def _differing(a: ast.AST, b: ast.AST) -> tuple[ast.AST, ast.AST] | None:
    """The lowest pair of nodes of ``a`` and ``b`` below which every difference between them lies."""
    if ast.dump(a) == ast.dump(b):
        return None
    if type(a) is not type(b):
        return a, b
    pairs: list[tuple[ast.AST, ast.AST]] = []
    for field in a._fields:
        x, y = getattr(a, field, None), getattr(b, field, None)
        xs, ys = (x, y) if isinstance(x, list) and isinstance(y, list) else ([x], [y])
        if len(xs) != len(ys):
            return a, b
        for one, two in zip(xs, ys, strict=True):
            if isinstance(one, ast.AST) and isinstance(two, ast.AST):
                if ast.dump(one) != ast.dump(two):
                    pairs.append((one, two))
            elif one != two:
                return a, b
    return _differing(*pairs[0]) if len(pairs) == 1 else (a, b)


def is_tool_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in code.BUILTINS \
        and node.func.id not in CONVERSIONS


def is_conversion(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp):
        return isinstance(node.right, ast.Constant) or isinstance(node.left, ast.Constant)
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "") \
        in CONVERSIONS


def parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _operand(node: ast.AST, parent: ast.AST) -> bool:
    """Whether ``node`` is what ``parent`` (a conversion) converts: its receiver, first argument or operand."""
    if isinstance(parent, ast.BinOp):
        return node is parent.left or node is parent.right
    if not isinstance(parent, ast.Call):
        return False
    receiver = parent.func.value if isinstance(parent.func, ast.Attribute) else None
    return node is receiver or bool(parent.args) and node is parent.args[0]


def widen(node: ast.AST, up: dict[int, ast.AST]) -> ast.AST:
    """``node`` with the conversions around it that convert it (``int(x.replace(...))`` for ``x.replace(...)``)."""
    parent = up.get(id(node))
    while parent is not None and is_conversion(parent) and _operand(node, parent):
        node, parent = parent, up.get(id(parent))
    return node


def read_path(node: ast.AST, up: dict[int, ast.AST]) -> ast.AST:
    """``node`` with the subscripts read from it (``r['data']['items']`` for ``r['data']``)."""
    parent = up.get(id(node))
    while isinstance(parent, ast.Subscript) and parent.value is node:
        node, parent = parent, up.get(id(parent))
    return node


def _spot(failed: ast.expr, fixed: ast.expr) -> tuple[str, ast.AST, ast.AST] | None:
    """(kind, the failing node, the corrected node) of what changed (see the module); None for anything else."""
    found = _differing(failed, fixed)
    if found is None:
        return None
    before, after = found
    ups = parents(failed), parents(fixed)
    key_of = ups[1].get(id(after))
    if isinstance(key_of, ast.Subscript) and key_of.slice is after and isinstance(after, ast.Constant):
        before, after = ups[0].get(id(before), before), key_of
    if isinstance(after, ast.Subscript):  # the whole path read: ``['data']['items']``, not ``['data']`` alone
        return "key", read_path(before, ups[0]), read_path(after, ups[1])
    node: ast.AST | None = after
    while node is not None and not is_tool_call(node):
        if is_conversion(node):
            return "conversion", widen(before, ups[0]), widen(node, ups[1])
        node, before = ups[1].get(id(node)), ups[0].get(id(before), before)
    if node is None or not is_tool_call(node):
        return None
    before_call: ast.AST | None = before
    while before_call is not None and not is_tool_call(before_call):
        before_call = ups[0].get(id(before_call))
    return ("call", before_call, node) if before_call is not None else None


class _Neutral(ast.NodeTransformer):
    """A node with neutral names: a tool call as ``result`` (kept in ``call``), an element picked by position as
    ``record`` (what it was picked from kept in ``loop``), a local name as ``result``; a slice of the question's
    (``[:7]``) dropped. ``bound``: the names the whole line's comprehensions bind, each an element of their
    iterable (``iters``)."""

    def __init__(self, iters: dict[str, ast.expr], source: str) -> None:
        self.iters, self.source, self.call, self.loop, self.ok = iters, source, "", "", True

    def visit_Call(self, node: ast.Call) -> ast.AST:  # noqa: N802 (ast's naming)
        if not is_tool_call(node):  # a conversion or a method: its operands are renamed, not the function
            func = node.func
            if isinstance(func, ast.Attribute) and not (isinstance(func.value, ast.Name) and func.attr in MAKERS):
                func.value = self.visit(func.value)
            node.args = [self.visit(arg) for arg in node.args]
            node.keywords = [self.visit(keyword) for keyword in node.keywords]
            return node
        text = _written(self.source, node)
        self.ok = self.ok and self.call in ("", text)
        self.call = text
        return ast.Name(id=RESULT, ctx=ast.Load())

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:  # noqa: N802
        value = self.visit(node.value)
        if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            return ast.Subscript(value=value, slice=node.slice, ctx=node.ctx)
        if isinstance(node.slice, ast.Slice):
            return value
        return self._element(value)

    def visit_Name(self, node: ast.Name) -> ast.AST:  # noqa: N802
        if node.id in self.iters:
            return self._element(self.visit(copy.deepcopy(self.iters[node.id])))
        return ast.Name(id=RESULT, ctx=ast.Load())

    def _element(self, of: ast.AST) -> ast.AST:
        text = ast.unparse(of)
        self.ok = self.ok and self.loop in ("", text)
        self.loop = text
        return ast.Name(id=RECORD, ctx=ast.Load())


def _written(line: str, node: ast.AST) -> str:
    """``node`` as ``line`` wrote it (its quotes kept), else as ``ast`` writes it."""
    return ast.get_source_segment(line, node) or ast.unparse(node)


def _iterables(tree: ast.AST) -> dict[str, ast.expr]:
    """{a name a comprehension of ``tree`` binds: what it iterates over}."""
    return {gen.target.id: gen.iter for node in ast.walk(tree) if isinstance(node, ast.comprehension)
            for gen in [node] if isinstance(gen.target, ast.Name)}


def handover(fix: FixPayload) -> Handover | None:
    """What ``fix`` hands to another question (see the module); None when what changed is none of the three, or
    cannot be said with neutral names (two calls, two elements picked)."""
    failed, fixed = _value(fix.failed), _value(fix.fixed)
    found = _spot(failed, fixed) if failed is not None and fixed is not None else None
    if found is None or failed is None or fixed is None:
        return None
    kind, before, after = found
    old, new = _Neutral(_iterables(failed), fix.failed), _Neutral(_iterables(fixed), fix.fixed)
    if kind == "call":
        return Handover(kind, _written(fix.fixed, after), "", _written(fix.failed, before), _written(fix.fixed, after))
    failed_text = ast.unparse(old.visit(copy.deepcopy(before)))
    fixed_text = ast.unparse(new.visit(copy.deepcopy(after)))
    if not (old.ok and new.ok) or RESULT not in fixed_text and RECORD not in fixed_text:
        return None
    return Handover(kind, new.call, new.loop, failed_text, fixed_text)


def bound(found: Handover, solved: str, task: str) -> tuple[Handover, bool] | None:
    """``found`` with the values its call and expressions took from ``solved`` placed for ``task`` (named where they
    cannot be), and whether every one was placed; None when a line does not parse."""
    lines = [found.call, found.loop, found.failed, found.fixed]
    placed = params.for_task([line or "None" for line in lines], solved, task)
    if placed is None:
        return None
    call, loop, failed, fixed = (out if line else "" for line, out in zip(lines, placed[0], strict=True))
    return Handover(found.kind, call, loop, failed, fixed), not placed[2]


def same_question(solved: str, task: str) -> bool:
    """Whether ``task`` asks what ``solved`` asked, in the same words, but for its values."""
    theirs, mine = params.words(solved), params.words(task)
    return bool(theirs) and len(theirs) == len(mine) and all(
        a.lower() == b.lower() or (params.is_value(a, at) and params.is_value(b, at))
        for at, (a, b) in enumerate(zip(theirs, mine, strict=True)))


def _what(found: Handover, kept: Handover) -> str:
    """How the one change is said, from the lines as ``kept`` (before their values were placed): the key read, or
    the argument passed another way, like its value for this task (``found``) or, not placed, written like its
    form."""
    changed = fixtext.changed_of(kept.failed, kept.fixed)
    one = changed[0] if len(changed) == 1 else None
    if one is not None and one.kind == "key":
        return f"the key is {json.dumps(one.after)}"
    if one is None or one.kind != "argument" or found.kind != "call":
        return ""
    mine = fixtext.arguments(params.LEFT.sub(r"\1", found.fixed)).get(one.argument)  # ``<city>``: a name, to parse
    if mine is not None and mine != fixtext.arguments(params.LEFT.sub(r"\1", found.failed)).get(one.argument):
        return f"pass {fixtext.named(one.argument)} like {json.dumps(mine)}"
    after, before = (json.dumps(fixtext.shape(value)) for value in (one.after, one.before))
    return f"pass {fixtext.named(one.argument)} written like {after}, not like {before}"


def text(fix: FixPayload, solved: str, task: str, *, for_task: bool, verified: bool,
         records: dict[str, tuple[str, ...]] | None = None) -> str:
    """``fix`` (observed on ``solved``) as handed to ``task`` (see the module; ``render.handed``); "" when what
    changed cannot be handed over without the rest of the question's line. With ``records`` ({tool: the path to
    its result's records}, from shapes given beside it), a handed call goes on to the loop over its records."""
    found = handover(fix)
    placed = bound(found, solved, task) if found is not None else None
    if placed is None or found is None:
        return ""
    mine, complete = placed
    said = render.handed(mine.kind, mine.call, mine.loop, mine.fixed, fix.error, _what(mine, found),
                         for_task and complete, verified)
    called = after.func.id if isinstance(after := _value(mine.call), ast.Call) and isinstance(
        after.func, ast.Name) else ""
    path = (records or {}).get(called) if mine.kind == "call" else None
    return f"{said} Then use its records: `for {RECORD} in {RESULT}{shapes.path(path)}:`." if path is not None \
        else said


def placed_call(lesson: Lesson, task: str, using: set[str]) -> str:
    """An observed shape fact's call with ``task``'s values put in ("" when the fact names no call, its tool is not
    one the task will use, a value cannot be placed, or the call was kept under an older rule of what a setting is:
    it may pass a number of its own task), with a larger value of an argument its records may have been cut at
    (``said.widened``; ``widened_note`` says why)."""
    shape = lesson.shape if lesson.origin == "observed" else None
    if shape is None or not (shape.call and task and lesson.task and shape.tool in using):
        return ""
    if shapes.call_line(shape.call, shape.tool, lesson.task) != shape.call:
        return ""
    return adapt.call_for(said.widened(shape.call, shape.said).line, lesson.task, task) or ""


def widened_note(lesson: Lesson) -> str:
    """Why ``placed_call`` passes a larger value than the observed call did ("" when it does not)."""
    shape = lesson.shape if lesson.origin == "observed" else None
    return said.widened(shape.call, shape.said).told if shape is not None and shape.call else ""


def call_line(lesson: Lesson, task: str, using: set[str], universe: Collection[str],
              failed: Sequence[FailurePayload] = ()) -> str:
    """An observed shape fact's call that got the result, as the line to write with ``task``'s values and the neutral
    name ``result``, then the loop over its records ("" when the fact names no call, its tool is not one the task
    will use (``using``), or a value cannot be placed: the call with another task's value is not given); from a
    question that used tools this task will not, an example to adapt. Given only the shape, small models asked the
    tool for values of their own. With observed failures of the same tool (``failed``), the line says which of its
    arguments they were passed another way (``form_change``)."""
    shape = lesson.shape if lesson.origin == "observed" else None
    line = placed_call(lesson, task, using)
    line = as_result(line) if line else ""
    if not line or shape is None:
        return ""
    then = f", then use its records: `for {RECORD} in {RESULT}{shapes.path(shape.records)}:`" \
        if shape.records is not None else ""
    lead = "For this task" if own_tools(lesson, using, universe) else render.ADAPT_OTHER
    told = "; ".join(filter(None, [form_change(line, failed), widened_note(lesson)]))
    return f"{lead}: write `{line}`{f' ({told})' if told else ''}{then}."


def form_change(line: str, failed: Sequence[FailurePayload]) -> str:
    """What sets the call ``line`` apart from its tool's observed failures: an argument it passes written another
    way than they passed it, as `` pass `date` written like "99.99.9999", as here: written like "9999-99-99" it
    raised ValueError`` ("" when none does). The line got a result and the failures did not: the form is the fix,
    whatever the tool and its error's wording."""
    found = one_call(line)
    call = found[1] if found is not None else None
    if call is None or not isinstance(call.func, ast.Name):
        return ""
    passed = fixtext.arguments(line)  # by keyword: the names a failure's forms go by
    for failure in failed:
        for role, before in failure.forms.items() if failure.tool == call.func.id else ():
            after = failures.form(passed[role]) if role in passed else ""
            if after and after != before:
                return (f"pass {fixtext.named(role)} written like {json.dumps(after)}, as here: written like "
                        f"{json.dumps(before)} it raised {failure.error_type}")
    return ""


def one_call(line: str) -> tuple[str, ast.Call] | None:
    """(the name it assigns, "" for none; the call) of a line that is one call, alone or assigned to one name:
    ``r = fetch_rates(...)``; None for any other line."""
    try:
        body = ast.parse(line).body
    except (SyntaxError, ValueError, RecursionError):
        return None
    stmt = body[0] if len(body) == 1 else None
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        return "", stmt.value
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
            and isinstance(stmt.value, ast.Call):
        return stmt.targets[0].id, stmt.value
    return None


def as_result(line: str) -> str:
    """A line that calls one tool, as ``result = <the call>`` (its own name for the result was its question's);
    "" for any other line."""
    found = one_call(line)
    if found is None:
        return ""
    return f"{RESULT} = {ast.get_source_segment(line, found[1]) or ast.unparse(found[1])}"


def own_tools(lesson: Lesson, using: set[str], universe: Collection[str]) -> bool:
    """Whether the question ``lesson`` was learnt on, and its code, used only tools this task will use."""
    question = needs.tools_used(lesson.task, universe) if lesson.task else set()
    return bool(using) and (question | (needs.needed_tools(lesson) or set())) - needs.NOT_TOOLS <= using


def foreign_code(lesson: Lesson, task: str, using: set[str]) -> bool:
    """Whether ``lesson`` is a recipe of another question that calls a tool ``task`` will not use (``using``, when
    known): run with this task's values, it computes that question's answer, not this one's."""
    recipe = lesson.recipe
    if recipe is None or not using or not task or same_question(recipe.task, task):
        return False
    return not (needs.needed_tools(lesson) or set()) - needs.NOT_TOOLS <= using
