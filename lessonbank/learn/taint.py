"""Taint: what in a recipe or a lesson first appeared in what its run observed, and what that holds back.

A run is given its task and its agent's tools; everything else it sees (tool results, fetched pages, file
contents, error messages) it observed, and that is untrusted. For a recipe or a lesson this says which of its
calls, names, literals and addresses first appeared in an observation rather than in the task or the tools'
names (each a ``Taint``, with the run, the step and the observation around it), and which of them hold it
back until a user releases it (``held``):

- a call the task did not ask for (``effects.asked``), made because an observation named it (the tool it
  calls, or its URL, address, variable or path, appeared in the observation of an earlier step), whose value
  did not reach the answer (``flow``: nor what the run printed on the way to it);
- a call with a sensitive effect the task did not ask for (``effects``: network, environment, files, a
  process, a tool that deletes, sends, pays...), whatever told the run to make it: an instruction split across
  two observations, or written in another language, is held by what the call does;
- in a prose lesson: a mention of a call the run made and that was held, of a call with such an effect (but
  for the network, which a lesson may mention as a library to use: where it sends is what holds it), and a
  URL, host or e-mail address that first appeared in an observation. A name of Python's own that only computes
  (``re.sub``, ``str.replace``: ``effects.python_own``) is every run's: an error that shows one introduces nothing.

A recipe is held whole: what it computes after a held call may rest on what that call did.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from lessonbank.core.models import Recipe, Taint, TaintKind
from lessonbank.learn import code as pycode
from lessonbank.learn import effects, flow, quarantine
from lessonbank.learn.effects import Site
from lessonbank.learn.trim import ran_before_failure
from lessonbank.learn.view import RunView, Step

MAX_MARKS = 24
AROUND = 60  # characters of an observation kept on each side of what it named
MAX_OCCURRENCES = 64
_SPAN = re.compile(r"`([^`\n]{1,200})`")
_CALLED = re.compile(r"(?<![\w.])([A-Za-z_][\w]{0,60}(?:\.[A-Za-z_]\w{0,60}){0,4})\s?\(")
_DOTTED = re.compile(r"(?<![\w.])([a-z_]\w{0,30}(?:\.[a-z_]\w{0,30}){1,4})(?![\w(])")
_ENV = re.compile(r"(?<![\w.])[A-Z][A-Z0-9]{0,40}(?:_[A-Z0-9]{1,40}){1,6}(?!\w)")


@dataclass(frozen=True)
class Seen:
    """Where a run first observed something: the step's record seq and the observation around it."""

    step: int
    text: str


def _occurs(value: str, text: str) -> int:
    """Where ``value`` stands alone in ``text`` (not inside a longer name or number), -1 when it does not."""
    at = text.find(value)
    for _ in range(MAX_OCCURRENCES):
        if at < 0:
            return -1
        before = text[at - 1] if at else " "
        after = text[at + len(value)] if at + len(value) < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return at
        at = text.find(value, at + 1)
    return -1


def _observed(step: Step) -> str:
    """What the run saw after the step: its observation and the error it got."""
    return "\n".join(part for part in (step.observation, step.error_message) if part)


class Sources:
    """What a run was given (its task, its agent's tools' names) and what it observed, step by step."""

    def __init__(self, view: RunView) -> None:
        self.run_id = view.run_id
        self.given = "\n".join([view.task, *(view.tools or ())]).lower()
        self.observed = [(step.seq, text, text.lower()) for step in view.steps if (text := _observed(step))]

    def seen(self, value: str, before: int | None = None) -> Seen | None:
        """The first observation (of a step before ``before``) in which ``value`` stands alone."""
        needle = value.strip().lower()
        if len(needle) < 3:
            return None
        for seq, text, lowered in self.observed:
            if before is not None and seq >= before:
                break
            at = _occurs(needle, lowered)
            if at >= 0:
                excerpt = " ".join(text[max(at - AROUND, 0):at + len(needle) + AROUND].split())
                return Seen(seq, excerpt[:2 * AROUND + 120])
        return None

    def tainted(self, value: str, before: int | None = None) -> Seen | None:
        """``seen``, unless the task or the tools' names hold ``value`` too: it first appeared in an observation."""
        needle = value.strip().lower()
        return None if _occurs(needle, self.given) >= 0 else self.seen(value, before)

    def mark(self, value: str, kind: TaintKind, seen: Seen | None, reason: str = "", held: bool = False) -> Taint:
        return Taint(value=value[:120], kind=kind, run_id=self.run_id, step=seen.step if seen else None,
                     observed=seen.text if seen else "", held=held, reason=reason[:400])


