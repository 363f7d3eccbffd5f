"""The smolagents integration: ``remember`` and ``feedback``.

``remember(agent, bank=...)`` gives an existing agent memory in one call. It attaches a
``StepRecorder`` (so runs are recorded and distilled into lessons) and wraps the agent's ``run`` so
that each run is given the lessons of the bank that bear on its task: by default right after the task, in
the run's first message (``lessons_in="task"``; the run is recorded with the task alone, and ``agent.task``
is set back to it when the run ends), or after the user's own instructions, in the system prompt
(``lessons_in="instructions"``: smolagents rebuilds it from ``agent.instructions`` at the start of every
``run``, so setting the attribute is enough; it is set back to the user's value when the run ends). A
1.5B model given a fix in the system prompt mostly wrote the task's own value first anyway; given it after
the task, it wrote the fix (``bench/learning/first_call.py``).
Managed agents (``agent.managed_agents``) get the same, recursively: their runs are recorded under the
manager's bank (``managed="shared"``) or a bank of their own, ``f"{bank}/{name}"`` (``managed="own"``),
and start with the lessons relevant to the sub-task the manager gave them.

Each run's hash records its arm (``lessons``, or ``control`` for the held-out fraction that gets no
lessons), the ids of the lessons it was given, and — with ``judge=`` — whether its final answer
passed the user's judge. ``feedback(run_id, success=...)`` records a user's verdict at any time.
With OpenTelemetry installed, each run's span carries the same (``lessonbank.telemetry``).
"""

from __future__ import annotations

import copy
import functools
import logging
import random
import weakref
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from typing import Any, Literal

import redis

from lessonbank import telemetry
from lessonbank.block import join_task
from lessonbank.core import runs
from lessonbank.core.connections import create_redis, redis_trouble
from lessonbank.core.constants import RECORDER_STATS_KEY, run_key
from lessonbank.core.exceptions import ConfigurationError, InvalidArgument, ServiceUnavailable
from lessonbank.core.models import ToolFingerprint, validate_bank
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.handout import Handout, described, handout, versions_of
from lessonbank.instructions import LESSONS_HEADER, MAX_RECIPES, STORE_ERRORS
from lessonbank.recorder.callback import StepRecorder
from lessonbank.source import LessonSource

logger = logging.getLogger(__name__)

ATTRIBUTE = "_lessonbank_memory"
Check = Callable[[Any], Any]
Managed = Literal["shared", "own"]
LessonsIn = Literal["task", "instructions"]
SENTINEL = "\x00lessonbank-task\x00"
_counted: weakref.WeakKeyDictionary[StepRecorder, tuple[int, int]] = weakref.WeakKeyDictionary()


def join_instructions(user: str | None, lessons: str) -> str | None:
    """The user's instructions followed by the lessons block (either may be empty)."""
    if not lessons:
        return user
    return f"{user.rstrip()}\n\n{lessons}" if user and user.strip() else lessons


def lessons_in_text(text: str) -> str:
    """The lessons block inside a task or a system prompt ("" if none)."""
    start = text.find(LESSONS_HEADER)
    return text[start:].split("\n\nNow Begin!")[0].strip() if start >= 0 else ""


def lessons_given(agent: Any) -> str:
    """The lessons block the agent's last run was given, after its task or in its system prompt ("" if none)."""
    from smolagents.memory import TaskStep

    memory = getattr(agent, "memory", None)
    system = getattr(getattr(memory, "system_prompt", None), "system_prompt", "") or ""
    tasks = [step.task for step in getattr(memory, "steps", []) if isinstance(step, TaskStep)]
    return next((block for text in tasks[-1:] + [system] if (block := lessons_in_text(str(text)))), "")


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
                versions=versions))
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


RECALL_TOOL = "recall_lessons"  # RecallLessonsTool.name; lessonbank.tools stays unimported in an agent without it


