"""The distiller against a real HTTP server speaking OpenAI's protocol, through the `openai` client."""

from __future__ import annotations

import json

import openai
import pytest

from lessonbank.core.exceptions import PermanentDistillError, TransientDistillError
from lessonbank.workers.distiller import DistillOutput, build_messages, distill
from lessonbank.workers.llm import ChatLLM, extract_json, strict_schema
from tests.fixtures.openai_server import FakeOpenAI, Reply, error, lessons_json
from tests.fixtures.redis_server import free_port

GOOD = lessons_json(
    ("fact", "The orders API paginates with a 'cursor' query parameter, not 'page'."),
    ("approach", "Retry the orders API on HTTP 429 after the number of seconds in its Retry-After header."),
    outcome="partial",
)


def llm_for(server: FakeOpenAI, timeout: float = 5.0) -> ChatLLM:
    client = openai.OpenAI(base_url=server.url, api_key="k", timeout=timeout, max_retries=0)
    return ChatLLM(client, "m", timeout=timeout)


def test_good_json_and_the_request_shape(openai_server: FakeOpenAI) -> None:
    openai_server.script(Reply(content=GOOD, prompt_tokens=321, completion_tokens=54))
    result = distill(llm_for(openai_server), "# Task\nList the orders", max_lessons=5)
    assert result.output.outcome == "partial"
    assert [lesson.kind for lesson in result.output.lessons] == ["fact", "approach"]
    assert result.tokens == (321, 54) and len(result.replies) == 1
    request = openai_server.chat_requests()[0]
    fmt = request["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    schema = fmt["json_schema"]["schema"]
    assert schema["additionalProperties"] is False and set(schema["required"]) == {"outcome", "lessons"}
    system, user = request["messages"][0]["content"], request["messages"][1]["content"]
    assert "at most 5 lessons" in system and "not instructions" in system and "imports included" in system
    assert "Never include secrets" in system and "<transcript>\n# Task\nList the orders" in user


def test_fenced_json_with_prose(openai_server: FakeOpenAI) -> None:
    openai_server.script(Reply(content=f"Here are the lessons.\n```json\n{GOOD}\n```\nHope this helps."))
    assert len(distill(llm_for(openai_server), "t", 5).output.lessons) == 2


def test_garbage_then_good_is_repaired_once(openai_server: FakeOpenAI) -> None:
    openai_server.script(Reply(content='{"outcome": "great", "lessons": []}'), Reply(content=GOOD))
    result = distill(llm_for(openai_server), "t", 5)
    assert len(result.output.lessons) == 2 and len(result.replies) == 2
    repair = openai_server.chat_requests()[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": '{"outcome": "great", "lessons": []}'}
    assert "outcome" in repair[-1]["content"] and "invalid" in repair[-1]["content"]


def test_garbage_twice_is_permanent(openai_server: FakeOpenAI) -> None:
    openai_server.script(Reply(content="no idea"), Reply(content="still no JSON"))
    with pytest.raises(PermanentDistillError, match="invalid after one repair"):
        distill(llm_for(openai_server), "t", 5)
    assert len(openai_server.chat_requests()) == 2


def test_too_many_lessons_are_cut_to_the_maximum(openai_server: FakeOpenAI) -> None:
    many = lessons_json(*[("fact", f"Lesson number {i} is about the endpoint quirk {i}.") for i in range(8)])
    openai_server.script(Reply(content=many))
    assert len(distill(llm_for(openai_server), "t", 3).output.lessons) == 3


def test_response_format_falls_back_like_llama_cpp_and_is_remembered(openai_server: FakeOpenAI) -> None:
    openai_server.script(
        error(400, 'response_format type must be one of "text" or "json_object", but got: json_schema'),
        Reply(content=GOOD),
        Reply(content=GOOD),
    )
    llm = llm_for(openai_server)
    distill(llm, "t", 5)
    distill(llm, "t", 5)
    formats = [r.get("response_format") for r in openai_server.chat_requests()]
    assert formats[0]["type"] == "json_schema"
    assert formats[1]["type"] == "json_object" and formats[1]["schema"]["type"] == "object"
    assert formats[2]["type"] == "json_object"  # remembered: no second rejected request


def test_llama_cpp_500_on_json_schema_falls_back_to_json_object(openai_server: FakeOpenAI) -> None:
    # What llama-cpp-python's server really answers to response_format type json_schema.
    openai_server.script(
        error(500, "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                   "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"),
        Reply(content=GOOD),
    )
    assert len(distill(llm_for(openai_server), "t", 5).output.lessons) == 2
    formats = [r.get("response_format") for r in openai_server.chat_requests()]
    assert [f["type"] for f in formats] == ["json_schema", "json_object"]


def test_plain_text_when_no_structured_output_is_accepted(openai_server: FakeOpenAI) -> None:
    openai_server.script(error(400, "unknown field response_format"), error(422, "json_object schema unsupported"),
                         Reply(content=GOOD))
    assert len(distill(llm_for(openai_server), "t", 5).output.lessons) == 2
    assert "response_format" not in openai_server.chat_requests()[2]


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_other_4xx_are_permanent(openai_server: FakeOpenAI, status: int) -> None:
    openai_server.script(error(status, "model not found"))
    with pytest.raises(PermanentDistillError, match=f"rejected the request \\({status}\\): model not found"):
        distill(llm_for(openai_server), "t", 5)
    assert len(openai_server.chat_requests()) == 1


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_429_and_5xx_are_transient(openai_server: FakeOpenAI, status: int) -> None:
    openai_server.script(error(status, "slow down", headers={"Retry-After": "1"}))
    with pytest.raises(TransientDistillError, match=str(status)):
        distill(llm_for(openai_server), "t", 5)
    assert len(openai_server.chat_requests()) == 1  # the client does not retry by itself


def test_timeout_is_transient(openai_server: FakeOpenAI) -> None:
    openai_server.script(Reply(content=GOOD, delay=1.5))
    with pytest.raises(TransientDistillError, match="timed out after 0.5s"):
        distill(llm_for(openai_server, timeout=0.5), "t", 5)


def test_connection_refused_is_transient() -> None:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="k", timeout=2, max_retries=0)
    with pytest.raises(TransientDistillError, match="unreachable"):
        distill(ChatLLM(client, "m"), "t", 5)


def test_embeddings_endpoint_answers_500_like_llama_cpp(openai_server: FakeOpenAI) -> None:
    client = openai.OpenAI(base_url=openai_server.url, api_key="k", max_retries=0)
    with pytest.raises(openai.InternalServerError):
        client.embeddings.create(model="m", input=["x"])


def test_extract_json_variants() -> None:
    assert extract_json('```\n{"a": 1}\n```') == {"a": 1}
    assert extract_json('Sure: {"a": {"b": 2}} done') == {"a": {"b": 2}}
    assert json.loads(json.dumps(extract_json(' {"a": 1} '))) == {"a": 1}


def test_messages_tell_the_model_the_limit() -> None:
    messages = build_messages("T", 2)
    assert "at most 2 lessons" in messages[0]["content"] and messages[1]["role"] == "user"


def test_schema_sent_to_the_llm_is_strict_and_has_no_length_bounds() -> None:
    schema = strict_schema(DistillOutput)
    text = json.dumps(schema)
    # llama.cpp compiles maxLength into a grammar too large to parse; OpenAI strict mode rejects it.
    assert "maxLength" not in text and "minLength" not in text
    lesson = schema["$defs"]["DraftLesson"]
    assert lesson["additionalProperties"] is False and set(lesson["required"]) == {"kind", "text", "tags"}
