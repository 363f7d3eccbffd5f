"""A tool result's structure without its values: what the recorder keeps of each tool call's result.

A small agent that loops over ``list_users("ops")`` gets the dict's keys, not the users, and fails
without ever printing the result; the next run needs to know where the records are. The recorder keeps,
per step and tool, a *specimen* of the first result that fits: the value with every leaf replaced by a
placeholder of its type (``""``, ``0``, ``0.0``, ``None``; a flag keeps its value), every list cut to its first
element (a list of records then ends with ``{"~": "count", "n": 10}``: how many records it held, ``counted``), at
most ``MAX_KEYS + 1`` keys per dict (one more than a shape shows, so a reader knows there were more) and
``MAX_DEPTH`` levels (a value below them is ``CUT``, ``{"~": "cut"}``: there, its structure not kept, which no
reader can take for a null). Only keys and type names leave the agent, and three things about strings that
change what the numbers beside them mean (``described``), each a leaf ``{"~": "str", ...}`` (``~`` is no plain
name, so no record's key can be taken for it):

- a string that holds a number (``"12,345"``, ``"12,50"``): ``{"~": "str", "number": true}``, with ``"like":
  "9,999"`` when it is written with thousands separators or a decimal comma (``number_form``);
- a field of a list's records whose values are a few short words repeated across the records (a status, a
  currency, a unit: ``"done"``/``"cancelled"``): ``{"~": "str", "values": ["cancelled", "done"]}``, the words only
  when each is a plain word (``WORD``), at most ``MAX_WORDS`` of them;
- a text result's form (``text_form``): its lines, the separator between its fields, its header's names when
  they are plain names, a byte-order mark, decimal commas, or that it is HTML or JSON;
- a string with another fixed written form (a time, a UTC offset, a date, a duration, a percentage, an amount with
  its currency): ``{"~": "str", "like": ["+99:99"]}``, its digits and letters masked (``written_form``), for a
  field of records only when all its values are written in at most ``MAX_FORMS`` forms (``field_forms``).

A list of records says how many it held (``{"~": "count", "n": 10}`` after its first record): a count is no value,
and ten records back from a call that asked for ten say that there may be more (``lessonbank.learn.said``).

A flag keeps its value, which carries no data and may be the fact that matters (``truncated: true``: the result
is only part of it): ``{"~": "bool", "values": [true]}``, for a field of a list's records the values its records
hold (``[false, true]``: some of each). ``valueless`` gives a specimen as its structure alone.

A result does not fit (nothing is kept) when a key is not a plain name (letters, digits, ``_``, at most
40 characters: a page cannot pass a sentence off as a key), a list or dict is empty (it says nothing of
the records' fields), a leaf is not a JSON scalar, or the walk meets more than ``MAX_NODES`` values.
The walk is bounded by those limits whatever the value (a huge or self-containing one included).

The worker keeps a tool's result shape from a specimen (``lessonbank.learn.shapes``) as a structured payload.
"""

from __future__ import annotations

import json
import re
from itertools import islice
from typing import Any

MAX_KEYS = 12
MAX_DEPTH = 4
MAX_NODES = 200
MAX_WORDS = 5  # distinct words of a field kept as its values
MAX_RECORDS = 50  # records of a list looked at for the words of a field
MAX_TEXT = 65_536  # characters of a text result read for its form
MAX_TEXT_LINES = 50
PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.\- ]{0,19}")
DESCRIBED = "~"
CUT = "cut"  # what ``DESCRIBED`` says of a value below ``MAX_DEPTH``
COUNT = "count"  # what ``DESCRIBED`` says of the element a list of records ends with: how many records it held
NUMBER = re.compile(r"[-+]?(?:[0-9]{1,3}(?:[,. '][0-9]{3})+|[0-9]+)(?:[.,][0-9]+)?")
_DECIMAL_COMMA = re.compile(r"-?[0-9]+,[0-9]{1,4}")
_SEPARATORS = (";", "\t", "|", ",")
MAX_FORM = 32  # characters of a value given its written form: a longer one is prose or data, not a form
MAX_FORMS = 3  # written forms a field's values may take and still be told
MAX_FORM_RUNS = 3  # runs of letters in a value with a written form (a unit, a currency, a time zone)
MAX_FORM_LETTERS = 3  # letters a written form may have beyond its digits ("EUR 12,50", "1h30m"; not "3 orders")
FORM_SIGNS = frozenset(" +-:./,%'()#_$\u20ac\u00a3")  # the separators and signs a written form keeps as they are
_MASK_DIGITS = re.compile(r"[0-9]")
_MASK_LETTERS = re.compile(r"[^\W\d_]+")
_DIGIT_RUNS = re.compile(r"9+")
_PLACEHOLDERS: tuple[tuple[type, Any], ...] = ((int, 0), (float, 0.0), (str, ""))


def holds_number(text: str) -> bool:
    """Whether a string is a number written as text (``"12,345"``, ``"12,50"``, ``"-3.5"``)."""
    return len(text) <= 40 and bool(NUMBER.fullmatch(text.strip())) and any(ch.isdigit() for ch in text)


