"""Observed fixes: a call or line that failed, and the later call of the same tool, or operation on the same value,
that worked, with what changed; kept as a fact without an LLM.

A run that ran ``rows = get_sales(region="north")``, got a ValueError, printed something else, and later ran
``rows = get_sales(region="North")`` has found out how the tool wants its value; one whose ``df["Revenue"].sum()``
raised KeyError and whose later ``df["revenue"].sum()`` worked has found the column's name; one whose
``sum(float(r["kwh"]) for r in rows)`` failed and whose ``sum(float(r["kwh"].replace(",", "")) for r in rows)``
worked has found the conversion the data needs. The two lines are what the next run needs (the text is
``learn.render``'s, from the fix's payload; ``fixtext.changes`` says what changed: an argument's value or its form,
a key, a conversion).

The failing line is the one the view names (the executor's line, a traceback's, a failed tool call written as a
line: ``learn.adapters``). Its correction is looked for in every later step that got past it (one that did not
fail, and did not get an empty result back; in a step that failed, the statements it ran before its error): a
line that calls the same tool, or operates on the same value (reads the same name), and is the most like the
failing one. Only a correction of values is kept, so that what the run read cannot write the next run's code:

- it calls no tool the failing line did not call and does not answer (``final_answer``); if the failing line
  called a tool, it still does; any call it adds is a conversion (``CONVERSIONS``: Python's own and the
  standard library's data functions and methods), never one with an effect or of a module or builtin that can
  have one (``requests.get``, ``pickle.loads``, ``exec``: ``effects``), whatever its method's name;
- it reads no name the failing line did not read (but the ones it binds itself), and still does every operation
  the failing line did: otherwise the fix is in another line;
- it does not step around the failure (``_guards``): the test of an ``if``, ``while`` or ``assert`` where the
  failing line was another statement, a test whether a key the failing line read is there (``'owners' in repo``),
  or a default for it (``repo.get('owners', [])``) avoids the error without finding what the data holds;
- a value it passes that the failing line did not (a string, or a number of 5 digits or more) was not copied
  from what the run had observed before (tool output, error messages); values from the task are the user's, and
  subscript keys are the data's names;
- it is not just the task's own value put in place of another of the same form (``user_id='USR-4356'``, the
  task's id, after a wrong one copied from a lesson): that says nothing another task can reuse;
- both lines parse, fit in ``MAX_LINE`` characters and hold no secret; the lesson quotes no error message, only
  the exception's name.

In a run judged wrong (by a user or the check), a fix whose corrected line computed the run's answer is not kept
(``gave_the_answer``): the line ran, but its value was the wrong answer.

The fingerprint keeps the shape of the correction (``'9-9-9'`` -> ``'9.9.9'`` for a date, the keys for a
subscript) and drops what the task changes (the city, local names), so the same fix seen by several runs is one
lesson with more evidence.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import re
from collections import Counter
from dataclasses import dataclass

from lessonbank.core.models import FixPayload
from lessonbank.core.redact import Redactor
from lessonbank.learn import answers, code, effects, evidence, fixtext, render, trim
from lessonbank.learn.view import RunView, Step

MAX_LINE = 200
MAX_LINES = 400  # lines of a later step compared with the failing one
MIN_RATIO = 0.5
MAX_FIXES = 3
LOOSE_NUMBER = 10_000  # smaller numbers are not worth copying from a page (a limit, a page number)
ANSWERERS = frozenset({"final_answer"})
# What a correction may add: conversions of values, never a tool, the network or the file system.
CONVERSIONS = code.PURE_CALLS | code.PURE_METHODS | frozenset({
    "replace", "lstrip", "rstrip", "split", "rsplit", "splitlines", "title", "join", "startswith", "endswith",
    "removeprefix", "removesuffix", "isdigit", "casefold", "count", "find", "index", "format", "decode", "encode",
    "loads", "StringIO", "reader", "DictReader", "strptime", "strftime", "fromisoformat", "isoformat", "date",
    "timedelta", "Decimal", "fsum", "mean", "median", "sub", "findall", "search", "match", "fullmatch", "group",
    "append", "extend", "pop",
})
_EXCEPTION = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]{0,60})(?::|$)")


@dataclass(frozen=True)
class Fix:
    """A failing line and the corrected line that worked; ``steps`` are their record ``seq``."""

    failed: str
    fixed: str
    error: str
    steps: tuple[int, int]
    fingerprint: str
    tried: bool = True

    @property
    def text(self) -> str:
        return render.fix(self.payload)

    @property
    def payload(self) -> FixPayload:
        payload = fixtext.payload(self.failed, self.error, self.fixed)
        return payload if self.tried else payload.model_copy(update={"tried": False})


def _key_constants(tree: ast.AST) -> set[int]:
    """ids of the constants that index a subscript: the data's keys."""
    return {id(n) for sub in ast.walk(tree) if isinstance(sub, ast.Subscript)
            for n in ast.walk(sub.slice) if isinstance(n, ast.Constant)}


