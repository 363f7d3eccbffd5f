"""One agent's memory at run time (``AgentHook``, which ``remember`` attaches): each run is given the lessons of
its task (or of the sub-task a manager gave it), recorded in its arm, judged by the user's ``judge`` and counted.

The helpers it reads a smolagents agent with (``sub_task``, ``callables_of``) are here too; ``lessonbank.agent``
re-exports them.
"""

from __future__ import annotations

import logging
import random
import weakref
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from typing import Any, Literal

import redis

from lessonbank import telemetry
from lessonbank.block import join_task
from lessonbank.core.constants import RECORDER_STATS_KEY
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.models import ToolFingerprint
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.handout import Handout, described, handout, kind_of, versions_of
from lessonbank.instructions import MAX_RECIPES, STORE_ERRORS
from lessonbank.recorder.callback import StepRecorder
from lessonbank.source import LessonSource

logger = logging.getLogger(__name__)

Check = Callable[[Any], Any]
LessonsIn = Literal["task", "instructions"]
SENTINEL = "\x00lessonbank-task\x00"
_counted: weakref.WeakKeyDictionary[StepRecorder, tuple[int, int]] = weakref.WeakKeyDictionary()


def join_instructions(user: str | None, lessons: str) -> str | None:
    """The user's instructions followed by the lessons block (either may be empty)."""
    if not lessons:
        return user
    return f"{user.rstrip()}\n\n{lessons}" if user and user.strip() else lessons


def sub_task(agent: Any, task: str) -> str:
    """The task a manager gave ``agent`` (a managed agent's run receives it wrapped in its prompt template)."""
    try:
        from smolagents.agents import populate_template

        template = agent.prompt_templates["managed_agent"]["task"]
        before, _, after = populate_template(template, {"name": agent.name, "task": SENTINEL}).partition(SENTINEL)
    except (AttributeError, KeyError, TypeError, ValueError, ImportError):
        return task
    if before and task.startswith(before) and task.endswith(after) and len(task) >= len(before) + len(after):
        return task[len(before):len(task) - len(after)].strip() or task
    return task


def count_records(client: redis.Redis, recorder: StepRecorder) -> None:
    """Add what ``recorder`` delivered and spooled since the last call to ``RECORDER_STATS_KEY`` (never raises)."""
    transport = getattr(recorder, "transport", None)
    if transport is None or transport.breaker.tripped:
        return  # Redis is away: the counts wait for the next run
    last = _counted.get(recorder, (0, 0))
    delivered, spooled = int(transport.delivered), int(transport.spooled)
    if (delivered, spooled) == last:
        return
    try:
        pipe = client.pipeline(transaction=False)
        pipe.hincrby(RECORDER_STATS_KEY, "delivered", max(delivered - last[0], 0))
        pipe.hincrby(RECORDER_STATS_KEY, "spooled", max(spooled - last[1], 0))
        pipe.execute()
        _counted[recorder] = (delivered, spooled)
    except redis.RedisError as e:
        logger.debug("recorder counts not written: %s", e)


