"""Did a run reproduce a recipe: its statements in order, names renamed one to one, values of the same shape.

A small model copies a recipe badly as often as not; a failed run that did not reproduce the recipe failed with its
own code, so credit (``lessonbank.learn.credit``) does not blame the recipe for it.
"""

from __future__ import annotations

import ast

from lessonbank.core.models import Lesson
from lessonbank.learn import code, fixtext
from lessonbank.learn.view import RunView


def skeleton(stored: set[str], seen: list[str]) -> code.Normaliser:
    """Names the code assigns become ``v`` (``seen`` lists them in order); constants become their shape
    (``'USR-1471'`` -> ``'a-9'``), except subscript keys (``row['user_id']`` stays: a key is a fact)."""

    def name(node: ast.Name) -> ast.AST:
        if node.id in stored:
            seen.append(node.id)
            return ast.Name("v", node.ctx)
        return node

    def constant(node: ast.Constant) -> ast.AST:
        return node if isinstance(node.value, bool) or node.value is None else ast.Constant(fixtext.shape(node.value))

    return code.Normaliser(name, constant, keys=True)


_BODIES = ("body", "orelse", "finalbody", "handlers")


def _quiet(node: ast.stmt) -> bool:
    """A statement that cannot change an answer: an import, ``pass``, a bare ``print(...)``."""
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.Pass)):
        return True
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "print")


Statement = tuple[str, tuple[str, ...]]


def statements(*codes: str) -> list[Statement]:
    """The statements of ``codes`` (a run's steps: smolagents keeps variables from step to step) in order,
    nested ones included (a compound statement as its header), each as (skeleton, the assigned names it
    uses in order), less those that cannot change an answer. Code that does not parse adds nothing."""
    trees = []
    for source in codes:
        try:
            trees.append(ast.parse(source))
        except (SyntaxError, ValueError, RecursionError):
            continue
    stored = {node.id for tree in trees for node in ast.walk(tree)
              if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    found: list[Statement] = []

    def add(body: list[ast.stmt]) -> None:
        for node in body:
            if _quiet(node):
                continue
            nested = [getattr(node, name, []) for name in _BODIES if name != "handlers"]
            nested += [handler.body for handler in getattr(node, "handlers", [])]
            head = type(node)(**{k: ([] if k in _BODIES else v) for k, v in ast.iter_fields(node)})
            seen: list[str] = []
            found.append((ast.dump(skeleton(stored, seen).visit(head)), tuple(seen)))
            for part in nested:
                add(part)

    for tree in trees:
        try:
            add(tree.body)
        except RecursionError:
            continue
    return found


def _in_order(wanted: list[Statement], seen: list[Statement]) -> bool:
    """Each wanted statement matches a later seen one: the same skeleton, names renamed one to one."""
    forward: dict[str, str] = {}
    backward: dict[str, str] = {}
    position = 0
    for shape, names in wanted:
        for index in range(position, len(seen)):
            other, others = seen[index]
            if other != shape or len(others) != len(names):
                continue
            pairs = set(zip(names, others, strict=True))
            if all(forward.get(a, b) == b and backward.get(b, a) == a for a, b in pairs) \
                    and len({a for a, _ in pairs}) == len({b for _, b in pairs}) == len(pairs):
                forward.update(pairs)
                backward.update((b, a) for a, b in pairs)
                position = index + 1
                break
        else:
            return False
    return True


def unfollowed(lesson: Lesson, run: RunView) -> bool:
    """A recipe the run applied but did not reproduce: its code (step after step) does not hold the recipe's
    statements in order, with names renamed one to one and values of the same shape (a dropped loop, a
    ``round()`` added, another date format, one more division before the answer). A small model copies a
    recipe badly as often as not; the failure of such a run says nothing about the recipe, so it is not
    blamed (its success still counts as help)."""
    if lesson.recipe is None or lesson.recipe.language != "python":
        return False
    wanted = statements(lesson.recipe.code)
    return bool(wanted) and not _in_order(wanted, statements(*(s.code for s in run.actions)))
