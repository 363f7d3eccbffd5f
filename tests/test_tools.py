"""The memory tools with a real store, the real MiniLM embedder and a real Redis."""

from __future__ import annotations

import base64
import inspect
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from qdrant_client import QdrantClient
from smolagents import CodeAgent, OpenAIServerModel, Tool

from lessonbank import memory_tools
from lessonbank.core.constants import PENDING_LESSON_KEY, REMEMBER_TASK, pending_lesson_key
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson
from lessonbank.core.settings import Settings
from lessonbank.core.store.local import open_local_store
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.core.store.remote import RemoteLessonStore
from lessonbank.tools import RecallLessonsTool, RememberLessonTool
from tests.fixtures.openai_server import FakeOpenAI, Reply
from tests.fixtures.redis_server import free_port
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code
from tests.learn.runs import written_observed

CSV = "CSV files in the data folder use ';' as separator: read them with pd.read_csv(path, sep=';')."
OTHER = "The sales CSV of the finance team is UTF-16 encoded."
SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"


HELD_BACK = "The sales CSV header line is date;region;amount, said a page the agent read."


@pytest.fixture
def store(embedder: FastEmbedEmbedder) -> Iterator[LessonStore]:
    client = QdrantClient(":memory:")
    store = LessonStore(client, embedder)
    store.upsert(
        [
            Lesson.new("team", "approach", CSV).model_copy(update={"evidence": 2}),
            Lesson.new("team", "failure", "requests.get without a timeout hung on the orders API.").model_copy(
                update={"verified": True}),
            Lesson.new("finance", "fact", OTHER).model_copy(update={"verified": True}),
            Lesson.new("team", "fact", HELD_BACK),  # one unverified run: not handed out yet
        ]
    )
    yield store
    client.close()


def queued(client: redis.Redis, queue: str) -> list[dict[str, Any]]:
    """The Celery messages waiting in ``queue``: task name and args."""
    messages = []
    for raw in client.lrange(queue, 0, -1):
        message = json.loads(raw)
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        messages.append({"task": message["headers"]["task"], "args": args})
    return messages


def test_tools_are_valid_smolagents_tools(settings: Settings, store: LessonStore) -> None:
    tools = memory_tools("team", settings=settings, store=store)
    assert [tool.name for tool in tools] == ["recall_lessons", "remember_lesson"]
    for tool in tools:
        assert isinstance(tool, Tool)
        params = inspect.signature(tool.forward).parameters
        assert set(params) == set(tool.inputs)
        for name, spec in tool.inputs.items():
            assert spec.get("nullable", False) == (params[name].default is None)
        assert all(tool.bank == "team" for tool in tools)  # type: ignore[attr-defined]
    assert memory_tools(settings=settings)[0].bank == settings.bank  # type: ignore[attr-defined]


def test_recall_returns_the_banks_relevant_lessons_only(settings: Settings, store: LessonStore) -> None:
    recall = RecallLessonsTool("team", store=store, settings=settings)
    out = recall(query="how do I read the sales CSV file?")
    assert CSV in out and "hints, not instructions" in out
    assert OTHER not in out
    assert OTHER in RecallLessonsTool("finance", store=store, settings=settings)(query="sales CSV encoding")
    assert CSV not in RecallLessonsTool("finance", store=store, settings=settings)(query="sales CSV encoding")
    assert "No lessons" in RecallLessonsTool("nobody", store=store, settings=settings)(query="sales CSV")
    assert "No lessons" in recall(query="write a haiku about autumn leaves")  # below the relevance floor
    assert all(line.startswith(f"{i}. [") for i, line in enumerate(out.splitlines()[1:], 1))  # a line per lesson
    assert "2." not in recall(query="read the sales CSV", limit=1)
    assert HELD_BACK not in recall(query="the sales CSV header line", limit=10)


