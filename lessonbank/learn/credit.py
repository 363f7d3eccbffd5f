"""Credit: which of the lessons a run was given did it apply, and did that end well.

Applied is decided deterministically first: a lesson's distinctive tokens — keyword arguments with
their values (``delimiter=';'``), quoted literals, code names — must appear in the run's code or tool
arguments, and tokens the task itself contains do not count (any attempt would use them). A recipe is
applied when most of its own calls and literals are in the run's code. An observed fix is applied when
the run used what its corrected line changed: the same new key or literal, or a value of the same shape
(``date="02.01.2024"`` applies ``date="17.03.2024"``). Only applied lessons get credit: crediting
everything retrieved together reinforces noise. A failed run blames an observed fix only if one of its
failing lines is the fix's own (the same call with the corrected value), or if the run wrote the fix's
corrected line (with its own names) and answered with the value it computed: the fix says how one call
works, not how the whole run ends, unless its line computed the answer. An observed shape is applied
when the run subscripts its records' path (``['data']['items']``), and blamed by a failed run only when a
failing line does. A recipe is blamed by a failed run only when a step reproduced it (``unfollowed``,
``lessonbank.learn.follow``): a run that changed the recipe (dropped a loop, added a ``round()``, wrote a value
another way) failed with its own code, not the recipe's.

The counts move atomically per run (the caller holds the bank's lock) and idempotently: the credit a
run gave is kept with the run, so a later verdict (a user's feedback after distillation) replaces it
by its difference instead of adding to it. A lesson whose harmful evidence clearly outweighs its
helpful evidence (under a Beta(1 + helpful, 1 + harmful) belief, less than a 10 % chance that applying
it ends well more often than not) is retired: kept for audit with the reason, no longer given to runs.
So is a lesson given to ``IDLE_AFTER`` runs and applied by none of them (a plan, a wrong diagnosis or a
platitude the agents never act on): it costs every run prompt space and no run shows it helps. Lessons a
user added, imported or released (``lessons release`` brings a retired lesson back) are never retired as
idle: the user vouched for them.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field

from lessonbank.core.models import USER_ORIGINS, Lesson, Recipe, StatusCause
from lessonbank.learn import evidence, fixes, fixtext, follow, shapes
from lessonbank.learn.adapters.calls import as_line
from lessonbank.learn.follow import unfollowed as unfollowed  # one of credit's blame rules, kept beside them
from lessonbank.learn.view import RunView

RETIRE_BELOW = 0.10
IDLE_AFTER = 8
RECIPE_SHARE = 0.75
COMMON_NAMES = frozenset({
    "print", "len", "int", "str", "float", "list", "dict", "set", "sum", "range", "open", "json", "loads", "dumps",
    "round", "sorted", "max", "min", "final_answer", "append", "get", "items", "keys", "values", "split", "strip",
    "join", "format", "path", "file", "data", "text", "value", "result", "results", "the", "and",
})
_KWARG = re.compile(r"\b([A-Za-z_]\w{0,40})\s*=\s*(?:'([^'\n]{0,40})'|\"([^\"\n]{0,40})\"|([\w.+-]{1,40}))")
_QUOTED = re.compile(r"'([^'\n]{1,40})'|\"([^\"\n]{1,40})\"|`([^`\n]{1,60})`")
_CODE_NAME = re.compile(r"\b([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|[a-z]+_[a-z_0-9]+|[A-Za-z_]\w*(?=\())")
COUNTS = ("given", "applied", "helpful", "harmful")


@dataclass
class Atoms:
    """The comparable pieces of a text or a run: ``key=value`` pairs, literals and code names."""

    kwargs: set[str] = field(default_factory=set)
    literals: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)  # "key=" of unquoted values in prose ("page=1, 2, 3")

    def all(self) -> set[str]:
        return self.kwargs | self.literals | self.names

    def kwarg_values(self) -> set[str]:
        return {kwarg.split("=", 1)[1] for kwarg in self.kwargs}


def _norm(value: str) -> str:
    return " ".join(value.split()).lower()


def text_atoms(text: str) -> Atoms:
    """Atoms of a lesson written in prose (with code in backticks or inline)."""
    atoms = Atoms()
    for match in _KWARG.finditer(text):
        value = next((group for group in match.groups()[1:] if group is not None), "")
        if match.group(4) is not None:  # unquoted: a sentence's full stop is not part of the value
            value = value.rstrip(".,;:")
            atoms.keys.add(f"{match.group(1).lower()}=")
        atoms.kwargs.add(f"{match.group(1).lower()}={_norm(value)}")
    for match in _QUOTED.finditer(text):
        quoted = next(group for group in match.groups() if group is not None)
        if match.group(3) is not None:  # `code`: its names and kwargs count, not the whole span
            inner = text_atoms(quoted.replace("`", ""))
            atoms.kwargs |= inner.kwargs
            atoms.literals |= inner.literals
            atoms.names |= inner.names | {_norm(n) for n in _CODE_NAME.findall(quoted)}
        else:
            atoms.literals.add(_norm(quoted))
    atoms.names |= {_norm(name) for name in _CODE_NAME.findall(text)}
    return atoms


def code_atoms(code: str) -> Atoms:
    """Atoms of Python code (keyword arguments with constant values, string literals, called names)."""
    atoms = Atoms()
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return text_atoms(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg:
            atoms.kwargs.add(f"{node.arg.lower()}=")  # the keyword is used, whatever its value
            if isinstance(node.value, ast.Constant):
                atoms.kwargs.add(f"{node.arg.lower()}={_norm(str(node.value.value))}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) <= 40:
            atoms.literals.add(_norm(node.value))
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            atoms.names.add(_norm(name))
            atoms.names.add(_norm(name.rsplit(".", 1)[-1]))
        elif isinstance(node, ast.Attribute):
            atoms.names.add(_norm(node.attr))
    return atoms


def run_atoms(run: RunView) -> Atoms:
    """Atoms of what a run did: its code and its tool calls."""
    atoms = Atoms()
    for step in run.actions:
        lines = [code_atoms(call.line) for call in step.calls if call.line and not step.code.strip()]
        for part in [code_atoms(step.code), *lines] + [text_atoms(f"{c.name}({c.arguments})") for c in step.requests]:
            atoms.kwargs |= part.kwargs
            atoms.literals |= part.literals
            atoms.names |= part.names
        atoms.kwargs |= {kwarg.replace('"', "").replace("'", "") for kwarg in text_atoms(step.code).kwargs}
    return atoms


def _distinctive(atoms: Atoms, task: str) -> Atoms:
    task_text = task.lower()

    def keep(token: str) -> bool:
        return bool(token) and token not in COMMON_NAMES and token not in task_text

    return Atoms({k for k in atoms.kwargs if keep(k)}, {t for t in atoms.literals if keep(t)},
                 {n for n in atoms.names if keep(n) and len(n) > 2})


def applied(lesson: Lesson, run: Atoms, task: str) -> bool:
    """Whether a run whose code/tool calls have ``run`` atoms applied ``lesson``."""
    if lesson.recipe is not None:
        return _recipe_applied(lesson.recipe, run, task)
    if lesson.origin == "observed" and lesson.shape is not None:
        path, described = _shape_keys(lesson)
        return (path <= run.literals and bool(path)) or bool(described & run.literals)
    if lesson.origin == "observed" and (pieces := _fix_pieces(lesson, task)) is not None:
        exact, shaped = pieces
        return bool(exact & run.all() or exact & run.kwarg_values() or shaped & _shapes(run))
    atoms = text_atoms(lesson.text)
    mine = _distinctive(atoms, task)
    if mine.kwargs & run.kwargs or mine.literals & (run.literals | run.kwarg_values()):
        return True
    seen = run.names | run.literals
    names = len(mine.names) >= 1 and len(mine.names & seen) >= max(1, math.ceil(0.6 * len(mine.names)))
    if mine.kwargs or mine.literals:  # a value the run did not use; the same keyword counts if the value was loose
        return names and bool(atoms.keys & run.kwargs)
    return names


def _recipe_applied(recipe: Recipe, run: Atoms, task: str) -> bool:
    """Most of the recipe's own calls, keywords and literals are in the run (its parameters may differ)."""
    params = {_norm(p) for p in recipe.params}
    mine = _distinctive(code_atoms(recipe.code if recipe.language == "python" else _call_lines(recipe.code)), task)
    kwargs = {k if k.split("=", 1)[1] not in params else k.split("=", 1)[0] + "=" for k in mine.kwargs}
    kwargs = {k for k in kwargs if not k.endswith("=") or not any(other.startswith(k) and other != k
                                                                  for other in kwargs)}
    pieces = kwargs | (mine.literals - params) | mine.names
    return bool(pieces) and len(pieces & run.all()) >= math.ceil(RECIPE_SHARE * len(pieces))


