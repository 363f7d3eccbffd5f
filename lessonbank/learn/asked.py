"""A date written the way a tool's error asks: ``invalid date '2024-08-02': expected DD.MM.YYYY`` names the
form the tool wants, and the task's own date can be written in it.

A small agent that reads such an error often never passes the date rewritten: it parses it with
``strptime``, changes the year, or answers the error. No later step of its run then holds a corrected
line, so ``learn.fixes`` has no observed fix to keep and the next run fails the same way. This module
gives that fix its corrected line: the failing line with the date written in the form the error names.

What the error may decide is only the *form*, from a closed vocabulary: day, month and year, each once, as
``DD``/``MM``/``YYYY``/``YY`` (any case) or ``%d``/``%m``/``%Y``/``%y``, with one separator among
``. / -`` or none. The digits come from the failing line's own value, which must be a date whose order is
unambiguous (a four-digit year first, or last with a day over 12). An error message is untrusted text: it
cannot put a value of its own into the next run's code, only reorder the date the run already passed.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

MAX_MESSAGE = 2_000  # characters of the error scanned for the form
_LETTER_PART = r"(D{2}|M{2}|Y{4}|Y{2})"
_LETTER_FORM = re.compile(rf"(?<![A-Za-z0-9%]){_LETTER_PART}([./\-]?){_LETTER_PART}\2{_LETTER_PART}(?![A-Za-z0-9])",
                          re.IGNORECASE)
_STRFTIME_FORM = re.compile(r"%([dmYy])([./\-]?)%([dmYy])\2%([dmYy])(?![A-Za-z0-9])")
_STRFTIME_PART = {"d": "DD", "m": "MM", "Y": "YYYY", "y": "YY"}
_VALUE = re.compile(r"([0-9]{1,4})([./\-])([0-9]{1,2})\2([0-9]{1,4})")
_COMPACT = re.compile(r"((?:19|20)[0-9]{2})([0-9]{2})([0-9]{2})")


@dataclass(frozen=True)
class Form:
    """A date's form: its parts in order (``DD``, ``MM``, ``YYYY`` or ``YY``) and their separator."""

    parts: tuple[str, str, str]
    separator: str

    @property
    def name(self) -> str:
        """``DD.MM.YYYY``: how the lesson names it (rebuilt from the parts, never the error's own text)."""
        return self.separator.join(self.parts)

    def write(self, day: datetime.date) -> str:
        values = {"DD": f"{day.day:02d}", "MM": f"{day.month:02d}", "YYYY": f"{day.year:04d}",
                  "YY": f"{day.year % 100:02d}"}
        return self.separator.join(values[part] for part in self.parts)


def _form(parts: list[str], separator: str) -> Form | None:
    kinds = sorted(part[0] for part in parts)
    if kinds != ["D", "M", "Y"]:
        return None
    return Form((parts[0], parts[1], parts[2]), separator)


def asked_form(message: str) -> Form | None:
    """The one date form the error names (None if it names none, or several different ones)."""
    text = message[:MAX_MESSAGE]
    forms: list[Form] = []
    for match in _LETTER_FORM.finditer(text):
        found = _form([match.group(i).upper() for i in (1, 3, 4)], match.group(2))
        if found is not None:
            forms.append(found)
    for match in _STRFTIME_FORM.finditer(text):
        found = _form([_STRFTIME_PART[match.group(i)] for i in (1, 3, 4)], match.group(2))
        if found is not None:
            forms.append(found)
    return forms[0] if forms and all(form == forms[0] for form in forms) else None


def _date(year: str, month: str, day: str) -> datetime.date | None:
    try:
        return datetime.date(int(year), int(month), int(day))
    except ValueError:
        return None


def read_date(value: str) -> datetime.date | None:
    """The date a value writes with a four-digit year, if its order is certain: ``2024-08-02``, ``2024/8/2``,
    ``20240802``, ``25.12.2024`` (a day over 12 says which part is the day); None for ``02.08.2024``."""
    value = value.strip()
    if (compact := _COMPACT.fullmatch(value)) is not None:
        return _date(*compact.groups())
    match = _VALUE.fullmatch(value)
    if match is None:
        return None
    first, _, second, third = match.groups()
    if len(first) == 4 and len(third) <= 2:
        return _date(first, second, third)
    if len(third) == 4 and len(first) <= 2:
        if int(first) > 12 >= int(second):
            return _date(third, second, first)
        if int(second) > 12 >= int(first):
            return _date(third, first, second)
    return None


def rewrite(value: str, message: str) -> tuple[str, Form] | None:
    """``value`` written in the form the error ``message`` asks for, and that form; None if the message
    names no form, the value is no certain date, or it is written that way already."""
    form = asked_form(message)
    day = read_date(value)
    if form is None or day is None:
        return None
    written = form.write(day)
    return (written, form) if written != value.strip() else None
