"""A tool result's structure without its values: what the recorder keeps of each tool call's result.

A small agent that loops over ``search_catalog("lamp")`` gets the dict's keys, not the products, and fails
without ever printing the result; the next run needs to know where the records are. The recorder keeps,
per step and tool, a *specimen* of the first result that fits: the value with every leaf replaced by a
placeholder of its type (``""``, ``0``, ``0.0``, ``False``, ``None``), every list cut to its first
element, at most ``MAX_KEYS + 1`` keys per dict (one more than a shape shows, so a reader knows there were
more) and ``MAX_DEPTH`` levels. Only keys and type names leave the agent, never a value it read.

A result does not fit (nothing is kept) when a key is not a plain name (letters, digits, ``_``, at most
40 characters: a page cannot pass a sentence off as a key), a list or dict is empty (it says nothing of
the records' fields), a leaf is not a JSON scalar, or the walk meets more than ``MAX_NODES`` values.
The walk is bounded by those limits whatever the value (a huge or self-containing one included).

The worker keeps a tool's result shape from a specimen (``lessonbank.learn.shapes``) as a structured payload.
"""

from __future__ import annotations

import re
from itertools import islice
from typing import Any

MAX_KEYS = 12
MAX_DEPTH = 4
MAX_NODES = 200
PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
_PLACEHOLDERS: tuple[tuple[type, Any], ...] = ((bool, False), (int, 0), (float, 0.0), (str, ""))


class Unfit(Exception):
    """A value whose structure is not kept (a key that is not a plain name, an empty list, too large)."""


def specimen(value: Any) -> Any:
    """``value``'s structure with placeholders for its values (see the module). Raises ``Unfit``."""
    try:
        return _walk(value, 0, [MAX_NODES])
    except RecursionError as e:  # pragma: no cover - the depth limit comes first
        raise Unfit("too deep") from e


def _walk(value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise Unfit("too many values")
    if depth > MAX_DEPTH:
        return None  # deeper than a shape shows
    if isinstance(value, dict):
        if not value:
            raise Unfit("an empty dict")
        kept: dict[str, Any] = {}
        for key in list(islice(value, MAX_KEYS + 1)):
            if not isinstance(key, str) or not PLAIN_KEY.fullmatch(key):
                raise Unfit("a key that is not a plain name")
            kept[key] = _walk(value[key], depth + 1, budget)
        return kept
    if isinstance(value, list | tuple):
        if not value:
            raise Unfit("an empty list")
        return [_walk(value[0], depth + 1, budget)]
    return _placeholder(value)


def _placeholder(value: Any) -> Any:
    if value is None:
        return None
    for kind, placeholder in _PLACEHOLDERS:
        if isinstance(value, kind):
            return placeholder
    raise Unfit(f"a {type(value).__name__}")
