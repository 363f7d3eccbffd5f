"""What a step showed, and an answer read back from it: a recipe answers with the value the run computed, never
with the literal the model copied from what it read.

An answer the model copied from an observation (``final_answer(152.74)`` after printing ``total``, or after a
step that ended with ``total = ...``, which the agent is shown) is answered with the variable it showed instead
(``answer_from_variables``), or the recipe would hand the next run this run's answer; code that still answers
with a literal the task did not give computes no answer (``typed_answer``). A run whose right answer was forced
at the step limit leaves the code up to the step that printed it (``answer_where_printed``).
"""

from __future__ import annotations

import ast
import copy
import logging
import re

from lessonbank.learn import code as pycode
from lessonbank.learn import walk
from lessonbank.learn.trim import answer_calls, calls_final_answer, printer_call
from lessonbank.learn.view import Step

logger = logging.getLogger(__name__)


def is_param(literal: str, task: str) -> bool:
    """A literal the task itself supplied: it appears in the task and looks like a value (a date, an id,
    a number, a path), not a word any code would use (``'orders'``)."""
    if len(literal) < 2 or literal.lower() not in task.lower():
        return False
    return any(ch.isdigit() for ch in literal) or any(ch in "./-_@:\\" for ch in literal) or (
        f"'{literal}'" in task or f'"{literal}"' in task)


def _replayable(expr: ast.expr | None, assigned: set[str]) -> bool:
    """``expr`` may be evaluated again, and reads at least one variable, every one of them set by the run."""
    reads = pycode.reads(expr) if expr is not None else None
    return bool(reads) and reads is not None and reads <= assigned


FIXED_DECIMALS = re.compile(r"\.([0-9])f")
Piece = str | ast.expr | None  # printed text, a value shown (its expression), or a value that cannot be replayed


def _shown_value(part: ast.FormattedValue) -> ast.expr | None:
    """The expression giving the text an f-string field printed: the value itself, or ``round(value, n)``
    for ``{value:.nf}``; None for other conversions and formats."""
    spec = part.format_spec
    if part.conversion not in (-1, ord("s")) or spec is not None and not (
            isinstance(spec, ast.JoinedStr) and len(spec.values) == 1 and isinstance(spec.values[0], ast.Constant)):
        return None
    if spec is None:
        return part.value
    decimals = FIXED_DECIMALS.fullmatch(str(spec.values[0].value))  # type: ignore[attr-defined]
    if decimals is None:
        return None
    return ast.Call(func=ast.Name(id="round", ctx=ast.Load()), args=[part.value, ast.Constant(int(decimals[1]))],
                    keywords=[])


def _print_pieces(stmt: ast.stmt) -> list[Piece] | None:
    """What a ``print(...)`` statement writes, in order: its texts and the values it shows (``print(f"Total of
    {inv['id']}:", total / 100)``: text, value, text, value). A ``pprint``/``display`` of one value shows just
    that value. None for anything else, or a ``sep``/``end``/``file`` it cannot follow."""
    if not (isinstance(stmt, ast.Expr) and printer_call(stmt.value)):
        return None
    call = stmt.value
    if call.func.id != "print":  # type: ignore[attr-defined]
        return [call.args[0]] if len(call.args) == 1 and not call.keywords else None
    options = {keyword.arg: keyword.value for keyword in call.keywords}
    sep = options.pop("sep", ast.Constant(" "))
    end = options.pop("end", ast.Constant("\n"))
    options.pop("flush", None)
    if options or not (isinstance(sep, ast.Constant) and isinstance(sep.value, str)) or not (
            isinstance(end, ast.Constant) and end.value == "\n"):
        return None
    pieces: list[Piece] = []
    for index, arg in enumerate(call.args):
        if index:
            pieces.append(sep.value)
        if isinstance(arg, ast.Constant):
            pieces.append(str(arg.value))
        elif isinstance(arg, ast.JoinedStr):
            pieces += [str(part.value) if isinstance(part, ast.Constant) else _shown_value(part)  # type: ignore[arg-type]
                       for part in arg.values]
        elif isinstance(arg, ast.Starred):
            return None
        else:
            pieces.append(arg)
    return pieces


