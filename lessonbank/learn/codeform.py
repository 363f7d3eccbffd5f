"""How observed lessons read for a CodeAgent, whose tool results are Python values in its code: an observed
shape with the loop over its records, and after a fix's line to write, the loop over the records of the call it
assigns (``learn.calls`` is the same for an agent that calls tools by name)."""

from __future__ import annotations

import ast

from lessonbank.core.models import FixPayload, ShapePayload
from lessonbank.learn import handover, said, shapes


def shape(payload: ShapePayload) -> str:
    """An observed shape with the loop over its records (told only where the records are, small models summed the
    first one alone)."""
    if payload.records is None:
        return shapes.text(payload, with_call=False)
    loop = f"for record in result{shapes.path(payload.records)}:"
    fields = ", ".join(f"`{key}`" for key in shapes.beside(payload))
    read = f" The fields beside them ({fields}) say about them (how many, whether there are more): read them." \
        if fields else ""
    return f"{shapes.text(payload, with_call=False)[:-1]}: read every one (`{loop}`).{read}{said.text(payload.said)}"


def assigned_call(line: str) -> tuple[str, str] | None:
    """(name, function) of a line of code that assigns one call's result to one name: ``r = fetch_rates(...)`` ->
    ``("r", "fetch_rates")``; None for any other line."""
    found = handover.one_call(line)
    if found is None or not found[0]:
        return None
    func = found[1].func
    tool = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    return (found[0], tool) if tool else None


def then_loop(fix: FixPayload, shapes_of: dict[str, tuple[str, ...]]) -> str:
    """What follows a fix's line to write when the block also holds the shape of the result of the call the line
    assigns: `` Then use its records: `for record in w['records']:`.`` ("" otherwise): given the line alone, small
    models printed the result and wrote the same call again."""
    assigned = assigned_call(fix.fixed) if shapes_of else None
    path = shapes_of.get(assigned[1]) if assigned is not None else None
    if assigned is None or path is None:
        return ""
    return f" Then use its records: `for record in {assigned[0]}{shapes.path(path)}:`."