_THOUSANDS = re.compile(r"-?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?")
_EUROPEAN = re.compile(r"-?[0-9]{1,3}(?:\.[0-9]{3})+,[0-9]+")


def number_form(texts: list[str]) -> str:
    """How numbers written as text are written, when it is not Python's own: ``"9,999"`` (thousands separators),
    ``"9.999,99"`` (thousands dots and a decimal comma) or ``"9,99"`` (a decimal comma); "" otherwise. A fixed
    example, never a value: the same form gives the same shape."""
    stripped = [text.strip() for text in texts]
    if any(_EUROPEAN.fullmatch(text) for text in stripped):
        return "9.999,99"
    if any(_THOUSANDS.fullmatch(text) for text in stripped):
        return "9,999"
    if any(_DECIMAL_COMMA.fullmatch(text) for text in stripped):
        return "9,99"
    return ""


def _number(texts: list[str]) -> dict[str, Any]:
    form = number_form(texts)
    return {DESCRIBED: "str", "number": True, **({"like": form} if form else {})}


def mask(value: str) -> str:
    """How a value is written, without it: digits as ``9``, each run of letters as ``a`` (lower case), ``A`` (upper
    case) or ``Aa`` (capitalised): ``'2024-03-12'`` -> ``'9999-99-99'``, ``'EUR 12,50'`` -> ``'A 99,99'``,
    ``'North'`` -> ``'Aa'``."""

    def letters(match: re.Match[str]) -> str:
        word = match.group(0)
        return "A" if word.isupper() else "Aa" if word[:1].isupper() else "a"

    return _MASK_LETTERS.sub(letters, _MASK_DIGITS.sub("9", value))


def written_form(text: str) -> str:
    """A value's fixed written form (``mask``): ``"+09:00"`` -> ``"+99:99"``, ``"1h30m"`` -> ``"9a99a"``, ``"12.5%"``
    -> ``"99.9%"``; "" for a value without a digit, longer than ``MAX_FORM``, more words than digits (more than
    ``MAX_FORM_RUNS`` runs of letters, ``MAX_FORM_LETTERS`` letters beyond its digits), or with any character other
    than a digit, a letter and ``FORM_SIGNS`` (a quote, a line break, a control or other digit): it is no form, and
    a form keeps nothing of what it masks."""
    value = text.strip() if len(text) <= 2 * MAX_FORM else ""
    if not 0 < len(value) <= MAX_FORM or not any("0" <= ch <= "9" for ch in value):
        return ""
    if not all("0" <= ch <= "9" or ch.isalpha() or ch in FORM_SIGNS for ch in value):
        return ""
    digits, letters = sum("0" <= ch <= "9" for ch in value), sum(ch.isalpha() for ch in value)
    if letters > digits + MAX_FORM_LETTERS or len(_MASK_LETTERS.findall(value)) > MAX_FORM_RUNS:
        return ""  # words with a number in them ("3 orders found"): prose, not a form
    return mask(value)


def field_forms(texts: list[str]) -> list[str] | None:
    """The written forms of a field's values (``written_form``), when every value has one and they take at most
    ``MAX_FORMS`` (counting a run of digits as one digit when they take more: ``"99.9%"`` and ``"9.99%"`` are both
    ``"9.9%"``); None otherwise."""
    forms = {written_form(text) for text in texts}
    return fewest(forms) if "" not in forms else None


def fewest(forms: set[str]) -> list[str] | None:
    """``forms`` as told (``field_forms``): at most ``MAX_FORMS``, a run of digits as one digit when they are more;
    None when they are still more (or none)."""
    if len(forms) > MAX_FORMS:
        forms = {_DIGIT_RUNS.sub("9", form) for form in forms}
    return sorted(forms) if 0 < len(forms) <= MAX_FORMS else None


def is_form(form: Any) -> bool:
    """Whether ``form`` is a written form as ``written_form`` gives it (checked again when it crossed Redis):
    digits as ``9``, letters as ``a`` and ``A``, and ``FORM_SIGNS``, never a value."""
    return isinstance(form, str) and 0 < len(form) <= 2 * MAX_FORM and "9" in form and all(
        ch in "9aA" or ch in FORM_SIGNS for ch in form)


def words(values: list[Any]) -> list[str] | None:
    """The distinct words of a field across records, when they are a few plain words some records share (a
    status, a currency, a unit); None otherwise (ids, names, numbers, anything else)."""
    if len(values) < 2 or not all(isinstance(v, str) and WORD.fullmatch(v) and not holds_number(v)
                                  for v in values):
        return None
    distinct = sorted(set(values))
    return distinct if len(distinct) <= MAX_WORDS and len(distinct) < len(values) else None


def _separator(lines: list[str]) -> str:
    for separator in _SEPARATORS:
        count = lines[0].count(separator)
        if count and sum(line.count(separator) == count for line in lines[1:]) >= 0.8 * (len(lines) - 1):
            return separator
    return ""


