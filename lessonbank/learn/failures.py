"""Observed failures: a call of one of the agent's tools that raised, kept without an LLM as what to avoid, when no
later step of the run got that tool to work.

A run that failed often has nothing else to teach: no correction to make a fix of (``learn.fixes``), no result
to take a shape from (``learn.shapes``). What its calls raised is still a fact about the tool: a
``rows = get_sales(region="north")`` that raised ``ValueError: unknown region 'north'; regions are written
capitalised`` says how the tool wants its value, whatever the run did next.

The item keeps the failing line with each value its call was passed replaced by its role (``<region>``: the
keyword it was passed as, or its name as a parameter of the task, ``learn.params``), how each value the error
names was written (``"a"``: lower case letters; ``"9999-99-99"``; ``blamed``), the exception's name and its
message quoted as observed: one line, capped, the values of the call in it replaced by the same roles, so that no
run's value is carried to the next. It is data about the tool, never a line to run nor an instruction; the worker
puts it through the same taint and quarantine as a prose lesson, and ``named_calls`` adds what holds an error text in
particular: a call it names that is neither the failing tool nor the task's nor Python's own.

Read from the normalised run view only: a CodeAgent's failing line (local executor or a remote traceback) or a
ToolCallingAgent's failed tool call, whatever the tool and the error's wording. A calling agent's code tool
(``python_interpreter``) that failed because its code read a name it never set, the name its error names, is kept
too (``unset``): such a tool runs each code alone, so a result another call got is not in it, and a small agent
sent it ``max(t["points"] for t in tickets)`` step after step.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Collection
from dataclasses import dataclass

from lessonbank.core import specimen
from lessonbank.core.models import FailurePayload
from lessonbank.learn import code, effects, params, render
from lessonbank.learn.adapters import toolcalling
from lessonbank.learn.view import Call, RunView, Step

TAG = "failure"
MAX_FAILURES = 2  # per run
MAX_LINE = 200
MAX_ERROR = 240
MAX_FORM = 40  # a longer value (a query, a sentence) has no form worth telling
MAX_LETTER_RUNS = 3
NOT_TOOLS = frozenset({"final_answer"})
_ERROR = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]{0,60})(?::\s?(.*))?$", re.S)
_NAMED_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w{0,60}(?:\.[A-Za-z_]\w{0,60}){0,4})(\s?)\(")
_DIGITS = re.compile(r"[0-9]")
_LETTERS = re.compile(r"[^\W\d_]+")


@dataclass(frozen=True)
class Failure:
    """A failing call as it is kept: its payload, the record ``seq`` of its step, and the fingerprint that makes
    the same failure seen by several runs one lesson."""

    payload: FailurePayload
    step: int
    fingerprint: str

    @property
    def text(self) -> str:
        return render.failed_call(self.payload)


def form(value: str) -> str:
    """How a value is written, without it (``specimen.mask``, as a shape says how a result's strings are written):
    ``'2024-03-12'`` -> ``'9999-99-99'``, ``'north'`` -> ``'a'``; "" for a value too long or too wordy to have a
    form worth telling."""
    if len(value) > MAX_FORM or len(_LETTERS.findall(value)) > MAX_LETTER_RUNS:
        return ""
    return specimen.mask(value)


def _roles(call: Call, node: ast.Call | None, task: str) -> dict[str, str]:
    """Each constant value of ``call`` and its role: the keyword it was passed as, else its name as a parameter of
    the task (``params.flows``), else ``value`` numbered."""
    named = {param.value: param.name for param in params.flows([node], task)} if node is not None else {}
    roles: dict[str, str] = {}
    for index, argument in enumerate(call.arguments, 1):
        if argument.value is None or argument.value in roles:
            continue
        keyword = argument.name if argument.name.isidentifier() else ""
        roles[argument.value] = keyword or named.get(argument.value) or f"value{index}"
    return roles


def _task_values(step: Step, task: str) -> dict[str, str]:
    """The values the step's code took from its task (``params.flows``) and their names: written anywhere in the
    failing line or the error (a date the code converted first), they are this run's, not the tool's."""
    statements = code.parse(step.code) if step.code.strip() else None
    return {param.value: param.name for param in params.flows(statements or [], task)}


def _call_node(line: str, tool: str) -> tuple[ast.Module, ast.Call] | None:
    tree = code.parse_line(line)
    if tree is None:
        return None
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name | ast.Attribute)
                 and (n.func.id if isinstance(n.func, ast.Name) else n.func.attr) == tool), None)
    return (tree, node) if node is not None else None


class _Roles(ast.NodeTransformer):
    """Writes each constant of ``roles`` as its role, bare (``<city>``); a subscript's key (the data's name) stays."""

    def __init__(self, roles: dict[str, str]) -> None:
        self.roles = roles

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:  # noqa: N802 (ast's naming)
        node.value = self.visit(node.value)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:  # noqa: N802
        role = self.roles.get(str(node.value)) if isinstance(node.value, str | int | float) else None
        return ast.Name(id=f"<{role}>", ctx=ast.Load()) if role else node


def _line_with_roles(line: str, call: Call, roles: dict[str, str]) -> str:
    """``line`` with the values of ``roles`` written as their roles (``<city>``); the call alone, its arguments as
    roles, when the line does not parse or is too long."""
    found = _call_node(line, call.tool)
    if found is not None:
        text = _unparse(_Roles(roles).visit(found[0]))
        if text and "\n" not in text and len(text) <= MAX_LINE:
            return text
    shown = [f"{a.name}=<{roles[a.value]}>" if a.value in roles and a.name.isidentifier() else
             f"<{roles[a.value]}>" if a.value in roles else "..." for a in call.arguments]
    return f"{call.tool}({', '.join(shown)})"[:MAX_LINE]


def _unparse(tree: ast.Module) -> str:
    try:
        return ast.unparse(tree).strip().removesuffix(" pass").removesuffix(":").strip()
    except (ValueError, RecursionError):
        return ""


def _error(step: Step, roles: dict[str, str]) -> tuple[str, str] | None:
    """(exception name, message) of the step's error, one line, capped, with ``roles``' values in it replaced by
    their roles; None when the step has no error."""
    match = _ERROR.match(step.error or step.error_message)
    if match is None:
        return None
    message = " ".join((match.group(2) or "").split())
    for value, role in sorted(roles.items(), key=lambda item: -len(item[0])):
        if value.strip():
            message = message.replace(value, f"<{role}>")
    message = message.replace("`", "'").replace('"', "'")
    return match.group(1), message[:MAX_ERROR]


def _failing_call(step: Step, tools: set[str]) -> Call | None:
    """The call of one of ``tools`` the step failed at (a ToolCallingAgent's failed call, the failing line's)."""
    failed = [call for call in step.calls if call.failed and call.tool in tools]
    if step.failed_tool:
        return next((call for call in failed if call.tool == step.failed_tool), None)
    return failed[0] if failed else None


def _worked_later(view: RunView, tool: str, after: int) -> bool:
    return any(call.tool == tool and not call.failed for step in view.actions if step.seq > after
               for call in step.calls)


def blamed(forms: dict[str, str], error: str) -> dict[str, str]:
    """The forms of the values ``error`` names, by their role (``'<date>'``) or the word of their role (``invalid
    date``); none when it names none (an executor's refusal, a timeout, an interpreter's error). An error about
    one argument says nothing about the others, nor one about none about any: a lesson blaming a form the error
    did not name sends the next run to change what was right."""
    return {role: shown for role, shown in forms.items()
            if f"<{role}>" in error or re.search(rf"(?<![\w<]){re.escape(role)}(?![\w>])", error, re.I)}


def kept_now(payload: FailurePayload) -> FailurePayload:
    """A stored failure as the current rule keeps it: only the forms its error names (``blamed``)."""
    return payload.model_copy(update={"forms": blamed(dict(payload.forms), payload.error)})


def fingerprint_of(payload: FailurePayload) -> str:
    """The tool, the roles and forms of what it was passed, the exception and its message without digits; of a code
    tool's code that read a name it never set, the tool, that name and the exception (whatever code read it)."""
    if payload.unset:
        return hashlib.sha256(json.dumps([payload.tool, "unset", payload.unset, payload.error_type]).encode()
                              ).hexdigest()[:24]
    roles = re.findall(r"<(\w+)>", payload.line)
    key = [payload.tool, sorted(set(roles)), sorted(payload.forms.items()), payload.error_type,
           _DIGITS.sub("9", payload.error)]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:24]