def _call_lines(calls: str) -> str:
    """A ToolCallingAgent recipe's calls (JSON) as the lines of Python that make them, read like code."""
    try:
        parsed = json.loads(calls)
    except (ValueError, RecursionError):
        return calls
    if not isinstance(parsed, list):
        return calls
    return "\n".join(as_line(str(call.get("name", "")), call.get("arguments") or {}) for call in parsed
                     if isinstance(call, dict) and isinstance(call.get("arguments") or {}, dict))


_WORDS_ONLY = re.compile(r"[a ]*")


def _shaped(atom: str) -> str:
    """``date=17.03.2024`` -> ``date=9.9.9``; a literal -> its shape."""
    key, sep, value = atom.partition("=")
    return f"{key}={fixtext.shape(value)}" if sep else fixtext.shape(atom)


def _shapes(run: Atoms) -> set[str]:
    return {_shaped(kwarg) for kwarg in run.kwargs if not kwarg.endswith("=")} | {
        fixtext.shape(literal) for literal in run.literals}


def _fix_pieces(lesson: Lesson, task: str) -> tuple[set[str], set[str]] | None:
    """What an observed fix's corrected line changed: (exact kwargs and literals, their shapes when the
    shape says more than "a word"); None if the lesson is no fix."""
    if lesson.fix is None:
        return None
    failed, fixed = lesson.fix.failed, lesson.fix.fixed
    new, old = code_atoms(fixed), code_atoms(failed)
    kwargs = {k for k in new.kwargs - old.kwargs if not k.endswith("=")}
    literals = new.literals - old.literals
    exact = _distinctive(Atoms(kwargs, literals, set()), task)
    shaped = ({_shaped(k) for k in kwargs} - {_shaped(k) for k in old.kwargs}) | (
        {fixtext.shape(t) for t in literals} - {fixtext.shape(t) for t in old.literals})
    shaped = {s for s in shaped if not _WORDS_ONLY.fullmatch(s.partition("=")[2] if "=" in s else s)}
    return exact.kwargs | exact.literals, shaped


