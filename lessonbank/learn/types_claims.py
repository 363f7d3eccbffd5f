"""What a lesson claims about the type of a tool's result, and whether what was observed of that tool bears it out.

A small distiller that misread its output writes "`list_parcels` returned a list of strings instead of a list of
dictionaries" or "`get_meter` gives back a string, not a number" while the run's recorded results say the opposite;
given to the next run, such a lesson makes it convert or parse what needs neither. A claim is read from a clause
whose subject is a tool (named by a code name, "the result of `tool`", or "the result" when the lesson names one
tool) or a field of its result ("its `reading`", "the 'points' field", "values of `price`", "`get_meter` readings":
the field ``reading``, named so only when no other name of code could own it), a verb of returning or being
("returns", "gives back", "came back as", "arrives as", "is", "are stored as") and a type ("a list of strings", "a
dict", "text", "numbers"); or from a tool giving a field as a type ("`list_orders` returns the `total` as a string").
A subject after "and" or "or" is one of several, and is not read. "not X", "instead of X" and "rather than X"
after the type deny X; a clause that supposes or asks for it ("if", "assuming",
"make sure") or pins it to some calls ("returns None for an unknown id", "... when the date is invalid") claims
nothing the run's other calls could contradict. What was observed of a tool is its results' structures
(``ShapePayload.structure``, from the recorder's specimens or what a step printed): a claim is contradicted when
every observed type of that tool (or field) differs from what it says, supported when one matches, and undecided
when nothing of it was observed or the words are loose ("numbers" for numbers written as text).

A kind is a short string: ``str``, ``number``, ``bool``, ``none``, ``dict``, ``numtext`` (a string holding a number;
observed only), ``list:<element kind or "">``, and ``*<kind>`` for a plural with no container named ("its `points`
are strings": each is one). Every pattern is linear, and only the first ``MAX_TEXT`` characters of a lesson are
read.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lessonbank.learn import shapes, walk
from lessonbank.learn.printed import printed_tool
from lessonbank.learn.view import RunView

MAX_TEXT = 2000
MAX_CLAIMS = 12
Seen = Mapping[str, Mapping[str, frozenset[str]]]  # tool -> field ("" the whole result) -> kinds observed

_WORDS: dict[str, str] = {
    "list": "list", "array": "list", "tuple": "list", "sequence": "list",
    "dict": "dict", "dictionary": "dict", "dictionarie": "dict", "object": "dict", "mapping": "dict",
    "record": "dict", "map": "dict", "hash": "dict",
    "string": "str", "str": "str", "text": "str",
    "number": "number", "int": "number", "integer": "number", "float": "number", "numeric value": "number",
    "numeric": "number", "decimal": "number",
    "bool": "bool", "boolean": "bool", "none": "none", "null": "none", "nonetype": "none",
}
_TYPE_WORD = (r"(?:lists?|arrays?|tuples?|sequences?|dicts?|dictionary|dictionaries|objects?|mappings?|records?|"
              r"maps?|hash(?:es)?|strings?|strs?|texts?|numbers?|ints?|integers?|floats?|numeric(?: values?)?|"
              r"decimals?|bools?|booleans?|none|null|nonetype)")
_ARTICLES = r"(?:(?:a|an|one|the|plain|bare|raw|single|python|json|simple|flat)\s+){0,2}"


def _type(group: str) -> str:
    """A type phrase (``a list of strings``, ``a list of parcels``) whose word, "of ..." and element word are the
    groups ``group``, ``group_ofp`` and ``group_of``."""
    return (rf"{_ARTICLES}(?P<{group}>{_TYPE_WORD})(?![\w(])(?P<{group}_ofp>\s+of\s+{_ARTICLES}"
            rf"(?:(?P<{group}_of>{_TYPE_WORD})(?![\w(])|[A-Za-z]\w{{0,40}}))?(?!\s+of\b)")


_NAME = (r"`(?P<{0}_code>[A-Za-z_]\w{{0,60}})(?P<{0}_call>\([^`\n]{{0,80}}\))?`"
         r"|'(?P<{0}_q1>[A-Za-z_]\w{{0,60}})'|\"(?P<{0}_q2>[A-Za-z_]\w{{0,60}})\""
         r"|\b(?P<{0}_bare>[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+)(?P<{0}_barecall>\((?:\.\.\.)?\))?")
_TOOLISH = r"tool|function|method|call|api|endpoint"
_FIELDISH = r"fields?|keys?|columns?|attributes?|propert(?:y|ies)|values?|entries|items"
# A plural after a tool's name that names its values ("`get_meter` readings"), not a verb or an adverb before one
_NOUN = (r"(?!(?:always|sometimes|returns|gives|yields|outputs|produces|comes|arrives|does|was|has|contains|lists|"
         r"sends|reports|provides|delivers|holds|is|its)\b)(?P<noun>[a-z]{2,30}s)\b(?!')")
_TAIL = re.compile(r"(?i)\b(?:of|and|or)\s+$")
_CODE_NAME = re.compile(r"`([A-Za-z_]\w{0,60})|\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b")
_WHOLE = frozenset({"results", "outputs", "responses", "returns", "elements", "records"})  # the result itself
_SUBJECT = (
    r"(?:(?P<of>\bthe\s+(?:result|output|response|return value|value returned)s?\s+(?:of|from)\s+(?:the\s+)?)"
    r"|(?P<vof>\b(?:the\s+)?(?:values?|entries|contents)\s+of\s+(?:the\s+|each\s+|every\s+)?))?"
    r"(?P<pre>\b(?:its|their|each|every|the)\s+)?(?:" + _NAME.format("s") + r")"
    rf"(?:\s+(?P<suf>{_TOOLISH}|{_FIELDISH})|\s+{_NOUN})?(?:'s?\s+(?:result|output|response)s?)?"
    r"(?:\s+(?:of|in|from)\s+(?:the\s+|each\s+|every\s+)?(?:result\s+of\s+)?(?:" + _NAME.format("t") + r")"
    rf"(?:'s?)?(?:\s+(?:{_TOOLISH}|result|output|response)s?)?)?"
    r"|(?P<it>\bthe\s+(?:result|output|response|return value)s?)"
)
_VERB = (
    r"\s+(?:(?:always|also|only|actually|then|now)\s+)?(?P<verb_not>(?:does|did|do)(?:n't|\s+not)\s+)?"
    r"(?:returns?|returned|return|gives?\s+back|gave\s+back|(?:comes?|came)\s+(?:back(?:\s+as)?|as)|"
    r"(?:arrives?|arrived)(?:\s+as)?|yields?|yielded|outputs?|produces?|produced|(?:is|are|was|were)(?P<is_not>n't|\s+not)?"
    r"(?:\s+(?:returned|given|stored|provided|formatted|written|encoded|typed|delivered|represented|serialized|"
    r"serialised|reported|expressed|sent|kept))?(?:\s+as)?(?:\s+of\s+type)?"
    r")\s+"
)
_NEG = r"(?:\s*,?\s*(?:and\s+|but\s+)?(?:not|never|instead\s+of|rather\s+than)\s+" + _type("neg") + ")?"
_CLAIM = re.compile(r"(?i)(?:" + _SUBJECT + r")" + _VERB + _type("main") + _NEG)
# A tool that gives one field of its result as a type: "`list_orders` returns the `total` as a string"
_AS = re.compile(
    r"(?i)(?:" + _NAME.format("s") + r")(?:\s+(?:tool|function|method))?\s+(?:(?:always|also|only|actually)\s+)?"
    r"(?:returns?|returned|gives?(?:\s+back)?|gave(?:\s+back)?|reports?|reported|provides?|provided|delivers?|"
    r"delivered|sends?|sent)\s+(?:(?:the|its|each|every|all)\s+)?(?:" + _NAME.format("f") + r")"
    rf"(?:\s+(?:{_FIELDISH}))?\s+as\s+" + _type("main") + _NEG
)
# What makes a clause a condition, a supposition or an instruction, not a claim: "check if the result is a list",
# "assuming `rows` is a dict", "make sure `get_x` returns a list"
_SUPPOSED = re.compile(
    r"(?i)\b(?:if|whether|when|whenever|unless|once|until|in case|assum\w*|suppos\w*|ensure|make sure|check|verify|"
    r"test|expect\w*|pretend|imagine)\b[^.;:!?\n]{0,80}$"
)
# ...or, after it, pins it to some calls: "returns None for an unknown meter", "is a string when the id is invalid"
_PINNED = re.compile(
    r"(?i)[^.;:!?\n]{0,80}?\b(?:when|whenever|if|unless|only|sometimes|until|in case|on (?:error|failure)|"
    r"for (?:an? |the )?(?:unknown|missing|invalid|bad|wrong|empty|non-?existent|unmatched)|"
    r"(?:if|when) (?:nothing|no \w+) (?:is|was|matches|matched))\b"
)
_PYTHON = frozenset(name.lower() for kind in (builtins, str, list, dict) for name in dir(kind)
                    if not name.startswith("_"))
_TOOL_NAMED = re.compile(  # a name written as code and called, or called a tool: `x(`, `x` tool, tool `x`, x_y tool
    r"`?\b([A-Za-z_]\w{0,60})\("
    r"|`([A-Za-z_]\w{0,60})`\s+(?:tool|function|method)\b|\b(?:tool|function|method)\s+`([A-Za-z_]\w{0,60})`"
    r"|\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\s+(?:tool|function|method)\b"
    r"|\bthe\s+(?:result|output|response)s?\s+of\s+(?:`([A-Za-z_]\w{0,60})|([a-z][a-z0-9]*(?:_[a-z0-9]+)+))"
)


@dataclass(frozen=True)
class TypeClaim:
    """That ``field`` of ``tool``'s result ("" the result as a whole) is (``holds``) or is not of ``kind``."""

    tool: str
    field: str
    kind: str
    holds: bool = True


