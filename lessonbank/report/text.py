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


SPLIT_AT = 60  # a column with lines longer than this is printed after its table when the table does not fit


def _longest(table: Table, i: int) -> int:
    return max((len(line) for row in table.rows for line in row[i].split("\n")), default=0)


def _natural_width(console: Console, rendered: RichTable) -> int:
    """How wide ``rendered`` is with no line wrapped (rich caps a measurement at the console's width)."""
    return console.measure(rendered, options=console.options.update_width(1 << 16)).maximum


def _print_table(console: Console, table: Table) -> None:
    """``table``; or, when it does not fit the terminal and a column other than the first holds long text (a
    lesson's), the table without that column, then the column row by row at the terminal's whole width, keyed
    by the first column: left to rich, the long column shrinks most and a lesson's text came out ten characters
    a line next to counts that kept their width."""
    rendered = rich_table(table)
    wide = max(range(1, len(table.headers)), key=lambda i: _longest(table, i), default=0)
    if wide == 0 or _longest(table, wide) <= SPLIT_AT or _natural_width(console, rendered) <= console.width:
        console.print(rendered)
        return
    keep = [i for i in range(len(table.headers)) if i != wide]
    console.print(rich_table(Table(table.title, [table.headers[i] for i in keep],
                                   [[row[i] for i in keep] for row in table.rows])))
    console.print(plain(f"{table.headers[wide]} (by {table.headers[0]}):"))
    listing = RichTable.grid(padding=(0, 2))
    listing.add_column(no_wrap=True)
    listing.add_column(overflow="fold")
    for row in table.rows:
        listing.add_row(plain(row[0]), plain(row[wide]))
    console.print(listing)


def render_text(tables: list[Table], header: str, footer: str = "", width: int | None = None) -> str:
    """The tables (each with its note) under ``header``, as text for a terminal of ``width`` columns."""
    width = width or shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False, emoji=False)
    console.print(plain(header))
    for table in tables:
        console.print()
        _print_table(console, table)
        if table.note:
            console.print(plain(table.note))
    if footer:
        console.print()
        console.print(plain(footer))
    output = console.file
    assert isinstance(output, io.StringIO)
    return output.getvalue()
