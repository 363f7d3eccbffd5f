"""The text of an observed fix (``workers/fixes.py`` keeps them), read back by credit and by the
instructions builder; and the rewriting of a task's values (a date's parts in another order) that fixes
and recipes carry over to a new task.

A fix's text quotes the line a step failed at and the corrected line that worked, in backticks, after
an optional lead naming the value that changed::

    Pass `date` like "02.01.2024", not like "2024-01-02": `w = get_weather(city="Lyon", date="2024-01-02")`
    failed with ValueError; the corrected line `w = get_weather(city="Lyon", date="02.01.2024")` worked.

When the correction rewrote a value's parts in another order with other separators (a date, a time, a
version), ``carry_over`` applies the same rewriting to the values of a new task that look like the one
that failed: for "What was the highest temperature in Porto on 2024-09-15?" the instructions give the fix
with "2024-09-15" failing and "15.09.2024" working (``in_task``), or, for a task with several such values,
say to write each one rewritten (``for_task``). A small model copies the task's "2024-09-15" into its first
call even when told how the tool wants dates; it uses a value it is handed.

A date fix whose error named the form the tool wants says so (``failed with ValueError asking for
DD.MM.YYYY``, ``form_of``): its example "2024-11-11" -> "11.11.2024" cannot say which "11" is the day, the
form can, so it still carries over.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable

from lessonbank.learn import asked

WORKED = " worked"
CORRECTED = "; the corrected line "
# A fix the error asked for (``core/asked.py``): the failing line with its date in the form the error names,
# which no step ran yet.
ASKED = "; written as asked: "
UNTRIED = " (not tried yet)"
ASKING = " asking for "  # the date form an error named, which the corrected line wrote its date in
POSITION = "#"  # a value passed by position, in the names ``changed_keywords`` gives: ``get_weather#2``
MAX_CARRIED = 3
_GROUP = re.compile(r"[0-9]+|[^\W\d_]+")
_DIGITS = re.compile(r"[0-9]+")
_LETTERS = re.compile(r"[^\W\d_]+")


def fix_text(failed: str, error: str, fixed: str, form: str = "", tried: bool = True) -> str:
    """The lesson text of a fix (backticks inside the lines are refused before this is called). ``form`` is the
    date form the error named (``DD.MM.YYYY``) when the correction wrote the date that way; a fix that is not
    ``tried`` is one the error asked for and no step ran."""
    lead = ""
    changed = changed_keywords(failed, fixed)
    if len(changed) == 1:
        keyword, old, new = changed[0]
        lead = f"Pass {_named(keyword)} like {json.dumps(new)}, not like {json.dumps(old)}: "
    asking = f"{ASKING}{form}" if form else ""
    if not tried:
        return f"{lead}`{failed}` failed with {error}{asking}{ASKED}`{fixed}`{UNTRIED}."
    return f"{lead}`{failed}` failed with {error}{asking}{CORRECTED}`{fixed}`{WORKED}."


def lines(text: str) -> tuple[str, str] | None:
    """(failing line, corrected line) of a fix's text, observed or asked for; None for any other text."""
    parts = text.split("`")
    if len(parts) < 5 or len(parts) % 2 == 0:
        return None
    ends = (CORRECTED, WORKED) if parts[-1].startswith(WORKED) else (ASKED, UNTRIED)
    if not (parts[-1].startswith(ends[1]) and parts[-3].startswith(" failed with ") and parts[-3].endswith(ends[0])):
        return None
    return parts[-4], parts[-2]


def form_of(text: str) -> asked.Form | None:
    """The date form a fix's text says the error named (``... failed with ValueError asking for DD.MM.YYYY; ...``),
    read again from the closed vocabulary of ``core/asked.py``; None for a fix that names none."""
    if lines(text) is None:
        return None
    middle = text.split("`")[-3]
    at = middle.rfind(ASKING)
    if at < 0:
        return None
    name = middle[at + len(ASKING):].split(";", 1)[0]
    form = asked.asked_form(name)
    return form if form is not None and form.name == name else None


def error_of(text: str) -> str:
    """The exception a fix's text says its failing line raised (``ValueError``); "" for any other text."""
    if lines(text) is None:
        return ""
    return text.split("`")[-3].split(" failed with ", 1)[1].split(ASKING, 1)[0].split(";", 1)[0]


def untried(text: str) -> bool:
    """Whether a fix's text is one the error asked for, which no step ran (``ASKED``)."""
    return lines(text) is not None and text.split("`")[-1].startswith(UNTRIED)