def _kind(word: str, inner: str | None, of: bool = False) -> str:
    """The kind a type phrase says: ``a list of strings`` -> ``list:str``; ``numbers`` -> ``*number``; ``a list of
    parcels`` (``of`` another word) -> ``list:``; ``a number of records`` -> "" (no type)."""
    text = " ".join(word.lower().split())
    stem = text if text in _WORDS else text[:-1] if text.endswith("s") and text[:-1] in _WORDS else text[:-2]
    base = _WORDS.get(stem, "")
    plural = stem != text and base not in ("none",)
    if of and not inner:
        return "list:" if base == "list" else base if base == "dict" else ""
    if inner:
        if base not in ("list", "dict"):
            return ""  # "a number of records": no type
        element = _kind(inner, None).lstrip("*")
        return f"list:{element}" if base == "list" else ("*" + base if plural else base)
    if base == "list":
        return "list:"
    return f"*{base}" if plural and base else base


def lesson_tools(text: str, known: Iterable[str] = ()) -> set[str]:
    """The tools ``text`` names: a name called (``tool(``), called a tool or function, or one of ``known``."""
    named = {name for match in _TOOL_NAMED.finditer(text[:MAX_TEXT])
             if (name := next((group for group in match.groups() if group), "")) and name.lower() not in _PYTHON}
    words = set(re.findall(r"[A-Za-z_]\w{0,60}", text[:MAX_TEXT]))
    return named | (words & set(known))


