"""The report's plots as PNG bytes, drawn from the report document with matplotlib's Agg canvas.

matplotlib is optional (``pip install 'lessonbank[report]'``): without it ``render_plots`` returns
None and the report is tables only. Figures are built with the object API (no pyplot, no global
backend switch), so drawing never touches a display.
"""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

INSTALL_HINT = "pip install 'lessonbank[report]'"
PLOT_TITLES = {
    "success_rate": "Success rate over time",
    "tokens": "Tokens per run over time",
    "lessons": "Lessons in the bank over time",
    "tool_errors": "Error rate per tool",
    "causal": "Per-lesson causal credit",
}
ARM_COLOURS = {"lessons": "#1f77b4", "control": "#ff7f0e"}
# The lessons arm is drawn over the control arm, thicker; control is dashed with hollow markers: where the
# two arms coincide (both always succeed, say) both stay visible.
ARM_STYLES: dict[str, dict[str, Any]] = {
    "lessons": {"marker": "o", "markersize": 4, "linestyle": "-", "linewidth": 2.2, "zorder": 3},
    "control": {"marker": "s", "markersize": 6, "linestyle": "--", "linewidth": 1.4, "markerfacecolor": "none",
                "zorder": 2},
}
KIND_COLOURS = {"fact": "#2ca02c", "approach": "#1f77b4", "failure": "#d62728"}
TOOLS_PLOTTED = 20
SIZE = (8.0, 3.6)
DPI = 100


def plots_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _times(points: list[dict[str, Any]]) -> list[dt.datetime]:
    return [dt.datetime.fromtimestamp(p["t"], dt.UTC) for p in points]


def _figure() -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=SIZE, dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


def _time_axis(axes: Any, label: str) -> None:
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    locator = AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=dt.UTC))
    axes.set_xlabel(label)
    axes.grid(True, alpha=0.3)


def _legend(axes: Any) -> None:
    """Legend to the right of the axes, never over the data."""
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def _runs_plot(document: dict[str, Any], key: str, ylabel: str) -> bytes | None:
    series = document["series"]["runs"]
    if not any(p[key] is not None for points in series.values() for p in points):
        return None
    figure = _figure()
    axes = figure.add_subplot()
    for arm, points in series.items():
        kept = [p for p in points if p[key] is not None]
        if kept:
            axes.plot(_times(kept), [p[key] for p in kept], color=ARM_COLOURS[arm], **ARM_STYLES[arm],
                      label=f"{arm} arm ({document['arms'][arm]['runs']} runs)")
    if key == "success_rate":
        axes.set_ylim(-0.02, 1.02)
    else:
        axes.set_ylim(bottom=0)
    axes.set_ylabel(ylabel)
    axes.set_title(f"{PLOT_TITLES[key]} (rolling over the last {document['window']} runs of each arm)", fontsize=10)
    _time_axis(axes, "run start (UTC)")
    _legend(axes)
    return _png(figure)


def _lessons_plot(document: dict[str, Any]) -> bytes | None:
    points = document["series"]["lessons"]
    if not points:
        return None
    figure = _figure()
    axes = figure.add_subplot()
    times = _times(points)
    kinds = list(points[0]["active_by_kind"])
    axes.stackplot(times, *[[p["active_by_kind"][k] for p in points] for k in kinds],
                   labels=[f"active {k}" for k in kinds], colors=[KIND_COLOURS.get(k, "#7f7f7f") for k in kinds],
                   alpha=0.8, step="post")
    axes.plot(times, [sum(p["by_status"].values()) for p in points], color="black", linestyle="--",
              drawstyle="steps-post", label="all, any status")
    axes.set_ylim(bottom=0)
    from matplotlib.ticker import MaxNLocator

    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel("lessons (count)")
    axes.set_title(PLOT_TITLES["lessons"], fontsize=10)
    _time_axis(axes, "time (UTC)")
    _legend(axes)
    return _png(figure)


def _tools_plot(document: dict[str, Any]) -> bytes | None:
    """Error rate per tool. Tool names are the agent's text: drawn literally, never parsed as mathtext
    (``$...$`` in a name would be, and a malformed one fails the whole drawing)."""
    from matplotlib import rc_context

    tools = sorted(document["tools"], key=lambda r: (-r["calls"], r["name"]))[:TOOLS_PLOTTED]
    if not tools:
        return None
    with rc_context({"text.parse_math": False}):  # tick labels are made when the figure is drawn: all of it inside
        return _tools_png(tools)


def _tools_png(tools: list[dict[str, Any]]) -> bytes:
    tools.reverse()  # most called at the top
    figure = _figure()
    figure.set_size_inches(SIZE[0], max(2.0, 0.35 * len(tools) + 1.2))
    axes = figure.add_subplot()
    rates = [100 * r["error_rate"] for r in tools]
    bars = axes.barh([r["name"] for r in tools], rates, color="#d62728", label="errors per call")
    axes.bar_label(bars, labels=[f"{r['errors']}/{r['calls']}" for r in tools], padding=3, fontsize=8)
    axes.set_xlim(0, max(100.0, max(rates) * 1.15))
    axes.set_xlabel("error rate (% of calls)")
    axes.set_ylabel("tool")
    axes.set_title(f"{PLOT_TITLES['tool_errors']} (label: errors/calls)", fontsize=10)
    axes.grid(True, axis="x", alpha=0.3)
    _legend(axes)
    return _png(figure)


def _causal_plot(document: dict[str, Any]) -> bytes | None:
    """The forest plot of the per-lesson causal credit (``lessonbank.report.causal``)."""
    from lessonbank.report.causal import forest_png

    figure = _figure()
    return _png(figure) if forest_png(document.get("causal", {"lessons": []}), figure) else None


def render_plots(document: dict[str, Any]) -> dict[str, bytes] | None:
    """Plot name -> PNG bytes for the plots that have data; None when matplotlib is not installed."""
    if not plots_available():
        return None
    drawn = {
        "success_rate": _runs_plot(document, "success_rate", "success rate (share of runs with a verdict)"),
        "tokens": _runs_plot(document, "tokens", "tokens per run (input + output)"),
        "lessons": _lessons_plot(document),
        "tool_errors": _tools_plot(document),
        "causal": _causal_plot(document),
    }
    return {name: png for name, png in drawn.items() if png is not None}
