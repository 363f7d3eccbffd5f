"""Watching an attached agent's tools: the structure of what each call returned, for the step's record.

A CodeAgent's tools run inside its code, so a step's record shows only what the code printed: a run that
looped over ``search_catalog("lamp")`` without printing it never showed where the products are. When a
recorder attaches to an agent, each of the agent's tools (not ``final_answer``) gets its ``forward``
wrapped once: the wrapper hands the result to the recorders watching that tool and returns it unchanged;
the tool's own exceptions pass through untouched. A recorder keeps, per agent and tool, the specimen of
the first result that fits (``lessonbank.core.specimen``: keys and type names, no value) until the
agent's next action step takes them into its record, at most ``MAX_TOOLS_PER_STEP`` tools per step.

Keeping a result costs a bounded walk of at most ``specimen.MAX_NODES`` values on the agent's thread,
once per tool and step (later calls of a tool already kept cost a dict lookup); it never raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from lessonbank.core.specimen import Unfit, specimen

MAX_TOOLS_PER_STEP = 4
SKIPPED = frozenset({"final_answer"})
_SINKS = "_lessonbank_sinks"

Sink = Callable[[str, Any], None]


def keep(pending: dict[str, Any], name: str, result: Any) -> None:
    """Put the specimen of ``result`` into ``pending`` unless ``name`` has one or the step has enough."""
    if name in pending or len(pending) >= MAX_TOOLS_PER_STEP:
        return
    try:
        pending[name] = specimen(result)
    except Unfit:
        pass


def watch(tool: Any, name: str, key: Any, sink: Sink) -> bool:
    """Wrap ``tool.forward`` (once per tool object) so that every result also goes to ``sink(name, result)``;
    ``key`` names the sink (one per recorder and agent). False when the tool cannot be watched."""
    if name in SKIPPED:
        return False
    forward = getattr(tool, "forward", None)
    if not callable(forward):
        return False
    sinks: dict[Any, tuple[str, Sink]] | None = getattr(forward, _SINKS, None)
    if sinks is None:
        sinks = {}
        try:
            tool.forward = _watched(forward, sinks)
        except (AttributeError, TypeError):  # a tool object that takes no attributes
            return False
    sinks[key] = (name, sink)
    return True


def _watched(original: Callable[..., Any], sinks: dict[Any, tuple[str, Sink]]) -> Callable[..., Any]:
    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        for name, sink in list(sinks.values()):
            sink(name, result)
        return result

    setattr(forward, _SINKS, sinks)
    return forward
