"""Tool fingerprints: which version of a tool a lesson was learnt on, and whether an agent's tool is still it.

A fingerprint (``core.models.ToolFingerprint``) holds a tool's signature as it reads (its arguments in order with
their types, optional ones marked ``?``, and its output type), a hash of its descriptions (the tool's and its
arguments': what the model reads of it), and, where a run kept one, a hash of the structure of what it returned
(``core.specimen``, read into the run's view).

The agent process records its tools' fingerprints with each run (``of_tools``, the run hash's ``tool_versions``);
the worker stamps the lessons a run teaches with those of the tools they involve (``stamped``). When an agent's
tool has another signature or description than the one a lesson calling it (a recipe, an observed fix or shape:
``needs.needed_tools``) was learnt on, the lesson is not given (``stale_reason``) and the worker marks it
``stale`` with that reason, until a run with the tool as it is now re-verifies or replaces it. A result of
another structure under the same signature is a softer change: the lesson is still given, with a plain warning
(``warning``), until a run given it ends well with the new structure (``shape_seen``). Prose lessons keep the
fingerprints of the tools they name, for the record, and are never stale: a sentence is not code to call.

A structure's hash names the rule it was hashed by (``SHAPE_RULE``): what is left out of a structure as no other
structure has grown (a flag's values, then a string's written forms and a field's words), and a hash of an earlier
rule says nothing of whether a result hashed now is another structure. A lesson's hash of an earlier rule is not
compared: the next result its tool returns is its structure.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from lessonbank.core import specimen
from lessonbank.core.models import Lesson, ToolFingerprint
from lessonbank.learn import needs
from lessonbank.learn.view import RunView

MAX_SIGNATURE = 300  # characters of a signature kept
SHAPE_RULE = "s2:"  # the rule ``shapes_of`` hashes by: flags' values, strings' forms and fields' words left out
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SIGNATURE = re.compile(r"(?s)(?P<name>[^(]*)\((?P<args>.*)\) -> (?P<out>[^()]*)")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _normal(text: Any) -> str:
    return " ".join(str(text or "").split())


def of_tool(tool: Any) -> ToolFingerprint | None:
    """The fingerprint of a smolagents tool (or managed agent): anything with a ``name``, ``inputs`` (argument ->
    ``{"type", "description", "nullable"}``), an ``output_type`` and a ``description``; None for anything else."""
    name, inputs = getattr(tool, "name", None), getattr(tool, "inputs", None)
    if not isinstance(name, str) or not name or not isinstance(inputs, Mapping):
        return None
    arguments, described = [], []
    for argument, spec in inputs.items():
        spec = spec if isinstance(spec, Mapping) else {}
        optional = "?" if spec.get("nullable") else ""
        arguments.append(f"{argument}{optional}: {spec.get('type', 'any')}")
        described.append([str(argument), _normal(spec.get("description"))])
    signature = f"{name}({', '.join(arguments)}) -> {getattr(tool, 'output_type', 'any')}"[:MAX_SIGNATURE]
    return ToolFingerprint(name=name, signature=signature,
                           doc=_digest([_normal(getattr(tool, "description", "")), described]))


def of_tools(tools: Collection[Any]) -> dict[str, ToolFingerprint]:
    """Fingerprints of ``tools`` by name (those ``of_tool`` can read)."""
    found = (of_tool(tool) for tool in tools)
    return {fingerprint.name: fingerprint for fingerprint in found if fingerprint is not None}


def encode(versions: Mapping[str, ToolFingerprint], budget: int) -> str:
    """``versions`` as the JSON of a run hash field of at most ``budget`` characters (tools past it left out)."""
    kept: list[list[str]] = []
    size = 2
    for fingerprint in versions.values():
        item = [fingerprint.name, fingerprint.signature, fingerprint.doc]
        cost = len(json.dumps(item)) + 1
        if size + cost > budget:
            break
        kept.append(item)
        size += cost
    return json.dumps(kept)


def decode(text: str | None) -> dict[str, ToolFingerprint]:
    """The fingerprints a run hash field holds ({} when absent or unreadable: not known)."""
    try:
        items = json.loads(text) if text else []
    except ValueError:
        return {}
    found: dict[str, ToolFingerprint] = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, list) and len(item) == 3 and all(isinstance(part, str) for part in item):
            found[item[0]] = ToolFingerprint(name=item[0], signature=item[1], doc=item[2])
    return found


def shapes_of(view: RunView) -> dict[str, str]:
    """Hash of the structure each tool returned first in the run, by tool (its flags' values left out: a flag that
    flips is no other structure)."""
    shapes: dict[str, str] = {}
    for step in view.actions:
        for returned in step.returned:
            shapes.setdefault(returned.tool, SHAPE_RULE + _digest(specimen.valueless(returned.structure)))
    return shapes


def comparable(digest: str) -> bool:
    """Whether a structure's hash was hashed by the current rule (a result hashed now can be compared with it)."""
    return digest.startswith(SHAPE_RULE)


