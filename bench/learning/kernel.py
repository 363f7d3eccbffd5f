"""The kernel of the benchmark's remote-style executor: a child process that runs a CodeAgent's steps.

smolagents' E2B, Docker and Modal executors send each step's code to a Python kernel elsewhere and,
when it raises, raise ``AgentError`` with the kernel's traceback (E2B: ``"{logs}\\nExecuting code
yielded an error:\\n{name}\\n{value}\\n{traceback}"``), not the local executor's ``Code execution
failed at line '...' due to: ...``. The tools run inside the kernel too (they are sent there), so
nothing in the agent's process sees their results. ``family_agents.TracebackExecutor`` does the same on
this machine: a child Python process (this module, run as a script) holds the namespace between steps,
builds the family's tools from the variant's world, runs each step with ``exec`` and answers with
E2B's error text and a plain Python traceback. Imports are limited to the benchmark's authorized
modules, as in the other arms, and a step that runs longer than ``STEP_TIMEOUT`` seconds is stopped.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import linecache
import sys
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
STEP_TIMEOUT = 120.0
MAX_OUTPUT = 20_000


class FinalAnswerException(BaseException):  # noqa: N818 - the name smolagents' remote executors look for
    """Raised by ``final_answer`` in the kernel, as smolagents' remote executors patch it to."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


# -- the kernel (child process) -----------------------------------------------------------------------------


def _guarded_import(allowed: set[str]) -> Any:
    real = builtins.__import__

    def guarded(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] not in allowed:
            raise ImportError(f"import of {name!r} is not allowed in this sandbox")
        return real(name, *args, **kwargs)

    return guarded


def _final_answer(answer: Any) -> None:
    raise FinalAnswerException(answer)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def _run_cell(namespace: dict[str, Any], code: str, cell: int) -> dict[str, Any]:
    """Run one step's code; its printed text, the value of a last bare expression, the final answer or the error."""
    filename = f"<cell {cell}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    out = io.StringIO()
    reply: dict[str, Any] = {"final": False, "output": None}
    try:
        tree = ast.parse(code, filename)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        with contextlib.redirect_stdout(out):
            exec(compile(tree, filename, "exec"), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), filename, "eval"), namespace)
                reply["output"] = None if value is None else repr(value)
    except FinalAnswerException as e:
        reply.update(final=True, output=_jsonable(e.value))
    except Exception as e:  # the agent's code failed: its traceback is the answer
        below = e.__traceback__.tb_next if e.__traceback__ is not None else None  # this module's frame left out
        reply["error"] = {"name": type(e).__name__, "value": str(e),
                          "traceback": "".join(traceback.format_exception(type(e), e, below))}
    reply["logs"] = out.getvalue()[-MAX_OUTPUT:]
    return reply


def kernel(allowed: list[str]) -> None:
    """Answer one JSON request a line on stdin: ``setup`` (family, world), ``vars`` or ``run`` (code)."""
    from families import all_families

    safe = {k: v for k, v in vars(builtins).items() if k not in ("open", "exec", "eval", "compile", "input",
                                                                  "breakpoint", "exit", "quit")}
    safe["__import__"] = _guarded_import(set(allowed))
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": safe, "final_answer": _final_answer}
    cell = 0
    for line in sys.stdin:
        request = json.loads(line)
        reply: dict[str, Any] = {"ok": True}
        if request["op"] == "setup":
            family = all_families()[request["family"]]
            namespace.update({f.__name__: f for f in family.tools(request["world"])})
        elif request["op"] == "vars":
            namespace.update(request["vars"])
        else:
            cell += 1
            reply = _run_cell(namespace, request["code"], cell)
        sys.__stdout__.write(json.dumps(reply) + "\n")
        sys.__stdout__.flush()


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    kernel(json.loads(sys.argv[1]))