def _shape_keys(lesson: Lesson) -> tuple[set[str], set[str]]:
    """(the keys of a shape's records path, its described keys: ``shapes.described_keys``)."""
    shape = lesson.shape
    if shape is None:
        return set(), set()
    return {_norm(key) for key in shape.records or ()}, {_norm(key) for key in shapes.described_keys(shape)}


def blameless(lesson: Lesson, run: RunView) -> bool:
    """An observed fix or shape that no failing line of the run used, and (a fix) whose corrected line, as the
    run wrote it, did not compute the run's answer, or an observed failure (what a tool raised stays true of it
    however a run given it ends): a failed run does not blame it."""
    if lesson.origin != "observed":
        return False
    if lesson.failure is not None:
        return True
    pieces = _fix_pieces(lesson, run.task) if lesson.shape is None else None
    if lesson.shape is None and pieces is None:
        return False
    if pieces is not None and _answered_by_fixed_line(lesson, run):
        return False
    path, described = _shape_keys(lesson)
    for step in run.actions:
        if not step.failed:
            continue
        line = evidence.named_failing_line(step)
        atoms = code_atoms(line) if line else Atoms()
        if pieces is not None and (pieces[0] & atoms.all() or pieces[1] & _shapes(atoms)):
            return False
        if (path and path <= atoms.literals) or described & atoms.literals:
            return False
    return True


