"""Observed fixes: a line a step failed at, and the corrected line a later step got past it with, kept
as a fact without an LLM.

A small agent that ran ``get_weather(city="Graz", date="2024-03-17")``, got a ValueError and then ran
``get_weather(city="Graz", date="17.03.2024")`` has found out how the tool wants its dates. The distiller's
account of it is often wrong ("the field name is 'high_temperature'") and worded anew by every run, so it
never gathers the two runs of evidence a lesson needs before runs get it; and a run that fails for another
reason afterwards leaves no recipe. The two lines themselves are what the next run needs (the text is
``learn.render``'s, from the fix's payload)::

    Pass `date` like "17.03.2024", not like "2024-03-17": `result = get_weather(city="Graz",
    date="2024-03-17")` failed with ValueError; the corrected line `result = get_weather(city="Graz",
    date="17.03.2024")` worked.

Only a fix that corrects values is kept, so that what the run read cannot write the next run's code:

- the corrected line calls nothing the failing line did not call, and does not answer (``final_answer``);
  if the failing line called something, the corrected one still does (a line that drops the call, such as
  ``temp = weather_data["Graz"][date]`` over a dict the agent typed in itself, is no correction); it reads
  no name the failing line did not read (``print(total / 100)`` for ``print(inv['total'] / 100)`` only
  works with the line that computed ``total``, and handing it on names the wrong key to the next run), and
  still does every operation the failing line did (``invoice_lines = invoice['lines']`` is no correction of
  ``total = invoice['total_amount'] * 0.85``: it is another line of the step, and the next run copies the
  failing line it is shown);
- a value it passes that the failing line did not (a string, or a number of 5 digits or more) was not
  copied from what the run had observed before (tool output, error messages): a page or an error message
  cannot hand the next runs a URL, a recipient or an account. Values from the task are the user's.
  Subscript keys may come from what it observed: ``result['data']['items']`` is the shape of the data;
- the correction is not just the task's own value put in place of another of the same form
  (``invoice_id='INV-4356'``, the task's id, after a wrong one copied from a lesson): that says nothing
  another task can reuse (the task's date in place of the run's own ``05/03/2024`` is a fix of the form);
- both lines parse on their own, fit in ``MAX_LINE`` characters and hold no secret; the lesson quotes no
  error message, only the exception's name (and, rebuilt from ``learn.asked``'s closed vocabulary, the
  date form the error named, if the corrected line wrote its date in it);
- the corrected step did not get an empty result back (``{'records': []}``): a tool that accepts a wrong
  value without an error (a date with its day and month swapped) would otherwise make it a "fix"; the
  next step that got data (or printed nothing) is compared instead.

In a run judged wrong (by a user or the check), a fix whose corrected line computed the run's answer
is not kept (``gave_the_answer``): the line ran, but its value was the wrong answer.

A step whose error names the date form the tool wants (``expected DD.MM.YYYY``) and that no later step
corrected gives a fix of another kind (``learn.asked``): its failing line with the task's date, passed
to a call by keyword or position, written in that form. Its text says that no step ran it ("(not tried
yet)"); the error decides only the order and separators of the date the run passed, never a value. A later
step that passed the rewritten date (or whose output shows it, as a tool echoing a date the run computed)
leaves no such fix: it worked (and was kept as observed, or as a recipe) or it did not. A later run that was
given such a fix and ran its line (with its own task's values, as the instructions gave it) and got data back
confirms it (``confirmed``): the fix is kept as seen to work, its lines with that run's values; the run is no
evidence of its own for it (it was told the line), so it is not counted as a source.

Such a fact (origin ``observed``) is given to runs from the run that observed it: the tool rejecting one
line and the next step running the corrected one is its evidence. The fingerprint keeps the shape of the
correction (``'9-9-9'`` -> ``'9.9.9'`` for a date, the keys for a subscript) and drops what the task
changes (the city, local names), so the same fix seen by several runs is one lesson with more evidence.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import re
from collections import Counter
from dataclasses import dataclass

from lessonbank.core.models import FixPayload, Lesson
from lessonbank.core.redact import Redactor
from lessonbank.learn import answers, asked, code, evidence, fixtext, render
from lessonbank.learn.view import RunView, Step

MAX_LINE = 200
MAX_LINES = 400  # lines of the later step compared with the failing one
MIN_RATIO = 0.5
MAX_FIXES = 3
LOOSE_NUMBER = 10_000  # smaller numbers are not worth copying from a page (a limit, a page number)
ANSWERERS = frozenset({"final_answer"})
_EXCEPTION = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]{0,60})(?::|$)")


@dataclass(frozen=True)
class Fix:
    """A failing line and the corrected line that worked; ``steps`` are their record ``seq``."""

    failed: str
    fixed: str
    error: str
    steps: tuple[int, int]
    fingerprint: str
    form: str = ""  # the date form the error named, when the corrected line wrote its date that way
    tried: bool = True  # False for a fix the error asked for, which no step ran (``learn.asked``)

    @property
    def text(self) -> str:
        return render.fix(self.payload)

    @property
    def payload(self) -> FixPayload:
        return fixtext.payload(self.failed, self.error, self.fixed, self.form, self.tried)


def _key_constants(tree: ast.AST) -> set[int]:
    """ids of the constants that index a subscript: the data's keys."""
    return {id(n) for sub in ast.walk(tree) if isinstance(sub, ast.Subscript)
            for n in ast.walk(sub.slice) if isinstance(n, ast.Constant)}


