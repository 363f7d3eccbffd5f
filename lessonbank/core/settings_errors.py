"""What a bad setting is told: one line naming each bad value's environment variable and what a valid one looks like.

The settings' own model (``settings.Settings``) is read for its fields' types, bounds and aliases; a numeric
field's ``Unit`` names what its number counts. ``settings`` re-exports ``env_var``, ``expected`` and ``explain``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt, MinLen
from pydantic import AliasChoices, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

ENV_PREFIX = "LESSONBANK_"


@dataclass(frozen=True)
class Unit:
    """The unit of a numeric setting, for error messages (``a whole number of seconds above 0``)."""

    name: str


def _fields() -> dict[str, FieldInfo]:
    from lessonbank.core.settings import Settings  # the model these lines are about (it imports this module)

    return Settings.model_fields


_SECRET = frozenset({"openai_api_key", "qdrant_api_key"})
_URL = frozenset({"redis_url", "openai_base_url", "qdrant_url", "embed_base_url", "otlp_endpoint"})


def env_var(name: str) -> str:
    """The environment variable of field `name` (its first alias, else ``LESSONBANK_<NAME>``)."""
    alias = _fields()[name].validation_alias
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return f"{ENV_PREFIX}{name.upper()}"


def _field_of(loc: str) -> str | None:
    """The field an error location names: a field name, or one of its aliases (any case)."""
    if loc in _fields():
        return loc
    for name, info in _fields().items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices) and any(str(c).upper() == loc.upper() for c in alias.choices):
            return name
    return None


def expected(name: str) -> str | None:
    """What a valid value of field `name` looks like, from its type and bounds (None: nothing to say)."""
    info = _fields()[name]
    if get_origin(info.annotation) is Literal:
        return "one of " + ", ".join(get_args(info.annotation))
    bounds = {kind.__name__.lower(): getattr(m, kind.__name__.lower())
              for m in info.metadata for kind in (Ge, Gt, Le, Lt) if isinstance(m, kind)}
    unit = next((f" of {m.name}" for m in info.metadata if isinstance(m, Unit)), "")
    whole = info.annotation is int or set(get_args(info.annotation)) == {int, type(None)}
    kind = ("a whole number" if whole else "a number") + unit
    show = {key: str(int(value)) if whole else f"{value:g}" for key, value in bounds.items()}
    low = show.get("ge", show.get("gt"))
    if "le" in show:
        return f"{kind} from {low} to {show['le']}"
    if "lt" in show:
        return f"{kind} from {low} up to (not including) {show['lt']}"
    if "gt" in show:
        return f"{kind} above {show['gt']}"
    if "ge" in show:
        return f"{kind} of at least {show['ge']}"
    if any(isinstance(m, MinLen) for m in info.metadata):
        return "a non-empty string"
    return None


def _got(name: str, value: Any) -> str:
    if name in _SECRET:
        return ""
    text = value if isinstance(value, str) else repr(value)
    if name in _URL:
        text = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)?[^@/]*@", lambda m: (m.group(1) or "") + "**@", text)
    shown = repr(text) if isinstance(value, str) else text
    return f" (got {shown[:80] + '...' if len(shown) > 80 else shown})"


def _line(error: ErrorDetails) -> tuple[str, str]:
    loc = str(error["loc"][0]) if error["loc"] else ""
    name = _field_of(loc)
    if name is None:
        return loc, error["msg"]
    cause = error.get("ctx", {}).get("error") if error["type"] == "value_error" else None
    want = str(cause) if cause is not None else expected(name)
    got = _got(name, error["input"])
    if want is None:
        return name, f"{env_var(name)} is not valid: {error['msg'][:1].lower()}{error['msg'][1:]}{got}"
    return name, f"{env_var(name)} must be {want}{got}"


def explain(error: ValidationError) -> str:
    """One line for the operator: each bad setting by its environment variable, and what would be valid."""
    lines: dict[str, str] = {}
    for detail in error.errors():
        key, line = _line(detail)
        lines.setdefault(key, line)
    return "; ".join(lines.values())
