"""The lessons a run of a bank is given for its task, piece by piece: ``lessons_block`` and ``LessonsBlock``.

``remember`` does all of this for an agent; this is for code that builds its runs itself. The block goes
after the task, in the run's first message (``LessonsBlock.after``), and the ids of the lessons in it are
recorded with the run (``LessonsBlock.run_fields`` for ``StepRecorder.prepare_run``), so that the run's
outcome credits them.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass

from lessonbank.core.models import validate_bank
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.instructions import STORE_ERRORS, compose_instructions
from lessonbank.learn.calls import AgentKind
from lessonbank.source import LessonSource


def join_task(task: str, lessons: str) -> str:
    """The task followed by the lessons block (the task alone when there are none)."""
    return f"{task.rstrip()}\n\n{lessons}" if lessons else task


@dataclass(frozen=True)
class LessonsBlock:
    """The lessons block for one task (``text``, "" when nothing bears on it) and the ids of the lessons in it."""

    text: str = ""
    lesson_ids: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.text

    def __bool__(self) -> bool:
        return bool(self.text)

    def after(self, task: str) -> str:
        """``task`` followed by the block: what the run is given (the task alone when the block is empty)."""
        return join_task(task, self.text)

    @property
    def run_fields(self) -> dict[str, str]:
        """The fields to record with the run (``recorder.prepare_run(agent, task=task, **block.run_fields)``):
        its arm and the ids of the lessons it was given, which its outcome credits."""
        return {"arm": "lessons", "given": json.dumps(list(self.lesson_ids))}


def lessons_block(
    task: str,
    bank: str | None = None,
    max_lessons: int = 8,
    max_chars: int = 2000,
    *,
    store: LessonStoreProtocol | None = None,
    settings: Settings | None = None,
    agent_kind: AgentKind = "code",
) -> LessonsBlock:
    """The lessons of ``bank`` that bear on ``task``, as a block to put after the task, with their ids
    (``agent_kind="calls"`` for an agent that calls tools by name rather than writing code: ``learn.calls``).

    An empty block for an empty bank, a task nothing in the bank bears on, or an unavailable store (said
    once, plainly, with what to start): getting lessons never fails the user's run.
    """
    settings = settings or Settings()
    bank = validate_bank(bank if bank is not None else settings.bank)
    source = LessonSource(settings, store=store)
    try:
        text, given = source.read(lambda s: compose_instructions(
            s, task, bank, max_lessons=max_lessons, max_chars=max_chars, min_relevance=settings.min_relevance,
            agent_kind=agent_kind))
        return LessonsBlock(text, tuple(lesson.id for lesson in given))
    except STORE_ERRORS as e:
        source.unavailable(e)
        return LessonsBlock()
    finally:
        if store is None:
            source.close()


def build_instructions(
    task: str,
    bank: str | None = None,
    max_lessons: int = 8,
    max_chars: int = 2000,
    *,
    store: LessonStoreProtocol | None = None,
    settings: Settings | None = None,
) -> str:
    """Deprecated: ``lessons_block(...).text``, without the ids a run needs to be credited."""
    warnings.warn("build_instructions is deprecated and will be removed in the next release: use "
                  "lessons_block(task, bank), which also gives the ids of the lessons to record with the run",
                  DeprecationWarning, stacklevel=2)
    return lessons_block(task, bank, max_lessons, max_chars, store=store, settings=settings).text
