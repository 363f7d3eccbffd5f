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

from lessonbank.core.specimen import MAX_DEPTH, MAX_KEYS, PLAIN_KEY

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


def first_json(text: str) -> Any:
    """The first JSON object or array in ``text`` (None when there is none)."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except (ValueError, RecursionError):  # nested deeper than the decoder follows: no value read
        return None


def structure(value: Any, depth: int = 0) -> Any:
    """``value``'s structure and types as ``ShapePayload.structure`` holds them (its keys, no value); raises
    ``Unfit`` for a value whose structure is not kept (a key that is not a plain name, an empty list)."""
    if depth > MAX_DEPTH:
        return MORE
    if isinstance(value, dict):
        if not value:
            raise Unfit("an empty dict")
        fields = []
        for key in list(value)[:MAX_KEYS]:
            if not isinstance(key, str) or not PLAIN_KEY.fullmatch(key):
                raise Unfit("a key that is not a plain name")
            fields.append([key, structure(value[key], depth + 1)])
        return {"fields": fields, "more": len(value) > MAX_KEYS}
    if isinstance(value, list | tuple):
        if not value:
            raise Unfit("an empty list")
        return {"items": structure(value[0], depth + 1)}
    if value is None or isinstance(value, bool | int | float | str):
        return type(value).__name__
    raise Unfit(f"a {type(value).__name__}")


def record_paths(value: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths of the lists of dicts under ``value`` (not inside another such list)."""
    if isinstance(value, dict) and len(path) < MAX_DEPTH:
        return [found for key, inner in list(value.items())[:MAX_KEYS] for found in record_paths(inner, (*path, key))]
    if isinstance(value, list) and path and value and isinstance(value[0], dict):
        return [path]
    return []


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