def _constants(tree: ast.AST) -> list[tuple[ast.Constant, bool]]:
    keys = _key_constants(tree)
    return [(n, id(n) in keys) for n in ast.walk(tree) if isinstance(n, ast.Constant)]


def _called(tree: ast.AST) -> set[str]:
    """The names a line calls: a plain name (``get_sales``, ``int``) or a method's (``replace``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            found.add(func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute)
                      else ast.unparse(func))
    return found


def _touching(tree: ast.AST) -> set[str]:
    """The calls a line makes that may do more than compute a value, whatever their method's name: one with an
    effect (``requests.get``, ``os.makedirs``), or of a module or builtin that can have one (``exec``)."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = effects.dotted(node.func, {})
        if callee and (effects.effect_of(callee, node) or effects.of_touching(callee)):
            found.add(callee)
    return found


def _operations(tree: ast.AST) -> Counter[str]:
    """The arithmetic, comparisons and boolean operations a line does (``* 0.85``, ``<``, ``and``)."""
    found: Counter[str] = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp | ast.BoolOp):
            found[type(node.op).__name__] += 1
        elif isinstance(node, ast.Compare):
            found.update(type(op).__name__ for op in node.ops)
    return found


def _bound(tree: ast.AST) -> set[str]:
    """Names a line binds for itself: comprehension and lambda variables."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension):
            found |= code.names(node.target, ast.Store)
        elif isinstance(node, ast.Lambda):
            found |= {arg.arg for arg in node.args.args}
    return found


def _read(tree: ast.AST) -> set[str]:
    """The names a line reads (not the functions it calls, nor the names it binds itself)."""
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and id(n) not in called} - _bound(tree)


def _given(value: object, task: str) -> bool:
    """Whether the task itself holds the value (as written)."""
    text = str(value).strip().lower()
    return len(text) >= 2 and text in task.lower()


def _copied(value: object, seen: str, task: str) -> bool:
    """Whether a value the corrected line passes could have been copied from what the run observed (``seen``,
    lower-cased)."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float) and abs(value) < LOOSE_NUMBER:
        return False
    text = str(value).lower()
    return bool(text.strip()) and text not in task.lower() and text in seen


def _skeleton(tree: ast.Module, shared: set[str]) -> str:
    """The correction's line with local names as ``v``, the values both lines share as ``_`` and the values it
    changed as their shape (subscript keys kept): what the same fix from several runs has in common."""
    calls, keys = {name for name in _called(tree)}, _key_constants(tree)

    def name(node: ast.Name) -> ast.AST:
        return node if node.id in calls else ast.Name(id="v", ctx=node.ctx)

    def constant(node: ast.Constant) -> ast.AST:
        if repr(node.value) in shared:
            return ast.Name(id="_", ctx=ast.Load())
        return node if id(node) in keys else ast.Constant(value=fixtext.shape(node.value))

    def text(part: ast.Constant) -> str:
        return "_" if repr(part.value) in shared else fixtext.shape(part.value)

    return ast.unparse(code.Normaliser(name, constant, text=text).visit(tree))


def _exception(step: Step) -> str:
    """The exception's name (never its message: that is text the run observed)."""
    match = _EXCEPTION.match(step.error)
    if match:
        return match.group(1)
    return step.error_type if step.error_type.isidentifier() else "an error"


def _lines(step: Step) -> list[str]:
    """The lines a later step ran: its statements (one line each, compound ones by their header), those before
    its error when it failed, and its tool calls written as lines."""
    lines = [call.line for call in step.calls if call.line and not call.failed and not step.code]
    if not step.code.strip():
        return lines
    statements = trim.ran_before_failure(step) if step.failed else code.parse(step.code) or []
    source = step.code.splitlines()
    for stmt in statements:
        for node in ast.walk(stmt):
            if isinstance(node, ast.stmt) and len(lines) < MAX_LINES and 0 < node.lineno <= len(source):
                first = source[node.lineno - 1]  # a statement's first line (get_source_segment splits the code)
                end = node.end_col_offset if node.end_lineno == node.lineno else None
                lines.append(first.encode()[node.col_offset:end].decode(errors="replace").strip())  # byte offsets
    return [line for line in dict.fromkeys(lines) if line and len(line) <= MAX_LINE and not line.startswith("#")]


