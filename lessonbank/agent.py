"""The smolagents integration: ``remember``, ``feedback`` and ``build_instructions``.

``remember(agent, bank=...)`` gives an existing agent memory in one call. It attaches a
``StepRecorder`` (so runs are recorded and distilled into lessons) and wraps the agent's ``run`` so
that each run starts with the user's own instructions followed by the lessons of the bank that bear
on that task. smolagents rebuilds the system prompt from ``agent.instructions`` at the start of every
``run``, so setting the attribute is enough; it is set back to the user's value when the run ends.

Each run's hash records its arm (``lessons``, or ``control`` for the held-out fraction that gets no
lessons), the ids of the lessons it was given, and — with ``check=`` — whether its final answer
passed the user's check. ``feedback(run_id, success=...)`` records a user's verdict at any time.
"""

from __future__ import annotations

import functools
import json
import logging
import random
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from typing import Any

import redis

from lessonbank.core import runs
from lessonbank.core.connections import create_redis
from lessonbank.core.constants import run_key
from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable
from lessonbank.core.instructions import STORE_ERRORS, compose_instructions
from lessonbank.core.models import Lesson, validate_bank
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.recorder.callback import StepRecorder

logger = logging.getLogger(__name__)

ATTRIBUTE = "_lessonbank_memory"
Check = Callable[[Any], Any]


def join_instructions(user: str | None, lessons: str) -> str | None:
    """The user's instructions followed by the lessons block (either may be empty)."""
    if not lessons:
        return user
    return f"{user.rstrip()}\n\n{lessons}" if user and user.strip() else lessons


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
    ) -> None:
        self.agent = agent
        self.bank = bank
        self.settings = settings
        self.recorder = recorder
        self.max_lessons = max_lessons
        self.max_chars = max_chars
        self.check = check
        self.holdout = holdout
        self._random = random.Random(seed)
        self._store = store
        self._redis: redis.Redis | None = None
        self._original_run: Callable[..., Any] = agent.run
        self._user_instructions: str | None = agent.instructions
        self._applied: str | None = None
        self.last_run_id: str | None = None

    def store(self) -> LessonStoreProtocol | None:
        if self._store is None:
            from lessonbank.core.store.remote import connect_store

            try:
                self._store = connect_store(self.settings)
            except STORE_ERRORS as e:
                logger.warning("lesson store unavailable, runs get no lessons: %s", e)
                return None
        return self._store

    def lessons_for(self, task: str) -> tuple[str, list[Lesson]]:
        """The lessons block for ``task``; ``("", [])`` when the store fails (never raises)."""
        try:
            store = self.store()
            if store is None:
                return "", []
            return compose_instructions(store, task, self.bank, max_lessons=self.max_lessons,
                                        max_chars=self.max_chars, min_relevance=self.settings.min_relevance)
        except STORE_ERRORS as e:
            logger.warning("lesson store unavailable, no lessons for this run: %s", e)
        except Exception:  # never let lessons break the user's run
            logger.warning("building the lessons block failed; the run gets no lessons", exc_info=True)
        return "", []

    def _begin(self, task: Any) -> None:
        current = self.agent.instructions
        if self._applied is None or current != self._applied:
            self._user_instructions = current  # the user changed them since the last run
        arm = "control" if self.holdout and self._random.random() < self.holdout else "lessons"
        block, given = ("", []) if arm == "control" else self.lessons_for(task if isinstance(task, str) else str(task))
        fields = {"arm": arm, "given": json.dumps([lesson.id for lesson in given])}
        if self.check is not None:
            fields["check"] = "pending"
        try:
            self.last_run_id = self.recorder.prepare_run(self.agent, **fields)
        except Exception:  # the recorder is foreign to this module; its failure must not surface
            logger.warning("could not prepare the run's record", exc_info=True)
            self.last_run_id = None
        self._applied = join_instructions(self._user_instructions, block)
        self.agent.instructions = self._applied

    def run(self, task: str, *args: Any, **kwargs: Any) -> Any:
        """The agent's ``run`` with the lessons of ``task`` added to its instructions.

        The run is recorded inside ``recorder.recording`` so that a run that raises is closed as failed.
        """
        self._begin(task)
        recording = self.recorder.recording(self.agent)
        recording.__enter__()
        try:
            result = self._original_run(task, *args, **kwargs)
        except BaseException as e:
            self._finish(recording, e, None)
            raise
        if isinstance(result, Generator):  # stream=True: the run happens as the caller iterates
            return self._stream(result, recording)
        self._finish(recording, None, result)
        return result

    def _stream(self, steps: Generator[Any, None, None], recording: AbstractContextManager[Any]
                ) -> Generator[Any, None, None]:
        last: Any = None
        try:
            for step in steps:
                last = step
                yield step
        except BaseException as e:
            self._finish(recording, e, None)
            raise
        self._finish(recording, None, getattr(last, "output", last))

    def _finish(self, recording: AbstractContextManager[Any], error: BaseException | None, answer: Any) -> None:
        try:
            if error is None:
                recording.__exit__(None, None, None)
            else:
                recording.__exit__(type(error), error, error.__traceback__)
        except Exception:  # the recorder is foreign to this module; its failure must not surface
            logger.warning("the recorder failed to close the run", exc_info=True)
        if self.agent.instructions == self._applied:
            self.agent.instructions = self._user_instructions
        self._applied = None
        if self.check is not None and self.last_run_id is not None:
            self._report_check(self.last_run_id, answer if error is None else None, error is None)

    def _report_check(self, run_id: str, answer: Any, answered: bool) -> None:
        """Run the user's check on the final answer and record its verdict (never raises)."""
        try:
            client = self._client()
            if not answered:
                runs.clear_check(client, run_id)
                return
            try:
                passed = bool(self.check(answer))  # type: ignore[misc]
            except Exception:  # the user's check is foreign code: its failure means "no verdict"
                logger.warning("check= raised on the final answer of run %s; no verdict recorded", run_id,
                               exc_info=True)
                runs.clear_check(client, run_id)
                return
            runs.set_verdict(client, self.bank, run_id, passed, "check", "", self.settings.queue)
        except redis.RedisError as e:
            logger.warning("could not record the check's verdict for run %s: %s", run_id, e)

    def _client(self) -> redis.Redis:
        if self._redis is None:
            self._redis = create_redis(self.settings, "agent")
        return self._redis