def shape(value: object) -> str:
    """A value with its digits and letters folded: ``'17.03.2024'`` -> ``'9.9.9'``, ``'Graz'`` -> ``'a'``."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    return _LETTERS.sub("a", _DIGITS.sub("9", str(value)))


def _keywords(line: str) -> dict[str, str]:
    """``name=value`` of the string constants passed in one line of code: by keyword (``date``), or by position
    (``get_weather#2``, the call's second argument: ``get_weather("Porto", "2024-09-13")``)."""
    try:
        tree = ast.parse(line)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg and isinstance(node.value, ast.Constant) and isinstance(
                node.value.value, str):
            found.setdefault(node.arg, node.value.value)
        elif isinstance(node, ast.Call):
            callee = ast.unparse(node.func)
            for index, arg in enumerate(node.args, start=1):
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.setdefault(f"{callee}{POSITION}{index}", arg.value)
    return found


def _named(keyword: str) -> str:
    """How a fix's lead names what changed: `` `date` ``, or ``argument 2 of `get_weather` ``."""
    callee, _, index = keyword.rpartition(POSITION)
    return f"argument {index} of `{callee}`" if callee else f"`{keyword}`"


def changed_keywords(failed: str, fixed: str) -> list[tuple[str, str, str]]:
    """(keyword, failed value, corrected value) of the string arguments the correction changed (one passed by
    position is named ``callee#N``)."""
    before, after = _keywords(failed), _keywords(fixed)
    return [(name, before[name], value) for name, value in after.items() if name in before and before[name] != value]


def _one_change(text: str) -> tuple[tuple[str, str], tuple[str, str, str]] | None:
    """(failing line, corrected line) and the one (keyword, failed value, corrected value) a fix changed; None
    for any other text, or a fix that changed several values."""
    found = lines(text)
    if found is None:
        return None
    changed = changed_keywords(*found)
    return (found, changed[0]) if len(changed) == 1 else None


def subject(text: str) -> tuple[str, str, str] | None:
    """(function, keyword, form of the corrected value) of a fix that changed one keyword's value; None for
    any other text. Two fixes with the same subject teach the same thing (``date`` like "9.9.9") from
    different wrong forms: the instructions give the better one only."""
    one = _one_change(text)
    if one is None:
        return None
    found, (keyword, _, new) = one
    if POSITION in keyword:
        return keyword.rpartition(POSITION)[0], keyword, shape(new)
    try:
        tree = ast.parse(found[1])
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


def for_task(text: str, task: str) -> str:
    """What the fix means for ``task``: the task's values rewritten as the correction did ("" if none)."""
    found = lines(text)
    if found is None:
        return ""
    form = form_of(text)
    clause = rewrite_clause([pair for _, old, new in changed_keywords(*found)
                             for pair in carry_over(old, new, task, form)])
    return f"For this task, {clause}." if clause else ""


def to_write(text: str) -> str:
    """A fix's text as the line to write, without the failing line or value: ``Write `w = get_weather(city="Porto",
    date="15.09.2024")`: pass `date` like "15.09.2024" (DD.MM.YYYY); written any other way it failed with
    ValueError.`` (``text`` itself for any other text). Given after its task with the task's own values
    (``in_task``), a fix whose failing line sat next to a recipe and a shape fact had a 1.5B agent copy that line
    into its first call: 11 times in 48 against 0 in this form (``bench/learning/first_call.py --context``)."""
    found = lines(text)
    if found is None:
        return text
    failed, fixed = found
    error = error_of(text)
    head = f"Write `{fixed}`" + (" (as the error asked; not tried yet)" if untried(text) else "")
    changed = changed_keywords(failed, fixed)
    if len(changed) != 1:
        return f"{head}; written otherwise, the line failed with {error}."
    keyword, _, new = changed[0]
    form = form_of(text)
    like = f"like {json.dumps(new)}" + (f" ({form.name})" if form is not None else "")
    return f"{head}: pass {_named(keyword)} {like}; written any other way it failed with {error}."


_PLAIN_VALUE = re.compile(r"[\w.\-/:]{1,40}")


def in_task(text: str, task: str, solved: str = "") -> str | None:
    """The fix's text with its example in ``task``'s value: the value that failed replaced by the task's value of
    that form, the corrected one by the same rewritten (``date="2024-09-15"`` failed, ``date="15.09.2024"``
    worked); None unless the fix changed one value and the task holds exactly one of its form. A small model
    copies the corrected line's value: told to write the task's date another way, it passed the fix's own.
    With ``solved``, the task of the run that observed the fix (``Lesson.task``), the other values its lines
    took from that task are put in from this one too (``city="Lyon"`` -> ``city="Porto"``), when the two
    tasks are the same words but for such values (``task_values``): runs copied the fix's city."""
    one = _one_change(text)
    if one is None:
        return None
    found, (_, old, new) = one
    carried = carry_over(old, new, task, form_of(text))
    if len(carried) != 1:
        return None
    swaps = {old: carried[0][0], new: carried[0][1]}
    if not all(_PLAIN_VALUE.fullmatch(value) for pair in swaps.items() for value in pair):
        return None
    swaps.update(_from_task(found, old, carried[0][0], solved, task))
    return _put_in(text, swaps)


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


def _put_in(text: str, swaps: dict[str, str]) -> str:
    """``text`` with each quoted value of ``swaps`` replaced, in the same quotes."""
    if not swaps:
        return text
    quoted = re.compile("|".join(f"{q}{re.escape(value)}{q}" for value in swaps for q in ('"', "'")))
    return quoted.sub(lambda m: m.group(0)[0] + swaps[m.group(0)[1:-1]] + m.group(0)[0], text)


def with_task_values(text: str, task: str, solved: str) -> str | None:
    """The fix's text with the values its lines took from ``solved`` (the task of the run that observed it) put
    in from ``task``, for a fix ``in_task`` cannot give (a key or an argument changed, not a value's form):
    ``get_invoice(invoice_id="INV-6222")["lines"]`` for a run asked about INV-6810 reads
    ``get_invoice(invoice_id="INV-6810")["lines"]``. The text itself when its lines hold no value of
    ``solved``; None when it is not a fix, or a value cannot be placed (the tasks differ in anything else)."""
    found = lines(text)
    if found is None or not solved:
        return None
    constants = _task_constants(found, solved, rewritten=True)
    if constants is None:
        return None
    if not constants:
        return text
    values = task_values(constants, solved, task, every=False)  # a line need not hold every value of its task
    if values is None:
        return None
    return _put_in(text, _swaps(constants, values))


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
    return _put_in(line, swaps)