def involved(lesson: Lesson, known: Collection[str]) -> set[str]:
    """The tools among ``known`` that ``lesson`` involves: those its code calls, and those its text names."""
    return (needs.needed_tools(lesson) or set()) & set(known) | set(_WORD.findall(lesson.text)) & set(known)


def stamped(lesson: Lesson, versions: Mapping[str, ToolFingerprint], shapes: Mapping[str, str]) -> Lesson | None:
    """``lesson`` with the fingerprints of the tools it involves as a run that taught it had them (``versions``,
    ``shapes``: what it returned); None when that changes nothing. A shape kept is kept while the run observed
    none and the signature is the same."""
    names = involved(lesson, versions)
    if not names:
        return None
    before = {fingerprint.name: fingerprint for fingerprint in lesson.tool_versions}
    after = dict(before)
    for name in sorted(names):
        current, old = versions[name], before.get(name)
        shape = shapes.get(name) or (old.shape if old is not None and old.signature == current.signature else "")
        after[name] = current.model_copy(update={"shape": shape, "later_shape": ""})
    if after == before:
        return None
    return lesson.model_copy(update={"tool_versions": list(after.values())})


def _arguments(signature: str) -> tuple[dict[str, str], str] | None:
    """({argument: its type with ``?`` when optional}, output type) of a signature as ``of_tool`` writes it."""
    found = _SIGNATURE.fullmatch(signature)
    if found is None:
        return None
    arguments: dict[str, str] = {}
    for part in filter(None, (item.strip() for item in found["args"].split(", "))):
        name, _, kind = part.partition(": ")
        optional = name.endswith("?")
        arguments[name.rstrip("?")] = kind + ("?" if optional else "")
    return arguments, found["out"]


def _signature_change(old: str, new: str) -> str:
    """What changed between two signatures, in a few words: ``user_id -> id``, ``new argument fields``."""
    before, after = _arguments(old), _arguments(new)
    if before is None or after is None:
        return f"{old} -> {new}"
    (old_args, old_out), (new_args, new_out) = before, after
    gone = [name for name in old_args if name not in new_args]
    came = [name for name in new_args if name not in old_args]
    parts = [f"{gone[0]} -> {came[0]}"] if len(gone) == len(came) == 1 else (
        [f"argument {name} removed" for name in gone] + [f"new argument {name}" for name in came])
    parts += [f"{name} is {new_args[name]} (was {old_args[name]})" for name in old_args
              if name in new_args and old_args[name] != new_args[name]]
    if old_out != new_out:
        parts.append(f"returns {new_out} (was {old_out})")
    return "; ".join(parts) or f"{old} -> {new}"


def change(old: ToolFingerprint, new: ToolFingerprint) -> str | None:
    """Why a lesson learnt on ``old`` no longer fits a tool that is ``new`` (None: it still does)."""
    if old.signature != new.signature:
        return f"{new.name}'s signature changed: {_signature_change(old.signature, new.signature)}"
    if old.doc and new.doc and old.doc != new.doc:
        return f"{new.name}'s description changed"
    return None


def stale_reason(lesson: Lesson, versions: Mapping[str, ToolFingerprint] | None) -> str | None:
    """Why ``lesson`` must not be given to an agent whose tools are ``versions`` (None: it may, or not known): a
    tool its code calls has another signature or description than the one it was learnt on."""
    if not versions or not lesson.tool_versions:
        return None
    calls = needs.needed_tools(lesson) or set()
    for learnt in lesson.tool_versions:
        current = versions.get(learnt.name)
        if learnt.name in calls and current is not None and (reason := change(learnt, current)):
            return reason
    return None


def warning(lesson: Lesson) -> str:
    """A plain warning for a lesson whose tool returned a result of another structure in a later run ("" if none)."""
    changed = [learnt.name for learnt in lesson.tool_versions
               if learnt.later_shape and learnt.later_shape != learnt.shape]
    if not changed:
        return ""
    return f"{', '.join(changed)} returned a result of another structure in a later run: check it"


def shape_seen(lesson: Lesson, shapes: Mapping[str, str], ended_well: bool) -> Lesson | None:
    """``lesson`` after a run given it observed its tools' results as ``shapes``: a structure other than the one it
    was learnt on becomes its own (``ended_well``: the run ended well) or its warning (``later_shape``); None when
    nothing changes."""
    updated = []
    for learnt in lesson.tool_versions:
        seen = shapes.get(learnt.name)
        if seen and learnt.shape and not comparable(learnt.shape):  # hashed by an earlier rule: this is its structure
            learnt = learnt.model_copy(update={"shape": seen, **({"later_shape": ""} if ended_well else {})})
        elif seen and learnt.shape and seen != learnt.shape:
            learnt = learnt.model_copy(update={"shape": seen, "later_shape": ""} if ended_well
                                       else {"later_shape": seen})
        elif seen and seen == learnt.shape and learnt.later_shape and ended_well:
            learnt = learnt.model_copy(update={"later_shape": ""})
        updated.append(learnt)
    if updated == lesson.tool_versions:
        return None
    return lesson.model_copy(update={"tool_versions": updated})