class AgentHook:
    """Per-agent state of ``remember``: the recorder, the store, the arm chooser and the wrapped ``run``."""

    def __init__(
        self,
        agent: Any,
        bank: str,
        settings: Settings,
        recorder: StepRecorder,
        store: LessonStoreProtocol | None = None,
        max_lessons: int = 8,
        max_chars: int = 2000,
        check: Check | None = None,
        holdout: float = 0.0,
        seed: int | None = None,
        parent: AgentHook | None = None,
        recipes: bool = True,
        lessons_in: LessonsIn = "task",
    ) -> None:
        self.agent = agent
        self.recipes = recipes
        self.lessons_in = lessons_in
        self.bank = bank
        self.settings = settings
        self.recorder = recorder
        self.max_lessons = max_lessons
        self.max_chars = max_chars
        self.check = check
        self.holdout = holdout
        self.parent = parent
        self._random = random.Random(seed)
        self._source = LessonSource(settings, store=store)
        self._redactor = Redactor(settings.redact_patterns)
        # smolagents' own run, looked up at call time when the agent has no ``run`` of its own (so an
        # instrumentation that wraps MultiStepAgent.run later, like OpenInference's, still sees the runs)
        self._own_run: Callable[..., Any] | None = agent.run if "run" in vars(agent) else None
        self._user_instructions: str | None = agent.instructions
        self._applied: str | None = None
        self._task: tuple[str, str] | None = None  # (the user's task, the task with lessons the run got)
        self.arm: str | None = None
        self.last_run_id: str | None = None

    def original_run(self) -> Callable[..., Any]:
        if self._own_run is not None:
            return self._own_run
        for klass in type(self.agent).__mro__:
            if "run" in vars(klass):
                return vars(klass)["run"].__get__(self.agent, type(self.agent))  # type: ignore[no-any-return]
        raise AttributeError("the agent has no run method")

    def lessons_for(self, task: str) -> Handout:
        """The lessons block for ``task`` with the per-lesson holdout drawn (``lessonbank.handout``); no lessons
        when the store fails (never raises)."""
        versions = self.versions()
        try:
            tools = described(self.agent, self.callables())
            return self._source.read(lambda store: handout(
                store, task, self.bank, self.settings, self._random, max_lessons=self.max_lessons,
                max_chars=self.max_chars, max_recipes=MAX_RECIPES if self.recipes else 0, tools=tools,
                versions=versions, agent_kind=kind_of(self.agent)))
        except STORE_ERRORS as e:
            self._source.unavailable(e)
        except Exception:  # never let lessons break the user's run
            logger.warning("building the lessons block failed; the run gets no lessons", exc_info=True)
        return Handout(versions=versions)

    def versions(self) -> dict[str, ToolFingerprint]:
        """The fingerprints of the agent's tools ({} when they cannot be read: never raises)."""
        try:
            return versions_of(self.agent)
        except Exception:  # the agent's tools are foreign objects
            logger.debug("could not read the fingerprints of the agent's tools", exc_info=True)
            return {}

    def callables(self) -> set[str] | None:
        """What the agent's code or tool calls can call (``callables_of``)."""
        return callables_of(self.agent)

    def _choose_arm(self) -> str:
        if self.parent is not None and self.parent.arm is not None:
            return self.parent.arm  # a managed agent's run is in the arm of its manager's run
        return "control" if self.holdout and self._random.random() < self.holdout else "lessons"

    def _begin(self, task: Any, trace: telemetry.RunTrace) -> Any:
        """Choose the run's arm, find its lessons and record them with the run; the task to run with."""
        current = self.agent.instructions
        if self._applied is None or current != self._applied:
            self._user_instructions = current  # the user changed them since the last run
        self.arm = self._choose_arm()
        query = sub_task(self.agent, task if isinstance(task, str) else str(task))
        started = telemetry.now_ns()
        handed = Handout(versions=self.versions()) if self.arm == "control" else self.lessons_for(query)
        block, given = handed.block, handed.given
        fields = {"arm": self.arm, **handed.fields(self.settings.max_field_chars)}
        if self.parent is not None and self.parent.last_run_id:
            fields["parent_run"] = self.parent.last_run_id  # a managed agent's run inherits its manager's verdict
        if self.check is not None:
            fields["check"] = "pending"
        parent = trace.traceparent()
        if parent:
            fields["traceparent"] = parent
        try:
            self.last_run_id = self.recorder.prepare_run(self.agent, task=task if isinstance(task, str) else None,
                                                         **fields)
        except Exception:  # the recorder is foreign to this module; its failure must not surface
            logger.warning("could not prepare the run's record", exc_info=True)
            self.last_run_id = None
        trace.record_lessons(self._redactor.redact(query), given, started)
        trace.annotate(self.bank, self.last_run_id, self.arm, [lesson.id for lesson in given])
        if self.lessons_in == "task" and isinstance(task, str):
            self._applied = current
            self._task = (task, join_task(task, block))
            return self._task[1]
        self._applied = join_instructions(self._user_instructions, block)
        self.agent.instructions = self._applied
        return task

    def run(self, task: str, *args: Any, **kwargs: Any) -> Any:
        """The agent's ``run`` with the lessons of ``task`` after the task (or in its instructions).

        The run is recorded inside ``recorder.recording`` so that a run that raises is closed as failed.
        """
        trace = telemetry.start_run(self.agent, task, self._redactor)
        try:
            task = self._begin(task, trace)
            recording = self.recorder.recording(self.agent)
            recording.__enter__()
        except BaseException as e:
            trace.end(e)
            raise
        try:
            result = self.original_run()(task, *args, **kwargs)
        except BaseException as e:
            self._finish(recording, trace, e, None)
            raise
        if isinstance(result, Generator):  # stream=True: the run happens as the caller iterates
            return self._stream(result, recording, trace)
        self._finish(recording, trace, None, result)
        return result

    def _stream(self, steps: Generator[Any, None, None], recording: AbstractContextManager[Any],
                trace: telemetry.RunTrace) -> Generator[Any, None, None]:
        last: Any = None
        try:
            for step in steps:
                last = step
                yield step
        except BaseException as e:
            self._finish(recording, trace, e, None)
            raise
        self._finish(recording, trace, None, getattr(last, "output", last))

    def _finish(self, recording: AbstractContextManager[Any], trace: telemetry.RunTrace,
                error: BaseException | None, answer: Any) -> None:
        try:
            if error is None:
                recording.__exit__(None, None, None)
            else:
                recording.__exit__(type(error), error, error.__traceback__)
        except Exception:  # the recorder is foreign to this module; its failure must not surface
            logger.warning("the recorder failed to close the run", exc_info=True)
        trace.end(error)
        if self.agent.instructions == self._applied:
            self.agent.instructions = self._user_instructions
        current = getattr(self.agent, "task", None)
        if self._task is not None and isinstance(current, str) and current.startswith(self._task[1]):
            # smolagents appends its note on additional_args to the task: keep it, drop the lessons
            self.agent.task = self._task[0] + current[len(self._task[1]):]
        self._applied = None
        self._task = None
        self.arm = None
        if self.check is not None and self.last_run_id is not None:
            self._report_check(self.last_run_id, answer if error is None else None, error is None)
        try:
            count_records(self._client(), self.recorder)
        except ConfigurationError:
            pass

    def _report_check(self, run_id: str, answer: Any, answered: bool) -> None:
        """Run the user's judge on the final answer and hand its verdict to the recorder (never raises): it goes to
        Redis after the run's close, in order with the run's records, or to the spool with them while Redis is
        away, and this waits no longer than what is left of the close's wait."""
        passed: bool | None = None
        if answered:
            try:
                passed = bool(self.check(answer))  # type: ignore[misc]
            except Exception:  # the user's judge is foreign code: its failure means "no verdict"
                logger.warning("judge= raised on the final answer of run %s; no verdict recorded", run_id,
                               exc_info=True)
        self.recorder.record_check(self.agent, run_id, passed)

    def _client(self) -> redis.Redis:
        """The recorder's client (its short timeout): what runs after ``agent.run`` must not stall it either."""
        return self.recorder.transport.client


def callables_of(agent: Any) -> set[str] | None:
    """What ``agent``'s code or tool calls can call besides Python's builtins: its tools, its managed agents and
    the functions smolagents' executor adds (``floor``, ``sqrt``...); None if the agent says not."""
    from smolagents.local_python_executor import BASE_PYTHON_TOOLS

    tools = getattr(agent, "tools", None)
    if not isinstance(tools, dict):
        return None
    managed = getattr(agent, "managed_agents", None) or {}
    return {str(name) for name in (*tools, *managed)} | set(BASE_PYTHON_TOOLS)
