"""What an observed fix changed, and values written another way: the reading of a fix's two lines.

A fix's correction changes an argument's value or its form (``date="2024-03-17"`` -> ``date="17.03.2024"``,
``region="north"`` -> ``region="North"``), a key (``row["revenue"]`` -> ``row["Revenue"]``), or adds a conversion
(``float(r["kwh"])`` -> ``float(r["kwh"].replace(",", ""))``): ``changes`` says which, as
``core.models.Change`` entries. When a value's correction only reordered or re-separated its parts (a date, a
time, a version), ``rewriter`` writes another value of that form the same way, and ``rewritten_from`` finds the
task's value a value rewrites.

Every pattern here reads a task, a value or a line of code, never a lesson's text.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from lessonbank.core.models import Change, FixPayload

POSITION = "#"  # a value passed by position, in the names ``changed_arguments`` gives: ``fetch_rates#2``
MAX_CARRIED = 3
MAX_CONVERSION = 80
_GROUP = re.compile(r"[0-9]+|[^\W\d_]+")
_DIGITS = re.compile(r"[0-9]+")
_LETTERS = re.compile(r"[^\W\d_]+")
_WORD = r"[^\W_](?:[\w.\-/:@]*[^\W_])?"  # a word or value: "ops", "21", "USR-5102", "2024-03-17", "get_user"
WORD = re.compile(_WORD)


def shape(value: object) -> str:
    """A value with its digits and letters folded: ``'17.03.2024'`` -> ``'9.9.9'``, ``'Oslo'`` -> ``'a'``."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    return _LETTERS.sub("a", _DIGITS.sub("9", str(value)))


def named(keyword: str) -> str:
    """How a fix's lead names what changed: `` `date` ``, or ``argument 2 of `fetch_rates` ``."""
    callee, _, index = keyword.rpartition(POSITION)
    return f"argument {index} of `{callee}`" if callee else f"`{keyword}`"


def _parse(line: str) -> ast.Module | None:
    for source in (line, line + " pass"):
        try:
            return ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return None


def _constant(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float) and not isinstance(
            node.value, bool):
        return str(node.value)
    return None


def arguments(line: str) -> dict[str, str]:
    """``name=value`` of the constants passed in one line of code: by keyword (``date``), or by position
    (``fetch_rates#2``, the call's second argument)."""
    tree = _parse(line)
    found: dict[str, str] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.keyword) and node.arg and (value := _constant(node.value)) is not None:
            found.setdefault(node.arg, value)
        elif isinstance(node, ast.Call):
            callee = ast.unparse(node.func)
            for index, arg in enumerate(node.args, start=1):
                if (value := _constant(arg)) is not None:
                    found.setdefault(f"{callee}{POSITION}{index}", value)
    return found


def keys(line: str) -> list[tuple[str, str]]:
    """(what is subscripted, the key) of each constant key the line reads: ``("rows[0]", "revenue")``."""
    tree = _parse(line)
    if tree is None:
        return []
    return [(ast.unparse(node.value), node.slice.value) for node in ast.walk(tree) if isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)]


def calls(line: str) -> dict[str, str]:
    """{the name a call of the line calls (``int``, ``replace``): the call's text}."""
    tree = _parse(line)
    found: dict[str, str] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name:
                found.setdefault(name, ast.unparse(node)[:MAX_CONVERSION])
    return found


def changed_arguments(failed: str, fixed: str) -> list[Change]:
    before, after = arguments(failed), arguments(fixed)
    return [Change(argument=name, before=before[name], after=value) for name, value in after.items()
            if name in before and before[name] != value]


def changed_keys(failed: str, fixed: str) -> list[Change]:
    """The keys the correction read instead of others of the same thing (``rows[0]``: "revenue" -> "Revenue")."""
    before, after = keys(failed), keys(fixed)
    gone = [pair for pair in before if pair not in after]
    new = [pair for pair in after if pair not in before]
    changed = []
    for base, key in gone:
        other = next((pair for pair in new if pair[0] == base), None)
        if other is not None:
            new.remove(other)
            changed.append(Change(kind="key", argument=base, before=key, after=other[1]))
    return changed


def added_conversions(failed: str, fixed: str) -> list[Change]:
    """The calls the correction added (a conversion: ``int``, ``replace``), each with its text."""
    before, after = calls(failed), calls(fixed)
    return [Change(kind="conversion", argument=name, before="", after=text) for name, text in after.items()
            if name not in before]


def changes(fix: FixPayload) -> list[Change]:
    """What ``fix``'s correction changed (worked out from its lines when it does not say)."""
    if fix.changed is not None:
        return fix.changed
    return changed_of(fix.failed, fix.fixed)


def changed_of(failed: str, fixed: str) -> list[Change]:
    return changed_arguments(failed, fixed) + changed_keys(failed, fixed) + added_conversions(failed, fixed)


