"""One structured chat completion against any OpenAI-compatible server, with the errors classified.

Structured output is asked for in the strongest form the server accepts: ``json_schema`` (OpenAI,
vLLM), then ``json_object`` carrying the schema (llama.cpp's server), then plain text; a server that
rejects one form with a 400/422 about the response format (or, as llama.cpp's server does for
``json_schema``, a 500 whose message names ``response_format``) is asked again in the next, and the
form that worked is remembered. Any other 4xx (but 429) is permanent.
Every reply is capped at ``max_tokens`` (``LESSONBANK_LLM_MAX_TOKENS``): a small model that loops (a JSON
object that never closes, whitespace forever) stops there instead of running until ``llm_timeout``, and
its cut reply is handled as malformed. A server that refuses ``max_tokens`` (OpenAI's reasoning models)
gets ``max_completion_tokens``, and that is remembered. ``LESSONBANK_LLM_SEED`` is sent as ``seed``: a server
that honours it (llama.cpp, vLLM) samples the same way for the same prompt (up to near-ties in its logits).
Replies are parsed leniently (code fences and prose around the JSON object are stripped) and
validated with pydantic.
"""

from __future__ import annotations

import email.utils
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, ValidationError

from lessonbank.core.exceptions import DistillError, PermanentDistillError, TransientDistillError, UnusableOutput
from lessonbank.core.settings import Settings
from lessonbank.workers.observe.tracing import llm_call

logger = logging.getLogger(__name__)

MODES = ("json_schema", "json_object", "plain")
LIMITS = ("max_tokens", "max_completion_tokens")
FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
T = TypeVar("T", bound=BaseModel)


class InvalidOutput(ValueError):
    """The model's reply is not the JSON asked for; `problem` says why without quoting it."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


@dataclass
class ChatReply:
    text: str
    latency: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    mode: str = "plain"


def make_client(settings: Settings) -> openai.OpenAI:
    """The OpenAI client for distillation; its own retries are off (Celery retries the task)."""
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "no-key"
    return openai.OpenAI(base_url=settings.openai_base_url, api_key=key, timeout=settings.llm_timeout, max_retries=0)


def classify(error: openai.OpenAIError, timeout: float) -> DistillError:
    """Map an `openai` error to a transient (retry) or permanent (dead-letter) DistillError."""
    if isinstance(error, openai.APITimeoutError):
        return TransientDistillError(f"LLM call timed out after {timeout:g}s")
    if isinstance(error, openai.APIConnectionError):
        return TransientDistillError(f"LLM unreachable: {type(error).__name__}")
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        message = _error_message(error)
        if status == 429 or status >= 500 or status in (408, 409):
            asked = _retry_after(error)
            wait = f" (Retry-After {asked:g}s)" if asked is not None else ""
            return TransientDistillError(f"LLM answered {status}: {message}{wait}")
        return PermanentDistillError(f"LLM rejected the request ({status}): {message}")
    return PermanentDistillError(f"LLM call failed: {type(error).__name__}")


RETRY_AFTER_STATUSES = (429, 503)


def retry_after(error: BaseException) -> float | None:
    """Seconds the LLM server asked to wait before trying again: the ``Retry-After`` of a 429 (or 503) among
    ``error`` and its causes, given in seconds or as an HTTP date; None when it asked nothing."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, openai.APIStatusError):
            return _retry_after(current)
        current = current.__cause__ or current.__context__
    return None


def _retry_after(error: openai.APIStatusError) -> float | None:
    if error.status_code not in RETRY_AFTER_STATUSES:
        return None
    headers = error.response.headers
    millis = headers.get("retry-after-ms")  # OpenAI's own, more precise
    try:
        if millis:
            return max(float(millis) / 1000, 0.0)
    except ValueError:
        pass
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def _error_message(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:200]
        if isinstance(inner, str):
            return inner[:200]
    return str(error.message)[:200]


def _about_format(error: openai.APIStatusError) -> bool:
    """Whether a 400/422 complains about the structured-output request (so another form may work)."""
    body = error.body if isinstance(error.body, dict) else {}
    inner = body.get("error", body)
    param = inner.get("param") if isinstance(inner, dict) else None
    text = f"{param or ''} {_error_message(error)}".lower()
    return any(word in text for word in ("response_format", "json_schema", "schema", "json_object"))


def _rejects_format(error: openai.APIStatusError) -> bool:
    """Whether the server refused the structured-output form rather than failing for another reason."""
    if error.status_code in (400, 422):
        return _about_format(error)
    # llama.cpp's server validates the request body with pydantic and answers 500 on an unknown form.
    return error.status_code == 500 and "response_format" in f"{error.message} {error.body}"


def _rejects_limit(error: openai.APIStatusError) -> bool:
    """Whether the server refused ``max_tokens`` itself (OpenAI's reasoning models want the other name)."""
    return error.status_code in (400, 422) and "max_tokens" in f"{error.message} {error.body}" and (
        "max_completion_tokens" in f"{error.message} {error.body}" or "unsupported" in str(error.body).lower())


