"""What a lesson kept from one task's run means for another task: its values placed, or named.

A recipe, a fix's lines or the call that got a result were written for the task of the run that observed them
(``Lesson.task``, ``Recipe.task``); the values they took from it are found by where they flow (``params.flows``)
and placed in the next task by role and form (``params.place``), whatever the words around them. A value that
cannot be placed is shown by its name (``<account_2>``), never as another task's value; an answer is never shown.

A recipe whose every value is placed is given as code to run, with this task's values (``recipe_example``); else
as an example to adapt: a function whose parameters are those values, called (in a comment) with this task's
values where known. Its task is shown with its values named (``"... account {account} ..."``), so that no value of
another question is handed on as this one's. A recipe of a question whose computation cannot be this task's (a value
of it has no counterpart here, or this task names more values) is given as how it got and read its data
(``learn.reads``): its computation answered its own question.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from lessonbank.core.models import FixPayload, Recipe
from lessonbank.learn import code as pycode
from lessonbank.learn import params, reads
from lessonbank.learn.adapters import toolcalling
from lessonbank.learn.adapters.calls import as_line

FUNCTION = "solve"
_FRAGMENT = re.compile(r"[^0-9a-z]+")


@dataclass(frozen=True)
class Example:
    """A recipe as given for a task: its code (or tool calls, one a line), whether its values are this task's
    (``placed``), what was placed (old -> new) and what is named, and its task with its values named."""

    code: str
    language: str
    placed: bool
    values: dict[str, str]
    names: dict[str, str]
    task: str
    reads_only: bool = False


def named_task(task: str, found: list[params.Param]) -> str:
    """``task`` with each parameter's value written as ``{name}``."""
    for param in sorted(found, key=lambda p: -len(p.source)):
        task = re.sub(rf"(?<![\w.\-]){re.escape(param.source)}(?![\w\-]|\.\w)", "{" + param.name + "}", task)
    return task


def fix_for(fix: FixPayload, solved: str, task: str) -> tuple[FixPayload, bool] | None:
    """``fix`` with the values its lines took from ``solved`` placed for ``task`` (named where they cannot be), and
    whether every one was placed; None when a line does not parse or naming hides what changed."""
    found = params.for_task([fix.failed, fix.fixed], solved, task)
    if found is None:
        return None
    (failed, fixed), _, names = found
    if (failed, fixed) == (fix.failed, fix.fixed):
        return fix, not names
    if failed == fixed:
        return None  # what changed is named away: only the lines as kept say what the correction was
    return fix.model_copy(update={"failed": failed, "fixed": fixed, "changed": None}), not names


def call_for(line: str, solved: str, task: str) -> str:
    """``line`` (a call that got a tool's result, for ``solved``) with ``task``'s values; "" unless every value it
    took from ``solved`` is placed."""
    found = params.for_task([line], solved, task)
    return found[0][0] if found is not None and not found[2] else ""


def _fragment(value: str) -> str:
    return _FRAGMENT.sub("_", value.lower()).strip("_")


def _renamed(tree: ast.AST, swaps: dict[str, str]) -> None:
    """Local names holding a replaced value's text (``transactions_acc_7083``) get the new text instead; a short
    one (``count_below_22_euros``) only as a whole part of the name between underscores."""
    pieces = {_fragment(old): _fragment(new) for old, new in swaps.items() if _fragment(old) and _fragment(new)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and pieces:
            for old, new in pieces.items():
                if len(old) >= 3 and old in node.id:
                    node.id = node.id.replace(old, new)
                elif len(old) < 3:
                    node.id = re.sub(rf"(?<![^_]){re.escape(old)}(?![^_])", new, node.id)


class _Answers(ast.NodeTransformer):
    """``final_answer(x)`` as ``return x``: the example's function gives its answer back."""

    def visit_Expr(self, node: ast.Expr) -> ast.AST:  # noqa: N802 (ast's naming)
        value = node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "final_answer" \
                and len(value.args) == 1 and not value.keywords:
            return ast.copy_location(ast.Return(value=value.args[0]), node)
        return node


def _function(tree: ast.Module, found: list[params.Param], values: dict[str, str]) -> str:
    names = {param.value: param.name for param in found}
    body = params.put_tree(tree, {}, names, as_names=True)
    _renamed(body, {value: names[value] for value in names})
    body = _Answers().visit(body)
    imports = [stmt for stmt in body.body if isinstance(stmt, ast.Import | ast.ImportFrom)]
    inner = [stmt for stmt in body.body if not isinstance(stmt, ast.Import | ast.ImportFrom)] or [ast.Pass()]
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(arg=p.name) for p in found], kwonlyargs=[],
                              kw_defaults=[], defaults=[])
    function = ast.FunctionDef(name=FUNCTION, args=arguments, body=inner, decorator_list=[], returns=None,
                               lineno=1)
    module = ast.fix_missing_locations(ast.Module(body=[*imports, function], type_ignores=[]))
    call = ", ".join(f"{p.name}={_literal(p.value, values[p.value]) if p.value in values else f'<{p.name}>'}"
                     for p in found)
    return f"{ast.unparse(module)}\n\n# for this task: final_answer({FUNCTION}({call}))"


def _literal(old: str, new: str) -> str:
    """``new`` written as a literal of the kind ``old`` was: a number stays a number."""
    for kind in (int, float):
        try:
            kind(old)
            return repr(kind(new))
        except ValueError:
            continue
    return json.dumps(new)