@dataclass(frozen=True)
class Judged:
    """A call the run made (the step's seq), whether it was held and why."""

    seq: int
    site: Site
    held: bool
    reason: str
    seen: Seen | None


def _where(sources: Sources, seen: Seen | None) -> str:
    if seen is None:
        return ""
    return f" (named in what run {sources.run_id[:8]} observed at step {seen.step}: \"{seen.text[:100]}\")"


def _kind(value: str) -> TaintKind:
    if quarantine.EMAIL.fullmatch(value):
        return "email"
    if quarantine.URL.match(value):
        return "url"
    if effects.network_target(value):
        return "host"
    return "env" if _ENV.fullmatch(value) else "path" if effects.is_target(value) else "literal"


def _prompted(site: Site, sources: Sources, before: int | None, tools: set[str]) -> Seen | None:
    """The observation that named the call before the run made it: its tool, or one of its targets."""
    name = site.callee if site.callee in tools else ""
    for value in (name, *site.targets):
        if value and (seen := sources.seen(value, before)) is not None:
            return seen
    return None


def judge(site: Site, task: str, sources: Sources, before: int | None, answers: bool,
          tools: set[str]) -> tuple[bool, str, Seen | None]:
    """(held, why, the observation that named it) for one call (see the module); ``answers``: its value reached
    the answer."""
    asked = effects.asked(site, task)
    seen = _prompted(site, sources, before, tools)
    call = f"`{site.line[:80]}`"
    if site.effect and not asked:
        return True, f"it calls {call} ({site.effect}), which the task did not ask for{_where(sources, seen)}", seen
    if seen is not None and not asked and not answers:
        return True, (f"it calls {call} because an observation named it{_where(sources, seen)}; the task did not "
                      "ask for it and the answer does not use it"), seen
    return False, "", seen


def _program(view: RunView) -> tuple[list[ast.stmt], dict[int, int], set[int]]:
    """The code the run ran, step after step (a failed step up to its error), with each statement's step seq
    and the last statement of each step (its value is shown to the model)."""
    program: list[ast.stmt] = []
    step_of: dict[int, int] = {}
    last: set[int] = set()
    for step in view.actions:
        if not step.code.strip():
            continue
        statements = ran_before_failure(step) if step.failed else (pycode.parse(step.code) or [])
        for stmt in statements:
            step_of[id(stmt)] = step.seq
        if statements and isinstance(statements[-1], ast.Expr):
            last.add(id(statements[-1]))
        program += statements
    return program, step_of, last


def _tool_calls(view: RunView) -> list[tuple[int, Site, str]]:
    """The tool calls of the run's steps that did not fail: (step seq, site, what the step observed)."""
    found = []
    for step in view.actions:
        if step.failed or step.code.strip():
            continue
        for request in step.requests:
            try:
                arguments = json.loads(request.arguments) if request.arguments else {}
            except (ValueError, RecursionError):
                arguments = request.arguments
            found.append((step.seq, effects.call_site(request.name, arguments, view.tools), _observed(step)))
    return found


_VALUE = re.compile(r"-?\d+(?:\.\d+)?|\"([^\"\n]{2,60})\"|'([^'\n]{2,60})'")


def _values(text: str) -> set[str]:
    """The numbers and quoted strings of an observation: what a later call or the answer could take from it."""
    return {match.group(1) or match.group(2) or match.group(0) for match in _VALUE.finditer(text[:20_000])}