def _subject(match: re.Match[str], tools: set[str], known: set[str]) -> tuple[str, str] | None:
    """(tool, field) the claim is about, None when it cannot be told."""
    only = next(iter(tools)) if len(tools) == 1 else ""
    if match.group("it"):
        return (only, "") if only else None
    if _TAIL.search(match.string[max(0, match.start() - 5):match.start()]):
        return None  # the tail of "the field of ..." or of "`a` and `b`": the subject is cut off
    owner = next((match.group(f"t_{part}") for part in ("code", "q1", "q2", "bare") if match.group(f"t_{part}")), "")
    name = _named(match, "s")
    if match.group("noun"):
        return _valued(name, match.group("noun"), tools, known, match.string[:MAX_TEXT])
    if match.group("vof"):  # "values of `price`": a field, of the tool named after it or the only one
        return None if owner and owner.lower() in _PYTHON else (owner or only, name)
    suffix = (match.group("suf") or "").lower()
    prefix = (match.group("pre") or "").strip().lower()
    called = bool(match.group("s_call") or match.group("s_barecall"))
    if match.group("of") or called or re.fullmatch(_TOOLISH, suffix) or name in known:
        return (name, "") if name.lower() not in _PYTHON else None
    if owner:
        return (owner, name) if owner.lower() not in _PYTHON else None
    if re.fullmatch(_FIELDISH, suffix) or prefix in ("its", "their", "each", "every") or match.group("s_q1") \
            or match.group("s_q2"):
        return (only, name)
    if name in tools:
        return (name, "")
    return (only, name) if only else (name, "")


