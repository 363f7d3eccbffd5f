"""llama-cpp-python's OpenAI server with a chat format that turns the model's output into OpenAI ``tool_calls``.

    python bench/learning/tool_server.py --model MODEL.gguf --chat_format chatml-function-calling-seeded ...

Through the server ``lessonbank llm serve`` starts (the GGUF's own chat template), the 1.5B model writes its
tool calls as text, which smolagents' ``ToolCallingAgent`` does not take as calls. llama-cpp-python's
``chatml-function-calling`` chat format asks the model, under a grammar, for either a message or
``functions.<name>:`` followed by JSON arguments that fit the tool's schema, and answers with real
``tool_calls``; it needs ``tool_choice="auto"`` (the agent's model is built with it). It ignores a request's
``seed``; the format registered here sets it first, so that two arms given the same prompt and seed sample the
same tokens, as the CodeAgent arms do. :class:`ToolServer` starts this script instead of ``llama_cpp.server``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lessonbank.llama_server import LlamaServer

CHAT_FORMAT = "chatml-function-calling-seeded"


class ToolServer(LlamaServer):
    """``LlamaServer`` running this script, with the seeded function-calling chat format."""

    def command(self) -> list[str]:
        base = super().command()
        return [self.python, str(Path(__file__).resolve()), *base[3:], "--chat_format", CHAT_FORMAT]


def register() -> None:
    from llama_cpp import llama_chat_format as formats

    @formats.register_chat_completion_handler(CHAT_FORMAT)
    def seeded(llama: Any, **kwargs: Any) -> Any:
        if kwargs.get("seed") is not None:
            llama.set_seed(int(kwargs["seed"]))
        return formats.chatml_function_calling(llama=llama, **kwargs)


if __name__ == "__main__":
    from llama_cpp.server.__main__ import main

    register()
    sys.exit(main())
