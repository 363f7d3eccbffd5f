"""Memory tools for smolagents agents (``recall_lessons``, ``remember_lesson``) and where the agent process
reads lessons from (``LessonSource``).

The tools follow smolagents' conventions for tools that can be saved and shared: class attributes are
literals, ``__init__`` takes only arguments with literal defaults, and each method imports what it uses,
so ``tool.to_dict()``, ``agent.save()`` and ``push_to_hub`` work. The bank is kept in the saved code
(``default_bank``); the settings are read from the environment when the tool is called (unless given),
and the store and Redis client are made on first use, never captured.

``recall_lessons`` searches the bank's active lessons (hybrid search, relevance floor on the dense
similarity). ``remember_lesson`` hands a lesson to the worker service, which consolidates it with
the bank's lessons exactly as it does distilled ones: the lesson (redacted, as ``Lesson`` JSON) is
parked in Redis at ``pending_lesson_key(id)`` with a TTL, and the task ``REMEMBER_TASK`` is published by
name with ``[bank, pending_id]``, in the same Redis transaction. Nothing here imports the worker code.

``LessonSource``: with a Qdrant server, straight to it; otherwise through the worker that owns the
embedded store. When no worker answers, it says so once, plainly (what to start), reads the embedded
store itself while no other process holds it, and does not wait for the absent owner again for
``RECHECK_SECONDS`` (at once when a worker announces itself, ``STORE_OWNER_KEY``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import redis
from smolagents import Tool

from lessonbank.core.connections import create_redis
from lessonbank.core.constants import REMEMBER_TASK, STORE_OWNER_KEY, pending_lesson_key
from lessonbank.core.exceptions import ServiceUnavailable
from lessonbank.core.instructions import KIND_TITLES, STORE_ERRORS, eligible, format_recipe
from lessonbank.core.models import LESSON_KINDS, Lesson, LessonKind
from lessonbank.core.publish import publish
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.protocol import LessonStoreProtocol

logger = logging.getLogger(__name__)

T = TypeVar("T")
MAX_LESSON_CHARS = 500
DEFAULT_RECALL_LIMIT = 5
MAX_RECALL_LIMIT = 20
RECHECK_SECONDS = 60.0


# -- where lessons are read from ---------------------------------------------------------------------

@dataclass
class OwnerState:
    """What this process knows about the owner of one embedded store."""

    absent_until: float = 0.0  # monotonic time until which the owner counts as absent (0: not known absent)
    seen: bytes | None = None  # the owner announced when it was found absent
    told_local: bool = False
    told_held: bool = False


_owners: dict[tuple[str, str], OwnerState] = {}
_owners_lock = threading.Lock()


def owner_state(settings: Settings) -> OwnerState:
    with _owners_lock:
        return _owners.setdefault((settings.redis_url, str(settings.resolved_qdrant_path)), OwnerState())


class LessonSource:
    """The lesson store as the agent process reaches it (see the module docstring); ``store`` overrides all."""

    def __init__(self, settings: Settings, store: LessonStoreProtocol | None = None,
                 redis_client: redis.Redis | None = None) -> None:
        self.settings = settings
        self._given = store
        self._store: LessonStoreProtocol | None = None
        self._redis = redis_client

    def read(self, use: Callable[[LessonStoreProtocol], T]) -> T:
        """``use(store)``; raises ServiceUnavailable (or the store's error) when no store can be read."""
        if self._given is not None:
            return use(self._given)
        if self.settings.qdrant_url:
            return use(self._connected())
        state = owner_state(self.settings)
        if self._worth_asking(state):
            try:
                result = use(self._connected())
            except ServiceUnavailable:
                state.absent_until = time.monotonic() + RECHECK_SECONDS
                state.seen = self._announced()
            else:
                if state.absent_until:
                    logger.info("a worker answers for the lesson store again")
                state.absent_until = 0.0
                return result
        return self._read_locally(use, state)

    def unavailable(self, error: Exception) -> None:
        """Log that a run gets no lessons: a warning for a store the caller chose (once said plainly otherwise)."""
        if self._given is not None or self.settings.qdrant_url:
            logger.warning("lesson store unavailable, no lessons for this run: %s", error)
        else:
            logger.info("no lessons for this run: %s", error)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def _connected(self) -> LessonStoreProtocol:
        if self._store is None:
            from lessonbank.core.store.remote import connect_store

            self._store = connect_store(self.settings, self._redis)
        return self._store

    def _announced(self) -> bytes | None:
        try:
            if self._redis is None:
                self._redis = create_redis(self.settings, "agent")
            value = self._redis.get(STORE_OWNER_KEY)
        except redis.RedisError:
            return None
        return value if isinstance(value, bytes) else None

    def _worth_asking(self, state: OwnerState) -> bool:
        if not state.absent_until or time.monotonic() >= state.absent_until:
            return True
        announced = self._announced()
        return announced is not None and announced != state.seen  # a worker came up since

    def _read_locally(self, use: Callable[[LessonStoreProtocol], T], state: OwnerState) -> T:
        from lessonbank.core.store.owner import open_local_store

        path, wait = self.settings.resolved_qdrant_path, self.settings.store_timeout
        start = ("Start a worker with the same LESSONBANK_REDIS_URL and LESSONBANK_DATA_DIR: `lessonbank worker` (or "
                 "`celery -A lessonbank.workers worker`); or set LESSONBANK_QDRANT_URL to a Qdrant server.")
        if not path.is_dir() or not any(path.iterdir()):
            self._tell(state, "told_local", "lessonbank: no worker answered for the lesson store at %s within %gs: "
                       "runs are recorded, but nothing distills them into lessons. %s", path, wait, start)
            raise ServiceUnavailable(f"no worker answered for the lesson store at {path}, which holds no lessons yet")
        try:
            store = open_local_store(self.settings)
        except ServiceUnavailable:
            self._tell(state, "told_held", "lessonbank: the lesson store at %s is held by a process that did not "
                       "answer within %gs, so runs start without lessons. Check the worker (`lessonbank status`), or "
                       "set LESSONBANK_QDRANT_URL to a Qdrant server.", path, wait)
            raise ServiceUnavailable(f"no worker answered for the lesson store at {path}, and it is held") from None
        self._tell(state, "told_local", "lessonbank: no worker answered for the lesson store at %s within %gs, so "
                   "this process reads the lessons from it directly, and no new lessons are learnt. %s", path, wait,
                   start)
        try:
            return use(store)
        finally:
            store.close()  # the path stays free for a worker that starts later

    @staticmethod
    def _tell(state: OwnerState, flag: str, message: str, *args: Any) -> None:
        """Say ``message`` once per store and kind (a warning: shown even when logging is not configured)."""
        if not getattr(state, flag):
            setattr(state, flag, True)
            logger.warning(message, *args)


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
        raise ValueError("recall_lessons needs a non-empty 'query' string describing what you want to know.")
    if limit is None:
        limit = DEFAULT_RECALL_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RECALL_LIMIT:
        raise ValueError(f"'limit' must be a whole number from 1 to {MAX_RECALL_LIMIT} (got {limit!r}).")
    bank, settings = tool_bank(tool), _settings(tool)
    if tool.source is None:
        tool.source = LessonSource(settings, store=tool.store)
    try:
        found = tool.source.read(lambda store: store.search(bank, query.strip(), limit=limit,
                                                            min_similarity=settings.min_relevance))
    except STORE_ERRORS as e:
        logger.warning("recall_lessons: lesson store unavailable: %s", e)
        return "The lesson memory is unavailable right now, so no lessons can be recalled. Carry on without it."
    lessons = [lesson for lesson, _ in found if lesson.bank == bank and eligible(lesson)]
    if not lessons:
        return f"No lessons about {query.strip()!r} yet. Carry on with your own approach."
    lines = [f"Lessons from earlier runs about {query.strip()!r} (hints, not instructions):"]
    for i, lesson in enumerate(lessons, 1):
        if lesson.recipe is not None:
            lines.append(f"{i}. [recipe] {format_recipe(lesson)}")
            continue
        runs = "run" if lesson.evidence == 1 else "runs"
        text = " ".join(lesson.text.split())
        lines.append(f"{i}. [{KIND_TITLES[lesson.kind].lower()}] {text} (seen in {lesson.evidence} {runs})")
    return "\n".join(lines)


def check_lesson(tool: Any, lesson: Any, kind: Any) -> tuple[str, LessonKind]:
    """The cleaned (text, kind), or ValueError with a message the model can act on."""
    kind = "fact" if kind is None else kind
    if not isinstance(kind, str) or kind.strip().lower() not in LESSON_KINDS:
        raise ValueError(f"'kind' must be one of 'fact', 'approach' or 'failure' (got {kind!r}).")
    if not isinstance(lesson, str) or not lesson.strip():
        raise ValueError("'lesson' must be a non-empty string: one or two self-contained sentences.")
    text = " ".join(lesson.split())
    if len(text) > MAX_LESSON_CHARS:
        raise ValueError(
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
