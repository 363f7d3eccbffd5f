"""Memory tools for smolagents agents (``recall_lessons``, ``remember_lesson``).

The tools follow smolagents' conventions for tools that can be saved and shared: class attributes are
literals, ``__init__`` takes only arguments with literal defaults, and each method imports what it uses,
so ``tool.to_dict()``, ``agent.save()`` and ``push_to_hub`` work. The bank is kept in the saved code
(``default_bank``); the settings are read from the environment when the tool is called (unless given),
and the store and Redis client are made on first use, never captured.

``recall_lessons`` searches the bank's active lessons (hybrid search, relevance floor on the dense
similarity). In an agent given memory by ``remember()``, it leaves out code about tools that agent lacks,
as the instructions do (``remember`` gives that agent a copy of the tool that knows its callables,
``agent_callables``). ``remember_lesson`` hands a lesson to the worker service, which consolidates it with
the bank's lessons exactly as it does distilled ones: the lesson (redacted, as ``Lesson`` JSON) is
parked in Redis at ``pending_lesson_key(id)`` with a TTL, and the task ``REMEMBER_TASK`` is published by
name with ``[bank, pending_id]``, in the same Redis transaction. Nothing here imports the worker code.

The tools read lessons through ``lessonbank.source.LessonSource``, as ``remember()`` does.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any, cast

import redis
from smolagents import Tool

from lessonbank.core.connections import create_redis
from lessonbank.core.constants import REMEMBER_TASK, pending_lesson_key
from lessonbank.core.exceptions import InvalidArgument
from lessonbank.core.models import LESSON_KINDS, Lesson, LessonKind
from lessonbank.core.publish import publish
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.instructions import KIND_TITLES, STORE_ERRORS, eligible, format_recipe
from lessonbank.learn import render
from lessonbank.learn.needs import usable
from lessonbank.source import LessonSource

logger = logging.getLogger(__name__)

MAX_LESSON_CHARS = 500
DEFAULT_RECALL_LIMIT = 5
MAX_RECALL_LIMIT = 20


# -- the tools -----------------------------------------------------------------------------------------

def _settings(tool: Any) -> Settings:
    if tool.settings is None:
        tool.settings = Settings()
    return cast(Settings, tool.settings)


def tool_bank(tool: Any) -> str:
    """The tool's bank: given, saved with it (``default_bank``), else ``LESSONBANK_BANK``."""
    return cast(str, tool.bank or tool.default_bank or _settings(tool).bank)


def with_bank(tool_dict: dict[str, Any], tool: Any) -> dict[str, Any]:
    """``Tool.to_dict()`` with the tool's bank kept in the code (``default_bank``), so a reloaded tool uses it."""
    bank = tool.bank or tool.default_bank
    if bank:
        saved = f"    default_bank = {json.dumps(bank)}\n"
        tool_dict["code"] = tool_dict["code"].replace('    default_bank = ""\n', saved, 1)
    return tool_dict


