"""What an observed fix means for another task: the values of its lines, and how a task's values are written the
way the fix rewrote its own (a date's parts in another order).

When the correction rewrote a value's parts in another order with other separators (a date, a time, a
version), ``carry_over`` applies the same rewriting to the values of a new task that look like the one
that failed: for "What was the highest temperature in Porto on 2024-09-15?" the instructions give the fix
with "2024-09-15" failing and "15.09.2024" working (``in_task``), or, for a task with several such values,
say to write each one rewritten (``for_task``). A small model copies the task's "2024-09-15" into its first
call even when told how the tool wants dates; it uses a value it is handed.

A date fix whose error named the form the tool wants keeps it (``FixPayload.form``, ``form_of``): its example
"2024-11-11" -> "11.11.2024" cannot say which "11" is the day, the form can, so it still carries over.

Every pattern here reads a task, a value or a line of code, never a lesson's text.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable

from lessonbank.core.models import Change, FixPayload
from lessonbank.learn import asked, code

POSITION = code.POSITION  # a value passed by position, in the names ``changed_keywords`` gives: ``get_weather#2``
MAX_CARRIED = 3
_GROUP = re.compile(r"[0-9]+|[^\W\d_]+")
_DIGITS = re.compile(r"[0-9]+")
_LETTERS = re.compile(r"[^\W\d_]+")


def changes(fix: FixPayload) -> list[Change]:
    """The string arguments ``fix``'s correction changed (worked out from its lines when it does not say)."""
    if fix.changed is not None:
        return fix.changed
    return [Change(argument=name, before=old, after=new) for name, old, new in changed_keywords(fix.failed, fix.fixed)]


def payload(failed: str, error: str, fixed: str, form: str = "", tried: bool = True) -> FixPayload:
    """A fix's payload: its lines, the exception's name, what changed, the date form the error named."""
    return FixPayload(failed=failed, error=error, fixed=fixed, form=form, tried=tried,
                      changed=[Change(argument=n, before=o, after=w) for n, o, w in changed_keywords(failed, fixed)])


def form_of(fix: FixPayload) -> asked.Form | None:
    """The date form the error named, read again from the closed vocabulary of ``asked``; None for a fix that
    names none."""
    form = asked.asked_form(fix.form) if fix.form else None
    return form if form is not None and form.name == fix.form else None


def shape(value: object) -> str:
    """A value with its digits and letters folded: ``'17.03.2024'`` -> ``'9.9.9'``, ``'Graz'`` -> ``'a'``."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    return _LETTERS.sub("a", _DIGITS.sub("9", str(value)))


def named(keyword: str) -> str:
    """How a fix's lead names what changed: `` `date` ``, or ``argument 2 of `get_weather` ``."""
    callee, _, index = keyword.rpartition(POSITION)
    return f"argument {index} of `{callee}`" if callee else f"`{keyword}`"


def changed_keywords(failed: str, fixed: str) -> list[tuple[str, str, str]]:
    """(keyword, failed value, corrected value) of the string arguments the correction changed (one passed by
    position is named ``callee#N``)."""
    before, after = code.string_arguments(failed), code.string_arguments(fixed)
    return [(name, before[name], value) for name, value in after.items() if name in before and before[name] != value]


def _one_change(fix: FixPayload) -> Change | None:
    """The one string argument a fix changed; None for a fix that changed none or several."""
    changed = changes(fix)
    return changed[0] if len(changed) == 1 else None


