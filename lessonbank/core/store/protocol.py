"""The one description of the lesson store. ``LessonStore`` (qdrant-client, for a Qdrant server) and
``EdgeLessonStore`` (the embedded Qdrant Edge shard) implement it; the proxy that forwards calls to the
embedded store's owner (``remote.RemoteLessonStore``) is derived from it.

Every method but ``ensure_collection``, ``banks``, ``warm`` and ``close`` names exactly one bank.
Arguments and results are plain data or ``Lesson`` models, so a call can cross a process boundary as JSON.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, runtime_checkable

from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing only on Python >= 3.12

from lessonbank.core.models import Lesson, LessonStatus, StatusCause

if TYPE_CHECKING:
    from pydantic import TypeAdapter


@runtime_checkable
class LessonStoreProtocol(Protocol):
    """What every lesson store does."""

    def ensure_collection(self) -> None:
        """Create the collection and its indexes if missing (idempotent)."""
        ...

    def upsert(self, lessons: builtins.list[Lesson]) -> None:
        """Write lessons (point id = lesson id, so repeating a write never duplicates)."""
        ...

    def get(self, bank: str, lesson_ids: builtins.list[str]) -> builtins.list[Lesson]:
        """The lessons of ``bank`` with these ids (any status), in the order asked; others are left out."""
        ...

    def similar(self, bank: str, text: str, limit: int = 5,
                statuses: builtins.list[LessonStatus] | None = None) -> builtins.list[tuple[Lesson, float]]:
        """Lessons of ``bank`` by dense cosine similarity to ``text``, best first: the active ones, or those
        whose status is one of ``statuses``."""
        ...

    def search(
        self,
        bank: str,
        query: str,
        limit: int = 8,
        kinds: builtins.list[str] | None = None,
        min_similarity: float | None = None,
    ) -> builtins.list[tuple[Lesson, float]]:
        """Hybrid search (dense + lexical, fused) of the active lessons of ``bank``."""
        ...

    def rank(
        self, bank: str, query: str, limit: int = 8, min_similarity: float | None = None
    ) -> builtins.list[tuple[Lesson, float, int | None]]:
        """Active lessons of ``bank`` relevant to ``query``: (lesson, dense cosine similarity, rank in the
        hybrid dense + lexical search or None), most similar first. What the instructions builder needs,
        from one embedding of ``query``."""
        ...

    def list(self, bank: str, limit: int = 100, include_inactive: bool = False) -> builtins.list[Lesson]:
        """Lessons of ``bank``, most recently seen first (active only unless ``include_inactive``)."""
        ...

    def banks(self, status: LessonStatus = "active") -> dict[str, int]:
        """Lesson count per bank, of the lessons with ``status`` (active ones unless said)."""
        ...

    def set_status(
        self, bank: str, lesson_ids: builtins.list[str], status: str, superseded_by: str | None = None,
        reason: str = "", cause: StatusCause | None = None, cause_run: str = "",
    ) -> int:
        """Set the status of those lessons of ``bank`` (with why: in words, ``reason``; its cause and the run it
        names, ``cause`` and ``cause_run``); returns how many were changed."""
        ...

    def set_counts(self, bank: str, counts: dict[str, dict[str, int]]) -> int:
        """Set the given/applied/helpful/harmful counts of those lessons of ``bank``; returns how many."""
        ...

    def delete(self, bank: str, lesson_ids: builtins.list[str]) -> int:
        """Remove those lessons of ``bank`` from the store for good; returns how many were removed."""
        ...

    def delete_bank(self, bank: str) -> int:
        """Remove every lesson of ``bank`` for good; returns how many were removed."""
        ...

    def warm(self, texts: builtins.list[str]) -> int:
        """Embed these texts in one batch, so the calls that name them next (``similar``, ``search``,
        ``rank``, ``upsert``) find their vectors ready; returns how many were not ready yet."""
        ...

    def close(self) -> None:
        """Release what the store holds (a client, a file lock)."""
        ...


# The methods that can be called across processes (``close`` is local to each side).
REMOTE_METHODS: tuple[str, ...] = tuple(
    name for name, member in vars(LessonStoreProtocol).items()
    if inspect.isfunction(member) and not name.startswith("_") and name != "close"
)


# What an agent process may ask of the store: reads (and embedding texts ahead of them). Everything else writes or
# deletes, and goes to the embedded store's owner on a queue the agents' Redis user cannot push to.
READ_METHODS: frozenset[str] = frozenset({"get", "similar", "search", "rank", "list", "banks", "warm"})


def method_signature(name: str) -> inspect.Signature:
    """The protocol's signature of ``name`` (without ``self``), annotations resolved."""
    function: Callable[..., Any] = getattr(LessonStoreProtocol, name)
    hints = typing.get_type_hints(function)
    signature = inspect.signature(function)
    parameters = [
        parameter.replace(annotation=hints.get(parameter.name, Any))
        for parameter in list(signature.parameters.values())[1:]
    ]
    return signature.replace(parameters=parameters, return_annotation=hints.get("return", Any))


