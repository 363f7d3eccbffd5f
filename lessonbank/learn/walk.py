"""Walking what a tool returned: reading printed output into a value, and the structures taken from it.

One bounded walk per question, each over the first element of a list and the first keys of a dict only, so
that a huge, deep or self-containing value costs what its shown part costs:

- ``read_literal`` / ``first_json``: printed output read back into a value (whole, or its first JSON value);
- ``structure``: its keys and type names as a shape keeps them (``ShapePayload.structure``), and
  ``record_paths``: where its lists of records are;
- ``outline``: a one-line description for the evidence the distiller is shown (``{orders: list of 3 x {...}}``);
- ``paths_to``: where a printed literal sits in it (the path a recipe reads its answer back with).

Everything here is what a run observed: values are read and measured, never interpreted.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from lessonbank.core import specimen
from lessonbank.core.specimen import CUT, DESCRIBED, MAX_DEPTH, MAX_KEYS, MAX_RECORDS, MAX_WORDS, PLAIN_KEY, WORD

MAX_PRINTED = 20_000  # characters of printed output read back into a value
MORE = "..."  # a structure deeper than shown; more keys than shown
MAX_PATH = 6  # levels looked into for a literal
OUTLINE_DEPTH = 3
OUTLINE_KEYS = 12


class Unfit(ValueError):
    """A value whose structure is not kept (a key that is not a plain name, an empty list, another type)."""


def read_literal(text: str) -> Any:
    """``text`` read whole as one JSON or Python literal (None when it is not one)."""
    if not text or len(text) > MAX_PRINTED or text[0] not in "{[":
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


MAX_STARTS = 20  # brackets of a printed output tried as the start of a literal


def _span(text: str, start: int) -> int:
    """Where the bracket at ``start`` closes (quotes followed), or -1."""
    depth, quote, escaped = 0, "", False
    for at in range(start, min(len(text), start + MAX_PRINTED)):
        ch = text[at]
        if quote:
            escaped = not escaped and ch == "\\"
            if ch == quote and not escaped:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
            if depth == 0:
                return at
    return -1


def first_literal(text: str) -> Any:
    """The first dict or list literal (JSON or Python) in ``text``, around other printed words (None when there
    is none)."""
    starts = sorted(i for i in (text.find("{"), text.find("[")) if i >= 0)
    at, tried = (starts[0] if starts else -1), 0
    while at >= 0 and tried < MAX_STARTS:
        end = _span(text, at)
        if end > at:
            value = read_literal(text[at:end + 1])
            if isinstance(value, dict | list):
                return value
        tried += 1
        nexts = [i for i in (text.find("{", at + 1), text.find("[", at + 1)) if i >= 0]
        at = min(nexts) if nexts else -1
    return None


def first_json(text: str) -> Any:
    """The first JSON object or array in ``text`` (None when there is none)."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except (ValueError, RecursionError):  # nested deeper than the decoder follows: no value read
        return None


def structure(value: Any, depth: int = 0, kept: bool = False, records: bool = False) -> Any:
    """``value``'s structure and types as ``ShapePayload.structure`` holds them (its keys, no value, but what a
    string is when that changes its meaning and what a flag held: ``core.specimen``); raises ``Unfit`` for a value
    whose structure is not kept (a key that is not a plain name, an empty list). ``value`` is a tool's result as
    printed, or (``kept``) the recorder's specimen of it, where a bare ``False`` is a placeholder: a flag whose
    value a recorder kept is a described leaf; ``records``: ``value`` is (in) a list's first element."""
    if depth > MAX_DEPTH:
        return MORE
    if isinstance(value, dict):
        if DESCRIBED in value:
            return MORE if value[DESCRIBED] == CUT else leaf(value, records)  # cut by the recorder: there, not null
        if not value:
            raise Unfit("an empty dict")
        fields = []
        for key in list(value)[:MAX_KEYS]:
            if not isinstance(key, str) or not PLAIN_KEY.fullmatch(key):
                raise Unfit("a key that is not a plain name")
            fields.append([key, structure(value[key], depth + 1, kept, records)])
        return {"fields": fields, "more": len(value) > MAX_KEYS}
    if isinstance(value, list | tuple):
        value = specimen.counted(value)[0]  # a specimen's count of the records: not structure
        if not value:
            raise Unfit("an empty list")
        first = value[0]
        if isinstance(first, dict) and DESCRIBED not in first and len(value) > 1:
            first = dict(list(first.items())[:MAX_KEYS + 1])
            specimen.describe_fields(first, list(value[:MAX_RECORDS]))
        return {"items": structure(first, depth + 1, kept, records=True)}
    if isinstance(value, str | bool):
        return _scalar(value, depth, kept)
    if value is None or isinstance(value, int | float):
        return type(value).__name__
    raise Unfit(f"a {type(value).__name__}")