def _constants(tree: ast.AST) -> list[tuple[ast.Constant, bool]]:
    keys = _key_constants(tree)
    return [(n, id(n) in keys) for n in ast.walk(tree) if isinstance(n, ast.Constant)]


def _calls(tree: ast.AST) -> set[str]:
    return {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}


def _operations(tree: ast.AST) -> Counter[str]:
    """The arithmetic, comparisons and boolean operations a line does (``* 0.85``, ``<``, ``and``)."""
    found: Counter[str] = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp | ast.BoolOp):
            found[type(node.op).__name__] += 1
        elif isinstance(node, ast.Compare):
            found.update(type(op).__name__ for op in node.ops)
    return found


def _read(tree: ast.AST) -> set[str]:
    """The names a line reads (not the functions it calls)."""
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and id(n) not in called}


def _given(value: object, task: str) -> bool:
    """Whether the task itself holds the value (as written)."""
    text = str(value).strip().lower()
    return len(text) >= 2 and text in task.lower()


def _copied(value: object, seen: str, task: str) -> bool:
    """Whether a value the corrected line passes could have been copied from what the run observed
    (``seen``, lower-cased)."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float) and abs(value) < LOOSE_NUMBER:
        return False
    text = str(value).lower()
    return bool(text.strip()) and text not in task.lower() and text in seen


def _skeleton(tree: ast.Module, shared: set[str]) -> str:
    """The correction's line with local names as ``v``, the values both lines share as ``_`` and the values it
    changed as their shape (subscript keys kept): what the same fix from several runs has in common."""
    calls, keys = {name for name in _calls(tree) if "." not in name}, _key_constants(tree)

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


def _best_match(failed: str, code: str) -> str | None:
    """The line of ``code`` most like ``failed`` (None if none is close enough or it is the same line)."""
    best, best_ratio = None, MIN_RATIO
    for line in code.splitlines()[:MAX_LINES]:
        line = line.strip()
        if not line or len(line) > MAX_LINE or line.startswith("#"):
            continue
        matcher = difflib.SequenceMatcher(None, failed, line, autojunk=False)
        if matcher.real_quick_ratio() > best_ratio and matcher.quick_ratio() > best_ratio:
            ratio = matcher.ratio()
            if ratio > best_ratio:
                best, best_ratio = line, ratio
    if best is None or " ".join(best.split()) == " ".join(failed.split()):
        return None
    return best


def _fix(failed_step: Step, later: Step, seen: str, task: str, redactor: Redactor) -> Fix | None:
    failed = evidence.named_failing_line(failed_step)  # none named: the fix cannot be pinned to a line
    if not failed or len(failed) > MAX_LINE or "`" in failed:
        return None
    fixed = _best_match(failed, later.code)
    if fixed is None or "`" in fixed:
        return None
    before, after = code.parse_line(failed), code.parse_line(fixed)
    if before is None or after is None:
        return None
    calls, called = _calls(after), _calls(before)
    if not calls <= called or calls & ANSWERERS:
        return None
    if called and not calls:  # the call was dropped, not corrected (a run that made its own data up)
        return None
    if _read(after) - _read(before):  # it reads a value another line computed: the fix is in that line
        return None
    if _operations(before) - _operations(after):  # it dropped what the failing line computed: another line
        return None
    constants_before, constants_after = _constants(before), _constants(after)
    old = {repr(node.value) for node, _ in constants_before}
    new = [node.value for node, is_key in constants_after if repr(node.value) not in old and not is_key]
    if any(_copied(value, seen, task) for value in new):
        return None
    kept = {repr(node.value) for node, _ in constants_after}
    replaced = [node.value for node, is_key in constants_before if repr(node.value) not in kept and not is_key]
    if new and all(_given(value, task) for value in new) and (
            sorted(map(fixtext.shape, new)) == sorted(map(fixtext.shape, replaced))):
        return None  # the task's own value in place of another of the same form: nothing another task can reuse
    if redactor.redact(failed) != failed or redactor.redact(fixed) != fixed:
        return None
    error = _exception(failed_step)
    form = _form_named(failed_step, failed, fixed)
    return Fix(failed, fixed, error, (failed_step.seq, later.seq), _fingerprint(error, before, after), form)


def _form_named(step: Step, failed: str, fixed: str) -> str:
    """The date form the step's error named (``DD.MM.YYYY``), if the correction changed one value, a date
    whose order is certain, into that form ("" otherwise): with it, the fix carries over to a next task's date
    even when the example's parts cannot say which is the day (``fixtext.carry_over``)."""
    changed = fixtext.changed_keywords(failed, fixed)
    if len(changed) != 1:
        return ""
    _, old, new = changed[0]
    form = asked.asked_form(step.error)
    day = asked.read_date(old)
    return form.name if form is not None and day is not None and form.write(day) == new else ""