def _related(before: ast.Module, after: ast.Module, tools: set[str]) -> bool:
    """The later line calls a tool the failing one called, or operates on a value it did (reads the same name)."""
    called = _called(before) & tools
    return bool(called & _called(after)) or bool(_read(before) & _read(after))


GUARDS = (ast.If, ast.While, ast.Assert)


def _keys(tree: ast.AST) -> set[object]:
    """The constant keys a line subscripts (``repo['owners']``: ``'owners'``)."""
    return {n.value for sub in ast.walk(tree) if isinstance(sub, ast.Subscript)
            for n in ast.walk(sub.slice) if isinstance(n, ast.Constant)}


def _guards(before: ast.Module, after: ast.Module) -> bool:
    """The later line steps around the failing one instead of correcting it: a test header where the failing line
    was another statement, or a test for (``'owners' in repo``) or a default for (``repo.get('owners', [])``) a key
    the failing line read."""
    kind = type(after.body[0]) if after.body else None
    if kind in GUARDS and kind is not (type(before.body[0]) if before.body else None):
        return True
    keys = _keys(before)
    for node in ast.walk(after):
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
            if any(isinstance(part, ast.Constant) and part.value in keys for part in [node.left, *node.comparators]):
                return True
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
              and node.args[0].value in keys):
            return True
    return False


def _corrects(before: ast.Module, after: ast.Module) -> bool:
    """The later line is a correction of values of the failing one (see the module's first three rules)."""
    calls, called = _called(after), _called(before)
    if _guards(before, after):
        return False
    if calls & ANSWERERS or not (calls - called) <= CONVERSIONS | trim.PRINTERS or _touching(after) - _touching(
            before):
        return False
    if (called - CONVERSIONS - trim.PRINTERS) - calls:  # the call was dropped, not corrected (data made up)
        return False
    if _read(after) - _read(before):  # it reads a value another line computed: the fix is in that line
        return False
    return not (_operations(before) - _operations(after))  # nor dropped what the failing line computed


def _candidate(failed: str, before: ast.Module, later: Step, tools: set[str]) -> tuple[str, ast.Module] | None:
    """The line of ``later`` most like ``failed`` that is related to it and corrects it (None when none is)."""
    best, best_ratio = None, MIN_RATIO
    wanted = " ".join(failed.split())
    for line in _lines(later)[:MAX_LINES]:
        if " ".join(line.split()) == wanted or "`" in line:
            continue
        matcher = difflib.SequenceMatcher(None, failed, line, autojunk=False)
        if matcher.real_quick_ratio() <= best_ratio or matcher.quick_ratio() <= best_ratio:
            continue
        ratio = matcher.ratio()
        after = code.parse_line(line) if ratio > best_ratio else None
        if after is not None and _related(before, after, tools) and _corrects(before, after):
            best, best_ratio = (line, after), ratio
    return best


def _fix(failed_step: Step, later: Step, seen: str, task: str, tools: set[str], redactor: Redactor) -> Fix | None:
    failed = evidence.named_failing_line(failed_step)  # none named: the fix cannot be pinned to a line
    before = code.parse_line(failed) if failed and len(failed) <= MAX_LINE and "`" not in failed else None
    found = _candidate(failed, before, later, tools) if before is not None else None
    if before is None or found is None:
        return None
    fixed, after = found
    old = {repr(node.value) for node, _ in _constants(before)}
    new = [node.value for node, is_key in _constants(after) if repr(node.value) not in old and not is_key]
    if any(_copied(value, seen, task) for value in new):
        return None
    kept = {repr(node.value) for node, _ in _constants(after)}
    replaced = [node.value for node, is_key in _constants(before) if repr(node.value) not in kept and not is_key]
    recased = {str(v).casefold() for v in new} == {str(v).casefold() for v in replaced}  # the same value, re-cased
    if new and not recased and all(_given(value, task) for value in new) and (
            sorted(map(fixtext.shape, new)) == sorted(map(fixtext.shape, replaced))
            and not fixtext.changed_keys(failed, fixed) and not fixtext.added_conversions(failed, fixed)):
        return None  # the task's own value in place of another of the same form: nothing another task can reuse
    if redactor.redact(failed) != failed or redactor.redact(fixed) != fixed:
        return None
    error = _exception(failed_step)
    return Fix(failed, fixed, error, (failed_step.seq, later.seq), _fingerprint(error, before, after))


