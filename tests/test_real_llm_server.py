"""What the real local server (llama-cpp-python 0.3.x on Qwen2.5-Coder 0.5B) accepts and refuses.

These are the facts the distiller's fallbacks rely on: ``json_object`` with a ``schema`` is
grammar-constrained, ``json_schema`` is refused with a 500, and ``/v1/embeddings`` answers 500
unless the server was started for embeddings.
"""

from __future__ import annotations

import json
from typing import Literal

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from pydantic import BaseModel, ConfigDict

from lessonbank.workers.llm import _rejects_format
from tests.fixtures.llama_server import STARTUP_TIMEOUT, TEST_MODEL_NAME

CALL_TIMEOUT = 240.0  # one completion of a few dozen tokens on 2 CPU threads takes seconds

# The server's start-up (up to STARTUP_TIMEOUT) counts in the first test's time, its calls in each test's.
pytestmark = [pytest.mark.real_llm, pytest.mark.slow, pytest.mark.timeout(STARTUP_TIMEOUT + 2 * CALL_TIMEOUT)]

SCHEMA = {
    "type": "object",
    "properties": {
        "kind": {"type": "string", "enum": ["fact", "approach", "failure"]},
        "answer": {"type": "integer"},
    },
    "required": ["kind", "answer"],
    "additionalProperties": False,
}
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is 2+3? Reply as JSON with a kind and the answer."}
]


class Answer(BaseModel):
    """SCHEMA as a pydantic model, to validate the reply against it."""

    model_config = ConfigDict(extra="forbid", strict=True)
    kind: Literal["fact", "approach", "failure"]
    answer: int


@pytest.fixture(scope="module")
def client(llama_server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=llama_server, api_key="local", max_retries=0, timeout=CALL_TIMEOUT)


def test_json_object_with_schema_returns_schema_valid_json(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(
        model=TEST_MODEL_NAME,
        messages=MESSAGES,
        max_tokens=60,
        temperature=0,
        # llama-cpp-python's extension: a "schema" next to "json_object" (not in the OpenAI types).
        response_format={"type": "json_object", "schema": SCHEMA},  # type: ignore[call-overload]
    )

    choice = response.choices[0]
    assert choice.finish_reason == "stop", choice  # it ended the object itself, within max_tokens
    content = choice.message.content or ""
    Answer.model_validate(json.loads(content))  # raises if the grammar did not hold


def test_json_schema_response_format_is_refused_with_500(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(
            model=TEST_MODEL_NAME,
            messages=MESSAGES,
            max_tokens=20,
            response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}},
        )

    assert info.value.status_code == 500
    assert "json_object" in str(info.value)  # "Input should be 'text' or 'json_object'"
    assert _rejects_format(info.value)  # what makes the distiller fall back to json_object (tests/workers too)


def test_embeddings_answer_500_unless_started_for_embeddings(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.embeddings.create(model=TEST_MODEL_NAME, input="a lesson")

    assert info.value.status_code == 500
    assert "embedding=True" in str(info.value)
