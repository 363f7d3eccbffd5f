"""Every error lessonbank raises on purpose derives from ``LessonbankError``; the few built-in exceptions
raised in the package are internal (caught where they are raised) or follow a Python protocol."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

import lessonbank
from lessonbank.core import exceptions

PACKAGE = Path(lessonbank.__file__).resolve().parent

# (module, exception): built-in exceptions that never reach a caller of the public API, and why.
INTERNAL = {
    ("__init__.py", "AttributeError"),  # a module's __getattr__ must raise it (PEP 562)
    ("recorder/__init__.py", "AttributeError"),
    ("agent_hook.py", "AttributeError"),  # a foreign agent without run: caught by the caller's getattr protocol
    ("core/settings.py", "ValueError"),  # pydantic validators: wrapped into ConfigurationError by Settings
    ("core/migrate.py", "ValueError"),  # the schema-1 reader's parse errors, caught by its caller
    ("recorder/ops.py", "ValueError"),  # a spool line that is not an op, caught by the spool reader
    ("recorder/spool.py", "OSError"),  # handled like any other disk error by the writer
    ("cli/intake.py", "ValueError"),  # json.loads hooks: json turns them into its own error, caught
    ("learn/stats.py", "ValueError"),  # preconditions of pure statistics the report never breaks
    ("core/store/protocol.py", "TypeError"),  # a proxy call with arguments the method lacks, as Python says it
    ("core/store/protocol.py", "KeyError"),  # a proxy's unknown method name, as a dict lookup says it
    ("core/embeddings.py", "NotImplementedError"),  # the abstract method of the embedders' base class
}


def raised_builtins() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = target.id if isinstance(target, ast.Name) else ""
            if isinstance(getattr(builtins, name, None), type) and issubclass(getattr(builtins, name), Exception):
                found.add((path.relative_to(PACKAGE).as_posix(), name))
    return found


def test_no_builtin_exception_is_raised_on_purpose_outside_the_known_internal_ones() -> None:
    assert raised_builtins() <= INTERNAL, sorted(raised_builtins() - INTERNAL)


def test_every_exception_class_derives_from_the_base() -> None:
    classes = [value for value in vars(exceptions).values()
               if isinstance(value, type) and issubclass(value, BaseException)
               and value.__module__ == exceptions.__name__]
    assert len(classes) >= 8
    assert all(issubclass(cls, exceptions.LessonbankError) for cls in classes)


def test_argument_errors_are_also_the_builtin_errors_callers_catch() -> None:
    assert issubclass(exceptions.InvalidArgument, ValueError)
    assert issubclass(exceptions.InvalidType, TypeError) and issubclass(exceptions.InvalidType, ValueError)
    assert issubclass(exceptions.NotFound, LookupError)


def test_remember_into_a_second_bank_is_a_lessonbank_error(tmp_path: Path) -> None:
    from smolagents import CodeAgent
    from smolagents.models import Model

    from lessonbank import LessonbankError, Settings, remember

    settings = Settings(data_dir=tmp_path, redis_url="redis://127.0.0.1:1/0")
    agent = CodeAgent(tools=[], model=Model())
    remember(agent, bank="one", settings=settings)
    with pytest.raises(LessonbankError, match="already remembers into bank 'one'"):
        remember(agent, bank="two", settings=settings)


def test_prepare_run_refuses_fields_with_lessonbank_errors(tmp_path: Path) -> None:
    from smolagents import CodeAgent
    from smolagents.models import Model

    from lessonbank import LessonbankError, Settings, StepRecorder

    recorder = StepRecorder(bank="b", settings=Settings(data_dir=tmp_path, redis_url="redis://127.0.0.1:1/0"))
    agent = CodeAgent(tools=[], model=Model())
    with pytest.raises(LessonbankError) as wrong_type:
        recorder.prepare_run(agent, given=["not", "a", "str"])  # type: ignore[arg-type]
    assert isinstance(wrong_type.value, TypeError)
    with pytest.raises(LessonbankError):
        recorder.prepare_run(agent, verdict="success")