def text_form(text: str) -> dict[str, Any] | None:
    """A text's form without its content: ``{"lines": 9, "separator": ";", "header": ["Amount", ...], "bom":
    true, "decimal_comma": true}`` for a table, ``{"holds": "html"}``, ``{"holds": "json"}``; None for a text that
    is none of these (prose, a number, an empty string)."""
    head = text[:MAX_TEXT]
    stripped = head.lstrip("\ufeff").strip()
    if not stripped:
        return None
    if stripped[0] in "{[" and stripped[-1] in "}]" and len(text) <= MAX_TEXT:
        try:
            json.loads(stripped)
            return {"holds": "json"}
        except (ValueError, RecursionError):
            pass
    if stripped[0] == "<" and "</" in stripped:
        return {"holds": "html"}
    lines = [line for line in stripped.splitlines()[:MAX_TEXT_LINES] if line.strip()]
    separator = _separator(lines) if len(lines) >= 2 else ""
    if not separator:
        return None
    form: dict[str, Any] = {"lines": len(stripped.splitlines()), "separator": separator}
    header = [cell.strip() for cell in lines[0].split(separator)]
    if all(WORD.fullmatch(cell) for cell in header) and len(header) <= MAX_KEYS:
        form["header"] = header
    if head.startswith("\ufeff"):
        form["bom"] = True
    if separator != "," and any(_DECIMAL_COMMA.fullmatch(cell.strip()) for line in lines[1:]
                                for cell in line.split(separator)):
        form["decimal_comma"] = True
    return form


def described(value: str, whole: bool = True) -> Any:
    """A string leaf's placeholder: ``""``, or what it is when that changes its meaning (see the module); its text
    form only for the ``whole`` result (a tool that returns text), not for a string inside a structure."""
    if holds_number(value):
        return _number([value])
    form = text_form(value) if whole and ("\n" in value[:MAX_TEXT] or value[:1] in "{[<") else None
    if form is not None:
        return {DESCRIBED: "str", "text": form}
    written = written_form(value)
    return {DESCRIBED: "str", "like": [written]} if written else ""


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
        return {DESCRIBED: CUT}  # deeper than a shape shows
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
        first = _walk(value[0], depth + 1, budget)
        if isinstance(first, dict) and isinstance(value[0], dict):
            describe_fields(first, list(islice(value, MAX_RECORDS)))
            return [first, {DESCRIBED: COUNT, "n": len(value)}]
        return [first]
    return _placeholder(value, depth == 0)


def counted(items: list[Any] | tuple[Any, ...]) -> tuple[list[Any], int | None]:
    """A specimen's list without the count a list of records ends with, and that count (None when it has none: a
    list of scalars, a value as printed, a specimen kept before counts were)."""
    last = items[-1] if items else None
    if isinstance(last, dict) and last.get(DESCRIBED) == COUNT:
        n = last.get("n")
        return list(items[:-1]), n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None
    return list(items), None


def flag(values: list[bool]) -> dict[str, Any]:
    """A flag's leaf: the values it was seen to hold."""
    return {DESCRIBED: "bool", "values": sorted(set(values))}


def valueless(value: Any, depth: int = 0) -> Any:
    """A specimen's structure alone: each flag back to its type's placeholder (``False``), a string's written forms
    and a field's shared words left out (an offset written ``+`` or ``-``, records that were all ``done`` this time,
    are no other structure, nor is how many records a list held)."""
    if depth > MAX_DEPTH + 1:
        return value
    if isinstance(value, dict):
        if value.get(DESCRIBED) == "bool":
            return False
        if value.get(DESCRIBED) == "str" and any(isinstance(value.get(key), list) for key in ("like", "values")):
            rest = {key: inner for key, inner in value.items() if key not in ("like", "values")}
            return rest if len(rest) > 1 else ""
        return {key: valueless(inner, depth + 1) for key, inner in value.items()}
    if isinstance(value, list):
        return [valueless(inner, depth + 1) for inner in counted(value)[0]]
    return value


def describe_fields(first: dict[str, Any], records: list[Any]) -> None:
    """Mark the fields of a list's records whose values are a few shared words, numbers written as text or values
    of a few written forms, and the values of their flags; a string field whose values are none of these is a
    plain string, whatever its first record's value is."""
    for key in first:
        raw = [record.get(key) for record in records if isinstance(record, dict)]
        flags = [v for v in raw if isinstance(v, bool)]
        if flags and len(flags) == len(raw):
            first[key] = flag(flags)
            continue
        if not all(isinstance(v, str) for v in raw):
            continue
        values = [str(v) for v in raw]
        found = words(values)
        if found is not None:
            first[key] = {DESCRIBED: "str", "values": found}
        elif values and all(holds_number(v) for v in values):
            first[key] = _number(values)
        elif (forms := field_forms(values)) is not None:
            first[key] = {DESCRIBED: "str", "like": forms}
        else:
            first[key] = ""  # the first record's value is not what every record holds


def _placeholder(value: Any, whole: bool) -> Any:
    if value is None:
        return None
    if isinstance(value, bool):
        return flag([value])
    if isinstance(value, str):
        return described(value, whole)
    for kind, placeholder in _PLACEHOLDERS:
        if isinstance(value, kind):
            return placeholder
    raise Unfit(f"a {type(value).__name__}")
