"""``lessonbank report``: what a bank's lessons did, per arm, from its run summaries and lessons.

- ``data``: the report as one JSON-ready document (``build_report``), no I/O;
- ``lessonbank.learn.stats`` (shared with the causal credit): Wilson, Newcombe, Student's t and Welch's t intervals;
- ``tables``: the document as tables of plain strings; ``text``: those tables for a terminal (rich);
- ``plots``: PNGs with matplotlib (optional extra ``report``); ``page``: the self-contained HTML and the files.
"""

from lessonbank.report.data import build_report
from lessonbank.report.page import render_html, write_report
from lessonbank.report.plots import INSTALL_HINT, render_plots
from lessonbank.report.tables import report_tables
from lessonbank.report.text import render_text

__all__ = [
    "INSTALL_HINT", "build_report", "render_html", "render_plots", "render_text", "report_tables", "write_report",
]
