"""``StepRecorder``: the smolagents step callback that sends every step of every run to Redis.

smolagents has no run id. A run starts when ``agent.run()`` appends a ``TaskStep`` to
``agent.memory.steps`` (with ``reset=False`` too), so a run is identified by that TaskStep object;
the recorder mints a uuid4 run id for it on the first step it sees.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import redis
from smolagents.memory import ActionStep, FinalAnswerStep, MemoryStep, PlanningStep, TaskStep
from smolagents.utils import AgentMaxStepsError

from lessonbank.core.connections import create_redis
from lessonbank.core.models import RunOutcome
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.recorder.ops import Op
from lessonbank.recorder.serialize import RunInfo, StepSerializer
from lessonbank.recorder.spool import Spool
from lessonbank.recorder.transport import RedisSink, Transport

logger = logging.getLogger(__name__)


@dataclass
class _Run:
    info: RunInfo
    task_step: TaskStep  # strong reference: the object's id must not be reused while the run is open
    seq: int = 0
    closed: bool = False
    max_steps_reached: bool = False


@dataclass
class _AgentState:
    """What the recorder knows about one agent: where it last looked in its memory, and its current run."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    steps: list[Any] | None = None  # the agent.memory.steps list last scanned (reset() replaces it)
    scanned: int = 0
    task_step: TaskStep | None = None
    run: _Run | None = None
    last_step: Any = None  # the memory step recorded last: a callback registered twice records it once