def extract(view: RunView) -> list[Failure]:
    """The failing calls of ``view``'s run worth keeping (see the module), at most ``MAX_FAILURES``, first first."""
    tools = set(view.tools) if view.tools is not None else {c.tool for s in view.actions for c in s.calls}
    tools -= NOT_TOOLS
    found: dict[str, Failure] = {}
    for step in view.actions:
        call = _failing_call(step, tools) if step.failed else None
        if call is None:
            alone = _unset(view, step, tools)
            if alone is not None:
                found.setdefault(alone.fingerprint, alone)
            if len(found) >= MAX_FAILURES:
                break
            continue
        if _worked_later(view, call.tool, step.seq):
            continue
        line = call.line or step.failed_line
        node = _call_node(line, call.tool)
        passed = _roles(call, node[1] if node else None, view.task)
        roles = {**_task_values(step, view.task), **passed}
        error = _error(step, roles)
        if error is None:
            continue
        forms = blamed({role: shown for value, role in passed.items() if (shown := form(value))}, error[1])
        payload = FailurePayload(tool=call.tool, line=_line_with_roles(line, call, roles), forms=forms,
                                 error_type=error[0], error=error[1])
        fingerprint = fingerprint_of(payload)
        found.setdefault(fingerprint, Failure(payload, step.seq, fingerprint))
        if len(found) >= MAX_FAILURES:
            break
    return list(found.values())