def callables_of(agent: Any) -> set[str] | None:
    """What ``agent``'s code or tool calls can call besides Python's builtins: its tools, its managed agents and
    the functions smolagents' executor adds (``floor``, ``sqrt``...); None if the agent says not."""
    from smolagents.local_python_executor import BASE_PYTHON_TOOLS

    tools = getattr(agent, "tools", None)
    if not isinstance(tools, dict):
        return None
    managed = getattr(agent, "managed_agents", None) or {}
    return {str(name) for name in (*tools, *managed)} | set(BASE_PYTHON_TOOLS)


def _lend_callables(agent: Any) -> None:
    """Give ``agent``, in its ``tools`` only, a copy of its ``recall_lessons`` tool (ours, or one rebuilt from its
    saved code) that knows what the agent can call, so that it too leaves out code about tools the agent lacks
    (``lessonbank.learn.needs``). The tool object itself is not changed: another agent may share it. Done before
    the recorder watches the agent's tools, so that the watched copy calls this one."""
    tools = getattr(agent, "tools", None)
    if not isinstance(tools, dict):
        return
    owner = weakref.ref(agent)
    for name, tool in list(tools.items()):
        if getattr(tool, "name", None) != RECALL_TOOL:
            continue
        try:
            lent = copy.copy(tool)
            lent.agent_callables = lambda: callables_of(owner())
        except Exception:  # a foreign tool object that cannot be copied or takes no attributes: unfiltered
            logger.debug("could not lend the callables of %r to its recall tool", agent, exc_info=True)
            continue
        tools[name] = lent


def _hook(agent: Any, memory: AgentHook) -> None:
    @functools.wraps(agent.run)
    def run(task: str, *args: Any, **kwargs: Any) -> Any:
        return memory.run(task, *args, **kwargs)

    agent.run = run
    setattr(agent, ATTRIBUTE, memory)


def _remember_managed(parent: AgentHook, managed: Managed, store: LessonStoreProtocol | None,
                      seen: set[int]) -> None:
    """Hook every managed agent of ``parent.agent`` (recursively) that has no memory yet."""
    for name, sub in (getattr(parent.agent, "managed_agents", None) or {}).items():
        if id(sub) in seen or getattr(sub, ATTRIBUTE, None) is not None or not hasattr(sub, "run"):
            continue
        seen.add(id(sub))
        bank = validate_bank(f"{parent.bank}/{name}") if managed == "own" else parent.bank
        recorder = parent.recorder if bank == parent.recorder.bank else StepRecorder(bank=bank,
                                                                                      settings=parent.settings)
        _lend_callables(sub)
        recorder.attach(sub)
        hook = AgentHook(sub, bank, parent.settings, recorder, store,
                         max_lessons=parent.max_lessons, max_chars=parent.max_chars, parent=parent,
                         recipes=parent.recipes, lessons_in=parent.lessons_in)
        _hook(sub, hook)
        _remember_managed(hook, managed, store, seen)