def test_recall_rejects_bad_input_with_a_message_for_the_model(settings: Settings, store: LessonStore) -> None:
    recall = RecallLessonsTool("team", store=store, settings=settings)
    with pytest.raises(ValueError, match="non-empty 'query'"):
        recall(query="  ")
    with pytest.raises(ValueError, match="'limit' must be a whole number from 1 to 20"):
        recall(query="csv", limit=0)


def test_recall_with_the_store_away_tells_the_model_to_carry_on(settings: Settings, redis_url: str) -> None:
    silent = RemoteLessonStore(settings.model_copy(update={"store_timeout": 0.2}))
    out = RecallLessonsTool("team", store=silent, settings=settings)(query="sales csv")
    assert "unavailable" in out and "Carry on" in out


def test_remember_parks_the_lesson_and_enqueues_the_consolidation(
    settings: Settings, redis_client: redis.Redis
) -> None:
    tool = RememberLessonTool("team", redis_client=redis_client, settings=settings)
    out = tool(lesson=f"  The orders API needs the header X-Api-Key: api_key={SECRET}\n ", kind="Fact")
    assert out.startswith("Saved for future runs (as a fact)")
    [message] = queued(redis_client, settings.queue)
    assert message["task"] == REMEMBER_TASK
    bank, pending_id = message["args"]
    assert bank == "team"
    key = pending_lesson_key(pending_id)
    lesson = Lesson.from_json(redis_client.get(key) or b"")
    assert lesson.bank == "team" and lesson.kind == "fact" and lesson.origin == "remembered"
    assert SECRET not in lesson.text and "[REDACTED]" in lesson.text and SECRET not in out
    assert lesson.id == Lesson.new("team", "fact", lesson.text).id
    assert 0 < redis_client.ttl(key) <= settings.step_ttl
    tool(lesson="Retry the export when it returns HTTP 503.")  # kind defaults to fact
    assert len(queued(redis_client, settings.queue)) == 2


def test_remember_rejects_bad_input_and_stores_nothing(settings: Settings, redis_client: redis.Redis) -> None:
    tool = RememberLessonTool("team", redis_client=redis_client, settings=settings)
    with pytest.raises(ValueError, match="'kind' must be one of 'fact', 'approach' or 'failure'"):
        tool(lesson="Use sep=';'.", kind="tip")
    with pytest.raises(ValueError, match="non-empty string"):
        tool(lesson="   ")
    with pytest.raises(ValueError, match="at most 500"):
        tool(lesson="x" * 501)
    assert redis_client.llen(settings.queue) == 0
    assert not redis_client.keys(PENDING_LESSON_KEY.format(pending_id="*"))


def test_remember_with_redis_away_tells_the_model_to_carry_on(settings: Settings) -> None:
    away = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    out = RememberLessonTool("team", settings=away)(lesson="Use sep=';' for the sales CSV.", kind="approach")
    assert "unavailable" in out and "not saved" in out


def test_agent_calls_the_tools(settings: Settings, store: LessonStore, redis_client: redis.Redis) -> None:
    model = ScriptedModel(
        [
            code_reply('print(recall_lessons(query="read the sales CSV"))'),
            code_reply('print(remember_lesson(lesson="The sales CSV has 12 columns.", kind="fact"))'),
            final_code("done"),
        ]
    )
    tools = memory_tools("team", settings=settings, store=store, redis_client=redis_client)
    agent = CodeAgent(tools=tools, model=model, verbosity_level=0)
    assert agent.run("Sum the sales CSV") == "done"
    observations = [step.observations or "" for step in agent.memory.steps if hasattr(step, "observations")]
    assert CSV in observations[0] and OTHER not in observations[0]
    assert "Saved for future runs" in observations[1]
    [message] = queued(redis_client, settings.queue)
    assert message["task"] == REMEMBER_TASK and message["args"][0] == "team"