def _holes(pieces: list[Piece], text: str) -> list[str] | None:
    """The text each value of ``pieces`` printed, when ``text`` is what they print; None when it is not, or
    when where a value ends is a guess: two values side by side, or a text between values seen twice."""
    texts: list[str] = [""]
    values = 0
    for piece in pieces:
        if isinstance(piece, str):
            texts[-1] += piece
        else:
            if values and not texts[-1]:
                return None
            texts.append("")
            values += 1
    if not values:
        return None
    head, tail = texts[0].lstrip(), texts[-1].rstrip()  # what was printed is read stripped
    if len(text) < len(head) + len(tail) or not text.startswith(head) or not text.endswith(tail):
        return None
    inner = text[len(head):len(text) - len(tail)]
    holes, position = [], 0
    for between in texts[1:-1]:
        found = inner.find(between, position)
        if found < 0 or inner.find(between, found + 1) >= 0:  # twice: where the value ends is a guess
            return None
        holes.append(inner[position:found])
        position = found + len(between)
    holes.append(inner[position:])
    return holes


def shown_values(statements: list[ast.stmt], step: Step) -> list[tuple[ast.expr | None, str]]:
    """The values ``step`` showed (``statements``: its code, as kept), each with the text it showed: what it
    printed, and the value its code ended with (``last_value``)."""
    return _printed_values(statements, step) + last_value(statements, step)


def last_value(statements: list[ast.stmt], step: Step) -> list[tuple[ast.expr | None, str]]:
    """The value a step's code ended with, which the agent is shown after the step (``Step.last_output``): the
    name its last statement assigned (``highest = max(...)``) or the expression it ended with (not a print or
    an answer), with the text shown; none when that was None. A model reads the number there as readily as a
    printed one and types it into ``final_answer``."""
    text = step.last_output
    if not text or not statements:
        return []
    stmt = statements[-1]
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return [(ast.Name(id=stmt.targets[0].id, ctx=ast.Load()), text)]
    if isinstance(stmt, ast.Expr) and not calls_final_answer(stmt) and not printer_call(stmt.value):
        return [(stmt.value, text)]
    return []


def _printed_values(statements: list[ast.stmt], step: Step) -> list[tuple[ast.expr | None, str]]:
    """The values a step printed, each with the text it printed. Only where which text came from which print
    is certain: every print of the step is one of its statements (none in a loop, a branch or a function),
    and either there is one, whose whole output (or else one line of it, the rest printed by tools) is what
    it writes, or each wrote one line, in order."""
    prints = [node for stmt in statements for node in ast.walk(stmt) if printer_call(node)]
    printing = [stmt for stmt in statements if isinstance(stmt, ast.Expr) and stmt.value in prints]
    all_pieces = [pieces for stmt in printing if (pieces := _print_pieces(stmt)) is not None]
    if not prints or len(all_pieces) != len(prints):
        return []
    text = step.logs  # what was printed, not the value the code ended with
    lines = [line.strip() for line in text.splitlines()]
    if len(prints) == 1:  # its whole output, else the one line of it that is what it writes
        found = [holes] if (holes := _holes(all_pieces[0], text)) is not None else [
            holes for line in lines if (holes := _holes(all_pieces[0], line)) is not None]
        all_holes = found if len(found) == 1 else []
    elif len(lines) == len(prints):  # a line each, in order
        all_holes = [holes for pieces, line in zip(all_pieces, lines, strict=True)
                     if (holes := _holes(pieces, line)) is not None]
    else:
        return []
    if len(all_holes) != len(prints):
        return []
    return [pair for pieces, holes in zip(all_pieces, all_holes, strict=True)
            for pair in zip([piece for piece in pieces if not isinstance(piece, str)], holes, strict=True)]


def same_value(printed: str, literal: str) -> bool:
    """``printed`` is ``literal``, as text or as the same number (``235.40`` and ``235.4``)."""
    if printed == literal:
        return True
    try:
        return float(printed) == float(literal)
    except ValueError:
        return False


def _read_back(expr: ast.expr, printed: str, literal: str) -> ast.expr | None:
    """The expression that gives ``literal`` again, from ``expr`` whose printing gave ``printed``: ``expr``
    itself when it printed the literal, ``expr['records'][0]['kwh']`` when it printed a dict or list
    holding it at one place; None otherwise."""
    printed = printed.strip()
    if isinstance(value := walk.read_literal(printed), dict | list):
        paths = walk.paths_to(value, literal)
        if len(paths) != 1:
            return None
        read = copy.deepcopy(expr)
        for key in paths[0]:
            read = ast.Subscript(value=read, slice=ast.Constant(value=key), ctx=ast.Load())
        return read
    return copy.deepcopy(expr) if same_value(printed, literal) else None