def _named(match: re.Match[str], group: str) -> str:
    return next(match.group(f"{group}_{part}") for part in ("code", "q1", "q2", "bare")
                if match.group(f"{group}_{part}"))


def _singular(noun: str) -> str:
    """A plural's singular, the way a field is mostly named: ``readings`` -> ``reading``, ``statuses`` ->
    ``status``, ``categories`` -> ``category``."""
    word = noun.lower()
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes", "uses")):
        return word[:-2]
    return word[:-1]


def _valued(name: str, noun: str, tools: set[str], known: set[str], head: str) -> tuple[str, str] | None:
    """(tool, field) of "`name` <noun>" ("`get_meter` readings": the field ``reading`` of ``get_meter``; "`x`
    results": ``x``'s result); None when ``name`` may not be a tool: not known or named as one, and the lesson
    (``head``) names another name of code (is it a tool, or a field of one?)."""
    if name.lower() in _PYTHON:
        return None
    if name not in known and name not in tools and {a or b for a, b in _CODE_NAME.findall(head)} - {name}:
        return None
    return (name, "" if noun.lower() in _WHOLE else _singular(noun))


def _matches(head: str, tools: set[str], known: set[str]) -> list[tuple[re.Match[str], tuple[str, str] | None]]:
    """Each claim's match in ``head``, in order, with the (tool, field) it is about (None: it cannot be told)."""
    found: list[tuple[re.Match[str], tuple[str, str] | None]] = []
    for match in _AS.finditer(head):
        tool = _named(match, "s")
        found.append((match, (tool, _named(match, "f")) if tool.lower() not in _PYTHON else None))
    spans = [match.span() for match, _ in found]
    found += [(match, _subject(match, tools, known)) for match in _CLAIM.finditer(head)
              if not any(start <= match.start() < end for start, end in spans)]
    return sorted(found, key=lambda pair: pair[0].start())


def read(text: str, known: Iterable[str] = ()) -> list[TypeClaim]:
    """The type claims of a lesson's ``text`` (see the module); ``known``: names known to be tools."""
    head = text[:MAX_TEXT]
    known_set = set(known)
    tools = lesson_tools(head, known_set)
    found: list[TypeClaim] = []
    for match, subject in _matches(head, tools, known_set):
        if _SUPPOSED.search(head, max(0, match.start() - 80), match.start()) or _PINNED.match(head, match.end()):
            continue
        main = _kind(match.group("main"), match.group("main_of"), bool(match.group("main_ofp")))
        if subject is None or not main:
            continue
        groups = match.groupdict()
        denied = bool(groups.get("verb_not") or groups.get("is_not"))
        found.append(TypeClaim(*subject, main, not denied))
        if match.group("neg") and (other := _kind(match.group("neg"), match.group("neg_of"),
                                                                bool(match.group("neg_ofp")))):
            found.append(TypeClaim(*subject, other, False))
        if len(found) >= MAX_CLAIMS:
            break
    return list(dict.fromkeys(found))


_SAID = {"str": ("a string", "strings"), "number": ("a number", "numbers"), "bool": ("a boolean", "booleans"),
         "none": ("None", "None"), "dict": ("a dict", "dicts"), "list": ("a list", "lists"),
         "numtext": ("a string holding a number", "strings holding numbers")}


def said(kind: str) -> str:
    """A kind in words: ``list:dict`` -> ``a list of dicts``."""
    outer, _, element = kind.lstrip("*").partition(":")
    one, many = _SAID.get(outer, (outer, outer))
    if outer == "list" and element:
        return f"a list of {_SAID.get(element, (element, element))[1]}"
    return many if kind.startswith("*") else one