def remember(
    agent: Any,
    bank: str | None = None,
    *,
    check: Check | None = None,
    holdout: float | None = None,
    seed: int | None = None,
    settings: Settings | None = None,
    recorder: StepRecorder | None = None,
    store: LessonStoreProtocol | None = None,
    max_lessons: int = 8,
    max_chars: int = 2000,
) -> StepRecorder:
    """Give ``agent`` memory across runs of ``bank``; returns the attached ``StepRecorder``.

    Every later ``agent.run(task)`` is recorded (and distilled into lessons by the worker service)
    and starts with the lessons of ``bank`` relevant to ``task`` appended to the agent's
    instructions. ``check(final_answer) -> bool`` says whether a run did its job (tests pass, schema
    validates...): the most trusted outcome after a user's ``feedback``. ``holdout`` (default
    ``LESSONBANK_HOLDOUT``) is the fraction of runs, chosen at random (``seed``), that get no lessons:
    the control arm ``lessonbank report`` compares with. Calling it again on the same agent changes
    nothing and returns the same recorder.
    """
    existing: AgentHook | None = getattr(agent, ATTRIBUTE, None)
    if existing is not None:
        if bank is not None and bank != existing.bank:
            raise ValueError(f"this agent already remembers into bank {existing.bank!r}, not {bank!r}")
        return existing.recorder
    settings = settings or Settings()
    bank = validate_bank(bank if bank is not None else settings.bank)
    holdout = settings.holdout if holdout is None else holdout
    if not 0.0 <= holdout < 1.0:
        raise ConfigurationError(f"holdout must be a fraction from 0 to below 1 (got {holdout!r})")
    if check is not None and not callable(check):
        raise ConfigurationError("check must be a callable taking the final answer and returning True or False")
    if recorder is None:
        recorder = StepRecorder(bank=bank, settings=settings)
    recorder.attach(agent)
    memory = AgentHook(agent, bank, settings, recorder, store, max_lessons=max_lessons, max_chars=max_chars,
                       check=check, holdout=holdout, seed=seed)

    @functools.wraps(memory._original_run)
    def run(task: str, *args: Any, **kwargs: Any) -> Any:
        return memory.run(task, *args, **kwargs)

    agent.run = run
    setattr(agent, ATTRIBUTE, memory)
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
        runs.set_verdict(client, name, run_id, bool(success), "user", note, settings.queue)
    except redis.RedisError as e:
        raise ServiceUnavailable(f"Redis unreachable, feedback for run {run_id} not recorded: {e}") from e
    finally:
        client.close()
    return True


def _connect(settings: Settings) -> LessonStoreProtocol:
    from lessonbank.core.store.remote import connect_store

    return connect_store(settings)


def _close(store: Any) -> None:
    close = getattr(store, "close", None)
    if callable(close):
        try:
            close()
        except STORE_ERRORS:
            logger.debug("closing the lesson store failed", exc_info=True)


def build_instructions(
    task: str,
    bank: str | None = None,
    max_lessons: int = 8,
    max_chars: int = 2000,
    *,
    store: LessonStoreProtocol | None = None,
    settings: Settings | None = None,
) -> str:
    """Instructions for a run of ``bank`` on ``task``: the relevant lessons of earlier runs, or ``""``.

    Returns ``""`` for an empty bank, a task nothing in the bank bears on, or an unavailable store
    (logged as a warning: building instructions never fails the user's run). To credit the lessons
    it hands out, record their ids with the run: ``recorder.prepare_run(agent, given=...)``;
    ``remember`` does all of this for you.
    """
    settings = settings or Settings()
    bank = validate_bank(bank if bank is not None else settings.bank)
    own_store = store is None
    try:
        source: LessonStoreProtocol = store if store is not None else _connect(settings)
    except STORE_ERRORS as e:
        logger.warning("lesson store unavailable, no lessons for this run: %s", e)
        return ""
    try:
        text, _ = compose_instructions(
            source, task, bank, max_lessons=max_lessons, max_chars=max_chars, min_relevance=settings.min_relevance
        )
        return text
    except STORE_ERRORS as e:
        logger.warning("lesson store unavailable, no lessons for this run: %s", e)
        return ""
    finally:
        if own_store:
            _close(source)