def _scalar(value: str | bool, depth: int, kept: bool) -> Any:
    if isinstance(value, bool):
        return "bool" if kept else leaf(specimen.flag([value]))
    found = specimen.described(value, whole=depth == 0)
    return leaf(found) if isinstance(found, dict) else "str"


_TEXT_FLAGS = ("bom", "decimal_comma")


def leaf(described: dict[str, Any], records: bool = False) -> Any:
    """A described leaf (``core.specimen``) as a shape keeps it: a string's ``{"type": "str", "number": true}``, with
    ``values`` (a few plain words), ``text`` (a text's form) or ``like`` (its written forms: ``["+99:99"]``); a
    flag's ``{"type": "bool", "true": 1, "false": 0}`` (how many results held each value: ``merged`` adds them up);
    checked again, since a specimen crossed Redis from the agent's process. Raises ``Unfit`` for anything else.
    Outside a list's records (not ``records``) a string has no words and a flag one value: what one result held
    there is its value, not what a field of records shares."""
    if described.get(DESCRIBED) == "bool":
        values = described.get("values")
        if not isinstance(values, list) or not 0 < len(values) <= 2 or not all(isinstance(v, bool) for v in values):
            raise Unfit("a flag without its values")
        if not records and len(values) > 1:
            return "bool"  # one result's flag held one value: which, is not known
        return {"type": "bool", "true": int(True in values), "false": int(False in values)}
    if described.get(DESCRIBED) != "str":
        raise Unfit("a described leaf of another type")
    out: dict[str, Any] = {"type": "str"}
    if described.get("number") is True:
        out["number"] = True
        if described.get("like") in ("9,999", "9.999,99", "9,99"):  # one of the fixed forms, never a value
            out["like"] = described["like"]
    elif isinstance(like := described.get("like"), list) and 0 < len(like) <= specimen.MAX_FORMS and all(
            specimen.is_form(form) for form in like):
        out["like"] = sorted(set(like))  # a written form: digits and letters masked, never a value
    values = described.get("values") if records else None
    if isinstance(values, list) and 0 < len(values) <= MAX_WORDS and all(
            isinstance(v, str) and WORD.fullmatch(v) for v in values):
        out["values"] = sorted(values)
    text = described.get("text")
    if isinstance(text, dict) and (form := _text(text)):
        out["text"] = form
    return out if len(out) > 1 else "str"