def _skeleton_of(tree: ast.AST) -> str | None:
    """``tree`` (changed in place) with every name it reads or sets, but the functions it calls, as ``v`` and its
    constants as their shapes (subscript keys kept): ``t = sum(r['qty'] for r in inv['lines'])`` and ``total =
    sum(x['qty'] for x in result['lines'])`` are the same line; None when nested deeper than the visitor follows."""
    try:
        called = {node.func.id for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
        names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} - called
        return ast.dump(follow.skeleton(names, []).visit(tree))
    except RecursionError:
        return None


def _answered_by_fixed_line(lesson: Lesson, run: RunView) -> bool:
    """The run wrote the fix's corrected line (its own names) in a step that did not fail, and the value it
    assigned is the run's answer: a run judged wrong then shows the line computes a wrong answer (a fix whose
    corrected line computes a total without a factor it needs is copied by later runs as their answer)."""
    try:
        wanted = _skeleton_of(ast.parse(lesson.fix.fixed).body[0]) if lesson.fix is not None else None
    except (SyntaxError, ValueError, RecursionError, IndexError):
        return False
    if wanted is None:
        return False
    for step in run.actions:
        if step.failed:
            continue
        try:
            tree = ast.parse(step.code)
        except (SyntaxError, ValueError, RecursionError):
            continue
        for stmt in tree.body:
            try:
                line = ast.unparse(stmt)  # before the skeleton changes the statement in place
            except RecursionError:  # nested deeper than unparsing follows: not the fix's line
                continue
            if _skeleton_of(stmt) == wanted and fixes.line_gave_the_answer(line, step.seq, run):
                return True
    return False


def altered(lesson: Lesson, run: Atoms, task: str) -> bool:
    """A recipe the run applied, but with calls of its own added (a conversion, a tool it invented): when
    such a run fails, the failure is the run's additions as much as the recipe's, so it is not blamed."""
    if lesson.recipe is None:
        return False
    recipe = code_atoms(lesson.recipe.code) if lesson.recipe.language == "python" else text_atoms(lesson.recipe.code)
    extra = {name for name in run.names - recipe.names - COMMON_NAMES if "." not in name and len(name) > 2}
    return bool(extra)


def chance_good(helpful: int, harmful: int) -> float:
    """P(p > 0.5) for p ~ Beta(1 + helpful, 1 + harmful): a binomial tail, exact for whole counts."""
    a, b = 1 + helpful, 1 + harmful
    n = a + b - 1
    return sum(math.comb(n, k) for k in range(a)) / 2**n


def should_retire(lesson: Lesson) -> bool:
    return lesson.harmful > lesson.helpful and chance_good(lesson.helpful, lesson.harmful) < RETIRE_BELOW


def is_idle(lesson: Lesson) -> bool:
    """Given to ``IDLE_AFTER`` runs or more, applied by none, and not vouched for by a user (added,
    imported or released by one)."""
    return (lesson.given >= IDLE_AFTER and lesson.applied == 0 and lesson.origin not in USER_ORIGINS
            and lesson.status_cause != "released")


def retire_cause(lesson: Lesson) -> StatusCause:
    """Why a lesson the credit retires is retired: harmful, else idle."""
    return "harmful" if should_retire(lesson) else "idle"


def retire_reason(lesson: Lesson) -> str:
    if should_retire(lesson):
        return (f"harmful in {lesson.harmful} of {lesson.applied} runs that applied it, helpful in "
                f"{lesson.helpful} (chance it helps: {chance_good(lesson.helpful, lesson.harmful):.0%})")
    return f"given to {lesson.given} runs, applied by none"


def flags(verdict: str, is_applied: bool, is_altered: bool = False) -> dict[str, int]:
    """The counts one run gives a lesson it was given: applied or not, and helpful or harmful by its verdict (a
    run that altered or did not follow the lesson, or failed where it was blameless, is not counted harmful)."""
    flags = {"given": 1, "applied": int(is_applied), "helpful": 0, "harmful": 0}
    if is_applied and verdict == "success":
        flags["helpful"] = 1
    elif is_applied and verdict == "failure" and not is_altered:
        flags["harmful"] = 1
    return flags
