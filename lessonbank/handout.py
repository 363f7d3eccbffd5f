"""What one run of an agent with memory is handed, and what its run hash keeps of it.

``handout`` ranks and writes the lessons block of the task as the instructions builder does
(``lessonbank.instructions``), with the agent's tools' fingerprints (``versions_of``, ``lessonbank.learn.fingerprint``)
so that no code calling a tool that changed since it was learnt is given. It then draws the lessons the block holds
for the per-lesson holdout (``lessonbank.learn.causal.withhold``: each may be withheld, independently) and writes
the block again without the withheld ones. ``Handout.fields`` are what the run's hash keeps: ``given``, ``drawn``,
``withheld`` and ``tool_versions``; the worker reads them to credit and measure the lessons, and to stamp (or mark
stale) the lessons the run teaches.
"""

from __future__ import annotations

import json
import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from lessonbank.core.models import Lesson, ToolFingerprint
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.instructions import MAX_RECIPES, format_lessons, rank_lessons
from lessonbank.learn import causal, fingerprint
from lessonbank.learn.calls import AgentKind


@dataclass(frozen=True)
class Handout:
    """The lessons block of one run, the lessons it holds, the holdout's draw, and the agent's tools."""

    block: str = ""
    given: list[Lesson] = field(default_factory=list)
    drawn: list[str] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)
    versions: Mapping[str, ToolFingerprint] = field(default_factory=dict)

    def fields(self, budget: int) -> dict[str, str]:
        """The run hash fields that record it (``budget``: the longest a field may be)."""
        fields = {"given": json.dumps([lesson.id for lesson in self.given])}
        if self.drawn:
            fields.update(drawn=json.dumps(self.drawn), withheld=json.dumps(self.withheld))
        if self.versions:
            fields["tool_versions"] = fingerprint.encode(self.versions, budget)
        return fields


def versions_of(agent: Any) -> dict[str, ToolFingerprint]:
    """The fingerprints of what ``agent`` can call: its tools and its managed agents."""
    found: list[Any] = []
    for source in (getattr(agent, "tools", None), getattr(agent, "managed_agents", None)):
        if isinstance(source, dict):
            found += list(source.values())
    return fingerprint.of_tools(found)


def kind_of(agent: Any) -> AgentKind:
    """"code" for a smolagents ``CodeAgent`` (its tools' results are values in its code), "calls" for any other
    agent (a ``ToolCallingAgent`` calls tools by name and holds their results in no variable)."""
    from smolagents import CodeAgent

    return "code" if isinstance(agent, CodeAgent) else "calls"


def described(agent: Any, names: Collection[str] | None) -> dict[str, str] | None:
    """What ``agent`` can call (``names``; None: not known), each with its description ("" for what has none): the
    builder tells by them which of its tools a task will use (``learn.needs.tools_used``)."""
    if names is None:
        return None
    found: dict[str, Any] = {}
    for source in (getattr(agent, "tools", None), getattr(agent, "managed_agents", None)):
        if isinstance(source, dict):
            found.update(source)
    descriptions = {name: getattr(found.get(name), "description", "") for name in names}
    return {name: text if isinstance(text, str) else "" for name, text in descriptions.items()}


def handout(
    store: LessonStoreProtocol, task: str, bank: str, settings: Settings, rng: random.Random, *,
    max_lessons: int = 8, max_chars: int = 2000, max_recipes: int = MAX_RECIPES,
    tools: Collection[str] | None = None, versions: Mapping[str, ToolFingerprint] | None = None,
    agent_kind: AgentKind = "code",
) -> Handout:
    """The lessons block for a run of ``bank`` on ``task`` with the per-lesson holdout drawn with ``rng`` (see the
    module; ``agent_kind``: ``kind_of`` the agent). Raises the store's errors."""
    lessons = rank_lessons(store, bank, task, max_lessons=max_lessons, min_relevance=settings.min_relevance,
                           max_recipes=max_recipes, tools=tools, versions=versions, agent_kind=agent_kind)
    block, given = format_lessons(lessons, max_chars=max_chars, task=task, tools=tools, agent_kind=agent_kind)
    drawn, withheld = causal.withhold(given, settings.lesson_holdout, rng, settings.lesson_holdout_after,
                                      settings.lesson_holdout_user)
    if withheld:
        block, given = format_lessons([lesson for lesson in lessons if lesson.id not in withheld],
                                      max_chars=max_chars, task=task, tools=tools, agent_kind=agent_kind)
    return Handout(block, given, drawn, withheld, dict(versions or {}))