def _text(form: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if form.get("holds") in ("html", "json"):
        return {"holds": form["holds"]}
    if isinstance(form.get("lines"), int) and not isinstance(form.get("lines"), bool):
        out["lines"] = form["lines"]
    if form.get("separator") in (";", "\t", "|", ","):
        out["separator"] = form["separator"]
    header = form.get("header")
    if isinstance(header, list) and 0 < len(header) <= MAX_KEYS and all(
            isinstance(cell, str) and WORD.fullmatch(cell) for cell in header):
        out["header"] = header
    out.update({flag: True for flag in _TEXT_FLAGS if form.get(flag) is True})
    return out if "separator" in out else {}


def is_flag(node: Any) -> bool:
    """Whether a structure's leaf is a flag with its values (``leaf``)."""
    return isinstance(node, dict) and node.get("type") == "bool"


VALUED = ("like", "values")  # a string's written forms and shared words: what its values were, not its structure


def _without(node: Any, keys: tuple[str, ...]) -> Any:
    """A string's leaf without its ``keys`` lists ("str" when nothing else is left); any other node as it is."""
    if not isinstance(node, dict) or node.get("type") != "str" or not any(isinstance(node.get(k), list) for k in keys):
        return node
    rest = {key: value for key, value in node.items() if not (key in keys and isinstance(value, list))}
    return rest if len(rest) > 1 else "str"


def _each_leaf(structure: Any, change: Any, depth: int = 0) -> Any:
    if depth > MAX_DEPTH + 1:
        return structure
    if isinstance(structure, dict) and "fields" in structure:
        return {**structure, "fields": [[key, _each_leaf(inner, change, depth + 1)]
                                        for key, inner in structure["fields"]]}
    if isinstance(structure, dict) and "items" in structure:
        return {**structure, "items": _each_leaf(structure["items"], change, depth + 1)}
    return change(structure)


def valueless(structure: Any) -> Any:
    """A structure without its flags' values (each a plain ``bool``), its strings' written forms and the words a
    field of records shared (``VALUED``): what stays the same whatever they held."""
    return _each_leaf(structure, lambda node: "bool" if is_flag(node) else _without(node, VALUED))


def formless(structure: Any) -> Any:
    """A structure without its strings' written forms (``leaf``'s ``like`` lists): what a shape too long with them
    still says."""
    return _each_leaf(structure, lambda node: _without(node, ("like",)))


def _joined(key: str, old: list[str], new: list[str]) -> list[str] | None:
    if key == "like":
        return specimen.fewest({*old, *new})
    words = sorted({*old, *new})
    return words if len(words) <= MAX_WORDS else None


def _merged_string(old: dict[str, Any], new: Any) -> Any:
    """A string's leaf seen twice: the forms and words of both, none when one of them had none (a value was seen
    that fits none) or they are more than are told."""
    out = dict(old)
    for key in VALUED:
        if isinstance(out.get(key), list):
            theirs = new.get(key) if isinstance(new, dict) else None
            both = _joined(key, out[key], theirs) if isinstance(theirs, list) else None
            if both is None:
                del out[key]
            else:
                out[key] = both
    return out if len(out) > 1 else "str"


def merged(old: Any, new: Any, depth: int = 0) -> Any:
    """Two structures of one result's form (the same ``valueless``) as one: each flag's counts added up; a flag
    whose values one of them did not keep (a plain ``bool``) takes the other's; a string's written forms and a
    field's words are those of both (``_merged_string``)."""
    if is_flag(old) and is_flag(new):
        return {"type": "bool", "true": old["true"] + new["true"], "false": old["false"] + new["false"]}
    if isinstance(old, dict) and old.get("type") == "str":
        return _merged_string(old, new)
    if old == "bool" or depth > MAX_DEPTH + 1:
        return new if is_flag(new) else old
    if isinstance(old, dict) and isinstance(new, dict) and "fields" in old and "fields" in new \
            and len(old["fields"]) == len(new["fields"]):
        return {**old, "fields": [[key, merged(inner, other, depth + 1)]
                                  for (key, inner), (_, other) in zip(old["fields"], new["fields"], strict=True)]}
    if isinstance(old, dict) and isinstance(new, dict) and "items" in old and "items" in new:
        return {**old, "items": merged(old["items"], new["items"], depth + 1)}
    return old


def record_paths(value: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths of the lists of dicts under ``value`` (not inside another such list; ``()``: ``value`` is one)."""
    if isinstance(value, dict) and DESCRIBED not in value and len(path) < MAX_DEPTH:
        return [found for key, inner in list(value.items())[:MAX_KEYS] for found in record_paths(inner, (*path, key))]
    if isinstance(value, list | tuple) and value and isinstance(value[0], dict) and DESCRIBED not in value[0]:
        return [path]
    return []


def count_at(value: Any, path: tuple[str, ...], kept: bool = False) -> int | None:
    """How many records the list at ``path`` (``record_paths``) of a printed value, or (``kept``) of the recorder's
    specimen, held (None when not known: a specimen kept before counts were)."""
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, list | tuple):
        return None
    items, count = specimen.counted(value)
    return count if kept or count is not None else len(items)


def outline(value: Any, depth: int = 0) -> str:
    """``value`` described on one line: its keys, its lists' lengths, small counts and flags (no other value)."""
    if isinstance(value, dict) and depth < OUTLINE_DEPTH:
        parts = []
        for key in list(value)[:OUTLINE_KEYS]:
            inner = outline(value[key], depth + 1)
            parts.append(f"{key}: {inner}" if inner else str(key))
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, list):
        inner = outline(value[0], depth + 1) if value else ""
        return f"list of {len(value)}" + (f" x {inner}" if inner else "")
    if isinstance(value, dict):
        return "{...}"
    if isinstance(value, bool | int | float) and depth:
        return repr(value) if isinstance(value, bool) or str(value).isdigit() and len(str(value)) < 6 else ""
    return ""


def _equals(value: object, literal: str) -> bool:
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float):
        try:
            return float(literal) == value
        except ValueError:
            return False
    return isinstance(value, str) and value.strip() == literal


def paths_to(value: object, literal: str, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Where ``literal`` sits in a printed dict or list, as key and index paths (at most two are looked for)."""
    if isinstance(value, dict | list):
        if len(path) >= MAX_PATH:
            return []
        found: list[tuple[str | int, ...]] = []
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if not isinstance(key, str | int) or isinstance(key, bool):
                continue
            found += paths_to(item, literal, (*path, key))
            if len(found) > 1:
                break
        return found
    return [path] if _equals(value, literal) else []