def run_calls(view: RunView, sources: Sources | None = None) -> list[Judged]:
    """Every call the run made, judged (see the module): code run by its steps, or its tool calls."""
    sources = sources or Sources(view)
    tools = set(view.tools) if view.tools is not None else set()
    program, step_of, last = _program(view)
    judged: list[Judged] = []
    if program:
        known = tools or (pycode.called("\n".join(ast.unparse(s) for s in program)) or set())
        answering = flow.answering_calls(program, flow.SHOWN, last)
        seq_of = {id(node): step_of[id(stmt)] for stmt in program for node in ast.walk(stmt)}
        for site in effects.sites_in(program, known):
            seq = seq_of.get(id(site.node))
            held, why, seen = judge(site, view.task, sources, seq, id(site.node) in answering, set(known))
            judged.append(Judged(seq or 0, site, held, why, seen))
    calls = _tool_calls(view)
    answer = view.final_answer
    for index, (seq, site, observed) in enumerate(calls):
        later = " ".join(other.line for _, other, _ in calls[index + 1:]) + " " + answer
        answers = any(_occurs(value.lower(), later.lower()) >= 0 for value in _values(observed) if len(value) >= 2)
        held, why, seen = judge(site, view.task, sources, seq, answers or site.callee == "final_answer", tools)
        judged.append(Judged(seq, site, held, why, seen))
    return judged


def _literal_marks(code: str, sources: Sources) -> list[Taint]:
    """The string constants of ``code`` that first appeared in an observation (keys read from a result, ids
    looked up): taint the recipe carries, held by nothing on its own."""
    tree = pycode.parse(code) or []
    strings = dict.fromkeys(node.value for stmt in tree for node in ast.walk(stmt)
                            if isinstance(node, ast.Constant) and isinstance(node.value, str) and 3 <= len(node.value))
    marks = []
    for value in strings:
        seen = sources.tainted(value)
        if seen is not None:
            marks.append(sources.mark(value, _kind(value), seen))
    return marks


def recipe_marks(recipe: Recipe, view: RunView, judged: list[Judged] | None = None) -> list[Taint]:
    """The taint of a recipe of ``view``'s run, held marks first (any held mark holds the recipe)."""
    sources = Sources(view)
    marks: list[Taint] = []
    if recipe.language == "python":
        statements = pycode.parse(recipe.code) or []
        tools = set(view.tools) if view.tools is not None else (pycode.called(recipe.code) or set())
        answering = flow.answering_calls(statements)
        # a call with an effect first: on a line with two calls, what it does is the reason to give
        for site in sorted(effects.sites_in(statements, tools), key=lambda site: not site.effect):
            before = _first_call(view, site.callee)
            held, why, seen = judge(site, view.task, sources, before, id(site.node) in answering, tools)
            if held or (seen is not None and sources.tainted(seen_value(site, seen)) is not None):
                marks.append(sources.mark(site.line, "call", seen, why, held))
        marks += _literal_marks(recipe.code, sources)
    else:
        for item in judged if judged is not None else run_calls(view, sources):
            if item.held or item.seen is not None:
                marks.append(sources.mark(item.site.line, "call", item.seen, item.reason, item.held))
    return ordered(marks)


def seen_value(site: Site, seen: Seen) -> str:
    """What of the call the observation named: its tool or the first target it holds."""
    for value in (site.callee, *site.targets):
        if _occurs(value.lower(), seen.text.lower()) >= 0:
            return value
    return site.callee


def _first_call(view: RunView, callee: str) -> int | None:
    """The seq of the first step whose code or tool calls call ``callee``."""
    called = re.compile(rf"(?<!\w){re.escape(callee.rsplit('.', 1)[-1])}\s{{0,4}}\(")
    for step in view.actions:
        if called.search(step.code) or any(request.name == callee for request in step.requests):
            return step.seq
    return None


