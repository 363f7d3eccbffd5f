"""Parameters: the values of a run's code or calls that came from its task, found by where they flow (the task's
text into the arguments of calls), and their place in another task, found by role and form.

``flows`` reads them from code: each constant passed to a call, or compared or computed with, that stands alone
in the task (``region="North"`` for "revenue of region North", ``140`` for "more than 140 euros", ``round(x, 2)``
for "Round to 2 decimals"), or that writes one of the task's values another way (``"17.03.2024"`` for the task's
"2024-03-17", ``"north"`` for "North"). Subscript keys are the data's names, never parameters; a plain word
the code only compares with is one only when the task names it as its own, capitalised or quoted (``r["region"] ==
"North"``; not ``j["state"] == "cancelled"`` for "... cancelled jobs"). Each gets a name
for an example (the keyword it is passed as, else the task's word before it: "region", "account").

``place`` finds each one's value in another task: a plain number by its role there (``roles``: its kind, a bound,
a rounding precision, a year, and the words around it; never another number of the task just for its form); else
the same value when that task holds it; else the new value of the same form, when the two tasks hold as many new
values of that form (``USR-5571`` and ``USR-7083`` for ``USR-1234`` and ``USR-9142``, in order); for a plain word,
the word after the same word of the task ("region North" -> "region South"), with the same capitals. A value
written another way is written the same way again.
What cannot be placed is left out: the caller shows the parameter's name, never another task's value.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lessonbank.learn import fixtext, roles
from lessonbank.learn.adapters.calls import occurs

MAX_PARAMS = 8
MAX_TASK = 4000
_TOKEN = re.compile(r"[^\W_](?:[\w.\-/:@]*[^\W_])?")
_WORD = re.compile(r"'[^']*'|\"[^\"]*\"|[^\W_](?:[\w.\-/:@]*[^\W_])?")  # a quoted text is one word
_STOPWORDS = roles.STOPWORDS
LEFT = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>")  # a value left to the model, as ``put`` writes it: ``<city>``
_ENDS = frozenset("?!.;:,")  # a mark right after a word that ends its sentence or clause (``_Token``)


@dataclass(frozen=True)
class Param:
    """A value the code took from its task: as the code wrote it, the task's text it came from, and its name."""

    value: str
    source: str
    name: str


def _kept(node: ast.Constant) -> str | None:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    text = str(value)
    return text if 0 < len(text) <= 60 and "\n" not in text else None


def _keys(tree: ast.AST) -> set[int]:
    """ids of the constants that index a subscript (the data's keys)."""
    return {id(node.slice) for node in ast.walk(tree) if isinstance(node, ast.Subscript)}


def _passed(tree: ast.AST) -> dict[int, str]:
    """{id of a constant passed to a call: its keyword, or ``callee#N``}."""
    found: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = ast.unparse(node.func) if isinstance(node.func, ast.Name | ast.Attribute) else "call"
            for index, arg in enumerate(node.args, start=1):
                found[id(arg)] = f"{callee}#{index}"
            for keyword in node.keywords:
                if keyword.arg:
                    found[id(keyword.value)] = keyword.arg
    return found


def source_of(value: str, task: str) -> str | None:
    """The task's text ``value`` came from: itself standing alone in the task (any case), or the task's value it
    writes another way (its parts reordered or re-separated); None when it came from elsewhere."""
    lowered = task[:MAX_TASK].lower()
    text = value.strip()
    if len(text) >= 2 or text.isdigit():
        at = _find(text.lower(), lowered)
        if at is not None:
            return task[at:at + len(text)]
    return fixtext.rewritten_from(text, task[:MAX_TASK])


def _find(value: str, lowered: str) -> int | None:
    at = lowered.find(value)
    while at >= 0:
        if occurs(value, lowered[max(0, at - 1):at + len(value) + 1]):
            return at
        at = lowered.find(value, at + 1)
    return None