def answer_literal(value: object, task: str) -> str | None:
    """An answer literal that may be read back from what a run printed: a short scalar the task did not give."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    literal = str(value).strip()
    if not literal or len(literal) > 100 or "\n" in literal or is_param(literal, task):
        return None
    return literal


def typed_answer(statements: list[ast.stmt], task: str) -> str | None:
    """The literal every ``final_answer`` of the code passes, when each passes one the task did not give (the
    model typed the answer it had read or worked out): such code does not compute the answer. None otherwise."""
    literals = [answer_literal(node.args[0].value, task) if len(node.args) == 1 and not node.keywords
                and isinstance(node.args[0], ast.Constant) else None for node in answer_calls(statements)]
    return literals[0] if literals and all(literal is not None for literal in literals) else None


def computes_answer(statements: list[ast.stmt], task: str) -> bool:
    """Whether the code reaches ``final_answer`` with something it computed (``typed_answer``)."""
    if not statements or not any(calls_final_answer(stmt) for stmt in statements):
        return False
    if (typed := typed_answer(statements, task)) is not None:
        logger.info("recipe not kept: it answers with %r, which it does not compute and no step showed (a recipe "
                    "would hand the next run this run's answer)", typed[:40])
        return False
    return True


def answer_from_variables(steps: list[tuple[list[ast.stmt], Step]], task: str) -> None:
    """``final_answer(152.74)`` after an earlier step printed ``total`` as 152.74 becomes ``final_answer(total)``.

    The model often copies the value it read from an observation into its answer; kept as is, the recipe
    would hand the next run this run's answer. Only a literal the task did not supply, equal to what one value
    printed by an EARLIER step printed (``total``, ``result['total']``, ``seconds / 60``, ``len([...])``: an
    expression of the run's variables safe to evaluate again), is replaced by that expression, or, when it
    printed a dict or list holding the literal at one place, by the path to it
    (``result['records'][0]['kwh']``). ``steps``: each step's statements and the step, in order;
    changed in place.
    """
    printed: list[list[tuple[ast.expr | None, str]]] = []  # per step: the values it printed, with their text
    assigned: set[str] = set()
    for statements, step in steps:
        for node in answer_calls(statements):
            if not (len(node.args) == 1 and isinstance(node.args[0], ast.Constant)):
                continue
            literal = answer_literal(node.args[0].value, task)
            if literal is None:
                continue
            for shown in reversed(printed):  # the latest step that printed it
                reads = reads_back(shown, literal, assigned)
                if reads:
                    if len(reads) == 1:  # two values of that step printed it: which one was copied is a guess
                        node.args[0] = reads[0]
                    break
        for stmt in statements:
            assigned |= pycode.names(stmt, ast.Store)
        printed.append(shown_values(statements, step))


def reads_back(shown: list[tuple[ast.expr | None, str]], literal: str, assigned: set[str]) -> list[ast.expr]:
    """The distinct expressions that give ``literal`` again among the values one step printed."""
    reads = {ast.dump(read): read for expr, text in shown if expr is not None and _replayable(expr, assigned)
             and (read := _read_back(expr, text, literal)) is not None}
    return list(reads.values())


def answer_where_printed(steps: list[tuple[list[ast.stmt], Step]], answer: str,
                         task: str) -> list[tuple[list[ast.stmt], Step]] | None:
    """The steps of a run whose right answer was never passed to ``final_answer`` by its code (smolagents
    forced it after the step limit), up to the first step that printed it, ending with ``final_answer`` of
    what printed it; None when no step printed it at one readable place.

    Only for an answer a user or a check judged right: the code then computed the verified answer."""
    literal = answer_literal(answer, task)
    if literal is None:
        return None
    assigned: set[str] = set()
    for index, (statements, step) in enumerate(steps):
        for stmt in statements:
            assigned |= pycode.names(stmt, ast.Store)
        reads = reads_back(shown_values(statements, step), literal, assigned)
        if len(reads) == 1:  # two values of the step printed it: which one the answer is, is a guess
            answer_stmt = ast.Expr(value=ast.Call(func=ast.Name(id="final_answer", ctx=ast.Load()), args=reads,
                                                  keywords=[]))
            return [*steps[:index], ([*statements, ast.fix_missing_locations(answer_stmt)], step)]
    return None