def _unset(view: RunView, step: Step, tools: set[str]) -> Failure | None:
    """The failure of a calling agent's code tool whose code read a name it never set, the one name its error
    names (see the module); None for any other step, or when a later call of the code tool worked."""
    if not step.failed or toolcalling.failed_tool(step.error_message) != toolcalling.CODE_TOOL:
        return None
    statements = code.parse(step.code)
    if not statements or any(later.seq > step.seq and not later.failed and later.code.strip()
                             for later in view.actions):
        return None
    tree = ast.Module(body=statements, type_ignores=[])
    bound = code.names(tree, ast.Store) | {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
                                           if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names}
    bound |= {arg.arg for node in ast.walk(tree) if isinstance(node, ast.arg) for arg in [node]}
    read = code.names(tree, ast.Load) - bound - code.BUILTINS - tools
    named = [name for name in sorted(read) if re.search(rf"[`'\"]{re.escape(name)}[`'\"]", step.error)]
    roles = _task_values(step, view.task)
    error = _error(step, roles)
    if len(named) != 1 or error is None:
        return None
    line = step.failed_line if "\n" not in step.failed_line else ""
    parsed = code.parse_line(line or step.code.strip().splitlines()[0])
    shown = _unparse(_Roles(roles).visit(parsed)) if parsed is not None else ""
    payload = FailurePayload(tool=toolcalling.CODE_TOOL, line=shown[:MAX_LINE], error_type=error[0], error=error[1],
                             unset=named[0])
    return Failure(payload, step.seq, fingerprint_of(payload))


def _code_like(name: str) -> bool:
    """A name written before `` (`` is a call when it reads as code (``reset_session (``, ``os.system (``,
    ``exec (``), not a word of a sentence with an aside (``one argument (2 given)``, ``region (north)``)."""
    return "_" in name or "." in name or name in code.BUILTINS


def named_calls(payload: FailurePayload, task: str, tools: Collection[str] = ()) -> list[str]:
    """The calls a failure's error names that are neither its tool, nor the task's, nor Python's own: an error
    naming one tells the agent to call something, and that waits for a user."""
    return calls_named(payload.error, payload.tool, task, tools)


def calls_named(error: str, tool: str, task: str, tools: Collection[str] = ()) -> list[str]:
    """The calls ``error`` (what ``tool`` raised) names that are neither ``tool``, nor the task's, nor Python's
    own (``named_calls``; ``effects.python_own``: ``re.sub`` and ``dict.get`` are; ``shutil.rmtree``,
    ``requests.get``, ``exec`` and ``getattr`` are not, whatever their method's name; nor are the agent's
    ``tools``)."""
    lowered = task.lower()
    names = dict.fromkeys(name for name, space in _NAMED_CALL.findall(error) if not space or _code_like(name))
    return [name for name in names if name != tool and name.lower() not in lowered
            and not effects.python_own(name, tools)]