def subject(fix: FixPayload) -> tuple[str, str, str] | None:
    """(function, keyword, form of the corrected value) of a fix that changed one keyword's value; None for a fix
    that changed none or several. Two fixes with the same subject teach the same thing (``date`` like "9.9.9")
    from different wrong forms: the instructions give the better one only."""
    one = _one_change(fix)
    if one is None:
        return None
    keyword, new = one.argument, one.after
    if POSITION in keyword:
        return keyword.rpartition(POSITION)[0], keyword, shape(new)
    try:
        tree = ast.parse(fix.fixed)
    except (SyntaxError, ValueError, RecursionError):
        return None
    callee = next((ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)
                   and any(k.arg == keyword for k in node.keywords)), "")
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
    reorders ``old``'s parts, each found once)."""
    old_groups, new_groups = _GROUP.findall(old), _GROUP.findall(new)
    if not old_groups or len(set(old_groups)) != len(old_groups) or sorted(old_groups) != sorted(new_groups):
        return None
    order = [old_groups.index(group) for group in new_groups]
    return order if order != list(range(len(order))) or _GROUP.sub("", old) != _GROUP.sub("", new) else None


def carry_over(old: str, new: str, task: str, form: asked.Form | None = None) -> list[tuple[str, str]]:
    """(value in the task, the same value rewritten the way ``old`` was corrected to ``new``). When the parts
    of ``old`` do not say which went where (2024-11-11 -> 11.11.2024), a date ``form`` the error named
    (``form_of``) that writes ``old`` as ``new`` says it."""
    if len(old) > 40 or len(new) > 40:
        return []
    rewrite = _by_parts(old, new) or (_by_form(old, new, form) if form is not None else None)
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


