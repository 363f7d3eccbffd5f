"""One store protocol: both stores (qdrant-client, the embedded Qdrant Edge shard) implement it, the remote
proxy is derived from it."""

from __future__ import annotations

import inspect
import json

import pytest
from pydantic import ValidationError

from lessonbank.core.models import Lesson
from lessonbank.core.settings import Settings
from lessonbank.core.store.edge import EdgeLessonStore
from lessonbank.core.store.protocol import REMOTE_METHODS, LessonStoreProtocol, codec, method_signature
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.core.store.remote import RemoteLessonStore


def public_methods(cls: type) -> set[str]:
    return {name for name, member in vars(cls).items() if callable(member) and not name.startswith("_")}


def test_every_protocol_method_is_implemented_with_the_same_signature() -> None:
    protocol = public_methods(LessonStoreProtocol)
    assert set(REMOTE_METHODS) == protocol - {"close"}
    for name in protocol:
        expected = inspect.signature(getattr(LessonStoreProtocol, name))
        assert str(inspect.signature(getattr(LessonStore, name))) == str(expected), name
        assert str(inspect.signature(getattr(EdgeLessonStore, name))) == str(expected), name
        assert str(inspect.signature(getattr(RemoteLessonStore, name))) == str(expected), name


def test_instances_satisfy_the_runtime_protocol() -> None:
    remote = RemoteLessonStore(Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0"))
    assert isinstance(remote, LessonStoreProtocol)
    assert LessonStore.__init__ is not None and issubclass(LessonStore, LessonStoreProtocol)
    assert issubclass(EdgeLessonStore, LessonStoreProtocol)


def test_the_codec_binds_like_a_direct_call() -> None:
    wire = codec("search")
    assert wire.bind(("b", "q"), {"limit": 3}) == {"bank": "b", "query": "q", "limit": 3}
    with pytest.raises(TypeError):
        wire.bind(("b",), {"nope": 1})
    with pytest.raises(TypeError):
        wire.load_args({"bank": "b", "query": "q", "evil": 1})
    assert method_signature("get").return_annotation is not inspect.Signature.empty
    with pytest.raises(KeyError):
        codec("close")


def test_a_reply_crosses_as_json_and_comes_back_as_the_method_result() -> None:
    lesson = Lesson.new("b", "fact", "The export is semicolon separated.")
    wire = codec("rank")
    raw = wire.dump_reply([(lesson, 0.75, 2), (lesson, 0.5, None)])
    assert json.loads(raw) == {"ok": True, "result": [[lesson.model_dump(mode="json"), 0.75, 2],
                                                      [lesson.model_dump(mode="json"), 0.5, None]]}
    assert wire.load_reply(raw) == {"ok": True, "result": [(lesson, 0.75, 2), (lesson, 0.5, None)]}
    error = {"ok": False, "error": {"type": "StoreError", "message": "the store is closed"}}
    assert wire.load_reply(json.dumps(error)) == error
    with pytest.raises(ValidationError):
        wire.load_reply(b'{"ok": true, "result": "not a list"}')
    assert codec("upsert").dump_reply(None) == b'{"ok":true,"result":null}'
