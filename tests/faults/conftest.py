"""The fault suite's figures: every fault test reports what it injected and what it counted, and the session
writes them to ``faults-summary.json`` under pytest's temporary directory and prints them as a table.

Figures (``None`` where a test has nothing to say about one):

- ``faults``: faults injected (kills, freezes, refusals, misbehaving replies, ...)
- ``runs``: runs the test followed
- ``records_lost``: step records handed to the recorder that are neither in Redis nor in a spool
- ``records_resent``: step records that reached Redis more than once (stored once: ``HSETNX``)
- ``tasks_published``: distill tasks pushed onto the queue for those runs (Redis ``MONITOR``)
- ``deliveries``: distill tasks delivered to a worker for those runs (each delivery counts itself)
- ``duplicate_tasks``: deliveries that found their run held by another worker or done, and did nothing
- ``llm_calls``: distilling LLM calls for those runs (the fake server's requests)
- ``duplicate_lessons``: lessons stored twice, or crediting a run twice
- ``redelivery_s``: seconds from the fault to the run's next delivery
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

FIGURES: list[dict[str, Any]] = []
COLUMNS = ("faults", "runs", "records_lost", "records_resent", "tasks_published", "deliveries", "duplicate_tasks",
           "llm_calls", "duplicate_lessons", "redelivery_s")
_written: list[Path] = []

Report = Callable[..., None]


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Report:
    """``report(fault="...", faults=1, runs=1, ...)``: one row of the suite's summary."""

    def add(fault: str, **figures: Any) -> None:
        unknown = set(figures) - set(COLUMNS)
        assert not unknown, f"unknown figures {unknown}"
        FIGURES.append({"test": request.node.name, "fault": fault, **{c: figures.get(c) for c in COLUMNS}})

    return add


@pytest.fixture(scope="session", autouse=True)
def fault_summary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    yield
    if FIGURES:
        path = tmp_path_factory.getbasetemp() / "faults-summary.json"
        path.write_text(json.dumps(FIGURES, indent=2) + "\n")
        _written.append(path)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    terminalreporter.section("fault injection: what each test counted")
    header = ("fault", *COLUMNS)
    rows = [[str(row["fault"]), *("-" if row[c] is None else _cell(row[c]) for c in COLUMNS)] for row in FIGURES]
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    for line in (header, *rows):
        terminalreporter.write_line("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)))
    totals = {c: sum(row[c] or 0 for row in FIGURES) for c in ("faults", "records_lost", "duplicate_tasks",
                                                              "duplicate_lessons")}
    terminalreporter.write_line(
        f"total: {totals['faults']} faults injected, {totals['records_lost']} records lost, "
        f"{totals['duplicate_tasks']} duplicate deliveries (dropped), {totals['duplicate_lessons']} duplicate lessons")
    for path in _written:
        terminalreporter.write_line(f"figures written to {path}")


def _cell(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)