def remember(
    agent: Any,
    bank: str | None = None,
    *,
    judge: Check | None = None,
    holdout: float | None = None,
    seed: int | None = None,
    settings: Settings | None = None,
    recorder: StepRecorder | None = None,
    store: LessonStoreProtocol | None = None,
    max_lessons: int = 8,
    max_chars: int = 2000,
    managed: Managed = "shared",
    recipes: bool = True,
    lessons_in: LessonsIn = "task",
    check: Check | None = None,
) -> StepRecorder:
    """Give ``agent`` memory across runs of ``bank``; returns the attached ``StepRecorder``.

    Every later ``agent.run(task)`` is recorded (and distilled into lessons by the worker service) and
    is given the lessons of ``bank`` relevant to ``task``: after the task, in the run's first message
    (``lessons_in="task"``, the default; the run is recorded with the task alone), or after the agent's
    instructions, in the system prompt (``lessons_in="instructions"``). ``judge(final_answer) -> bool``
    says whether a run did its job (tests pass, schema validates...): the most trusted outcome after a
    user's ``feedback``. Unlike smolagents' ``final_answer_checks``, it never makes the agent retry: it
    only says how the run went. ``max_lessons`` caps the lessons a run is given. ``holdout`` (default
    ``LESSONBANK_HOLDOUT``) is the fraction of runs, chosen at random (``seed``), that get no lessons: the
    control arm ``lessonbank report`` compares with. Managed
    agents are covered too: their runs are recorded under ``bank`` (``managed="shared"``) or
    ``f"{bank}/{name}"`` (``managed="own"``) and given the lessons of their sub-task; ``remember(sub_agent)``
    returns a managed agent's recorder. ``recipes=False`` hands out prose lessons only, never the code of
    earlier runs. Calling it again on the same agent changes nothing and returns the same recorder.
    ``check=`` is the deprecated name of ``judge=``.
    """
    if check is not None:
        if judge is not None:
            raise InvalidArgument("pass judge= only (check= is its deprecated name)")
        import warnings

        warnings.warn("remember(check=) is deprecated and will be removed in the next release: use judge= (it "
                      "judges the final answer; smolagents' final_answer_checks are what make an agent retry)",
                      DeprecationWarning, stacklevel=2)
        judge = check
    existing: AgentHook | None = getattr(agent, ATTRIBUTE, None)
    if existing is not None:
        if bank is not None and bank != existing.bank:
            raise InvalidArgument(f"this agent already remembers into bank {existing.bank!r}, not {bank!r}")
        return existing.recorder
    settings = settings or Settings()
    bank = validate_bank(bank if bank is not None else settings.bank)
    holdout = settings.holdout if holdout is None else holdout
    if not 0.0 <= holdout < 1.0:
        raise ConfigurationError(f"holdout must be a fraction from 0 to below 1 (got {holdout!r})")
    if judge is not None and not callable(judge):
        raise InvalidArgument("judge must be a callable taking the final answer and returning True or False")
    if managed not in ("shared", "own"):
        raise ConfigurationError(f"managed must be 'shared' or 'own' (got {managed!r})")
    if lessons_in not in ("task", "instructions"):
        raise ConfigurationError(f"lessons_in must be 'task' or 'instructions' (got {lessons_in!r})")
    if recorder is None:
        recorder = StepRecorder(bank=bank, settings=settings)
    _lend_callables(agent)
    recorder.attach(agent)
    memory = AgentHook(agent, bank, settings, recorder, store, max_lessons=max_lessons, max_chars=max_chars,
                       check=judge, holdout=holdout, seed=seed, recipes=recipes, lessons_in=lessons_in)
    _hook(agent, memory)
    _remember_managed(memory, managed, store, {id(agent)})
    return recorder


def feedback(run_id: str, success: bool, note: str = "", *, settings: Settings | None = None) -> bool:
    """Record whether run ``run_id`` did its job — before or after it is distilled.

    A user's verdict is the most trusted outcome: it decides how the lessons the run applied are
    credited (a distilled run is credited again) and whether its code is kept as a recipe. Returns
    False when the run is unknown (never recorded, or its data expired). Raises ServiceUnavailable
    when Redis does not answer.
    """
    if not isinstance(run_id, str) or not run_id.strip():
        raise ConfigurationError("feedback needs the run id (recorder.run_id(agent) after a run)")
    settings = settings or Settings()
    client = create_redis(settings, "cli")
    try:
        bank = client.hget(run_key(run_id), "bank")
        if bank is None:
            return False
        name = bank.decode() if isinstance(bank, bytes) else str(bank)
        runs.set_verdict(client, name, run_id, bool(success), "user", note, settings.queue, settings.step_ttl)
    except redis.RedisError as e:
        raise ServiceUnavailable(f"{redis_trouble(e)}, feedback for run {run_id} not recorded: {e}") from e
    finally:
        client.close()
    return True
