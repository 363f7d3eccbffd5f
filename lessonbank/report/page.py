"""The report as files: one self-contained ``report.html`` (plots embedded as data URIs, no scripts,
readable without a server), ``report.json`` and the PNGs.

Every text that comes from runs or lessons is escaped (``html.escape``), and the page's
Content-Security-Policy allows nothing but its own inline style and ``data:`` images.
"""

from __future__ import annotations

import base64
import json
from html import escape
from pathlib import Path
from typing import Any

from lessonbank.report.plots import INSTALL_HINT, PLOT_TITLES
from lessonbank.report.tables import Table

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #222; padding: 0 1rem; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td { white-space: pre-wrap; overflow-wrap: anywhere; }
td:first-child, #lessons td:nth-child(2) { white-space: nowrap; }
.note { color: #555; max-width: 60rem; } .plots img { display: block; max-width: 100%; margin: 1rem 0; }
"""


def _table(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>\n" for row in table.rows)
    note = f'<p class="note">{escape(table.note)}</p>' if table.note else ""
    slug = escape(table.title.split(" ")[0].lower())
    return (f'<h2>{escape(table.title)}</h2>\n<table id="{slug}"><thead><tr>{head}</tr></thead>\n'
            f"<tbody>{body}</tbody></table>\n{note}")


def _plots(plots: dict[str, bytes] | None) -> str:
    if plots is None:
        return f'<p class="note">Plots need matplotlib: <code>{escape(INSTALL_HINT)}</code>.</p>'
    if not plots:
        return '<p class="note">No data to plot yet.</p>'
    images = []
    for name, png in plots.items():
        data = base64.b64encode(png).decode("ascii")
        title = escape(PLOT_TITLES.get(name, name))
        images.append(f'<img id="plot-{escape(name)}" alt="{title}" src="data:image/png;base64,{data}">')
    return '<div class="plots">' + "\n".join(images) + "</div>"


def render_html(document: dict[str, Any], tables: list[Table], plots: dict[str, bytes] | None) -> str:
    """The whole page as one string."""
    bank = escape(document["bank"])
    since = f" since {escape(document['since'])}" if document.get("since") else ""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>lessonbank report: {bank}</title><style>{STYLE}</style></head><body>",
        f"<h1>lessonbank report: bank {bank}</h1>",
        f'<p class="note">{document["runs"]} runs{since}; generated {escape(document["generated_at"])}.</p>',
        *[_table(table) for table in tables[:1]],
        "<h2>Plots</h2>",
        _plots(plots),
        *[_table(table) for table in tables[1:]],
        "</body></html>",
    ]
    return "\n".join(parts)


def write_report(
    out: Path, document: dict[str, Any], tables: list[Table], plots: dict[str, bytes] | None
) -> list[Path]:
    """Write report.html, report.json and one PNG per plot into ``out`` (created); returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, png in (plots or {}).items():
        path = out / f"{name}.png"
        path.write_bytes(png)
        written.append(path)
    json_path = out / "report.json"
    json_path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    html_path = out / "report.html"
    html_path.write_text(render_html(document, tables, plots), encoding="utf-8")
    return [html_path, json_path, *written]
