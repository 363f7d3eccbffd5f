"""Watching an attached agent's tools: the structure of what each call returned, for the step's record.

A CodeAgent's tools run inside its code, so a step's record shows only what the code printed: a run that
looped over ``list_users("ops")`` without printing it never showed where the users are. When a
recorder attaches to an agent, each of the agent's tools (not ``final_answer``) is replaced, in that
agent's ``tools`` only, by a shallow copy whose ``forward`` calls the tool's own and hands the result to
that recorder for that agent; the result is returned unchanged and the tool's own exceptions pass
through untouched. The tool object itself is never changed: a module-level ``@tool`` shared by agents
of two banks feeds each agent's records with its own calls only (a CodeAgent's code runs in a thread of
its own, so the copy, not the calling thread, says whose call it was), and a copy goes away with its
agent. A recorder keeps, per agent and tool, the specimen of the first result that fits
(``lessonbank.core.specimen``: keys and type names, no value but a flag's) until the agent's next action step
takes them into its record, at most ``MAX_TOOLS_PER_STEP`` tools per step.

Keeping a result costs a bounded walk of at most ``specimen.MAX_NODES`` values on the agent's thread,
once per tool and step (later calls of a tool already kept cost a dict lookup); it never raises.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

from lessonbank.core.specimen import Unfit, specimen

MAX_TOOLS_PER_STEP = 4
SKIPPED = frozenset({"final_answer"})
_WATCHED_BY = "_lessonbank_watched_by"

Sink = Callable[[str, Any], None]


def keep(pending: dict[str, Any], name: str, result: Any) -> None:
    """Put the specimen of ``result`` into ``pending`` unless ``name`` has one or the step has enough."""
    if name in pending or len(pending) >= MAX_TOOLS_PER_STEP:
        return
    try:
        pending[name] = specimen(result)
    except Unfit:
        pass


def watch(tool: Any, name: str, key: Any, sink: Sink) -> Any | None:
    """A copy of ``tool`` for one agent whose every result also goes to ``sink(name, result)``; ``key`` names
    the watcher (one per recorder and agent). None when the tool cannot be watched or ``key`` watches it
    already."""
    if name in SKIPPED or getattr(tool, _WATCHED_BY, None) == key:
        return None
    forward = getattr(tool, "forward", None)
    if not callable(forward):
        return None
    try:
        watched = copy.copy(tool)
        watched.forward = _watched(tool, forward, name, sink)
        setattr(watched, _WATCHED_BY, key)
        if getattr(tool, "is_initialized", None) is not None:
            watched.is_initialized = True  # the tool sets itself up (once) when the copy calls it
    except Exception:  # a foreign tool object that cannot be copied or takes no attributes: not watched
        return None
    return watched


def _watched(tool: Any, original: Callable[..., Any], name: str, sink: Sink) -> Callable[..., Any]:
    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        if getattr(tool, "is_initialized", True) is False:
            tool.setup()
        result = tool.forward(*args, **kwargs)
        sink(name, result)
        return result

    return forward