def _fingerprint(error: str, before: ast.Module, after: ast.Module) -> str:
    """The correction's shape: the same fix seen by several runs (or asked for, then observed) is one."""
    shared = {repr(node.value) for node, _ in _constants(before)} & {repr(node.value) for node, _ in _constants(after)}
    print_ = f"{error}|{_skeleton(before, shared)}|{_skeleton(after, shared)}"
    return hashlib.sha256(print_.encode()).hexdigest()[:32]


def _asked_fix(step: Step, later: list[Step], task: str, redactor: Redactor) -> Fix | None:
    """The failing line with the task's date written in the form the step's error names (see the module's
    text); None unless the line passes exactly one date, that the task gave, to a call (by keyword or
    position)."""
    failed = evidence.named_failing_line(step)
    if not failed or len(failed) > MAX_LINE or "`" in failed:
        return None
    before = code.parse_line(failed)
    calls = _calls(before) if before is not None else set()
    if before is None or not calls or calls & ANSWERERS:
        return None
    dates = [node for node, _ in _constants(before) if isinstance(node.value, str)
             and asked.read_date(node.value) is not None]
    passed = {id(k.value) for k in ast.walk(before) if isinstance(k, ast.keyword)} | {
        id(arg) for call in ast.walk(before) if isinstance(call, ast.Call) for arg in call.args}
    if len(dates) != 1 or id(dates[0]) not in passed or not _given(dates[0].value, task):
        return None
    value = str(dates[0].value)
    found = asked.rewrite(value, step.error)
    if found is None:
        return None
    written, form = found
    quoted = [q + value + q for q in ('"', "'") if q + value + q in failed]
    if len(quoted) != 1 or failed.count(quoted[0]) != 1:
        return None
    fixed = failed.replace(quoted[0], quoted[0][0] + written + quoted[0][0])
    # tried, as typed or computed (the tool echoes its date): it worked (an observed fix, a recipe) or it did not
    if any(written in other.code or written in other.observation for other in later):
        return None
    after = code.parse_line(fixed)
    if after is None or redactor.redact(failed) != failed or redactor.redact(fixed) != fixed:
        return None
    error = _exception(step)
    return Fix(failed, fixed, error, (step.seq, step.seq), _fingerprint(error, before, after), form.name,
               tried=False)


