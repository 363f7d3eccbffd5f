"""The report for a terminal: rich tables. Every cell is plain ``Text`` (never markup) with control
characters removed, since tasks, lessons and error messages come from runs and are untrusted."""

from __future__ import annotations

import io
import shutil
import unicodedata

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from lessonbank.report.tables import Table

DEFAULT_WIDTH = 120


def plain(value: str) -> Text:
    """``value`` as literal text without control characters (newlines kept)."""
    cleaned = "".join(
        ch if ch == "\n" or unicodedata.category(ch)[0] != "C" else " " for ch in value
    )
    return Text(cleaned)


def rich_table(table: Table) -> RichTable:
    rendered = RichTable(title=plain(table.title), title_justify="left", show_lines=False, expand=False)
    for i, header in enumerate(table.headers):
        rendered.add_column(plain(header), overflow="fold", no_wrap=i == 0 and header == "id")
    for row in table.rows:
        rendered.add_row(*[plain(cell) for cell in row])
    return rendered


def render_text(tables: list[Table], header: str, footer: str = "", width: int | None = None) -> str:
    """The tables (each with its note) under ``header``, as text for a terminal of ``width`` columns."""
    width = width or shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False, emoji=False)
    console.print(plain(header))
    for table in tables:
        console.print()
        console.print(rich_table(table))
        if table.note:
            console.print(plain(table.note))
    if footer:
        console.print()
        console.print(plain(footer))
    output = console.file
    assert isinstance(output, io.StringIO)
    return output.getvalue()
