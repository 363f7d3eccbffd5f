"""A CodeAgent step run by smolagents' local executor: the only module that reads that executor's text.

What smolagents writes and this reads:

- a failed step's error: ``Code execution failed at line '<statement>' due to: <exception>``;
- a step's observation: ``Execution logs:\\n<printed>\\nLast output from code snippet:\\n<value>`` (the value
  ``None`` when the code ended with nothing);
- the model's output, led by ``Thought:``; the code interpreter's own tool call, ``python_interpreter``.
"""

from __future__ import annotations

LOGS_HEADER = "Execution logs:"
LAST_OUTPUT = "Last output from code snippet:"
THOUGHT = "Thought:"
CODE_FAILED = "Code execution failed at line '"
DUE_TO = "' due to: "


def failing_line(message: str) -> str:
    """The code smolagents says a step failed at (``Code execution failed at line '...' due to: ``), or ""."""
    start = message.find(CODE_FAILED)
    if start < 0 or DUE_TO not in message[start:]:
        return ""
    return message[start + len(CODE_FAILED):].split(DUE_TO, 1)[0]


def error_text(message: str) -> str:
    """The exception part of the local executor's error ("ValueError: ..."), or the message as it is."""
    start = message.find(CODE_FAILED)
    if start >= 0 and DUE_TO in message[start:]:
        return message[start:].split(DUE_TO, 1)[1]
    return message


def logs(observation: str) -> str:
    """What a CodeAgent step printed, without smolagents' framing (or the observation as it is)."""
    return observation.partition(LAST_OUTPUT)[0].replace(LOGS_HEADER, "").strip()


def last_output(observation: str) -> str:
    """The value a CodeAgent step's code ended with, as smolagents showed it ("" when it showed None, or none)."""
    last = observation.partition(LAST_OUTPUT)[2].strip()
    return "" if last == "None" else last


def unframed(text: str) -> str:
    """An observation without the executor's empty framing: its ``Execution logs:`` header, and the trailer
    saying the code ended with None."""
    lines = text.strip().splitlines()
    if lines and lines[0].strip() == LOGS_HEADER:
        lines = lines[1:]
    if len(lines) >= 2 and lines[-2].strip() == LAST_OUTPUT and lines[-1].strip() == "None":
        lines = lines[:-2]
    return "\n".join(lines)


def thought(model_output: str) -> str:
    """The model's reasoning without the ``Thought:`` label a CodeAgent's prompt asks it to lead with."""
    stripped = model_output.strip()
    return stripped[len(THOUGHT):].strip() if stripped.startswith(THOUGHT) else stripped
