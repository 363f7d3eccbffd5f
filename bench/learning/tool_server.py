"""llama-cpp-python's OpenAI server with a chat format that turns the model's output into OpenAI ``tool_calls``.

    python bench/learning/tool_server.py --model MODEL.gguf --chat_format chatml-function-calling-seeded ...

Through the server ``lessonbank llm serve`` starts (the GGUF's own chat template), the 1.5B model writes its
tool calls as text, which smolagents' ``ToolCallingAgent`` does not take as calls. llama-cpp-python's
``chatml-function-calling`` chat format asks the model, under a grammar, for ``functions.<name>:`` followed by
JSON arguments that fit the tool's schema, and answers with real ``tool_calls``. What it took, beyond that
format, for the agent to get calls it can act on at every step (the format registered here):

- ``tool_choice="required"``, smolagents' own default (every step of a ToolCallingAgent is a call; its answer
  goes through ``final_answer``). llama-cpp-python's format accepts only ``"auto"`` or a named function; under
  ``"auto"`` a model that chooses to answer with a message gets a message whose grammar admits nothing but
  ``functions.<name>:`` or an empty text, which the agent cannot parse, so the step fails. Here ``"required"``
  (and a named function) picks the function under a grammar of the tools' names, then samples its arguments
  under the grammar of its JSON schema, both with the request's sampling settings (its temperature, as the
  agent asked). The format's own choice is greedy (temperature 0): a small model that chose a call that failed
  chose the same tool again at every later step, however its prompt had changed, and with the same tool it
  mostly wrote the same arguments.
- The prompt without HTML escaping: the format's template escapes every message, so the model read tool
  results as ``{&#39;tickets&#39;: ...}`` and wrote answers in that form.
- The agent's earlier calls shown as the model writes them (``functions.<name>:`` and JSON): smolagents sends
  them as an assistant text ``Calling tools:`` with a Python list of calls, which the format showed as a
  message.

Any other ``tool_choice`` goes to the format as it is. The format ignores a request's ``seed``; the one
registered here sets it first, so that two arms given the same prompt and seed sample the same tokens, as the
CodeAgent arms do. :class:`ToolServer` starts this script instead of ``llama_cpp.server``.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lessonbank.llama_server import LlamaServer

CHAT_FORMAT = "chatml-function-calling-seeded"
CALLING = "Calling tools:\n"  # how smolagents writes an agent's earlier calls into its memory
SAMPLING = ("temperature", "top_p", "top_k", "min_p", "typical_p", "presence_penalty", "frequency_penalty",
            "repeat_penalty", "max_tokens")


class ToolServer(LlamaServer):
    """``LlamaServer`` running this script, with the seeded function-calling chat format."""

    def command(self) -> list[str]:
        base = super().command()
        return [self.python, str(Path(__file__).resolve()), *base[3:], "--chat_format", CHAT_FORMAT]


def text_of(content: Any) -> str:
    """A message's content as text (a string, or the text parts of a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def calls_of(message: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, arguments) of each call an assistant message made: its ``tool_calls``, or the Python list of calls
    that follows ``Calling tools:`` in its text; [] for a message that made none."""
    found = [(call["function"]["name"], call["function"].get("arguments", {}))
             for call in message.get("tool_calls") or [] if isinstance(call, dict) and "function" in call]
    text = text_of(message.get("content"))
    if found or not text.startswith(CALLING):
        return found
    try:
        listed = ast.literal_eval(text[len(CALLING):].strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return []
    calls = [item.get("function") for item in listed if isinstance(item, dict)] if isinstance(listed, list) else []
    return [(call["name"], call.get("arguments", {})) for call in calls if isinstance(call, dict) and "name" in call]


def written(name: str, arguments: Any) -> str:
    """A call as the model writes it under this format: ``functions.<name>:`` and its JSON arguments."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return f"functions.{name}:\n{arguments}"
    return f"functions.{name}:\n{json.dumps(arguments, default=str)}"


def system_text(tools: Sequence[dict[str, Any]]) -> str:
    listed = "".join(f"\nfunctions.{tool['function']['name']}:\n{json.dumps(tool['function'].get('parameters', {}))}\n"
                     for tool in tools)
    return (f"\n\nYou have access to the following functions:\n{listed}\nRespond with one function call, in this "
            'format:\n\nfunctions.<function_name>:\n{ "arg1": "value1", "arg2": "value2" }')


def render(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> str:
    """The ChatML prompt of ``messages``, with the functions ``tools`` offer, up to the assistant's turn (no
    escaping; an earlier call as ``functions.<name>:`` and its JSON, any other assistant text as a message)."""
    parts = []
    for message in messages:
        role, content = str(getattr(message.get("role"), "value", message.get("role") or "user")), \
            text_of(message.get("content"))
        if role == "system":
            content += system_text(tools)
        elif role == "assistant":
            calls = calls_of(message)
            content = "\n".join(written(name, arguments) for name, arguments in calls) if calls else \
                f"message:\n{content}"
        elif role != "user":  # a tool's result, for a client that sends them with their own role
            role, content = "user", f"Observation:\n{content}"
        parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


def alternatives(names: Sequence[str]) -> str:
    """A GBNF grammar that matches exactly one of ``names``, followed by ``:``."""
    return "root ::= " + " | ".join(json.dumps(f"{name}:") for name in names) + "\n"


def required_call(llama: Any, *, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
                  tool_choice: Any, **kwargs: Any) -> dict[str, Any]:
    """One call of one of ``tools`` (``tool_choice``: ``"required"``, or the function it names): the function
    chosen under a grammar of their names, its arguments under its JSON schema, both sampled as the request asks."""
    from llama_cpp import llama_chat_format as formats
    from llama_cpp import llama_grammar

    prompt = render(messages, tools) + "functions."
    named = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    by_name = {tool["function"]["name"]: tool for tool in tools}
    sampling = {key: kwargs[key] for key in SAMPLING if kwargs.get(key) is not None}
    if named not in by_name:
        names = llama_grammar.LlamaGrammar.from_string(alternatives(list(by_name)), verbose=llama.verbose)
        choosing = {**sampling, "max_tokens": None}
        chosen = llama.create_completion(prompt=prompt, stream=False, stop=[":"], grammar=names, **choosing)
        named = chosen["choices"][0]["text"].strip()
    prompt += f"{named}:\n"
    try:
        grammar = llama_grammar.LlamaGrammar.from_json_schema(json.dumps(by_name[named]["function"]["parameters"]),
                                                           verbose=llama.verbose)
    except Exception:  # a schema the converter does not handle: any JSON object
        grammar = llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=llama.verbose)
    completion = llama.create_completion(prompt=prompt, stream=False, stop=["<|im_end|>"], grammar=grammar,
                                         **sampling)
    response: dict[str, Any] = formats._convert_completion_to_chat_function(named, completion, False)
    return response


def register() -> None:
    from llama_cpp import llama_chat_format as formats

    @formats.register_chat_completion_handler(CHAT_FORMAT)
    def seeded(llama: Any, **kwargs: Any) -> Any:
        if kwargs.get("seed") is not None:
            llama.set_seed(int(kwargs["seed"]))
        choice, tools = kwargs.get("tool_choice"), kwargs.get("tools")
        if tools and (choice == "required" or isinstance(choice, dict)) and not kwargs.get("stream"):
            return required_call(llama, **kwargs)
        return formats.chatml_function_calling(llama=llama, **kwargs)


if __name__ == "__main__":
    from llama_cpp.server.__main__ import main

    register()
    sys.exit(main())