def payload(failed: str, error: str, fixed: str) -> FixPayload:
    """A fix's payload: its lines, the exception's name and what changed."""
    return FixPayload(failed=failed, error=error, fixed=fixed, changed=changed_of(failed, fixed))


def one_change(fix: FixPayload) -> Change | None:
    """The one thing a fix changed; None for a fix that changed none or several."""
    changed = changes(fix)
    return changed[0] if len(changed) == 1 else None


def subject(fix: FixPayload) -> tuple[str, str, str] | None:
    """(function, keyword, form of the corrected value) of a fix that changed one argument's value; None for any
    other. Two fixes with the same subject teach the same thing (``date`` like "9.9.9") from different wrong
    forms: the instructions give the better one only."""
    one = one_change(fix)
    if one is None or one.kind != "argument":
        return None
    keyword, new = one.argument, one.after
    if POSITION in keyword:
        return keyword.rpartition(POSITION)[0], keyword, shape(new)
    tree = _parse(fix.fixed)
    callee = next((ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)
                   and any(k.arg == keyword for k in node.keywords)), "") if tree is not None else ""
    return callee, keyword, shape(new)


# A value standing alone: not preceded by a word character or a separator, and not followed by a word character,
# '-' or '/', nor by '.' or ':' that go on into a longer value ("09:30" of "09:30:15" is no value; "2024-09-22" of
# "Ghent, 2024-09-22: what was..." is one).
_STARTS_ALONE = r"(?<![\w.\-/:])"
_STANDS_ALONE = r"(?![\w\-/]|[.:]\w)"


def _pattern(value: str) -> re.Pattern[str]:
    """A value of the same form: the same digit counts, letters, and separators, standing alone."""
    parts = []
    for match in re.finditer(r"[0-9]+|[^\W\d_]+|.", value):
        piece = match.group(0)
        if piece.isdigit():
            parts.append(rf"[0-9]{{{len(piece)}}}")
        elif _LETTERS.fullmatch(piece):
            parts.append(r"[^\W\d_]+")
        else:
            parts.append(re.escape(piece))
    return re.compile(_STARTS_ALONE + "".join(parts) + _STANDS_ALONE)


def _reorder(old: str, new: str) -> list[int] | None:
    """For each part of ``new``, the position of the same part in ``old`` (None unless ``new`` only
    reorders or re-separates ``old``'s parts, each found once)."""
    old_groups, new_groups = _GROUP.findall(old), _GROUP.findall(new)
    if not old_groups or len(set(old_groups)) != len(old_groups) or sorted(old_groups) != sorted(new_groups):
        return None
    order = [old_groups.index(group) for group in new_groups]
    return order if order != list(range(len(order))) or _GROUP.sub("", old) != _GROUP.sub("", new) else None


def rewriter(old: str, new: str) -> Callable[[str], str | None] | None:
    """A function writing a value of ``old``'s form the way ``new`` rewrote ``old`` (its parts in another order,
    other separators: "2024-03-17" -> "17.03.2024"); None unless ``new`` only does that to ``old``."""
    if len(old) > 40 or len(new) > 40:
        return None
    order = _reorder(old, new)
    if order is None:
        return None
    template = re.split(r"([0-9]+|[^\W\d_]+)", new)  # separators at even indices, parts at odd ones
    form = _pattern(old)

    def rewrite(value: str) -> str | None:
        groups = _GROUP.findall(value)
        if len(groups) != len(order) or not form.fullmatch(value):
            return None
        return "".join(piece if i % 2 == 0 else groups[order[i // 2]] for i, piece in enumerate(template))
    return rewrite


def carry_over(old: str, new: str, task: str) -> list[tuple[str, str]]:
    """(value in the task, the same value rewritten the way ``old`` was rewritten to ``new``), at most
    ``MAX_CARRIED``."""
    rewrite = rewriter(old, new)
    if rewrite is None:
        return []
    carried: list[tuple[str, str]] = []
    for match in _pattern(old).finditer(task[:4000]):
        value = match.group(0)
        written = rewrite(value) if value != old else None
        if written is not None and (value, written) not in carried:
            carried.append((value, written))
        if len(carried) >= MAX_CARRIED:
            break
    return carried


_COMPOUND = re.compile(_STARTS_ALONE + r"[^\W_]{1,10}(?:[^\w\s][^\W_]{1,10}){1,5}" + _STANDS_ALONE)


def rewritten_from(value: str, task: str) -> str | None:
    """The value of ``task`` that ``value`` rewrites (its parts in another order or with other separators:
    "17.03.2024" rewrites the task's "2024-03-17"), or None."""
    if len(value) > 40 or not _GROUP.search(value):
        return None
    parts = sorted(_GROUP.findall(value))
    for match in _COMPOUND.finditer(task[:4000]):
        if match.group(0) != value and sorted(_GROUP.findall(match.group(0))) == parts:
            return match.group(0)
    return None
