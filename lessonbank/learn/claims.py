"""What a lesson claims about a tool's result, and which of two contradicting lessons the observations support.

A claim is about one tool (``""``: it names none) and one field of its result (``""``: the result as a whole): that
it is there or not, or (``kind``) that it is or is not of a type (``lessonbank.learn.types_claims``). A lesson's
claims come from its structured payload where it has one (a shape: the fields the tool returned, and that it
returned something; a fix on a key: the key that failed is not there, the one that worked is) and otherwise from its
text (a field said to be missing or to be there, a call said to get nothing back). Two lessons contradict each other
when one claims what the other denies, about the same field of the same tool. The recorded observations settle it:
the steps that used the field as a key ran or failed, the calls of the tool printed data or came back empty. A claim
read from a payload is an observation itself. When exactly one side is supported, it stays and the other is
superseded; when neither is (or both are), both stay.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lessonbank.core.models import USER_ORIGINS, Lesson
from lessonbank.learn import types_claims
from lessonbank.learn.grounding import CODE_NAME, GOT_NOTHING, MISSING, PYTHON_NAMES, VALUE

Results = Sequence[tuple[str, str]]  # (code, what it got back or "failed") per step: evidence.call_results
Winner = Literal["new", "old"]
MAX_DEPTH = 4

# "has no 'amount' field", "lacks a 'total' key", "there is no 'sku' column", "without 'price'": absent
_ABSENT = re.compile(
    r"(?i)\b(?:has|have|had)(?:n't| not| no)\b|\b(?:does|do|did)(?:n't| not) (?:have|hold|include)\b"
    r"|\blacks?\b|\bno (?:such )?(?:\w+ )?"
    r"(?:fields?|keys?|columns?|attributes?)\b|\bwithout\b|\bnot (?:there|included|returned|a (?:field|key))\b"
)
_PRESENT = re.compile(r"(?i)\b(?:fields?|keys?|columns?|attributes?|propert(?:y|ies))\b|\b(?:use|read|holds?|has)\b")
# what a clause names as not to use, or as the other form ("instead of 'amount'"): no claim on it
_INSTEAD = re.compile(r"(?i)\binstead of\s+[\"']([^\"'`\n]{1,60})[\"']|\brather than\s+[\"']([^\"'`\n]{1,60})[\"']")
_NAME = re.compile(r"[A-Za-z_][\w -]{0,59}$")  # a field's name, not a value
_CONDITION = re.compile(r"(?i)\b(?:when|whenever|if|unless|only|until|nested|inside|under|top[- ]level|sometimes)\b")
_CLAUSE = re.compile(r"[;:.](?:\s|$)|,\s+(?:but|while|whereas|and)\s|\s(?:but|whereas)\s")


@dataclass(frozen=True)
class Claim:
    """That ``field`` of ``tool``'s result is there (``holds``) or not; ``field`` "" is the result as a whole (it
    holds data, or comes back empty); ``when``: the values the claim is pinned to (a call with those values); with
    a ``kind`` (``types_claims``), that the field is of that type (``holds``) or not."""

    tool: str
    field: str
    holds: bool
    when: frozenset[str] = frozenset()
    observed: bool = False  # read from a payload: an observation itself
    kind: str = ""


def _fields(tree: Any, depth: int = 0) -> Iterable[str]:
    if depth > MAX_DEPTH:
        return
    if isinstance(tree, dict) and isinstance(tree.get("fields"), list):
        for pair in tree["fields"]:
            if isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[0], str):
                yield pair[0]
                yield from _fields(pair[1], depth + 1)
    elif isinstance(tree, dict) and "items" in tree:
        yield from _fields(tree["items"], depth + 1)


def _named_tools(text: str, fields: set[str]) -> set[str]:
    names = set()
    for match in CODE_NAME.finditer(text):
        name = re.split(r"[(=\s.\[]", next(group for group in match.groups() if group).strip(), maxsplit=1)[0]
        if name and name.isidentifier() and name.lower() not in PYTHON_NAMES and name not in fields:
            names.add(name)
    return names


def _text_claims(text: str) -> list[Claim]:
    quoted_all = {m.group(1) for m in VALUE.finditer(text) if m.group(1)}
    named = _named_tools(text, quoted_all) or {""}
    claims: list[Claim] = []
    for clause in _CLAUSE.split(text):
        if _CONDITION.search(clause):
            continue  # true under a condition: not a claim about every call
        tools = _named_tools(clause, quoted_all) or named  # the tool the clause names, else the lesson's
        other = {group for m in _INSTEAD.finditer(clause) for group in m.groups() if group}
        quoted = {m.group(1) for m in VALUE.finditer(clause) if m.group(1) and _NAME.match(m.group(1))} - other
        nothing = bool(GOT_NOTHING.search(clause))
        if nothing and not quoted and not MISSING.search(clause) and not _ABSENT.search(clause):
            values = frozenset(m.group(1) or m.group(2) for m in VALUE.finditer(clause))
            claims += [Claim(tool, "", False, values) for tool in tools if tool]
            continue
        absent = bool(nothing or MISSING.search(clause) or _ABSENT.search(clause))
        if absent or _PRESENT.search(clause):
            claims += [Claim(tool, name, not absent) for tool in tools for name in sorted(quoted)]
    return claims


def _callee(line: str) -> str:
    match = re.search(r"\b([A-Za-z_]\w*)\(", line)
    return match.group(1) if match and match.group(1).lower() not in PYTHON_NAMES else ""


def claims_of(lesson: Lesson) -> list[Claim]:
    """What ``lesson`` claims about tools' results: from its shape or fix where it has one, else from its text
    (none for a recipe)."""
    if lesson.shape is not None:
        tool = lesson.shape.tool
        fields = list(dict.fromkeys(_fields(lesson.shape.structure)))
        kinds = [Claim(tool, name, True, observed=True, kind=kind)
                 for name, found in types_claims.kinds_of(lesson.shape.structure).items() for kind in sorted(found)]
        return [Claim(tool, "", True, observed=True), *(Claim(tool, name, True, observed=True) for name in fields),
                *kinds]
    if lesson.fix is not None:
        if not lesson.fix.tried:
            return []
        tool = _callee(lesson.fix.fixed)
        keys = [change for change in lesson.fix.changed or [] if change.kind == "key"]
        return [claim for change in keys for claim in (Claim(tool, change.before, False, observed=True),
                                                       Claim(tool, change.after, True, observed=True))
                if claim.field]
    if lesson.recipe is not None:
        return []
    typed = [Claim(said.tool, said.field, said.holds, kind=said.kind) for said in types_claims.read(lesson.text)]
    return _text_claims(lesson.text) + typed


def _used_as_key(name: str, code: str) -> bool:
    return any(f"[{q}{name}{q}]" in code or f".get({q}{name}{q}" in code for q in ("'", '"'))


def observed(claim: Claim, results: Results) -> bool | None:
    """Whether the steps (``results``) show ``claim`` true (True), false (False) or neither (None): a field used as a
    key by a step that ran is there, one every step that used it failed on is not; a call of the tool (with the
    claim's values) that printed data holds data, one that only came back empty does not."""
    if claim.field:
        uses = [got for code, got in results if _used_as_key(claim.field, code)]
        there = any(got != "failed" for got in uses) if uses else None
    else:
        calls = [got for code, got in results
                 if f"{claim.tool}(" in code and all(value in code for value in claim.when)]
        there = True if "data" in calls else (False if "empty" in calls else None)
    return None if there is None else there == claim.holds


def conflict(a: Claim, b: Claim) -> bool:
    """Whether two claims say opposite things about the same field of the same tool: of a type, one read from a
    lesson's words and one observed (a shape's) that contradicts it."""
    if a.kind or b.kind:
        return _type_conflict(a, b)
    if a.holds == b.holds or a.field != b.field:
        return False
    if not a.field:
        return bool(a.tool) and a.tool == b.tool
    return a.tool == b.tool or not a.tool or not b.tool


def _type_conflict(a: Claim, b: Claim) -> bool:
    if not (a.kind and b.kind) or a.observed == b.observed or not a.tool or a.tool != b.tool or a.field != b.field:
        return False
    said, seen = (b, a) if a.observed else (a, b)
    return types_claims.judge(types_claims.TypeClaim(said.tool, said.field, said.kind, said.holds),
                              {seen.tool: {seen.field: frozenset({seen.kind})}}) is False


def _bears(mine: Claim, theirs: Claim, results: Results) -> bool:
    """Whether the observations can settle two conflicting claims: they name the same tool and neither is pinned to
    values, or the steps show the pinned one (or, one naming no tool, either) true or false."""
    pinned = [claim for claim in (mine, theirs) if claim.when]
    if pinned:
        return all(observed(claim, results) is not None for claim in pinned)
    return mine.tool == theirs.tool or observed(mine, results) is not None


def _supported(claim: Claim, results: Results) -> bool:
    return claim.observed or observed(claim, results) is True


@dataclass(frozen=True)
class Verdict:
    """Which of two contradicting lessons the observations support (None: neither alone), and on what."""

    winner: Winner | None
    claim: Claim | None = None

    @property
    def why(self) -> str:
        if self.claim is None:
            return ""
        subject = f"`{self.claim.tool}`" if self.claim.tool else "the result"
        if self.claim.kind:
            what = f"the field '{self.claim.field}' of {subject}" if self.claim.field else f"the result of {subject}"
            return f"{what} is {types_claims.said(self.claim.kind)}"
        if not self.claim.field:
            return f"{subject} returned data" if self.claim.holds else f"{subject} came back empty"
        said = "is there" if self.claim.holds else "is not there"
        return f"the field '{self.claim.field}' of {subject} {said}"


def contradict(new: Lesson, old: Lesson) -> bool:
    """Whether ``new`` and ``old`` claim opposite things about one field of one tool (before any observation)."""
    theirs = claims_of(old)
    return any(conflict(mine, other) for mine in claims_of(new) for other in theirs)


def settle(new: Lesson, old: Lesson, results: Results) -> Verdict:
    """Which of ``new`` and ``old`` stays when they contradict each other, by the recorded observations ``results``
    (the steps each cites): the one whose claim they support while they do not support the other's. None when they
    do not contradict each other, or the observations back neither, both, or each on a different claim."""
    winners: set[Winner] = set()
    why: Claim | None = None
    for mine in claims_of(new):
        for theirs in claims_of(old):
            if not conflict(mine, theirs) or not _bears(mine, theirs, results):
                continue
            new_ok, old_ok = _supported(mine, results), _supported(theirs, results)
            if new_ok != old_ok:
                winners.add("new" if new_ok else "old")
                why = mine if new_ok else theirs
    if len(winners) != 1:
        return Verdict(None)
    winner = winners.pop()
    if (old if winner == "new" else new).origin in USER_ORIGINS:  # a user's word is not overruled by a run
        return Verdict(None)
    return Verdict(winner, why)
