"""Whether what a lesson says agrees with what its run observed: the quality gate's rules that read the run.

- ``ungrounded``: the lesson quotes a number or a code name that appears nowhere in the run's task or observations;
- ``contradicts_call``, ``contradicts_a_working_key``, ``claims_a_failed_key``: it says a call got nothing back, a
  key was missing or a field is there, and the run's own steps (``evidence.call_results``) say otherwise.

The patterns that find such claims (``GOT_NOTHING``, ``MISSING``, ``VALUE``, ``CODE_NAME``) are
``lessonbank.learn.claims``'s too, which reads the same claims to settle two lessons that contradict each other.
Every pattern is linear: fixed words with bounded gaps, no nested quantifiers.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Sequence

Results = Sequence[tuple[str, str]]  # (code, what it got back or "failed") per step: evidence.call_results

NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?!\w|\.\d)")
# "did not return any records", "returned no results", "no data was found", "came back empty"
GOT_NOTHING = re.compile(
    r"(?i)\b(?:did(?:n't| not)|does(?:n't| not)|could(?:n't| not)|can(?:'t|not)|failed to|(?:was|were) unable to)"
    r" (?:\w+ ){0,2}?(?:return|find|retrieve|get|fetch|provide|give|contain|yield)\b"
    r"|\breturn(?:s|ed)? (?:no|nothing|none|an empty|empty|zero)\b"
    r"|\bno (?:\w+ ){0,3}?(?:data|records?|results?|entries|items|rows|matches|values?) (?:(?:was|were|is|are) )?"
    r"(?:found|returned|available)\b"
    r"|\b(?:is|was|are|were|came back) empty\b"
)
# "The date '04.10.2024' was not valid for the tool": a value said to be refused by the call it was passed to
REFUSED = re.compile(
    r"(?i)\b(?:is|was|are|were|gets?|got) (?:(?!not\b)\w+ ){0,2}?"
    r"(?:invalid|not valid|not accepted|rejected|refused|not recogni[sz]ed|not supported|unsupported)\b"
)
# "The 'amount' column was not found": a key or name said to be missing.
MISSING = re.compile(
    r"(?i)\b(?:was|were|is|are)(?:n't| not) (?:found|present|defined)\b"
    r"|\b(?:does|do|did)(?:n't| not) exist\b|\b(?:is|was|are|were) missing\b"
)
# What makes a claim that something is missing a contrast or a condition (true as said): code that shows where
# it is, or words that say when or what instead ("not found when the file is split on ','", "use 'total'").
_QUALIFIED = re.compile(r"[`\[=]|(?i:\b(?:instead|use|using|rather|but|unless|only|when|if|with|until|because|"
                        r"since|after|before|under|inside|nested)\b)")
# The values a lesson pins its claim to: a quoted string, or a number, date or id of 3 characters or more.
VALUE = re.compile(r"[\"']([^\"'`\n]{3,60})[\"']|(?<![\w.])(\d[\d./:-]{1,30}\d)(?!\w)")
# Python's own names (builtins, methods of its basic types): what everyone knows, no value the run must have seen.
PYTHON_NAMES = frozenset(name.lower() for kind in (builtins, str, list, dict, bytes) for name in dir(kind)
                         if not name.startswith("_"))
CODE_NAME = re.compile(r"`([^`\n]{2,60})`|\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b|\b([A-Za-z_]\w*)\(")


def numbers(text: str) -> set[str]:
    """The numbers in ``text``, as one writes them to compare (no thousands separators, no trailing zeros)."""
    return {match.replace(",", "").rstrip("0").rstrip(".") or "0" for match in NUMBER.findall(text)}


def ungrounded(text: str, haystack: str) -> bool:
    """The lesson quotes a number (three digits or more, or a decimal) or a code name (not Python's own) that
    ``haystack`` (the run's task and observations, lower-cased) does not hold: a value the run never saw."""
    for number in NUMBER.findall(text):
        digits = sum(ch.isdigit() for ch in number)
        if (digits >= 3 or "." in number) and number.replace(",", "") not in haystack.replace(",", ""):
            return True
    for match in CODE_NAME.finditer(text):
        name = next(group for group in match.groups() if group)
        core = re.split(r"[(=\s]", name.strip(), maxsplit=1)[0].lower()
        if len(core) >= 3 and core not in haystack and core.rstrip("()") not in PYTHON_NAMES:
            return True
    return False


def contradicts_call(text: str, results: Results) -> bool:
    """The lesson says a call got nothing back, but each value it pins that on (the ones the run's code
    passed) was passed by a step that ran and printed data, calling the function the lesson names if it
    names one the run called: "`fetch_orders` did not return any records for S-12 on 15.09.2024" after
    ``fetch_orders(store="S-12", date="15.09.2024")`` printed a record. A small distiller writes this when
    the run misread its output; given to the next run, it makes that run give up. A lesson that contrasts
    a rejected value with the working one ("2024-09-15 returns nothing, 15.09.2024 works") is kept. A value said
    to be refused ("The date '04.10.2024' was not valid for `fetch_orders`", ``REFUSED``) is judged the same way."""
    if not results or not (GOT_NOTHING.search(text) or REFUSED.search(text)):
        return False
    values = {match.group(1) or match.group(2) for match in VALUE.finditer(text)}
    pinned = [value for value in values if any(value in code for code, _ in results)]
    if not pinned:
        return False  # pinned to no call: it may be true of every call
    named = {re.split(r"[(=\s]", next(group for group in m.groups() if group).strip(), maxsplit=1)[0]
             for m in CODE_NAME.finditer(text)}
    called = {name for name in named if name and any(f"{name}(" in code for code, _ in results)}
    return all(any(got == "data" and value in code and (not called or any(f"{name}(" in code for name in called))
                   for code, got in results)
               for value in pinned)


def _used_as_key(name: str, code: str) -> bool:
    """The code subscripts something with ``name`` (``row['amount']``, ``result["peak_kw"]``)."""
    return any(f"[{q}{name}{q}]" in code for q in ("'", '"'))


def contradicts_a_working_key(text: str, results: Results) -> bool:
    """The lesson says a key or name was missing, but each one it quotes was used as a key (``['amount']``)
    by a step that ran without an error: "The 'amount' column was not found in the header line" from a run
    that split on the wrong separator, then read ``row['amount']`` fine. The symptom of an error the run
    fixed is no fact; given to the next run, it says the column does not exist. Kept: a lesson that names a
    key only the failing steps used, or qualifies its claim ("not found when the file is split on ','", "not
    at the top level: it is under result['data']")."""
    if not results or not MISSING.search(text) or _QUALIFIED.search(text):
        return False
    quoted = {match.group(1) for match in VALUE.finditer(text) if match.group(1)}
    if not quoted:
        return False
    ran = [code for code, got in results if got != "failed"]
    return all(any(_used_as_key(name, code) for code in ran) for name in quoted)


# "a dictionary with 'peak_kw' as one of its fields", "the 'total' key of the result": a name said to be there.
_FIELD = re.compile(r"(?i)\b(?:fields?|keys?|columns?|attributes?|propert(?:y|ies))\b")
# ...unless the lesson says it is not, or names it as what not to use
_DENIED = re.compile(r"(?i)\b(?:not?|none|never|without|instead|rather|missing|absent|lacks?|wrong|avoid)\b|n't\b")


def claims_a_failed_key(text: str, results: Results) -> bool:
    """The lesson says a field or key is there, but every step that used it as a key (``['peak_kw']``) failed:
    "The `read_meter` tool is expected to return a dictionary with 'peak_kw' as one of its fields" from a
    run whose ``read_meter(...)['peak_kw']`` raised KeyError before ``['readings'][0]['kw']`` worked. The
    run's wrong guess, stated as a fact: given to the next run, it makes that run guess the same. Kept: a lesson
    that says the name is not there, or names it as what not to use, and any name a step used without failing."""
    if not results or not _FIELD.search(text) or _DENIED.search(text):
        return False
    quoted = {match.group(1) for match in VALUE.finditer(text) if match.group(1)}
    return any(any(_used_as_key(name, code) for code, _ in results)
               and all(got == "failed" for code, got in results if _used_as_key(name, code))
               for name in quoted)
