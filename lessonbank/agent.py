"""The smolagents integration: ``remember(agent, bank=...)`` and ``build_instructions(task, bank)``.

``remember`` gives an existing agent memory in one call.

It attaches a ``StepRecorder`` (so runs are recorded and distilled into lessons) and wraps the
agent's ``run`` so that each run starts with the user's own instructions followed by the lessons
of the bank that bear on that task. smolagents rebuilds the system prompt from
``agent.instructions`` at the start of every ``run``, so setting the attribute is enough; it is
set back to the user's value when the run ends. Which lessons a run was given is recorded against
that run's id.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from typing import Any

from lessonbank.core.instructions import STORE_ERRORS, compose_instructions, record_injection
from lessonbank.core.models import Lesson
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.recorder.callback import StepRecorder

logger = logging.getLogger(__name__)

ATTRIBUTE = "_lessonbank_memory"


def join_instructions(user: str | None, lessons: str) -> str | None:
    """The user's instructions followed by the lessons block (either may be empty)."""
    if not lessons:
        return user
    return f"{user.rstrip()}\n\n{lessons}" if user and user.strip() else lessons


class AgentHook:
    """Per-agent state of ``remember``: the recorder, the store and the wrapped ``run``."""

    def __init__(
        self,
        agent: Any,
        bank: str,
        settings: Settings,
        recorder: StepRecorder,
        store: LessonStoreProtocol | None = None,
        max_lessons: int = 8,
        max_chars: int = 2000,
    ) -> None:
        self.agent = agent
        self.bank = bank
        self.settings = settings
        self.recorder = recorder
        self.max_lessons = max_lessons
        self.max_chars = max_chars
        self._store = store
        self._original_run: Callable[..., Any] = agent.run
        self._user_instructions: str | None = agent.instructions
        self._applied: str | None = None

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
            return compose_instructions(
                store,
                task,
                self.bank,
                max_lessons=self.max_lessons,
                max_chars=self.max_chars,
                min_relevance=self.settings.min_relevance,
            )
        except STORE_ERRORS as e:
            logger.warning("lesson store unavailable, no lessons for this run: %s", e)
        except Exception:  # never let lessons break the user's run
            logger.warning("building the lessons block failed; the run gets no lessons", exc_info=True)
        return "", []

    def _begin(self, task: Any) -> list[Lesson]:
        current = self.agent.instructions
        if self._applied is None or current != self._applied:
            self._user_instructions = current  # the user changed them since the last run
        block, given = self.lessons_for(task if isinstance(task, str) else str(task))
        self._applied = join_instructions(self._user_instructions, block)
        self.agent.instructions = self._applied
        return given

    def _end(self, given: list[Lesson]) -> None:
        if self.agent.instructions == self._applied:
            self.agent.instructions = self._user_instructions
        self._applied = None
        if not given:
            return
        store = self.store()
        if store is None:
            return
        try:
            run_id = self.recorder.run_id(self.agent)
        except Exception:  # the recorder is foreign to this module; its failure must not surface
            logger.warning("could not read the run id from the recorder", exc_info=True)
            run_id = None
        record_injection(store, self.bank, given, run_id)

    def run(self, task: str, *args: Any, **kwargs: Any) -> Any:
        """The agent's ``run`` with the lessons of ``task`` added to its instructions.

        The run is recorded inside ``recorder.recording`` so that a run that raises is closed as failed.
        """
        given = self._begin(task)
        recording = self.recorder.recording(self.agent)
        recording.__enter__()
        try:
            result = self._original_run(task, *args, **kwargs)
        except BaseException as e:
            self._finish(recording, given, e)
            raise
        if isinstance(result, Generator):  # stream=True: the run happens as the caller iterates
            return self._stream(result, given, recording)
        self._finish(recording, given, None)
        return result

    def _stream(
        self, steps: Generator[Any, None, None], given: list[Lesson], recording: AbstractContextManager[Any]
    ) -> Generator[Any, None, None]:
        try:
            yield from steps
        except BaseException as e:
            self._finish(recording, given, e)
            raise
        self._finish(recording, given, None)

    def _finish(self, recording: AbstractContextManager[Any], given: list[Lesson], error: BaseException | None) -> None:
        try:
            if error is None:
                recording.__exit__(None, None, None)
            else:
                recording.__exit__(type(error), error, error.__traceback__)
        except Exception:  # the recorder is foreign to this module; its failure must not surface
            logger.warning("the recorder failed to close the run", exc_info=True)
        self._end(given)


def remember(
    agent: Any,
    bank: str | None = None,
    *,
    settings: Settings | None = None,
    recorder: StepRecorder | None = None,
    store: LessonStoreProtocol | None = None,
    max_lessons: int = 8,
    max_chars: int = 2000,
) -> StepRecorder:
    """Give ``agent`` memory across runs of ``bank``; returns the attached ``StepRecorder``.

    Every later ``agent.run(task)`` is recorded (and distilled into lessons by the worker service)
    and starts with the lessons of ``bank`` relevant to ``task`` appended to the agent's
    instructions. Calling it again on the same agent changes nothing and returns the same recorder.
    """
    existing: AgentHook | None = getattr(agent, ATTRIBUTE, None)
    if existing is not None:
        if bank is not None and bank != existing.bank:
            raise ValueError(f"this agent already remembers into bank {existing.bank!r}, not {bank!r}")
        return existing.recorder
    settings = settings or Settings()
    bank = bank or settings.bank
    if recorder is None:
        recorder = StepRecorder(bank=bank, settings=settings)
    recorder.attach(agent)
    memory = AgentHook(agent, bank, settings, recorder, store, max_lessons=max_lessons, max_chars=max_chars)

    @functools.wraps(memory._original_run)
    def run(task: str, *args: Any, **kwargs: Any) -> Any:
        return memory.run(task, *args, **kwargs)

    agent.run = run
    setattr(agent, ATTRIBUTE, memory)
    return recorder


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
    run_id: str | None = None,
) -> str:
    """Instructions for a run of ``bank`` on ``task``: the relevant lessons of earlier runs, or ``""``.

    Returns ``""`` for an empty bank, a task nothing in the bank bears on, or an unavailable store
    (logged as a warning: building instructions never fails the user's run). Records which lessons
    were given (``run_id`` when known).
    """
    settings = settings or Settings()
    bank = bank or settings.bank
    own_store = store is None
    try:
        source: LessonStoreProtocol = store if store is not None else _connect(settings)
    except STORE_ERRORS as e:
        logger.warning("lesson store unavailable, no lessons for this run: %s", e)
        return ""
    try:
        text, given = compose_instructions(
            source, task, bank, max_lessons=max_lessons, max_chars=max_chars, min_relevance=settings.min_relevance
        )
        if given:
            record_injection(source, bank, given, run_id)
        return text
    except STORE_ERRORS as e:
        logger.warning("lesson store unavailable, no lessons for this run: %s", e)
        return ""
    finally:
        if own_store:
            _close(source)