class StepRecorder:
    """Records every step of a smolagents agent's runs into Redis and hands finished runs to distillation.

    ``CodeAgent(..., step_callbacks=recorder.step_callbacks)`` or ``recorder.attach(agent)``. Runs that end
    with an exception produce no final step: use ``recorder.run(agent, task)`` or
    ``with recorder.recording(agent): agent.run(task)`` to close them with outcome ``error``.

    The callback never raises and never blocks for long: when Redis is away, records go to a local spool
    and are delivered, in order and exactly once, when Redis answers again.
    """

    def __init__(
        self,
        bank: str | None = None,
        settings: Settings | None = None,
        redis_client: redis.Redis | None = None,
    ) -> None:
        self.settings = settings if settings is not None else Settings()
        self.bank = bank or self.settings.bank
        self._own_client = redis_client is None
        self._client = redis_client
        self.serializer = StepSerializer(
            Redactor(self.settings.redact_patterns), self.settings.max_field_chars, self.settings.max_record_bytes
        )
        self.transport = Transport(
            self._make_sink, Spool(self.settings.resolved_spool_dir), self.settings.breaker_cooldown
        )
        self._states: weakref.WeakKeyDictionary[Any, _AgentState] = weakref.WeakKeyDictionary()
        self._pinned: dict[int, tuple[Any, _AgentState]] = {}
        self._states_lock = threading.Lock()
        self._failure_logged = False
        self._attached: weakref.WeakSet[Any] = weakref.WeakSet()
        self.step_callbacks: dict[type[MemoryStep], Any] = {
            ActionStep: self._on_step,
            PlanningStep: self._on_step,
            FinalAnswerStep: self._on_step,
        }

    def _make_sink(self) -> RedisSink:
        if self._client is None:
            self._client = create_redis(self.settings, "recorder")
        return RedisSink(self._client, self.settings.queue)

    # -- public API ------------------------------------------------------------------------------

    def attach(self, agent: Any) -> Any:
        """Register the callbacks on an existing agent (idempotent). Returns the agent.

        Registering on an agent built with ``step_callbacks=recorder.step_callbacks`` is harmless: a
        step reaching the callback twice is recorded once.
        """
        try:
            if agent in self._attached:
                return agent
            self._attached.add(agent)
        except TypeError:  # an agent object that cannot be weakly referenced: register every time it is asked
            pass
        for step_cls, callback in self.step_callbacks.items():
            agent.step_callbacks.register(step_cls, callback)
        return agent

    def run(self, agent: Any, task: str, **kwargs: Any) -> Any:
        """``agent.run(task, **kwargs)``, with the run closed as ``error`` if it raises."""
        with self.recording(agent):
            return agent.run(task, **kwargs)

    @contextmanager
    def recording(self, agent: Any) -> Iterator[StepRecorder]:
        """Attach to ``agent``; a run started inside the block that raises is closed with outcome ``error``."""
        self.attach(agent)
        state = self._state(agent)
        with state.lock:
            before = self._latest_task_step(agent, state)
        try:
            yield self
        except BaseException as e:
            self._close_on_error(agent, state, before, e)
            raise

    def run_id(self, agent: Any) -> str | None:
        """The id of the agent's current run (minted now if its run has started), else None."""
        try:
            state = self._state(agent)
            with state.lock:
                run = self._current_run(agent, state)
            return run.info.run_id if run is not None else None
        except Exception:  # foreign agent objects may lack memory and so on
            self._log_failure("could not determine the run id")
            return None

    def flush(self) -> bool:
        """Deliver the spool now (ignoring the breaker's cooldown). True when nothing is left to deliver."""
        return self.transport.flush()

    def close(self, interrupt_open_runs: bool = True) -> None:
        """Close still-open runs as ``interrupted`` (default), flush, and release the spool and clients."""
        if interrupt_open_runs:
            with self._states_lock:
                states = list(self._states.values()) + [state for _, state in self._pinned.values()]
            for state in states:
                with state.lock:
                    if state.run is not None and not state.run.closed:
                        self._close_run(state.run, "interrupted")
        self.transport.close()
        if self._own_client and self._client is not None:
            self._client.close()

    # -- the callback ----------------------------------------------------------------------------

    def _on_step(self, memory_step: MemoryStep, agent: Any = None, **_: Any) -> None:
        try:
            if agent is None:
                self._log_failure("step callback called without the agent; step not recorded")
                return
            state = self._state(agent)
            with state.lock:
                if memory_step is state.last_step:
                    return  # the same callback registered twice (constructor and attach)
                run = self._current_run(agent, state)
                if run is None or run.closed:
                    return
                state.last_step = memory_step
                self._record(memory_step, agent, run)
        except Exception:  # a raising step callback would abort the user's run
            self._log_failure("recording a step failed")

    def _record(self, memory_step: MemoryStep, agent: Any, run: _Run) -> None:
        seq = run.seq
        if isinstance(memory_step, ActionStep):
            if isinstance(memory_step.error, AgentMaxStepsError):
                run.max_steps_reached = True
            record = self.serializer.action(memory_step, run.info, seq)
        elif isinstance(memory_step, PlanningStep):
            record = self.serializer.planning(memory_step, run.info, seq, getattr(agent, "step_number", None))
        elif isinstance(memory_step, FinalAnswerStep):
            record = self.serializer.final(memory_step, run.info, seq)
        else:
            return
        run.seq += 1
        self.transport.deliver(self._op("step", run, seq, record))
        if isinstance(memory_step, FinalAnswerStep):
            self._close_run(run, "max_steps" if run.max_steps_reached else "success")

    # -- runs ------------------------------------------------------------------------------------

    def _state(self, agent: Any) -> _AgentState:
        with self._states_lock:
            try:
                state = self._states.get(agent)
                if state is None:
                    state = self._states[agent] = _AgentState()
            except TypeError:  # an agent object that cannot be weakly referenced: kept alive by the recorder
                state = self._pinned.setdefault(id(agent), (agent, _AgentState()))[1]
            return state

    def _latest_task_step(self, agent: Any, state: _AgentState) -> TaskStep | None:
        """The newest TaskStep in the agent's memory; scans only what was appended since the last call."""
        steps = agent.memory.steps
        if state.steps is None or steps is not state.steps or len(steps) < state.scanned:
            state.steps, state.scanned, state.task_step = steps, 0, None
        for index in range(state.scanned, len(steps)):
            if isinstance(steps[index], TaskStep):
                state.task_step = steps[index]
        state.scanned = len(steps)
        return state.task_step

    def _current_run(self, agent: Any, state: _AgentState) -> _Run | None:
        """The run of the agent's newest TaskStep; a new one closes the previous run as ``interrupted``."""
        task_step = self._latest_task_step(agent, state)
        if task_step is None:
            return None
        if state.run is not None and state.run.task_step is task_step:
            return state.run
        if state.run is not None and not state.run.closed:
            self._close_run(state.run, "interrupted")
        state.run = self._new_run(agent, task_step)
        return state.run

    def _new_run(self, agent: Any, task_step: TaskStep) -> _Run:
        task = getattr(agent, "task", None) or task_step.task
        name = getattr(agent, "name", None) or type(agent).__name__
        info = RunInfo(self.bank, uuid.uuid4().hex, str(name), self.serializer.task_text(task))
        return _Run(info=info, task_step=task_step)

    def _close_on_error(self, agent: Any, state: _AgentState, before: TaskStep | None, error: BaseException) -> None:
        try:
            with state.lock:
                if self._latest_task_step(agent, state) is before:
                    return  # the block raised before a new run started
                run = self._current_run(agent, state)
                if run is not None and not run.closed:
                    outcome: RunOutcome = "error" if isinstance(error, Exception) else "interrupted"
                    self._close_run(run, outcome, error)
        except Exception:  # never mask the user's exception
            self._log_failure("closing a failed run")

    def _close_run(self, run: _Run, outcome: RunOutcome, error: BaseException | None = None) -> None:
        run.closed = True
        seq = run.seq
        run.seq += 1
        record = self.serializer.run_end(run.info, seq, outcome, error)
        self.transport.deliver(self._op("close", run, seq, record, outcome=outcome, token=uuid.uuid4().hex))

    def _op(self, kind: Any, run: _Run, seq: int, record: str, outcome: str = "", token: str = "") -> Op:
        info = run.info
        return Op(kind, info.bank, info.run_id, info.agent, info.task, seq, record, time.time(), outcome, token)

    def _log_failure(self, what: str) -> None:
        if not self._failure_logged:
            self._failure_logged = True
            logger.warning("%s (logged once)", what, exc_info=True)