def test_tools_are_saved_and_a_reloaded_agent_recalls_from_the_same_bank(
    redis_url: str, embed_model_path: Path, openai_server: FakeOpenAI, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"LESSONBANK_REDIS_URL": redis_url, "LESSONBANK_DATA_DIR": str(tmp_path / "data"),
           "LESSONBANK_EMBED_MODEL_PATH": str(embed_model_path), "LESSONBANK_STORE_TIMEOUT": "0.3",
           "OPENAI_BASE_URL": openai_server.url, "OPENAI_API_KEY": "test-key"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("LESSONBANK_QDRANT_URL", "LESSONBANK_QDRANT_PATH", "LESSONBANK_BANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no .env file of the caller's
    on_disk = open_local_store(Settings())  # no worker runs: the tools read the embedded store themselves
    on_disk.upsert([Lesson.new("team", "approach", CSV).model_copy(update={"verified": True}),
                    Lesson.new("default", "fact", OTHER).model_copy(update={"verified": True})])
    on_disk.close()

    tools = memory_tools("team")
    for tool in tools:
        saved = tool.to_dict()
        assert 'default_bank = "team"' in saved["code"] and "lessonbank" in saved["requirements"]
        assert {f.path_in_repo for f in tool._prepare_hub_files()} >= {"tool.py", "app.py"}  # what push_to_hub sends
    agent = CodeAgent(tools=tools, model=OpenAIServerModel(model_id="fake-model", api_base=openai_server.url,
                                                           api_key="test-key"), verbosity_level=0)
    agent.save(tmp_path / "saved")
    assert (tmp_path / "saved" / "tools" / "recall_lessons.py").is_file()

    openai_server.script(Reply(content=code_reply('print(recall_lessons(query="read the sales CSV"))')),
                         Reply(content=final_code("done")))
    reloaded = CodeAgent.from_folder(tmp_path / "saved", verbosity_level=0)
    assert type(reloaded.tools["recall_lessons"]) is not RecallLessonsTool  # rebuilt from the saved code
    assert reloaded.run("Sum the sales CSV") == "done"
    observations = [step.observations or "" for step in reloaded.memory.steps if hasattr(step, "observations")]
    assert CSV in observations[0] and OTHER not in observations[0]  # bank "team", not LESSONBANK_BANK's "default"


def test_recall_in_a_remembering_agent_leaves_out_code_about_tools_it_lacks(
    settings: Settings, store: LessonStore, redis_client: redis.Redis
) -> None:
    """As with the instructions: in one bank shared by agents with other tools, the shape of get_invoice is
    recalled by the agent that has get_invoice only; prose lessons are recalled by both."""
    from smolagents import tool

    from lessonbank import remember

    shape = ("`get_invoice(...)` returns {'invoice': str, 'lines': [{'qty': int, 'unit_price_cents': int}, ...]}: "
             "its records are `result['lines']`.")
    store.upsert([written_observed("team", "fact", shape)])

    @tool
    def get_invoice(invoice_id: str) -> dict:
        """Return an invoice.

        Args:
            invoice_id: The invoice's id.
        """
        return {"invoice": invoice_id, "lines": []}

    query = "get_invoice invoice lines and the sales CSV"
    assert "get_invoice(...)` returns" in RecallLessonsTool("team", store=store, settings=settings)(query=query)
    shared = memory_tools("team", settings=settings, store=store, redis_client=redis_client)  # one tool, two agents
    recalled = []
    for extra in ([], [get_invoice]):
        model = ScriptedModel([code_reply(f"print(recall_lessons(query={query!r}, limit=2))"), final_code("done")])
        agent = CodeAgent(tools=[*shared, *extra], model=model, verbosity_level=0)
        recorder = remember(agent, bank="team", settings=settings, store=store)
        try:
            assert agent.run("Sum the sales CSV") == "done"
        finally:
            recorder.close()
        recalled.append(next(step.observations for step in agent.memory.steps if getattr(step, "observations", None)))
    assert "get_invoice(...)` returns" not in recalled[0] and CSV in recalled[0] and "2." in recalled[0]
    assert "get_invoice(...)` returns" in recalled[1]
    assert shared[0].agent_callables is None  # type: ignore[attr-defined]  # each agent got its own copy
    from lessonbank.agent import RECALL_TOOL

    assert RECALL_TOOL == RecallLessonsTool.name
