"""Lessons stored by schema 1 read into the current schema: the one place that reads a lesson's text back.

Schema 1 kept an observed fix or shape only as prose, and why a lesson had its status only in the words of its
``status_reason``. Both were written by the release before schema 2 in fixed forms, read here once (a lesson
that does not have the form keeps its text and no payload):

- a fix: ``[lead]`<failing line>` failed with <Error>[ asking for <form>]; the corrected line `<line>` worked.``,
  or, asked for by an error, ``...; written as asked: `<line>` (not tried yet).``; the lead, if any, is rendered
  again from the two lines, so ``changed`` is left to be worked out (``lessonbank.learn.fixtext.changes``);
- a shape: ``\\`<tool>(...)\\` returns <structure>: its records are \\`result['k']...\\`.[ Records came back from
  \\`<line>\\`.]``, the structure written as ``{'key': type, ..., ...}`` and ``[type, ...]``;
- a status reason: ``contradicted by run <id>``, ``a newer recipe (run <id>) ...``, ``harmful in ...``, ``given
  to N runs, applied by none``, ``its run <id> was judged a failure by ...``, ``its corrected line gave the answer
  of run <id>, ...``, ``its run <id> was judged a success by ... again``, ``released by a user``, ``unforgotten by
  a user``; a superseded lesson without a reason was merged.

Linear string operations only: the text was written by this project, but a store may hold anything.
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 2
MAX_TEXT = 4000  # characters of a lesson's text read for a payload
_WORKED, _CORRECTED = " worked", "; the corrected line "
_UNTRIED, _ASKED = " (not tried yet)", "; written as asked: "
_FAILED_WITH, _ASKING = " failed with ", " asking for "
_RETURNS, _RECORDS, _CAME = "(...)` returns ", ": its records are `result", " Records came back from `"
MORE, DEEPER = "...", "..."


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a lesson record of schema 1) in the current schema: payloads read from an observed lesson's
    text, the status cause from its reason."""
    data = dict(data)
    text = data.get("text") if isinstance(data.get("text"), str) else ""
    if data.get("origin") == "observed" and text and data.get("fix") is None and data.get("shape") is None:
        data["fix"] = read_fix(text)
        if data["fix"] is None:
            data["shape"] = read_shape(text)
    if data.get("status_cause") is None:
        cause, run = read_cause(str(data.get("status", "active")), str(data.get("status_reason") or ""),
                                data.get("superseded_by"))
        data["status_cause"], data["status_run"] = cause, run
    data["schema_version"] = SCHEMA_VERSION
    return data


def read_fix(text: str) -> dict[str, Any] | None:
    """The payload of a schema-1 fix text (see the module), or None."""
    parts = text[:MAX_TEXT].split("`")
    if len(parts) < 5 or len(parts) % 2 == 0:
        return None
    tried = parts[-1].startswith(_WORKED)
    lead, end = (_CORRECTED, _WORKED) if tried else (_ASKED, _UNTRIED)
    middle = parts[-3]
    if not (parts[-1].startswith(end) and middle.startswith(_FAILED_WITH) and middle.endswith(lead)):
        return None
    error = middle.split(_FAILED_WITH, 1)[1].split(_ASKING, 1)[0].split(";", 1)[0]
    at = middle.rfind(_ASKING)
    form = middle[at + len(_ASKING):].split(";", 1)[0] if at >= 0 else ""
    return {"failed": parts[-4], "error": error, "fixed": parts[-2], "changed": None, "form": form, "tried": tried}