def confirmed(given: list[Lesson], run: RunView) -> list[Fix]:
    """The fixes an error asked for (``(not tried yet)``) that this run was given and ran: a step that did not
    fail and did not get an empty result back holds the corrected line, with this task's values as the
    instructions gave it (``fixtext.in_task``). Each comes back as observed (tried), its lines with this task's
    values, with the fingerprint of the asked fix, which ``Consolidator.add_observed`` then rewrites as seen to
    work (a run given the fix wrote its line first and the tool answered: no step failed, so ``extract`` finds
    nothing, and the fix would say "not tried yet" to every later run)."""
    task = run.task
    actions = [step for step in run.actions
               if not step.failed and step.code.strip() and evidence.result(step.printed) != "empty"]
    found: list[Fix] = []
    for lesson in given:
        if lesson.kind != "fact" or "fix" not in lesson.tags or lesson.fix is None or lesson.fix.tried:
            continue
        placed = fixtext.in_task(lesson.fix, task, lesson.task) or lesson.fix
        failed, fixed = placed.failed, placed.fixed
        before, after = code.parse_line(failed), code.parse_line(fixed)
        wanted = " ".join(fixed.split())
        step = next((s for s in actions if any(" ".join(line.split()) == wanted
                                               for line in s.code.splitlines()[:MAX_LINES])), None)
        if before is None or after is None or step is None:
            continue
        error, form = placed.error, fixtext.form_of(placed)
        fix = Fix(failed, fixed, error, (step.seq, step.seq), _fingerprint(error, before, after),
                  form.name if form is not None else "")
        if all(fix.fingerprint != other.fingerprint for other in found):
            found.append(fix)
    return found


def gave_the_answer(fix: Fix, run: RunView) -> bool:
    """Whether the value the fix's corrected line assigned is the run's final answer: its step answered with it
    (``final_answer(total)``) or printed it as the answer the run then gave (``print(total)``, ``71.33``,
    then ``final_answer(71.33)`` or smolagents' forced answer at the step limit).

    In a run judged wrong, such a line did not work: it computed the wrong answer. The corrected line of
    ``total = sum(line['amount_cents'] / 100 ...)`` that raised KeyError, ``total = sum(line['unit_price_cents']
    / 100 ...)``, ran, but without the quantities; kept as "worked", the next runs copied it and gave its wrong
    total where the plain agent, given nothing, answered right. A line whose value only holds the answer (a
    record with several fields, from which the run took the wrong one) is not this: the fix got the data."""
    return fix.tried and line_gave_the_answer(fix.fixed, fix.steps[1], run)  # an asked fix's line never ran


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
    """The fixes a run observed: for each failed step, its failing line and the corrected line of the
    next step that did not fail and did not get an empty result back; then, for failed steps no later
    step corrected, the date fix their error asked for (at most ``MAX_FIXES`` in all, each fingerprint
    once, observed ones first)."""
    task, actions = run.task, run.actions
    found: list[Fix] = []
    uncorrected: list[int] = []
    for index, step in enumerate(actions):
        if not step.failed:
            continue
        # A step that ran but got nothing back may have passed a wrong value the tool accepts: not the fix.
        later = next((s for s in actions[index + 1:] if not s.failed and s.code.strip()
                      and evidence.result(s.printed) != "empty"), None)
        fix = None
        if later is not None and len(found) < MAX_FIXES:
            seen = "\n".join(part for s in actions if s.seq < later.seq
                             for part in (s.observation, s.error_message)).lower()
            fix = _fix(step, later, seen, task, redactor)
        if fix is None:
            uncorrected.append(index)
        elif all(fix.fingerprint != other.fingerprint for other in found):
            found.append(fix)
    for index in uncorrected:
        if len(found) >= MAX_FIXES:
            break
        fix = _asked_fix(actions[index], actions[index + 1:], task, redactor)
        if fix is not None and all(fix.fingerprint != other.fingerprint for other in found):
            found.append(fix)
    return found