def _by_parts(old: str, new: str) -> Callable[[str], str | None] | None:
    """A value's parts put in the order and separators ``new`` gave ``old``'s (None unless ``new`` only
    reorders ``old``'s parts, each found once)."""
    order = _reorder(old, new)
    if order is None:
        return None
    template = re.split(r"([0-9]+|[^\W\d_]+)", new)  # separators at even indices, parts at odd ones

    def rewrite(value: str) -> str | None:
        groups = _GROUP.findall(value)
        if len(groups) != len(order):
            return None
        return "".join(piece if i % 2 == 0 else groups[order[i // 2]] for i, piece in enumerate(template))
    return rewrite


def _by_form(old: str, new: str, form: asked.Form) -> Callable[[str], str | None] | None:
    """A date, if its order is certain, written in ``form`` (None unless ``form`` writes ``old`` as ``new``)."""
    day = asked.read_date(old)
    if day is None or form.write(day) != new:
        return None

    def rewrite(value: str) -> str | None:
        found = asked.read_date(value)
        return form.write(found) if found is not None else None
    return rewrite


_COMPOUND = re.compile(_STARTS_ALONE + r"[^\W_]{1,10}(?:[^\w\s][^\W_]{1,10}){1,5}" + _STANDS_ALONE)


def rewritten_from(value: str, task: str) -> str | None:
    """The value of ``task`` that ``value`` rewrites (its parts in another order or with other separators:
    "17.03.2024" rewrites the task's "2024-03-17"), or None. Parts may repeat: "08.08.2024" rewrites
    "2024-08-08", although its parts do not say which went where (``carry_over`` then needs the form)."""
    if len(value) > 40 or not _GROUP.search(value):
        return None
    parts = sorted(_GROUP.findall(value))
    for match in _COMPOUND.finditer(task[:4000]):
        if match.group(0) != value and sorted(_GROUP.findall(match.group(0))) == parts:
            return match.group(0)
    return None


def rewrite_clause(pairs: list[tuple[str, str]]) -> str:
    """ 'use "09.12.2024" for "2024-12-09"' ("" for no pairs): the value to write comes first, because a small
    model copies the first value of a form that it reads ("write "2024-12-09" as ..." had it pass the former)."""
    if not pairs:
        return ""
    return "use " + ", ".join(f"{json.dumps(w)} for {json.dumps(v)}" for v, w in pairs)


def for_task(fix: FixPayload, task: str) -> str:
    """What the fix means for ``task``: the task's values rewritten as the correction did ("" if none)."""
    form = form_of(fix)
    clause = rewrite_clause([pair for change in changes(fix)
                             for pair in carry_over(change.before, change.after, task, form)])
    return f"For this task, {clause}." if clause else ""


_PLAIN_VALUE = re.compile(r"[\w.\-/:]{1,40}")


def in_task(fix: FixPayload, task: str, solved: str = "") -> FixPayload | None:
    """The fix with its example in ``task``'s value: the value that failed replaced by the task's value of that
    form, the corrected one by the same rewritten (``date="2024-09-15"`` failed, ``date="15.09.2024"`` worked);
    None unless the fix changed one value and the task holds exactly one of its form. A small model copies the
    corrected line's value: told to write the task's date another way, it passed the fix's own. With ``solved``,
    the task of the run that observed the fix (``Lesson.task``), the other values its lines took from that task
    are put in from this one too (``city="Lyon"`` -> ``city="Porto"``), when the two tasks are the same words
    but for such values (``task_values``): runs copied the fix's city."""
    one = _one_change(fix)
    if one is None:
        return None
    old, new = one.before, one.after
    carried = carry_over(old, new, task, form_of(fix))
    if len(carried) != 1:
        return None
    swaps = {old: carried[0][0], new: carried[0][1]}
    if not all(_PLAIN_VALUE.fullmatch(value) for pair in swaps.items() for value in pair):
        return None
    swaps.update(_from_task((fix.failed, fix.fixed), old, carried[0][0], solved, task))
    return _put_in(fix, swaps)


def _from_task(found: tuple[str, str], old: str, placed: str, solved: str, task: str) -> dict[str, str]:
    """{string constant of the fix's lines taken from ``solved``: ``task``'s value in its place}, for the
    values other than the one the fix changed (``old``, which ``task`` has as ``placed``); {} when the tasks
    differ in anything else, or a value cannot be placed."""
    others = [value for value in _task_constants(found, solved) or [] if value != old]
    values = task_values([old, *others], solved, task) if others else None
    if values is None or values.get(old) != placed:
        return {}
    return _swaps(others, values)


def _task_constants(found: tuple[str, ...], solved: str, rewritten: bool = False) -> list[str] | None:
    """The string constants of the fix's lines that are words of ``solved`` (the task of the run that observed
    it), with ``rewritten`` also those that are one of its values written another way (``08.06.2024`` for
    ``2024-06-08``), each once; None when a line does not parse."""
    words = {token.lower() for token in _TOKEN.findall(solved[:4000])}
    constants: list[str] = []
    for line in found:
        try:
            tree = ast.parse(line)
        except (SyntaxError, ValueError, RecursionError):
            return None
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or node.value in constants:
                continue
            if node.value.lower() in words or (rewritten and rewritten_from(node.value, solved) is not None):
                constants.append(node.value)
    return constants


def _swaps(constants: list[str], values: dict[str, str]) -> dict[str, str]:
    return {value: values[value] for value in constants
            if values[value] != value and _PLAIN_VALUE.fullmatch(value) and _PLAIN_VALUE.fullmatch(values[value])}


def _put_line(line: str, swaps: dict[str, str]) -> str:
    """``line`` with each quoted value of ``swaps`` replaced, in the same quotes."""
    quoted = re.compile("|".join(f"{q}{re.escape(value)}{q}" for value in swaps for q in ('"', "'")))
    return quoted.sub(lambda m: m.group(0)[0] + swaps[m.group(0)[1:-1]] + m.group(0)[0], line)


def _put_in(fix: FixPayload, swaps: dict[str, str]) -> FixPayload:
    """``fix`` with each quoted value of ``swaps`` replaced in both its lines (what changed worked out again)."""
    if not swaps:
        return fix
    return fix.model_copy(update={"failed": _put_line(fix.failed, swaps), "fixed": _put_line(fix.fixed, swaps),
                                  "changed": None})


def with_task_values(fix: FixPayload, task: str, solved: str) -> FixPayload | None:
    """The fix with the values its lines took from ``solved`` (the task of the run that observed it) put in from
    ``task``, for a fix ``in_task`` cannot give (a key or an argument changed, not a value's form):
    ``get_invoice(invoice_id="INV-6222")["lines"]`` for a run asked about INV-6810 reads
    ``get_invoice(invoice_id="INV-6810")["lines"]``. The fix itself when its lines hold no value of ``solved``;
    None without ``solved``, or when a value cannot be placed (the tasks differ in anything else)."""
    if not solved:
        return None
    constants = _task_constants((fix.failed, fix.fixed), solved, rewritten=True)
    if constants is None:
        return None
    if not constants:
        return fix
    values = task_values(constants, solved, task, every=False)  # a line need not hold every value of its task
    if values is None:
        return None
    return _put_in(fix, _swaps(constants, values))


_WORD = r"[^\W_](?:[\w.\-/:@]*[^\W_])?"  # a word or value: "mug", "21", "INV-5102", "2024-03-17", "get_invoice"
WORD = re.compile(_WORD)
_TOKEN = re.compile(rf"{_WORD}|\S")
MAX_TASK_TOKENS = 400


def task_values(params: list[str], solved: str, task: str, every: bool = True) -> dict[str, str] | None:
    """``task``'s value for each of ``params`` (values of a recipe that solved the task ``solved``), when the
    two tasks are the same words but for those values, each one word of the same form (``'mug'`` for
    ``'chair'``, ``21`` for ``26``, ``INV-5102`` for ``INV-8526``): ``{'mug': 'chair', '21': '26'}``. A value
    the recipe wrote another way (``17.03.2024`` for the task's ``2024-03-17``) comes rewritten the same way.
    None when the tasks differ in anything else, or a value cannot be placed; with ``every`` (a recipe's values)
    also when a value the tasks differ in is not among ``params``."""
    old, new = _TOKEN.findall(solved[:4000]), _TOKEN.findall(task[:4000])
    if not params or len(old) != len(new) or len(old) > MAX_TASK_TOKENS:
        return None
    pairs: dict[str, str] = {}  # a word of the solved task -> the word of this task in its place
    for before, after in zip(old, new, strict=True):
        if before == after:
            pairs.setdefault(before.lower(), after)
        elif shape(before) != shape(after) or pairs.setdefault(before.lower(), after) != after:
            return None
    values: dict[str, str] = {}
    sources: set[str] = set()
    for param in params:
        source = param if param.lower() in pairs else rewritten_from(param, solved)
        if source is None or source.lower() not in pairs:
            return None
        sources.add(source.lower())
        placed = pairs[source.lower()]
        if source is param:
            values[param] = placed
            continue
        rewritten = carry_over(source, param, placed) if placed != source else [(placed, param)]
        if len(rewritten) != 1:
            return None
        values[param] = rewritten[0][1]
    changed = {before.lower() for before, after in zip(old, new, strict=True) if before != after}
    return values if changed <= sources or not every else None


def task_constants(line: str, solved: str) -> list[str] | None:
    """The string constants of one line of code that are words of ``solved`` (the task of the run that wrote it),
    each once; None when the line does not parse."""
    return _task_constants((line,), solved)


def line_for_task(line: str, task: str, solved: str) -> str | None:
    """``line`` (a line of code a run of ``solved`` wrote, passing values it took from that task) with ``task``'s
    values put in: ``r = search_catalog(query="mug")`` for a run asked about chairs reads ``r =
    search_catalog(query="chair")``. None when the line takes no value from ``solved``, or one cannot be placed
    (the tasks differ in anything else)."""
    constants = task_constants(line, solved)
    if not constants:
        return None
    values = task_values(constants, solved, task, every=False)
    if values is None:
        return None
    swaps = _swaps(constants, values)
    if any(values[value] != value and value not in swaps for value in constants):
        return None  # a value that cannot be replaced as a plain word
    return _put_line(line, swaps) if swaps else line
