"""``StepRecorder``: the smolagents step callback that sends every step of every run to Redis.

The callback costs a snapshot of the step (its values as text) handed to a background writer thread,
which redacts, caps and serializes the records and delivers them in batches (``writer.py``). A run's
close waits (at most about one Redis timeout) until the writer has delivered or spooled every record
of the run, so that when ``agent.run`` returns its run is in Redis (or in the spool).
"""

from __future__ import annotations

import functools
import logging
import os
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from smolagents.memory import ActionStep, FinalAnswerStep, MemoryStep, PlanningStep, TaskStep
from smolagents.utils import AgentMaxStepsError

from lessonbank.core.connections import bounded_copy, create_redis
from lessonbank.core.models import RunOutcome
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.recorder import results, snapshot
from lessonbank.recorder.logs import warn_with_traceback
from lessonbank.recorder.serialize import StepSerializer
from lessonbank.recorder.snapshot import RunInfo, Snapshot
from lessonbank.recorder.spool import Spool
from lessonbank.recorder.tracking import AgentState, Run, RunTracker, check_fields
from lessonbank.recorder.transport import Transport
from lessonbank.recorder.writer import Writer

logger = logging.getLogger(__name__)

_RECORDERS: weakref.WeakSet[StepRecorder] = weakref.WeakSet()


