"""Recipes: the code that solved a task, taken from a run whose outcome verified it, without an LLM.

For a CodeAgent run, the code of the steps that did not fail, in order, trimmed to what the answer needs
(``trim``), answering with the value the run computed rather than a literal the model copied (``answers``); for
a run of an agent that calls tools by name (a ToolCallingAgent), the sequence of its calls with their arguments,
the code its interpreter tool ran among them (such an agent can follow only calls). Secrets are redacted, the
size capped, the code must parse.

The values that came from the task (found by where they flow into the code: ``params``; an account, a region, a
date, a threshold) are the recipe's parameters: the next run must adapt them. The code must hold every value the
task gives (``ignored_values``): a right answer without one is chance. The fingerprint hashes the code with its
local names renamed in order of first use and its parameters replaced (``code.Normaliser``), so the same code
from several runs of similar tasks is one recipe. A ToolCallingAgent's recipe keeps its calls, not the answer it
gave (its ``final_answer`` call's arguments are left out: they are this run's answer); when the step limit forced
its answer, a right one, its calls end at the one whose result stated it.
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
from lessonbank.learn import fixtext, params
from lessonbank.learn.adapters import toolcalling
from lessonbank.learn.adapters.calls import as_line
from lessonbank.learn.answers import (
    answer_from_variables,
    answer_literal,
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
    prune,
    ran_before_failure,
    tried_again,
)
from lessonbank.learn.view import RunView, Step

logger = logging.getLogger(__name__)


def kept_task(task: str, redactor: Redactor) -> str:
    """A run's task as a lesson keeps it (a recipe's, an observed fix's): capped, then redacted."""
    return redactor.redact(task[:MAX_TASK_CHARS])


def params_of(tree: Iterable[ast.AST], task: str) -> list[str]:
    """The values of the code that came from the task (``params.flows``): what the next run must adapt."""
    return [param.value for param in params.flows(list(tree), task)]


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
    wrote another way: code that gave the right answer without using them got it by chance (``len(result)``
    counting a dict's keys), and handed on it answers the next task wrongly. A number counts only as a constant of
    its own: a limit written into a tool's query text (``query='load above 80 percent'``) is no computation with it.
    A compound word of letters counts as held when the code uses one of its parts (``_part_used``)."""
    rewritten = {fixtext.rewritten_from(param, task) for param in params}
    constants = _constants(code)
    held = [word for word in dict.fromkeys(fixtext.WORD.findall(task[:MAX_TASK_CHARS])) if is_param(word, task)]
    return [word for word in held if word not in rewritten and (
        word not in constants and repr(float(word)) not in constants if _NUMBER.fullmatch(word)
        else word not in code and not _part_used(word, code))]


_COMPOUND = re.compile(r"[A-Za-z]+(?:[-_][A-Za-z]+)+")
MIN_PART = 3  # shorter parts of a compound ("eu", "of") say nothing about the code


def _part_used(word: str, code: str) -> bool:
    """Whether ``word``, a compound of letters (``on-call``, ``read_sensor``), has a part the code uses
    (``calls``, ``sensor``): such a word is a noun or a name in the question, which code writes its own way."""
    if not _COMPOUND.fullmatch(word):
        return False
    lowered = code.lower()
    return any(len(part) >= MIN_PART and part.lower() in lowered for part in re.split(r"[-_]", word))


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


def _states(step: Step, literal: str) -> bool:
    """Whether what ``step``'s call returned states ``literal``: the whole of it, or what its interpreter tool's code
    printed on a line of its own or ended with."""
    printed, last = toolcalling.interpreter_output(step.observation)
    return literal in {step.observation.strip(), last, *(line.strip() for line in printed.splitlines())}


def _answered(calls: list[tuple[dict[str, object], Step]], answer: str, task: str,
              verified_by: str) -> list[dict[str, object]] | None:
    """The calls up to the one whose result first stated the run's answer, then ``final_answer``, for a run a user
    or a check judged right whose answer no ``final_answer`` call gave (smolagents forced it after the step limit);
    None when none stated it."""
    literal = answer_literal(answer, task) if verified_by in JUDGES else None
    at = next((index for index, (_, step) in enumerate(calls) if literal is not None and _states(step, literal)),
              None)
    return None if at is None else [call for call, _ in calls[:at + 1]] + [{"name": "final_answer", "arguments": {}}]


def _superseded(call: dict[str, object], later: dict[str, object]) -> bool:
    """Whether ``later`` is ``call`` tried again (``trim.tried_again``; not the interpreter or ``final_answer``):
    the first try's result was not what the run went on with; handed over, it is a call the next run makes for
    nothing, with the setting that was changed (a code recipe drops it alike: ``trim.prune``)."""
    before, after = call["arguments"], later["arguments"]
    if call["name"] in (toolcalling.CODE_TOOL, "final_answer") or not (isinstance(before, dict)
                                                                       and isinstance(after, dict)):
        return False
    return tried_again((str(call["name"]), before), (str(later["name"]), after))


def _tool_call_recipe(run: RunView, redactor: Redactor, verified_by: str) -> Recipe | None:
    task = run.task
    made: list[tuple[dict[str, object], Step]] = []
    for step in run.actions:
        if step.failed:
            continue
        for call in step.requests:
            try:
                arguments = json.loads(call.arguments) if call.arguments else {}
            except ValueError:
                arguments = call.arguments
            made.append(({"name": call.name, "arguments": arguments}, step))
    calls: list[dict[str, object]] | None = [call for call, _ in made]
    checks = ["json"]
    if made and made[-1][0]["name"] != "final_answer":
        calls = _answered(made, run.final_answer, task, verified_by)
        checks.append("answer:printed")
    if not calls or calls[-1]["name"] != "final_answer":
        return None
    calls = [call for at, call in enumerate(calls) if not any(_superseded(call, later) for later in calls[at + 1:])]
    calls[-1] = {"name": "final_answer", "arguments": {}}  # the answer is this run's, not the recipe's
    code = redactor.redact(json.dumps(calls, ensure_ascii=False))
    if len(code) > MAX_CODE_CHARS:
        return None
    pieces = [toolcalling.interpreter_code(str(c["name"]), c["arguments"]) or as_line(str(c["name"]), c["arguments"])
              for c in calls if isinstance(c["arguments"], dict)]  # the interpreter's code is read as code
    trees = [tree for piece in pieces if (tree := pycode.parse_line(piece)) is not None]
    shape = json.dumps([(c["name"], sorted(c["arguments"]) if isinstance(c["arguments"], dict) else "")
                        for c in calls])
    return Recipe(language="tool_calls", code=code, task=kept_task(task, redactor), params=params_of(trees, task),
                  checks=checks, fingerprint=hashlib.sha256(shape.encode()).hexdigest()[:32])


def extract(run: RunView, redactor: Redactor, verified_by: str) -> Recipe | None:
    """The recipe of a run that ended well (``verified_by``: user, check or signals), or None."""
    calls_tools = any(step.requests for step in run.actions)  # a CodeAgent's steps make no call by name
    if not calls_tools and any(step.code.strip() for step in run.actions):
        recipe = _code_recipe(run, list(run.tools or ()), redactor, verified_by)
    else:
        recipe = _tool_call_recipe(run, redactor, verified_by)
    if recipe is not None:
        recipe.checks.append(f"outcome:{verified_by}")
        recipe.tools = called_tools(recipe)
    return recipe