def flows(statements: Iterable[ast.AST], task: str) -> list[Param]:
    """The parameters of code (see the module), in order of first use, each value once (at most ``MAX_PARAMS``)."""
    found: dict[str, Param] = {}
    names: set[str] = set()
    for tree in statements:
        keys, passed = _keys(tree), _passed(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or id(node) in keys:
                continue
            text = _kept(node)
            if text is None or text in found:
                continue
            word = isinstance(node.value, str) and not any(ch.isdigit() for ch in text)
            source = source_of(text, task)
            if source is None or (word and id(node) not in passed and not _named_in(source, task)):
                continue  # a plain word the code compares with is the data's ('done' in j['state']), not the task's
            same = next((param.name for param in found.values() if param.source == source), None)
            name = same or _name(passed.get(id(node), ""), source, task, names)  # one value, written two ways
            names.add(name)
            found[text] = Param(text, source, name)
            if len(found) >= MAX_PARAMS:
                return list(found.values())
    return list(found.values())


def _named_in(source: str, task: str) -> bool:
    """Whether the task names ``source`` as a value of its own: capitalised ("region North") or quoted."""
    quoted = any(f"{quote}{source}{quote}" in task for quote in ("'", '"'))
    return quoted or (source[:1].isupper() and not task.startswith(source))


def _name(role: str, source: str, task: str, taken: set[str]) -> str:
    """A name for a parameter: the keyword it is passed as, else the task's word before it, else ``value``."""
    base = role if role.isidentifier() else ""
    if not base:
        tokens = _TOKEN.findall(task[:MAX_TASK])
        lowered = [token.lower() for token in tokens]
        at = lowered.index(source.lower()) if source.lower() in lowered else -1
        before = tokens[at - 1].lower() if at > 0 else ""
        base = before if before.isalpha() and len(before) >= 3 and before not in _STOPWORDS else "value"
    name, number = base, 2
    while name in taken:
        name, number = f"{base}_{number}", number + 1
    return name


def words(task: str) -> list[str]:
    """The words of a task, a quoted text one word."""
    return _WORD.findall(task[:MAX_TASK])


def is_value(word: str, at: int) -> bool:
    """Whether a word of a task (``words``) is one of its values: quoted, with a digit, an id (``eu-west``,
    ``USR-7``) or a capitalised name (but the first word)."""
    return word[:1] in "'\"" or any(ch.isdigit() for ch in word) or any(ch in "-./:@" for ch in word) \
        or bool(at and word[:1].isupper())


def task_values(task: str) -> set[str]:
    """The values of a task (``is_value``), a quoted one without its quotes."""
    return {word.strip("'\"") for at, word in enumerate(words(task)) if is_value(word, at)}


def more_values(params: Sequence[Param], solved: str, task: str) -> bool:
    """Whether ``task`` names more values than code written for ``solved`` (its parameters ``params``) has places
    for: more of its values are new (no word of ``solved``) than the parameters have values it does not repeat
    ("how many more points has FJOR than BORE" for code that read one project's)."""
    theirs = {word.lower() for word in words(solved)}
    mine = words(task)
    new = {word.lower() for at, word in enumerate(mine) if is_value(word, at) and word.lower() not in theirs}
    repeated = {word.strip("'\"").lower() for word in mine}
    return len(new) > len({param.source.lower() for param in params if param.source.lower() not in repeated})


class _Token(str):
    """A word of a task that knows whether a mark ending a sentence or a clause follows it ("LUME" in "of LUME?
    Answer"): a capitalised word across that mark is no part of its name."""

    ends = False


def _tokens(task: str) -> list[str]:
    found: list[str] = []
    text = task[:MAX_TASK]
    for match in _TOKEN.finditer(text):
        token = _Token(match.group())
        token.ends = text[match.end():match.end() + 1] in _ENDS
        found.append(token)
    return found


def _by_context(source: str, solved: list[str], tokens: list[str]) -> str | None:
    """The word of ``tokens`` after (or before) the same word ``source`` follows (or precedes) in ``solved``; else on
    the other side of that word; None unless one word fits."""
    lowered = [token.lower() for token in solved]
    mine = [token.lower() for token in tokens]
    if source.lower() not in lowered:
        return None
    at = lowered.index(source.lower())
    for side in (1, -1):  # the same side of the word first, then the other ("region North", "North region")
        found: list[str] = []
        for offset in (-1, 1):
            if not 0 <= at + offset < len(lowered) or lowered[at + offset] in _STOPWORDS:
                continue
            neighbour, step = lowered[at + offset], offset * side
            found += [tokens[i - step] for i, token in enumerate(mine)
                      if token == neighbour and 0 <= i - step < len(tokens) and not _longer_name(tokens, i - step)]
        fits = list(dict.fromkeys(word for word in found if word.lower() not in _STOPWORDS
                                  and fixtext.shape(word) == fixtext.shape(source)
                                  and word[:1].isupper() == source[:1].isupper() and word.lower() not in lowered))
        if fits:
            return fits[0] if len(fits) == 1 else None
    return None


def _longer_name(tokens: list[str], at: int) -> bool:
    """Whether the capitalised word at ``at`` is part of a longer name ("New York"): placing it alone would cut it."""
    following = tokens[at + 1] if at + 1 < len(tokens) and not _ended(tokens[at]) else ""
    before = tokens[at - 1] if at > 1 and not _ended(tokens[at - 1]) else ""  # the first word is the sentence's
    return tokens[at][:1].isupper() and any(word[:1].isupper() and word.isalpha() for word in (following, before))


def _ended(token: str) -> bool:
    return isinstance(token, _Token) and token.ends


# A date written day and month first in either order, then the year: "05/03/2024", "5.3.24".
_DAY_MONTH = re.compile(r"(\d{1,2})[./-](\d{1,2})[./-](?:\d{2}|\d{4})")


def unsure_date(value: str) -> bool:
    """Whether ``value`` is a date whose day and month are both 12 or less, not written year first: its form does
    not say which is which, so no rewriting of another date of that form can be trusted to put them in order."""
    match = _DAY_MONTH.fullmatch(value.strip())
    return match is not None and all(0 < int(part) <= 12 for part in match.groups())


def _written(param: Param, source: str) -> str | None:
    """``source`` (the new task's value) written the way ``param`` wrote its own; None when that cannot be known
    (a date whose day and month its form does not tell apart, to be rewritten in another order)."""
    old, value = param.source, param.value
    if value == old:
        return source
    for change in (str.lower, str.upper, str.title):
        if change(old) == value:
            return change(source)
    if unsure_date(source):
        return None  # left to the model to adapt (``<date>``), not written in a guessed order
    rewrite = fixtext.rewriter(old, value)
    return rewrite(source) if rewrite is not None else None


def place(params: Sequence[Param], solved: str, task: str) -> dict[str, str]:
    """{a parameter's value: the value it takes for ``task``} for each parameter of code written for ``solved``
    that can be placed (see the module)."""
    mine, theirs = _tokens(task), _tokens(solved)
    lowered_theirs = {token.lower() for token in theirs}
    fresh = list(dict.fromkeys(token for token in mine if token.lower() not in lowered_theirs))
    numbers = [param.source for param in params if roles.numeric(param.source)]
    placed = roles.match(numbers, theirs, mine)  # a number by its role: its form says nothing of it
    by_form: dict[str, list[Param]] = {}
    for param in params:
        if roles.numeric(param.source):
            continue
        same = next((token for token in mine if token.lower() == param.source.lower()), None)
        if same is not None:
            placed[param.source] = same
        else:
            by_form.setdefault(fixtext.shape(param.source), []).append(param)
    for form, group in by_form.items():
        sources = list(dict.fromkeys(param.source for param in group))
        news = [token for token in fresh if fixtext.shape(token) == form]
        if form != "a" and len(news) == len(sources):
            placed.update(zip(sources, news, strict=True))
            continue
        for source in sources:
            found = _by_context(source, theirs, mine)
            if found is not None:
                placed[source] = found
    return {param.value: written for param in params if param.source in placed
            and (written := _written(param, placed[param.source])) is not None}


class _Put(ast.NodeTransformer):
    """Constants of ``values`` replaced by their new values; of ``names`` by a name (``<name>``, or the plain
    name with ``as_names``: a function's parameter)."""

    def __init__(self, values: dict[str, str], names: dict[str, str], as_names: bool) -> None:
        self.values, self.names, self.as_names = values, names, as_names

    def visit_Constant(self, node: ast.Constant) -> ast.AST:  # noqa: N802 (ast's naming)
        text = _kept(node)
        if text is None:
            return node
        if text in self.values:
            return ast.copy_location(ast.Constant(value=_as_constant(node.value, self.values[text])), node)
        if text in self.names:
            name = self.names[text] if self.as_names else f"<{self.names[text]}>"
            return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)
        return node