def recipe_example(recipe: Recipe, task: str, *, reads_only: bool = False) -> Example | None:
    """How ``recipe`` is given for ``task`` (see the module); None when its code does not parse. ``reads_only`` (a
    recipe of another question): only how it got and read its data (``learn.reads``), when anything is left out."""
    if recipe.language != "python":
        return _calls_example(recipe, task, reads_only=reads_only)
    try:
        tree = ast.parse(recipe.code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found = params.flows([tree], recipe.task)
    named = named_task(recipe.task, found)  # every value of its question named, those the code no longer uses too
    values = params.place(found, recipe.task, task) if task else {}
    reads_only = reads_only and (any(param.value not in values for param in found)
                                 or params.more_values(found, recipe.task, task))
    asked = {param.value for param in found} | params.task_values(recipe.task)
    part = reads.reduced(tree, asked) if reads_only else None
    if part is not None:  # its values placed again: the part may no longer use them all
        tree, found = part, params.flows([part], recipe.task)
        values = params.place(found, recipe.task, task) if task else {}
    if all(param.value in values for param in found):
        placed = params.put_tree(tree, values, {})
        _renamed(placed, values)
        return Example(ast.unparse(placed), "python", True, values, {}, named, part is not None)
    names = {param.value: param.name for param in found if param.value not in values}
    if part is not None:  # no function to call: the part gets data, it gives no answer
        return Example(ast.unparse(params.put_tree(tree, values, names)), "python", False, values, names, named, True)
    return Example(_function(tree, found, values), "python", False, values, names, named)


def _reading(name: str, arguments: dict[str, object], asked: set[str]) -> dict[str, object] | None:
    """A call's arguments, the code of the interpreter's cut to how it got and read its data (None: it calls no
    tool, or does not parse)."""
    code = toolcalling.interpreter_code(name, arguments)
    if not code:
        return arguments
    tree = pycode.parse_line(code)
    part = reads.reduced(tree, asked) if tree is not None else None
    if part is None:
        return arguments if tree is not None and any(reads.calls_tool(stmt) for stmt in tree.body) else None
    return toolcalling.with_code(name, arguments, ast.unparse(part))


_ONCE_CHARS = 2000


def _once(lines: list[str]) -> list[str]:
    """``lines`` without those made again: the same line, or one that is an earlier line but for values left to the
    model (``limit=<limit>`` after ``limit=100``: the same call, its value taken for the question's)."""
    kept: list[str] = []
    for line in lines:
        left = params.LEFT.findall(line)
        # two values left at most, in a line of bounded length: the pattern's backtracking stays small
        pattern = re.compile(params.LEFT.sub(r"[^,()]+", re.escape(line))) if 0 < len(left) <= 2 \
            and len(line) <= _ONCE_CHARS else None
        if line in kept or (pattern is not None and any(pattern.fullmatch(earlier) for earlier in kept)):
            continue
        kept.append(line)
    return kept


def _calls_example(recipe: Recipe, task: str, *, reads_only: bool = False) -> Example | None:
    """A ToolCallingAgent's recipe as its calls, one a line, with this task's values or their names, in its
    arguments and in the code its interpreter tool ran; ``reads_only``: its calls without ``final_answer``, the code
    its interpreter ran cut to how it got and read its data (``learn.reads``; left out when that calls no tool),
    when anything is left out."""
    try:
        calls = json.loads(recipe.code)
    except (ValueError, RecursionError):
        return None
    if not isinstance(calls, list):
        return None
    kept = [(str(call.get("name", "")), call.get("arguments") or {}) for call in calls
            if isinstance(call, dict) and isinstance(call.get("arguments") or {}, dict)]
    whole = [pycode.parse_line(toolcalling.interpreter_code(name, arguments) or as_line(name, arguments))
             for name, arguments in kept]
    asked = params.flows([tree for tree in whole if tree is not None], recipe.task)
    placed = params.place(asked, recipe.task, task) if task else {}
    reads_only = reads_only and (any(param.value not in placed for param in asked)
                                 or params.more_values(asked, recipe.task, task))
    if reads_only:
        mine = {param.value for param in asked} | params.task_values(recipe.task)
        part = [(name, _reading(name, arguments, mine)) for name, arguments in kept if name != "final_answer"]
        tools = [(name, arguments) for name, arguments in part if arguments is not None]
        reads_only = bool(tools) and tools != kept
        kept = tools if reads_only else kept
    pieces = [toolcalling.interpreter_code(name, arguments) or as_line(name, arguments) for name, arguments in kept]
    trees = [pycode.parse_line(piece) for piece in pieces]
    if not all(trees):
        return None
    found = params.flows([tree for tree in trees if tree is not None], recipe.task)
    values = params.place(found, recipe.task, task) if task else {}
    names = {param.value: param.name for param in found if param.value not in values}
    written = []
    for (name, arguments), piece in zip(kept, pieces, strict=True):
        put = params.put(piece, values, names)
        if put is None:
            return None
        written.append(as_line(name, toolcalling.with_code(name, arguments, put)) if put != piece
                       and toolcalling.interpreter_code(name, arguments) else put)
    if reads_only:  # the same call made again (a step that failed, tried as it was) says nothing more
        written = _once(written)
        left = "\n".join(written)  # a value left to the model only in a call left out is no longer asked for
        names = {value: name for value, name in names.items() if f"<{name}>" in left}
    return Example("\n".join(written), "tool_calls", not names, values, names, named_task(recipe.task, asked),
                   reads_only)