def read_shape(text: str) -> dict[str, Any] | None:
    """The payload of a schema-1 shape text (see the module), or None."""
    text = text[:MAX_TEXT]
    at = text.find(_RETURNS)
    tool = text[1:at] if text.startswith("`") and at > 1 else ""
    if not tool.isidentifier():
        return None
    parsed = _Structure(text, at + len(_RETURNS)).tree()
    if parsed is None:
        return None
    structure, at = parsed
    if not text.startswith(_RECORDS, at):
        return None
    records, at = _path(text, at + len(_RECORDS))
    rest = text[at:]
    if not records or not rest.startswith("`."):
        return None
    rest = rest[2:]
    call = ""
    if rest:
        if not (rest.startswith(_CAME) and rest.endswith("`.")):
            return None
        call = rest[len(_CAME):-2]
        if "`" in call or "\n" in call:
            return None
    return {"tool": tool, "structure": structure, "records": records, "call": call, "said": []}


def _path(text: str, at: int) -> tuple[list[str], int]:
    """The keys of ``['a']['b']`` at ``at``, and where they end."""
    keys: list[str] = []
    while text.startswith("['", at):
        end = text.find("']", at + 2)
        key = text[at + 2:end] if end > 0 else ""
        if not key.isidentifier():
            return [], at
        keys.append(key)
        at = end + 2
    return keys, at


class _Structure:
    """A structure as schema 1 wrote it (``{'key': str, 'items': [{'n': int}, ...], ...}``) read into a tree."""

    MAX_DEPTH = 8

    def __init__(self, text: str, at: int) -> None:
        self.text, self.at = text, at

    def tree(self) -> tuple[Any, int] | None:
        try:
            return self._value(0), self.at
        except ValueError:
            return None

    def _take(self, token: str) -> bool:
        if self.text.startswith(token, self.at):
            self.at += len(token)
            return True
        return False

    def _value(self, depth: int) -> Any:
        if depth > self.MAX_DEPTH:
            raise ValueError("too deep")
        if self._take("{"):
            return self._object(depth)
        if self._take("["):
            item = self._value(depth + 1)
            if not self._take(", ...]"):
                raise ValueError("a list without its ', ...]'")
            return {"items": item}
        if self._take(DEEPER):
            return DEEPER
        start = self.at
        while self.at < len(self.text) and (self.text[self.at].isalnum() or self.text[self.at] == "_"):
            self.at += 1
        if self.at == start:
            raise ValueError("no type name")
        return self.text[start:self.at]

    def _object(self, depth: int) -> dict[str, Any]:
        fields: list[list[Any]] = []
        more = False
        while True:
            if fields and self._take(MORE):
                more = True
            else:
                end = self.text.find("': ", self.at + 1)
                key = self.text[self.at + 1:end] if self.text.startswith("'", self.at) and end > 0 else ""
                if not key.isidentifier():
                    raise ValueError("a key that is not a plain name")
                self.at = end + 3
                fields.append([key, self._value(depth + 1)])
            if self._take("}"):
                return {"fields": fields, "more": more}
            if more or not self._take(", "):
                raise ValueError("a field without ', ' or '}' after it")


_REASONS: tuple[tuple[str, str, str, str], ...] = (
    # status, reason prefix, cause, what follows the run id
    ("superseded", "contradicted by run ", "contradicted", " "),
    ("superseded", "a newer recipe (run ", "outdated", ")"),
    ("retired", "harmful in ", "harmful", ""),
    ("retired", "given to ", "idle", ""),
    ("retired", "its run ", "retracted", " "),
    ("retired", "its corrected line gave the answer of run ", "retracted", ","),
    ("active", "its run ", "restored", " "),
    ("active", "released by a user", "released", ""),
    ("active", "unforgotten by a user", "unforgotten", ""),
)


def read_cause(status: str, reason: str, superseded_by: Any) -> tuple[str | None, str]:
    """(status cause, the run it names) of a schema-1 status and reason (see the module)."""
    for known, prefix, cause, run_end in _REASONS:
        if status == known and reason.startswith(prefix):
            run = reason[len(prefix):].split(run_end, 1)[0] if run_end else ""
            return cause, run
    if status == "superseded" and superseded_by and not reason:
        return "merged", ""
    if status in ("quarantined", "forgotten"):
        return status, ""
    return None, ""
