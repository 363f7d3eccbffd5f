"""Recipes: the code that solved a task, taken from a run whose outcome verified it, without an LLM.

For a CodeAgent run, the code of the steps that did not fail, in order, trimmed to what the answer needs
(``trim``), answering with the value the run computed rather than a literal the model copied (``answers``); for
a ToolCallingAgent run, the sequence of tool calls with their arguments. Secrets are redacted, the size capped,
the code must parse.

Literals that come from the task (a date, an id, a file name) are the recipe's parameters: the next run must
adapt them. The code must hold every value the task gives (``ignored_values``): a right answer without one is
chance. The fingerprint hashes the code with its local names renamed in order of first use and its parameters
replaced (``code.Normaliser``), so the same code from several runs of similar tasks is one recipe.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import hashlib
import json
import logging
import re
from collections.abc import Iterable

from lessonbank.core.models import Recipe
from lessonbank.core.redact import Redactor
from lessonbank.learn import code as pycode
from lessonbank.learn import fixtext
from lessonbank.learn.answers import (
    answer_from_variables,
    answer_where_printed,
    computes_answer,
    is_param,
)
from lessonbank.learn.needs import called_tools
from lessonbank.learn.trim import (
    MAX_CODE_CHARS,
    MAX_TASK_CHARS,
    answering_path,
    calls_final_answer,
    fold_dates,
    prune,
    ran_before_failure,
)
from lessonbank.learn.view import RunView, Step

logger = logging.getLogger(__name__)


def kept_task(task: str, redactor: Redactor) -> str:
    """A run's task as a lesson keeps it (a recipe's, an observed fix's): capped, then redacted."""
    return redactor.redact(task[:MAX_TASK_CHARS])


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


def fingerprint(statements: list[ast.stmt], tools: Iterable[str], params: Iterable[str]) -> str:
    """Hash of the normalised code: renamed locals and replaced parameters make runs comparable."""
    keep = set(tools) | pycode.BUILTINS | {"final_answer"}
    module = ast.Module(body=[copy.deepcopy(s) for s in statements], type_ignores=[])
    for node in ast.walk(module):
        if isinstance(node, ast.Import | ast.ImportFrom):
            keep.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
    renamed: dict[str, str] = {}
    wanted = set(params)

    def name(node: ast.Name) -> ast.AST:  # local names -> v0, v1, ... in order of first use
        if node.id not in keep:
            node.id = renamed.setdefault(node.id, f"v{len(renamed)}")
        return node

    def constant(node: ast.Constant) -> ast.AST:  # parameters -> a placeholder
        if isinstance(node.value, str | int | float) and str(node.value) in wanted:
            return ast.Constant(value="<param>")
        return node

    normalized = pycode.Normaliser(name, constant).visit(module)
    return hashlib.sha256(ast.dump(normalized, annotate_fields=False).encode()).hexdigest()[:32]


JUDGES = ("user", "check")  # who may find an answer right that the run's own code never gave


_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def _constants(code: str) -> set[str]:
    """The constants of ``code`` as text, numbers also as their float (``25`` and ``25.0`` are one)."""
    tree = pycode.parse(code) or []
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
        parsed = pycode.parse(step.code)
        if parsed is not None:
            parsed_steps.append((answering_path(parsed, answer) if step.is_final else parsed, step))
    answer_from_variables(parsed_steps, task)
    if not any(calls_final_answer(stmt) for statements, _ in parsed_steps for stmt in statements):
        answered = (answer_where_printed(parsed_steps, answer, task)
                    if verified_by in JUDGES else None)
        if answered is None:
            return None
        parsed_steps = answered
        checks.append("answer:printed")
    kept = prune([stmt for statements, _ in parsed_steps for stmt in statements], frozenset(optional))
    if (folded := fold_dates(kept)) is not kept:
        kept = prune(folded)  # the import a folded date needed goes
    if not computes_answer(kept, task):
        return None
    code = redactor.redact("\n".join(ast.unparse(s) for s in kept))
    tree = pycode.parse(code) if len(code) <= MAX_CODE_CHARS else None
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
        recipe.tools = called_tools(recipe)
    return recipe