def _mentions(text: str, tools: set[str]) -> list[Site]:
    """The calls a prose lesson names: code in backticks, ``name(``, a dotted name, a tool of the agent."""
    found: list[Site] = []
    for span in _SPAN.findall(text):
        parsed = pycode.parse(span)
        if parsed and (in_span := effects.sites_in(parsed, tools)):
            found += in_span
        elif parsed and isinstance(parsed[0], ast.Expr):
            name = effects.dotted(parsed[0].value, {})
            if name:
                found.append(Site(name, (), effects.effect_of(name, None, tools), parsed[0], span))
    names = set(_CALLED.findall(text)) | set(_DOTTED.findall(text)) | {
        word for word in re.findall(r"[A-Za-z_]\w{2,60}", text) if word in tools}
    for name in sorted(names):
        if all(site.callee != name for site in found):
            found.append(Site(name, (), effects.effect_of(name, None, tools), ast.Constant(None), name))
    return found


def text_marks(text: str, view: RunView, judged: list[Judged] | None = None) -> list[Taint]:
    """The taint of a prose lesson drafted from ``view``'s run, held marks first."""
    sources = Sources(view)
    judged = judged if judged is not None else run_calls(view, sources)
    tools = set(view.tools or ()) | {item.site.callee for item in judged if "." not in item.site.callee}
    held_calls = {item.site.callee: item for item in judged if item.held}
    marks: list[Taint] = []
    for site in _mentions(text, tools):
        if effects.python_own(site.callee, view.tools or ()):
            continue  # every run knows Python's own names: no observation introduced one
        ran = held_calls.get(site.callee)
        if ran is not None:
            marks.append(sources.mark(site.line, "call", ran.seen, f"it names `{site.callee}`, which the run called "
                                      f"and which was held: {ran.reason}", held=True))
            continue
        seen = _prompted(site, sources, None, tools)
        if site.effect and site.effect != "network" and not effects.asked(site, view.task):
            marks.append(sources.mark(site.line, "call", seen, f"it tells the agent to call `{site.line[:80]}` "
                                      f"({site.effect}), which the task did not ask for{_where(sources, seen)}", True))
        elif (seen := sources.tainted(site.callee)) is not None:
            marks.append(sources.mark(site.callee, "name", seen))
    addresses = [*quarantine.URL.findall(text), *quarantine.HOST.findall(text), *quarantine.EMAIL.findall(text)]
    for value in dict.fromkeys(address.rstrip(".,;:!?") for address in addresses):
        seen = sources.tainted(value)
        if seen is not None:
            marks.append(sources.mark(value, _kind(value), seen, f"it carries {value}, which first appeared in what "
                                      f"run {sources.run_id[:8]} observed at step {seen.step}", held=True))
    for span in _SPAN.findall(text):
        if any(mark.value == span for mark in marks) or effects.python_own(span, view.tools or ()):
            continue
        if (seen := sources.tainted(span)) is not None:
            marks.append(sources.mark(span, _kind(span), seen))
    return ordered(marks)


def error_asked(call: str, view: RunView, why: str) -> Taint:
    """The held mark of ``call``, which an error of ``view``'s run asked for (``framing.attested_by``,
    ``failures.named_calls``): the run and step whose observation named it first, and ``why`` with where."""
    sources = Sources(view)
    seen = sources.seen(call)
    return sources.mark(call, "call", seen, f"{why}{_where(sources, seen)}", held=True)


def ordered(marks: list[Taint]) -> list[Taint]:
    """Held marks first, each value once (its first mark), at most ``MAX_MARKS``."""
    unique: dict[tuple[str, bool], Taint] = {}
    for mark in marks:
        unique.setdefault((mark.value, mark.held), mark)
    return sorted(unique.values(), key=lambda mark: not mark.held)[:MAX_MARKS]


def held_reason(marks: list[Taint]) -> str:
    """Why ``marks`` hold what carries them ("" when none is held)."""
    return next((mark.reason for mark in marks if mark.held), "")
