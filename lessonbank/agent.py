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
import weakref
from typing import Any, Literal

import redis

from lessonbank.agent_hook import (
    AgentHook,
    Check,
    LessonsIn,
    callables_of,
    count_records,
    join_instructions,
    sub_task,
)
from lessonbank.block import join_task
from lessonbank.core import runs
from lessonbank.core.connections import create_redis, redis_trouble
from lessonbank.core.constants import run_key
from lessonbank.core.exceptions import ConfigurationError, InvalidArgument, ServiceUnavailable
from lessonbank.core.models import validate_bank
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.instructions import LESSONS_HEADER
from lessonbank.recorder.callback import StepRecorder

# With the run-time hook and its helpers (``agent_hook``), re-exported where ``remember`` is
__all__ = ["ATTRIBUTE", "RECALL_TOOL", "AgentHook", "Check", "LessonsIn", "Managed", "callables_of", "count_records",
           "feedback", "join_instructions", "join_task", "lessons_given", "lessons_in_text", "remember", "sub_task"]

logger = logging.getLogger(__name__)

ATTRIBUTE = "_lessonbank_memory"
Managed = Literal["shared", "own"]


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


RECALL_TOOL = "recall_lessons"  # RecallLessonsTool.name; lessonbank.tools stays unimported in an agent without it


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
