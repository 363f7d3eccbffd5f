"""Which run a step belongs to: smolagents has no run id, so the recorder tracks each agent's TaskSteps.

A run starts when ``agent.run()`` appends a ``TaskStep`` to ``agent.memory.steps`` (with ``reset=False``
too), so a run is identified by that TaskStep object; the recorder mints a uuid4 run id for it when it
first sees it, or takes the id that ``prepare_run`` minted for the agent's next run.
"""

from __future__ import annotations

import json
import threading
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

from smolagents.memory import TaskStep

from lessonbank.core.exceptions import InvalidArgument, InvalidType
from lessonbank.recorder.snapshot import Converter, RunInfo, valid_utf8

MAX_TOOLS = 64  # tool names kept in a run's ``tools`` field
MAX_TOOL_NAME = 64
MAX_AGENT_NAME = 200  # characters of the agent's name kept in its records
# Fields of the run's hash that ``prepare_run`` may not set: the run state machine writes them.
RESERVED_FIELDS = frozenset({
    "bank", "agent", "task", "state", "outcome", "started_at", "updated_at", "closed_at", "enqueued", "tools",
    "distill_attempts", "distilled_at", "distill_output", "consolidated", "lessons", "credited", "verdict",
    "verdict_source", "verdict_note", "verdict_trust", "verdict_at", "late_at", "followup", "distilled_upto",
    "judged", "taught", "recounted", "llm_error", "deliveries", "forgotten", "forgotten_done",
})


@dataclass
class Run:
    info: RunInfo
    task_step: TaskStep  # strong reference: the object's id must not be reused while the run is open
    seq: int = 0
    closed: bool = False
    max_steps_reached: bool = False
    close_deadline: float = 0.0  # monotonic time the close's wait ends (a verdict after it waits only what is left)


@dataclass
class Prepared:
    """The id and fields of an agent's next run, minted before it starts: the run of the first TaskStep
    that is not ``after``."""

    run_id: str
    fields: dict[str, str]
    after: TaskStep | None
    task: str | None = None  # the run's task as the user gave it, when the agent runs it with more text


@dataclass
class AgentState:
    """What the recorder knows about one agent: where it last looked in its memory, and its current run."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    steps: list[Any] | None = None  # the agent.memory.steps list last scanned (reset() replaces it)
    scanned: int = 0
    task_step: TaskStep | None = None
    run: Run | None = None
    last_step: Any = None  # the memory step recorded last: a callback registered twice records it once
    prepared: Prepared | None = None
    results: dict[str, Any] = field(default_factory=dict)  # tool -> result specimen, for the next action step


def check_fields(fields: dict[str, Any], limit: int) -> dict[str, str]:
    """``prepare_run``'s fields, or a one-line error naming the field."""
    for name, value in fields.items():
        if not name.isidentifier() or name in RESERVED_FIELDS:
            raise InvalidArgument(f"prepare_run: {name!r} cannot be set (a run state field or not a name)")
        if not isinstance(value, str):
            raise InvalidType(f"prepare_run: field {name!r} must be a str, not {type(value).__name__}")
        if len(value) > limit:
            raise InvalidArgument(f"prepare_run: field {name!r} has {len(value)} characters, more than "
                             f"LESSONBANK_MAX_FIELD_CHARS ({limit})")
    return dict(fields)


def tool_names(agent: Any) -> str:
    """JSON list of the agent's tool names and managed agents' names (at most MAX_TOOLS, each cut)."""
    names: list[str] = []
    for source in (getattr(agent, "tools", None), getattr(agent, "managed_agents", None)):
        if isinstance(source, dict):
            names += [str(name)[:MAX_TOOL_NAME] for name in source]
    return json.dumps(list(dict.fromkeys(names))[:MAX_TOOLS])


class RunTracker:
    """Per-agent state, kept in a weak dictionary (agents that cannot be weakly referenced are pinned)."""

    def __init__(self, bank: str) -> None:
        self.bank = bank
        self.reset()

    def reset(self) -> None:
        """Forget every agent (a forked child records its runs under ids of its own)."""
        self._states: weakref.WeakKeyDictionary[Any, AgentState] = weakref.WeakKeyDictionary()
        self._pinned: dict[int, tuple[Any, AgentState]] = {}
        self._lock = threading.Lock()

    def state(self, agent: Any) -> AgentState:
        try:
            state = self._states.get(agent)
        except TypeError:  # an agent object that cannot be weakly referenced: kept alive by the recorder
            with self._lock:
                return self._pinned.setdefault(id(agent), (agent, AgentState()))[1]
        if state is None:
            with self._lock:
                state = self._states.get(agent)
                if state is None:
                    state = self._states[agent] = AgentState()
        return state

    def states(self) -> list[AgentState]:
        with self._lock:
            return list(self._states.values()) + [state for _, state in self._pinned.values()]

    def latest_task_step(self, agent: Any, state: AgentState) -> TaskStep | None:
        """The newest TaskStep in the agent's memory; scans only what was appended since the last call."""
        steps = agent.memory.steps
        if state.steps is None or steps is not state.steps or len(steps) < state.scanned:
            state.steps, state.scanned, state.task_step = steps, 0, None
        for index in range(state.scanned, len(steps)):
            if isinstance(steps[index], TaskStep):
                state.task_step = steps[index]
        state.scanned = len(steps)
        return state.task_step

    def resolve(self, agent: Any, state: AgentState) -> tuple[Run | None, Run | None]:
        """The run of the agent's newest TaskStep, and the previous run if it is still open (the caller
        closes it as ``interrupted``)."""
        task_step = self.latest_task_step(agent, state)
        if task_step is None:
            return None, None
        current = state.run
        if current is not None and current.task_step is task_step:
            return current, None
        state.run = self._new_run(agent, state, task_step)
        return state.run, current if current is not None and not current.closed else None

    def prepare(self, state: AgentState, fields: dict[str, str], task: str | None = None) -> str:
        """Mint (or keep) the id of the agent's next run and remember its fields (and its task)."""
        if state.prepared is None:
            state.prepared = Prepared(uuid.uuid4().hex, fields, state.task_step, task)
        else:
            state.prepared.fields, state.prepared.task = fields, task
        return state.prepared.run_id

    def _new_run(self, agent: Any, state: AgentState, task_step: TaskStep) -> Run:
        prepared = state.prepared
        task = None
        if prepared is not None and task_step is not prepared.after:
            state.prepared = None
            run_id, fields, task = prepared.run_id, prepared.fields, prepared.task
        else:
            run_id, fields = uuid.uuid4().hex, {}
        task = task or getattr(agent, "task", None) or task_step.task
        name = getattr(agent, "name", None) or type(agent).__name__
        extra = {valid_utf8(key): valid_utf8(value) for key, value in {**fields, "tools": tool_names(agent)}.items()}
        info = RunInfo(valid_utf8(self.bank), run_id, valid_utf8(str(name)[:MAX_AGENT_NAME]), Converter().text(task),
                       extra)
        return Run(info, task_step)