class RemoteError(TypedDict):
    type: str
    message: str


class ErrorReply(TypedDict):
    ok: Literal[False]
    error: RemoteError


class WireCodec:
    """Arguments and replies of one protocol method as JSON, and back (pydantic adapters built from the
    protocol's own annotations, so the wire format cannot drift from the signatures). A reply is serialised
    and validated by pydantic-core in one pass each; each side builds only the adapters it uses."""

    def __init__(self, name: str) -> None:
        from pydantic import TypeAdapter

        self.name = name
        self.signature = method_signature(name)
        self._params = {p.name: TypeAdapter(p.annotation) for p in self.signature.parameters.values()}

    @functools.cached_property
    def _result(self) -> Any:
        """``{"ok": true, "result": <the method's return type>}``: the type is known only here, so the
        functional form takes it as a value."""
        return TypedDict(  # type: ignore[misc,operator]  # noqa: UP013
            f"{self.name}_result", {"ok": Literal[True], "result": self.signature.return_annotation})

    @functools.cached_property
    def _reply(self) -> TypeAdapter[Any]:
        from pydantic import TypeAdapter

        return TypeAdapter(self._result)

    @functools.cached_property
    def _replies(self) -> TypeAdapter[Any]:
        from pydantic import Field, TypeAdapter

        replies: Any = Annotated[self._result | ErrorReply, Field(discriminator="ok")]
        return TypeAdapter(replies)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Call arguments as a JSON-ready dict by parameter name; TypeError as a direct call would raise."""
        bound = self.signature.bind(*args, **kwargs)
        return {name: self._params[name].dump_python(value, mode="json") for name, value in bound.arguments.items()}

    def load_args(self, data: dict[str, Any]) -> dict[str, Any]:
        """Validated call arguments from the wire; TypeError or pydantic's ValidationError when they do not fit."""
        unknown = set(data) - set(self._params)
        if unknown:
            raise TypeError(f"{self.name}() got unexpected arguments {sorted(unknown)}")
        return {name: self._params[name].validate_python(value) for name, value in data.items()}

    def dump_reply(self, value: Any) -> bytes:
        """The JSON reply ``{"ok": true, "result": <value>}``, serialised in one pass (pydantic-core)."""
        return self._reply.dump_json({"ok": True, "result": value})

    def load_reply(self, raw: bytes | str) -> dict[str, Any]:
        """A JSON reply parsed and, when it is a result, validated in one pass: ``{"ok": True, "result": ...}``
        or ``{"ok": False, "error": {...}}``; pydantic's ValidationError when it is neither."""
        return dict(self._replies.validate_json(raw))


CODECS: dict[str, WireCodec] = {}


def codec(name: str) -> WireCodec:
    """The (cached) codec of remote method ``name``; KeyError for a name that is not a remote method."""
    if name not in REMOTE_METHODS:
        raise KeyError(name)
    if name not in CODECS:
        CODECS[name] = WireCodec(name)
    return CODECS[name]