def response_format(mode: str, name: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


class ChatLLM:
    """Structured chat completions with one model; remembers which output form the server accepts."""

    @classmethod
    def from_settings(cls, settings: Settings) -> ChatLLM:
        """The distiller's LLM as the settings describe it (endpoint, model, timeout, reply cap, seed)."""
        return cls(make_client(settings), settings.distill_model, timeout=settings.llm_timeout,
                   max_tokens=settings.llm_max_tokens, seed=settings.llm_seed)

    def __init__(self, client: openai.OpenAI, model: str, timeout: float = 120.0, max_tokens: int = 1024,
                 seed: int | None = None) -> None:
        self.client = client
        self.model = model
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.seed = seed
        self._mode_index = 0
        self._limit = LIMITS[0]

    def complete(self, messages: list[dict[str, str]], name: str, schema: dict[str, Any]) -> ChatReply:
        """One completion; raises TransientDistillError / PermanentDistillError.

        Observed (``observe.tracing.llm_call``): a span with the model and token counts, latency, tokens, errors by
        kind.
        """
        with llm_call(self.model, name) as call:
            while True:
                mode = MODES[self._mode_index]
                kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0.2,
                                          self._limit: self.max_tokens}
                if self.seed is not None:
                    kwargs["seed"] = self.seed
                fmt = response_format(mode, name, schema)
                if fmt is not None:
                    kwargs["response_format"] = fmt
                started = time.monotonic()
                try:
                    response = self.client.chat.completions.create(**kwargs)
                except openai.APIStatusError as e:
                    if self._limit == LIMITS[0] and _rejects_limit(e):
                        self._limit = LIMITS[1]
                        logger.info("LLM rejected max_tokens (%s); sending max_completion_tokens", e.status_code)
                        continue
                    if self._mode_index + 1 < len(MODES) and _rejects_format(e):
                        self._mode_index += 1
                        logger.info("LLM rejected response_format %s (%s); trying %s", mode, e.status_code,
                                    MODES[self._mode_index])
                        continue
                    raise classify(e, self.timeout) from e
                except openai.OpenAIError as e:
                    raise classify(e, self.timeout) from e
                except ValueError as e:  # a 200 whose body is not JSON: cut off on the way, worth another try
                    raise TransientDistillError(f"LLM response unreadable: {type(e).__name__}") from e
                latency = time.monotonic() - started
                text = ""
                if response.choices and response.choices[0].message.content:
                    text = response.choices[0].message.content
                if response.choices and response.choices[0].finish_reason == "length":
                    logger.warning("LLM reply cut at LESSONBANK_LLM_MAX_TOKENS=%d tokens (%s call); it is handled "
                                   "as malformed", self.max_tokens, name)
                usage = response.usage
                reply = ChatReply(
                    text=text,
                    latency=latency,
                    prompt_tokens=usage.prompt_tokens if usage else 0,
                    completion_tokens=usage.completion_tokens if usage else 0,
                    mode=mode,
                )
                call.done(reply)
                return reply


def extract_json(text: str) -> Any:
    """The JSON value in a reply: fenced or bare, with prose around it tolerated."""
    candidates = [m.group(1) for m in FENCE.finditer(text)] + [text]
    for candidate in candidates:
        candidate = candidate.strip()
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            start, end = candidate.find("{"), candidate.rfind("}")
            if 0 <= start < end:
                try:
                    return json.loads(candidate[start : end + 1])
                except json.JSONDecodeError:
                    continue
    raise InvalidOutput("the reply is not a JSON object" if text.strip() else "the reply is empty")


def parse_reply(text: str, model: type[T]) -> T:
    """Validate a reply against `model`; raises InvalidOutput describing what is wrong (never the content)."""
    data = extract_json(text)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'root'}: {err['msg']}" for err in e.errors()[:5]
        )
        raise InvalidOutput(f"the JSON does not match the schema ({problems})") from e


# Length bounds stay in the pydantic validation only: OpenAI's strict mode does not support them, and
# llama.cpp turns a maxLength into a grammar too large to parse (the request then fails).
UNSENT_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems")


def strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON schema in the strict form OpenAI asks for: closed objects, every property required,
    no length bounds."""

    def close(node: Any) -> None:
        if isinstance(node, dict):
            for keyword in UNSENT_KEYWORDS:
                node.pop(keyword, None)
            if node.get("type") == "object" and "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node["properties"])
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    schema = model.model_json_schema()
    close(schema)
    return schema


def structured(
    llm: ChatLLM,
    messages: list[dict[str, str]],
    name: str,
    model: type[T],
    schema_model: type[BaseModel] | None = None,
    check: Callable[[T], None] | None = None,
) -> tuple[T, list[ChatReply]]:
    """Ask for a reply shaped like ``schema_model`` (default ``model``), validated with ``model``; one repair
    round if the first reply is invalid (``check`` may raise InvalidOutput for a reply that parses but is
    unusable).

    Raises UnusableOutput (a PermanentDistillError) if the reply is still invalid after the repair.
    """
    schema = strict_schema(schema_model or model)

    def parse(text: str) -> T:
        result = parse_reply(text, model)
        if check is not None:
            check(result)
        return result

    replies = [llm.complete(messages, name, schema)]
    try:
        return parse(replies[0].text), replies
    except InvalidOutput as first:
        logger.info("LLM output invalid (%s); asking once for a repair", first.problem)
        repair = messages + [
            {"role": "assistant", "content": replies[0].text[:4000]},
            {"role": "user", "content": f"That reply is invalid: {first.problem}. Reply again with only the "
                                        "corrected JSON object, matching the schema exactly."},
        ]
        replies.append(llm.complete(repair, name, schema))
        try:
            return parse(replies[1].text), replies
        except InvalidOutput as second:
            raise UnusableOutput(f"LLM output invalid after one repair: {second.problem}") from second