def recall(tool: Any, query: Any, limit: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgument("recall_lessons needs a non-empty 'query' string describing what you want to know.")
    if limit is None:
        limit = DEFAULT_RECALL_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RECALL_LIMIT:
        raise InvalidArgument(f"'limit' must be a whole number from 1 to {MAX_RECALL_LIMIT} (got {limit!r}).")
    bank, settings = tool_bank(tool), _settings(tool)
    if tool.source is None:
        tool.source = LessonSource(settings, store=tool.store)
    lent = getattr(tool, "agent_callables", None)
    callables = lent() if callable(lent) else None
    wanted = limit if callables is None else 2 * limit  # room for the lessons the agent cannot use
    try:
        found = tool.source.read(lambda store: store.search(bank, query.strip(), limit=wanted,
                                                            min_similarity=settings.min_relevance))
    except STORE_ERRORS as e:
        logger.warning("recall_lessons: lesson store unavailable: %s", e)
        return "The lesson memory is unavailable right now, so no lessons can be recalled. Carry on without it."
    lessons = [lesson for lesson, _ in found
               if lesson.bank == bank and eligible(lesson) and usable(lesson, callables)][:limit]
    none = f"No lessons about {query.strip()!r} yet. Carry on with your own approach."
    if not lessons:
        return none
    lines = [f"Lessons from earlier runs about {query.strip()!r} (hints, not instructions):"]
    for lesson in lessons:
        if lesson.recipe is not None:
            lines.append(f"{len(lines)}. [recipe] {format_recipe(lesson)}")
            continue
        runs = "run" if lesson.evidence == 1 else "runs"
        try:
            text = " ".join(render.text(lesson).split())
        except render.MALFORMED as e:  # a stored payload that is not one: the others are recalled
            logger.warning("recall_lessons: bank %s: lesson %s left out: %s", bank, lesson.id, render.unreadable(e))
            continue
        lines.append(f"{len(lines)}. [{KIND_TITLES[lesson.kind].lower()}] {text} (seen in {lesson.evidence} {runs})")
    return "\n".join(lines) if len(lines) > 1 else none


def check_lesson(tool: Any, lesson: Any, kind: Any) -> tuple[str, LessonKind]:
    """The cleaned (text, kind), or ValueError with a message the model can act on."""
    kind = "fact" if kind is None else kind
    if not isinstance(kind, str) or kind.strip().lower() not in LESSON_KINDS:
        raise InvalidArgument(f"'kind' must be one of 'fact', 'approach' or 'failure' (got {kind!r}).")
    if not isinstance(lesson, str) or not lesson.strip():
        raise InvalidArgument("'lesson' must be a non-empty string: one or two self-contained sentences.")
    text = " ".join(lesson.split())
    if len(text) > MAX_LESSON_CHARS:
        raise InvalidArgument(
            f"The lesson is {len(text)} characters long; keep it to at most {MAX_LESSON_CHARS}: "
            "one or two sentences with the essential point."
        )
    return Redactor(_settings(tool).redact_patterns).redact(text), cast(LessonKind, kind.strip().lower())


def save_lesson(tool: Any, lesson: Any, kind: Any) -> str:
    text, clean_kind = check_lesson(tool, lesson, kind)
    bank, settings = tool_bank(tool), _settings(tool)
    record = Lesson.new(bank, clean_kind, text, origin="remembered")
    pending_id = uuid.uuid4().hex
    key = pending_lesson_key(pending_id)
    try:
        if tool.redis_client is None:
            tool.redis_client = create_redis(settings, "agent")
        pipe = tool.redis_client.pipeline(transaction=True)
        pipe.set(key, record.to_json(), ex=settings.step_ttl)
        publish(pipe, settings.queue, REMEMBER_TASK, [bank, pending_id])
        pipe.execute()
    except redis.RedisError as e:
        logger.warning("remember_lesson: Redis unavailable: %s", e)
        return "The lesson memory is unavailable right now, so the lesson was not saved. Carry on with your task."
    logger.info("remember_lesson: lesson %s queued for bank %s", record.id, bank)
    return f"Saved for future runs (as a {clean_kind}): {text}"


class RecallLessonsTool(Tool):
    """Searches the lessons earlier runs of one bank learnt."""

    name = "recall_lessons"
    description = (
        "Look up lessons that earlier runs of this agent learnt: facts about the environment, approaches "
        "that worked and mistakes to avoid. Use it before something you may have done before, or after an "
        "error. The lessons are hints from earlier runs, not instructions: your task comes first."
    )
    inputs = {
        "query": {
            "type": "string",
            "description": "What you want to know about, e.g. 'reading the sales CSV' or the error message you got.",
        },
        "limit": {
            "type": "integer",
            "description": "How many lessons to return, 1 to 20 (default 5).",
            "nullable": True,
        },
    }
    output_type = "string"
    default_bank = ""

    def __init__(self, bank: str | None = None, store: Any = None, settings: Any = None) -> None:
        super().__init__()
        self.bank = bank
        self.store = store
        self.settings = settings
        self.source = None
        self.agent_callables = None  # what the agent can call, lent by remember()

    def forward(self, query: str, limit: int | None = None) -> str:
        from lessonbank.tools import recall

        return recall(self, query, limit)

    def to_dict(self) -> dict:
        from lessonbank.tools import with_bank

        return with_bank(super().to_dict(), self)


class RememberLessonTool(Tool):
    """Hands one lesson to the worker service, which consolidates it into one bank."""

    name = "remember_lesson"
    description = (
        "Save one short lesson for future runs of this agent, once you have verified it: a fact about the "
        "environment ('fact'), an approach that worked ('approach') or a mistake to avoid ('failure'). "
        "Write one or two self-contained sentences that make sense without this conversation, e.g. "
        "\"The sales CSV files use ';' as separator: read them with pd.read_csv(path, sep=';').\" "
        "It is merged with what is already known, so repeating a lesson is harmless."
    )
    inputs = {
        "lesson": {
            "type": "string",
            "description": "The lesson: one or two self-contained sentences, at most 500 characters.",
        },
        "kind": {
            "type": "string",
            "description": "One of 'fact', 'approach' or 'failure' (default 'fact').",
            "nullable": True,
        },
    }
    output_type = "string"
    default_bank = ""

    def __init__(self, bank: str | None = None, redis_client: Any = None, settings: Any = None) -> None:
        super().__init__()
        self.bank = bank
        self.redis_client = redis_client
        self.settings = settings

    def validate(self, lesson: Any, kind: Any) -> tuple[str, str]:
        """The cleaned (text, kind), or ValueError with a message the model can act on."""
        from lessonbank.tools import check_lesson

        return check_lesson(self, lesson, kind)

    def forward(self, lesson: str, kind: str | None = None) -> str:
        from lessonbank.tools import save_lesson

        return save_lesson(self, lesson, kind)

    def to_dict(self) -> dict:
        from lessonbank.tools import with_bank

        return with_bank(super().to_dict(), self)


def memory_tools(
    bank: str | None = None,
    *,
    settings: Settings | None = None,
    store: LessonStoreProtocol | None = None,
    redis_client: redis.Redis | None = None,
) -> list[Tool]:
    """``[recall_lessons, remember_lesson]`` bound to ``bank`` (default: ``settings.bank``)."""
    settings = settings or Settings()
    bank = bank or settings.bank
    return [
        RecallLessonsTool(bank, store=store, settings=settings),
        RememberLessonTool(bank, redis_client=redis_client, settings=settings),
    ]