class StepRecorder:
    """Records every step of a smolagents agent's runs into Redis and hands finished runs to distillation.

    ``CodeAgent(..., step_callbacks=recorder.step_callbacks)`` or ``recorder.attach(agent)``. Runs that end
    with an exception produce no final step: use ``recorder.run(agent, task)`` or
    ``with recorder.recording(agent): agent.run(task)`` to close them with outcome ``error``.

    The callback never raises and costs a snapshot of the step: a background writer thread redacts,
    serializes and delivers the records (durability: see ``lessonbank.recorder``). When Redis is away,
    records go to a local spool and are delivered, in order and exactly once, when Redis answers again.
    ``prepare_run`` mints the id of an agent's next run before it starts; every run's hash carries the
    names of the agent's tools (``tools``).
    """

    def __init__(
        self,
        bank: str | None = None,
        settings: Settings | None = None,
        redis_client: redis.Redis | None = None,
    ) -> None:
        self.settings = settings if settings is not None else Settings()
        self.bank = bank or self.settings.bank
        self.serializer = StepSerializer(
            Redactor(self.settings.redact_patterns), self.settings.max_field_chars, self.settings.max_record_bytes
        )
        factory: Callable[[], redis.Redis] = functools.partial(create_redis, self.settings, "recorder")
        if redis_client is not None:  # its options with the recorder's timeouts and no retry (the writer never keeps
            # the agent waiting); a client that is no redis-py client is refused here, not in the writer thread
            factory = functools.partial(_same, bounded_copy(redis_client, self.settings, "recorder"))
        self.transport = Transport(factory, Spool(self.settings.resolved_spool_dir), self.settings.breaker_cooldown,
                                   self.settings.redis_timeout, self.settings.queue)
        self._writer = Writer(self.serializer, self.transport)
        self._close_wait = 2 * self.settings.redis_timeout + 0.5
        self._tracker = RunTracker(self.bank)
        self._failure_logged = False
        self._attached: weakref.WeakSet[Any] = weakref.WeakSet()
        self._watch_key = object()  # marks the tool copies this recorder watches
        self.step_callbacks: dict[type[MemoryStep], Any] = {
            ActionStep: self._on_step,
            PlanningStep: self._on_step,
            FinalAnswerStep: self._on_step,
        }
        finalizer = weakref.finalize(self, self._writer.retire)
        finalizer.atexit = False  # at exit, every writer is closed (flushed) instead
        _RECORDERS.add(self)

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
        self._watch_tools(agent)
        return agent

    def run(self, agent: Any, task: str, **kwargs: Any) -> Any:
        """``agent.run(task, **kwargs)``, with the run closed as ``error`` if it raises."""
        with self.recording(agent):
            return agent.run(task, **kwargs)

    @contextmanager
    def recording(self, agent: Any) -> Iterator[StepRecorder]:
        """Attach to ``agent``; a run started inside the block that raises is closed with outcome ``error``."""
        self.attach(agent)
        state = self._tracker.state(agent)
        with state.lock:
            before = self._tracker.latest_task_step(agent, state)
        try:
            yield self
        except BaseException as e:
            self._close_on_error(agent, state, before, e)
            raise

    def run_id(self, agent: Any) -> str | None:
        """The id of the agent's current run (minted now if its run has started), else None."""
        try:
            state = self._tracker.state(agent)
            with state.lock:
                run = self._resolve(agent, state)
            return run.info.run_id if run is not None else None
        except Exception:  # foreign agent objects may lack memory and so on
            self._log_failure("could not determine the run id")
            return None

    def prepare_run(self, agent: Any, task: str | None = None, **fields: str) -> str:
        """Mint now the id of the agent's next run (the run whose TaskStep appears next) and remember
        ``fields`` (e.g. ``arm="control"``, ``given='["id1"]'``) to be written into that run's hash with its
        records and its close. Called again before that run starts: same id, the new fields replace the old.
        ``task``: the run's task as the user gave it, recorded instead of the text the agent runs with (which
        ``remember`` follows with the lessons block).

        Raises ValueError/TypeError for a field that is not a str, too long, or a run state field.
        """
        checked = check_fields(fields, self.settings.max_field_chars)
        state = self._tracker.state(agent)
        with state.lock:
            self._resolve(agent, state)
            return self._tracker.prepare(state, checked, task)

    def record_check(self, agent: Any, run_id: str, passed: bool | None) -> None:
        """Hand over the verdict of the check of the agent's run ``run_id`` (None: the check gave none), to be
        delivered after the run's close, in order with its records: spooled and replayed with them while Redis is
        away. Waits, as the close does, until it is in Redis or spooled, but only for what is left of the close's
        wait (``2 * LESSONBANK_REDIS_TIMEOUT + 0.5`` s from the close on). Never raises."""
        try:
            state = self._tracker.state(agent)
            with state.lock:
                run = state.run
                if run is not None and run.info.run_id == run_id:
                    info, seq, deadline = run.info, run.seq, run.close_deadline
                else:  # the agent started another run meanwhile: the verdict still names its own
                    info, seq, deadline = RunInfo(self.bank, run_id, "", ""), 0, 0.0
                fields = {"source": "check", "note": "", "ttl": self.settings.step_ttl}
                outcome = "" if passed is None else "success" if passed else "failure"
                self._writer.put(Snapshot(info, seq, "verdict", fields, time.time(), outcome))
            left = deadline - time.monotonic()
            if left > 0:
                self._writer.sync(left)
        except Exception:  # the verdict must never break the user's run
            self._log_failure("handing over the check's verdict failed")

    def flush(self, timeout: float = 30.0) -> bool:
        """Deliver what is queued and the spool now (ignoring the breaker's cooldown). True when nothing is
        left to deliver."""
        return self._writer.flush(timeout)

    def close(self, interrupt_open_runs: bool = True) -> None:
        """Close still-open runs as ``interrupted`` (default), flush, and release the spool and clients."""
        if interrupt_open_runs:
            for state in self._tracker.states():
                with state.lock:
                    if state.run is not None and not state.run.closed:
                        self._close_run(state.run, "interrupted")
        self._writer.close(self._close_wait)

    def _watch_tools(self, agent: Any) -> None:
        """Watch the agent's tools so that each action step's record carries the structure of their results
        (``lessonbank.recorder.results``): the agent's ``tools`` get copies that report to this recorder for this
        agent only (a tool shared with other agents is left unchanged)."""
        tools = getattr(agent, "tools", None)
        if not isinstance(tools, dict):
            return
        try:
            sink = functools.partial(_keep_result, weakref.ref(self), weakref.ref(agent))
        except TypeError:  # an agent object that cannot be weakly referenced: its results are not watched
            return
        for name, tool in list(tools.items()):
            watched = results.watch(tool, str(name), self._watch_key, sink)
            if watched is not None:
                tools[name] = watched  # this agent's copy: the tool itself, maybe shared, stays as it is

    # -- the callback ----------------------------------------------------------------------------

    def _on_step(self, memory_step: MemoryStep, agent: Any = None, **_: Any) -> None:
        try:
            if agent is None:
                self._log_failure("step callback called without the agent; step not recorded")
                return
            state = self._tracker.state(agent)
            with state.lock:
                if memory_step is state.last_step:
                    return  # the same callback registered twice (constructor and attach)
                run = self._resolve(agent, state)
                if run is None or run.closed:
                    return
                state.last_step = memory_step
                self._record(memory_step, agent, run, state)
        except Exception:  # a raising step callback would abort the user's run
            self._log_failure("recording a step failed")

    def _record(self, memory_step: MemoryStep, agent: Any, run: Run, state: AgentState) -> None:
        if isinstance(memory_step, ActionStep):
            if isinstance(memory_step.error, AgentMaxStepsError):
                run.max_steps_reached = True
            kind, fields = "action", snapshot.action_fields(memory_step)
            if state.results:
                kept, state.results = state.results, {}
                fields["tool_results"] = list(kept.items())
        elif isinstance(memory_step, PlanningStep):
            kind, fields = "planning", snapshot.planning_fields(memory_step, getattr(agent, "step_number", None))
        elif isinstance(memory_step, FinalAnswerStep):
            kind, fields = "final", snapshot.final_fields(memory_step)
        else:
            return
        seq = run.seq
        run.seq += 1
        self._writer.put(Snapshot(run.info, seq, kind, fields, time.time()))
        if kind == "final":
            self._close_run(run, "max_steps" if run.max_steps_reached else "success", wait=True)

    # -- runs ------------------------------------------------------------------------------------

    def _resolve(self, agent: Any, state: AgentState) -> Run | None:
        run, superseded = self._tracker.resolve(agent, state)
        if superseded is not None:
            self._close_run(superseded, "interrupted")
        return run

    def _close_on_error(self, agent: Any, state: AgentState, before: TaskStep | None, error: BaseException) -> None:
        try:
            with state.lock:
                if self._tracker.latest_task_step(agent, state) is before:
                    return  # the block raised before a new run started
                run = self._resolve(agent, state)
                if run is not None and not run.closed:
                    outcome: RunOutcome = "error" if isinstance(error, Exception) else "interrupted"
                    self._close_run(run, outcome, error, wait=True)
        except Exception:  # never mask the user's exception
            self._log_failure("closing a failed run")

    def _close_run(self, run: Run, outcome: RunOutcome, error: BaseException | None = None,
                   wait: bool = False) -> None:
        """Hand over the run's close; ``wait``: until it and the records before it are in Redis or spooled."""
        fields = snapshot.end_fields(error)  # first: nothing may keep a run marked closed from its close
        run.closed = True
        seq = run.seq
        run.seq += 1
        self._writer.put(Snapshot(run.info, seq, "run_end", fields, time.time(), outcome))
        if wait:
            run.close_deadline = time.monotonic() + self._close_wait
            self._writer.sync(self._close_wait)

    def _log_failure(self, what: str) -> None:
        if not self._failure_logged:
            self._failure_logged = True
            warn_with_traceback(logger, "%s (logged once)", what)


def _keep_result(recorder_ref: weakref.ref[StepRecorder], agent_ref: weakref.ref[Any], name: str,
                 result: Any) -> None:
    """A watched tool's result: its specimen waits in the agent's state for the next action step."""
    recorder, agent = recorder_ref(), agent_ref()
    if recorder is None or agent is None:
        return
    try:
        results.keep(recorder._tracker.state(agent).results, name, result)
    except Exception:  # a tool call must never fail because of the recorder
        recorder._log_failure("keeping the structure of a tool result failed")


def _same(client: redis.Redis) -> redis.Redis:
    return client


def _forget_runs_in_child() -> None:
    for recorder in list(_RECORDERS):
        recorder._tracker.reset()


os.register_at_fork(after_in_child=_forget_runs_in_child)
