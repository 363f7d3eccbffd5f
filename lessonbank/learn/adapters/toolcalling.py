"""A ToolCallingAgent's step: the tool calls the model made, and the one that failed, read from smolagents'
records and error text.

A step whose tool calls all ran keeps them (``StepRecord.tool_calls``: name and JSON arguments). A step whose
call raised keeps none; its error names the call::

    Error executing tool 'fetch_rates' with arguments {'base': 'USD', 'day': '2024-03-17'}: ValueError: ...

and the arguments (Python's text of a dict) are read back with ``ast.literal_eval``. The code interpreter given
to such an agent as a tool (``python_interpreter``, argument ``code``) runs code: that code is the step's code,
its error the local executor's, and what it printed its output (``Stdout:`` ... ``Output:``).
"""

from __future__ import annotations

import ast
import json
from typing import Any

CODE_TOOL = "python_interpreter"
TOOL_FAILED = "Error executing tool '"
WITH_ARGUMENTS = "' with arguments "
MAX_ARGUMENTS = 8_000
STDOUT = "Stdout:"
OUTPUT = "\nOutput: "


def failed_tool(message: str) -> str | None:
    """The tool named by ``Error executing tool 'name' ...``, else None."""
    if not message.startswith(TOOL_FAILED):
        return None
    return message[len(TOOL_FAILED):].split("'", 1)[0] or None


def _arguments(message: str) -> tuple[dict[str, Any] | None, int]:
    """(the arguments of the failed call, where the text after them starts) of ``... with arguments {...}: ...``;
    (None, where the search for the exception starts) when they cannot be read back as a dict."""
    name = failed_tool(message)
    if name is None:
        return None, 0
    start = len(TOOL_FAILED) + len(name)
    if not message.startswith(WITH_ARGUMENTS, start):
        return None, start
    start += len(WITH_ARGUMENTS)
    rest = message[start:start + MAX_ARGUMENTS]
    end = rest.find("}: ")
    while end != -1:
        try:
            value = ast.literal_eval(rest[:end + 1])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            value = None
        if isinstance(value, dict):
            return {str(key): item for key, item in value.items()}, start + end + 1
        end = rest.find("}: ", end + 1)
    return None, start


def failed_arguments(message: str) -> dict[str, Any] | None:
    """The arguments of the failed call (``... with arguments {...}: Error: ...``), or None when they cannot be
    read back as a dict."""
    return _arguments(message)[0]


def tool_error(message: str) -> str:
    """The exception of a failed tool call ("ValueError: ..."), without the call's text: the first part after
    ": " that starts with an exception's name (after the arguments, when they can be read); "" when none."""
    if failed_tool(message) is None:
        return ""
    start = message.find(": ", _arguments(message)[1])
    while start != -1:
        part = message[start + 2:]
        head = part.split(":", 1)[0]
        if head.isidentifier() and head.endswith(("Error", "Exception")):
            return part.split("\nPlease try again", 1)[0].strip()
        start = message.find(": ", start + 1)
    return ""


def arguments_of(text: str) -> dict[str, Any]:
    """A recorded call's arguments (JSON text of a dict; {} otherwise)."""
    try:
        loaded: Any = json.loads(text) if text else {}
    except (ValueError, RecursionError):
        return {}
    return {str(key): value for key, value in loaded.items()} if isinstance(loaded, dict) else {}


def interpreter_code(name: str, arguments: dict[str, Any]) -> str:
    """The code a call of the code interpreter tool ran ("" for any other call)."""
    code = arguments.get("code") if name == CODE_TOOL else None
    return code if isinstance(code, str) else ""


def with_code(name: str, arguments: dict[str, Any], code: str) -> dict[str, Any]:
    """``arguments`` of a call of the code interpreter tool with ``code`` in place of the code it ran (any other
    call's unchanged)."""
    return {**arguments, "code": code} if interpreter_code(name, arguments) else arguments


def interpreter_output(observation: str) -> tuple[str, str]:
    """(what the code printed, the value it ended with) from the interpreter tool's ``Stdout: ... Output: ...``."""
    if not observation.startswith(STDOUT) or OUTPUT not in observation:
        return observation.strip(), ""
    printed, _, last = observation[len(STDOUT):].rpartition(OUTPUT)
    last = last.strip()
    return printed.strip(), "" if last == "None" else last