def _fingerprint(error: str, before: ast.Module, after: ast.Module) -> str:
    """The correction's shape: the same fix seen by several runs is one."""
    shared = {repr(node.value) for node, _ in _constants(before)} & {repr(node.value) for node, _ in _constants(after)}
    print_ = f"{error}|{_skeleton(before, shared)}|{_skeleton(after, shared)}"
    return hashlib.sha256(print_.encode()).hexdigest()[:32]


def _tools(run: RunView) -> set[str]:
    """The tools of the run: its agent's, else every name its steps called as one."""
    return set(run.tools) if run.tools is not None else {call.tool for step in run.actions for call in step.calls}


def gave_the_answer(fix: Fix, run: RunView) -> bool:
    """Whether the value the fix's corrected line assigned is the run's final answer: its step answered with it
    (``final_answer(total)``) or printed it as the answer the run then gave (``print(total)``, ``71.33``,
    then ``final_answer(71.33)`` or smolagents' forced answer at the step limit).

    In a run judged wrong, such a line did not work: it computed the wrong answer; kept as "worked", the next runs
    would copy it and give its wrong total. A line whose value only holds the answer (a record with several
    fields, from which the run took the wrong one) is not this: the fix got the data."""
    return fix.tried and line_gave_the_answer(fix.fixed, fix.steps[1], run)


def line_gave_the_answer(line: str, seq: int, run: RunView) -> bool:
    """Whether the value ``line`` (a statement of step ``seq``) assigned is the run's final answer (see
    ``gave_the_answer``)."""
    answer = run.final_answer
    parsed = code.parse_line(line)
    step = next((s for s in run.actions if s.seq == seq), None)
    if not answer or parsed is None or step is None:
        return False
    targets = {target.id for stmt in parsed.body if isinstance(stmt, ast.Assign | ast.AnnAssign)
               for target in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
               if isinstance(target, ast.Name)}
    if not targets:
        return False
    try:
        tree = ast.parse(step.code)
    except (SyntaxError, ValueError, RecursionError):
        return False
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ANSWERERS
                and len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id in targets):
            return True
    return any(_value_of(expr) in targets and _read_as(text.strip(), answer)
               for expr, text in answers.shown_values(tree.body, step))


_DECIMALS = re.compile(r"-?[0-9]+\.([0-9]{1,6})")


def _read_as(printed: str, answer: str) -> bool:
    """``answer`` is what was printed, or the printed number as a model types it back: rounded to the
    answer's decimals (``120.46000000000001`` answered ``120.46``)."""
    if answers.same_value(printed, answer):
        return True
    decimals = _DECIMALS.fullmatch(answer)
    try:
        return decimals is not None and round(float(printed), len(decimals[1])) == float(answer)
    except (ValueError, OverflowError):
        return False


def _value_of(expr: ast.expr | None) -> str | None:
    """The name a printed value shows: ``total``, or ``round(total, 2)`` (``{total:.2f}``)."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "round" and expr.args:
        expr = expr.args[0]
    return expr.id if isinstance(expr, ast.Name) else None


def extract(run: RunView, redactor: Redactor) -> list[Fix]:
    """The fixes a run observed: for each failed step, its failing line and its correction in the first later
    step that holds one (see the module), at most ``MAX_FIXES``, each fingerprint once."""
    task, actions, tools = run.task, run.actions, _tools(run)
    found: list[Fix] = []
    for index, step in enumerate(actions):
        if not step.failed or len(found) >= MAX_FIXES:
            continue
        for later in actions[index + 1:]:
            if not (later.code.strip() or later.calls) or evidence.result(later.printed) == "empty":
                continue  # a step that got nothing back may have passed a wrong value the tool accepts
            seen = "\n".join(part for s in actions if s.seq < later.seq
                             for part in (s.observation, s.error_message)).lower()
            fix = _fix(step, later, seen, task, tools, redactor)
            if fix is not None:
                if all(fix.fingerprint != other.fingerprint for other in found):
                    found.append(fix)
                break
    return found