def kind_of(node: Any) -> str | None:
    """The kind of one node of a structure (``ShapePayload.structure``), None when it is not shown."""
    if isinstance(node, str):
        return {"str": "str", "int": "number", "float": "number", "bool": "bool", "NoneType": "none"}.get(node)
    if isinstance(node, dict) and "type" in node:
        return "bool" if node["type"] == "bool" else "numtext" if node.get("number") else "str"
    if isinstance(node, dict) and "fields" in node:
        return "dict"
    if isinstance(node, dict) and "items" in node:
        inner = kind_of(node["items"]) or ""
        return f"list:{inner.split(':')[0]}"
    return None


def kinds_of(structure: Any) -> dict[str, frozenset[str]]:
    """{field ("" the whole result): its kind} of a structure; a field shown as None says nothing (a value left
    out, or deeper than shown)."""
    found: dict[str, frozenset[str]] = {}
    whole = kind_of(structure)
    if whole:
        found[""] = frozenset({whole})
    for key, leaf in shapes.fields(structure).items():
        kind = kind_of(leaf)
        if kind and kind != "none":
            found[key] = frozenset({kind})
    return found


def _same(said: str, seen: str) -> bool | None:
    """Whether a scalar or container kind said matches one seen (None: the words cannot tell)."""
    if said == seen or (said == "str" and seen == "numtext"):
        return True
    if said == "number" and seen == "numtext":
        return None  # "numbers" may mean numbers written as text
    return False


def matches(said: str, seen: str) -> bool | None:
    """Whether the kind ``said`` is the kind ``seen`` (True), is not (False) or the words cannot tell (None)."""
    outer, _, element = seen.partition(":")
    if said.startswith("*"):
        said = said[1:]
        if outer == "list":
            return _same(said, element) if element else None
        return None if outer == "dict" else _same(said, seen)
    said_outer, _, said_element = said.partition(":")
    if said_outer != "list" or outer != "list":
        return _same(said_outer, outer)
    return _same(said_element, element) if said_element and element else True


def judge(claim: TypeClaim, seen: Seen) -> bool | None:
    """Whether the observed kinds (``seen``) bear ``claim`` out (True), contradict it (False) or neither (None).
    A claim naming no tool is judged by every tool whose result has that field."""
    tools = [claim.tool] if claim.tool else [tool for tool, fields in seen.items() if claim.field in fields]
    kinds = {kind for tool in tools for kind in seen.get(tool, {}).get(claim.field, ())}
    if not kinds or (not claim.tool and not claim.field):
        return None
    said = {matches(claim.kind, kind) for kind in kinds}
    if True in said:
        return claim.holds
    return (not claim.holds) if said == {False} else None


def contradicted(text: str, seen: Seen) -> bool:
    """Whether a claim of ``text`` about the type of a tool's result is one the observations ``seen`` contradict."""
    if not seen:
        return False
    return any(judge(claim, seen) is False for claim in read(text, seen))


def _printed(code: str, printed: str, tools: set[str]) -> tuple[str, Any] | None:
    found = printed_tool(code, tools)
    if found is None:
        return None
    tool, alone = found
    value = walk.read_literal(printed) if alone else walk.first_literal(printed)
    return (tool, value) if isinstance(value, dict | list) else None


def _add(seen: dict[str, dict[str, frozenset[str]]], tool: str, value: Any) -> None:
    try:
        structure = walk.structure(value)
    except (walk.Unfit, RecursionError):
        return
    fields = seen.setdefault(tool, {})
    for key, kinds in kinds_of(structure).items():
        fields[key] = fields.get(key, frozenset()) | kinds


def seen_in(run: RunView) -> dict[str, dict[str, frozenset[str]]]:
    """The kinds of what each tool returned in ``run``: from the recorder's specimens, and for a tool it kept none
    of, from what a step printed of its result (a dict or list literal; a printed scalar's type cannot be told from
    its text, and a printed name may have been bound to part of the result: a specimen says more)."""
    known = set(run.tools or ())
    seen: dict[str, dict[str, frozenset[str]]] = {}
    printed: dict[str, dict[str, frozenset[str]]] = {}
    for step in run.actions:
        for returned in step.returned:
            _add(seen, returned.tool, returned.structure)
        if step.code.strip() and (shown := _printed(step.code, step.logs.strip(), known)) is not None:
            _add(printed, *shown)
    return {**{tool: kinds for tool, kinds in printed.items() if tool not in seen}, **seen}