def put_tree(tree: ast.Module, values: dict[str, str], names: dict[str, str], as_names: bool = False) -> ast.Module:
    """A copy of ``tree`` with its parameters placed or named (see ``_Put``)."""
    result = _Put(values, names, as_names).visit(copy.deepcopy(tree))
    assert isinstance(result, ast.Module)
    return result


def put(line: str, values: dict[str, str], names: dict[str, str]) -> str | None:
    """``line`` (one line of code) with each constant of ``values`` replaced by its value for another task, and
    each of ``names`` (a parameter that could not be placed) by ``<name>``, written as the line wrote it (its quotes
    kept); None when the line does not parse."""
    try:
        tree = ast.parse(line)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    spliced = _spliced(line, tree, values, names)
    return spliced if spliced is not None else ast.unparse(put_tree(tree, values, names))


def _spliced(line: str, tree: ast.Module, values: dict[str, str], names: dict[str, str]) -> str | None:
    """``put`` by replacing the constants' own text in ``line``; None when a constant is not a plain literal of one
    line (an f-string part, a prefix, a string over several lines)."""
    raw = line.encode()
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant):
            continue
        text = _kept(node)
        if text is None or (text not in values and text not in names):
            continue
        if node.lineno != 1 or node.end_lineno != 1 or node.end_col_offset is None:
            return None
        written = raw[node.col_offset:node.end_col_offset].decode(errors="replace")
        if text in names:
            edits.append((node.col_offset, node.end_col_offset, f"<{names[text]}>"))
            continue
        new = _as_constant(node.value, values[text])
        if isinstance(new, str):
            quote = written[:1]
            if quote not in ("'", '"') or written[-1:] != quote or written[:3] == quote * 3:
                return None
            body = new.replace("\\", "\\\\").replace(quote, "\\" + quote)
            edits.append((node.col_offset, node.end_col_offset, f"{quote}{body}{quote}"))
        else:
            edits.append((node.col_offset, node.end_col_offset, repr(new)))
    for start, end, replacement in sorted(edits, reverse=True):
        raw = raw[:start] + replacement.encode() + raw[end:]
    return raw.decode(errors="replace")


def _as_constant(value: object, new: str) -> str | int | float:
    """``new`` as a constant of ``value``'s type when it can be written so (``21`` and ``"26"``), else as text."""
    if isinstance(value, str):
        return new
    try:
        return float(new) if isinstance(value, float) else int(new)
    except (TypeError, ValueError):
        return new


def for_task(lines: Sequence[str], solved: str, task: str) -> tuple[list[str], dict[str, str], dict[str, str]] | None:
    """``lines`` (code written for ``solved``) for ``task``: each with the values it took from ``solved`` placed
    (``place``) or, where they cannot be, named (``<region>``); with the values placed and the names left. None
    when a line does not parse."""
    trees = []
    for line in lines:
        try:
            trees.append(ast.parse(line))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
    found = flows(trees, solved)
    values = place(found, solved, task) if task else {}
    names = {param.value: param.name for param in found if param.value not in values}
    out = [put(line, values, names) for line in lines]
    if any(line is None for line in out):
        return None
    return [line for line in out if line is not None], values, names
