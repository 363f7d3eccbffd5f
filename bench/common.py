"""Helpers shared by the benchmark scripts: timing statistics, a throwaway redis-server, JSON output, the table.

Every script reports rows of ``{"figure", "value", "baseline", "ratio", "target"}``: the figure, the
baseline measured in the same run, their ratio and the goal (printed, never asserted).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def redis_server(workdir: Path, persistent: bool = False) -> Iterator[str]:
    """A redis-server on a free loopback port for the duration of the block; yields its URL. ``persistent``: its
    append-only file lives in ``workdir``, so a server started again there has the data back (it may load it a
    while: up to a minute is waited for)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir), "--save", "",
                             "--appendonly", "yes" if persistent else "no"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + (60 if persistent else 10)
        while True:
            try:
                redis.Redis.from_url(url, socket_timeout=0.5).ping()
                break
            except (redis.ConnectionError, redis.BusyLoadingError):
                if time.monotonic() > deadline:
                    raise SystemExit("redis-server did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of already sorted values."""
    if not sorted_values:
        return float("nan")
    return float(sorted_values[min(len(sorted_values) - 1, max(0, int(round(q * len(sorted_values))) - 1))])


def latency_stats(samples: Sequence[float], digits: int = 3) -> dict[str, float]:
    """p50 / p95 / p99 / mean / min / max of samples (any unit), and their count."""
    values = sorted(samples)
    return {
        "p50": round(statistics.median(values), digits),
        "p95": round(quantile(values, 0.95), digits),
        "p99": round(quantile(values, 0.99), digits),
        "mean": round(statistics.fmean(values), digits),
        "min": round(values[0], digits),
        "max": round(values[-1], digits),
        "n": len(values),
    }


def spread(per_repeat: Sequence[float], digits: int = 3) -> dict[str, Any]:
    """Median over repeats and the range around it: how much to trust one figure on a noisy machine."""
    values = sorted(per_repeat)
    return {
        "median": round(statistics.median(values), digits),
        "min": round(values[0], digits),
        "max": round(values[-1], digits),
        "repeats": [round(v, digits) for v in per_repeat],
    }


def ratio(value: float, baseline: float) -> float | None:
    return round(value / baseline, 2) if baseline else None


def row(figure: str, value: str, baseline: str = "", ratio_value: float | None = None, target: str = "",
        met: bool | None = None) -> dict[str, Any]:
    """One line of the summary table."""
    return {"figure": figure, "value": value, "baseline": baseline,
            "ratio": "" if ratio_value is None else f"{ratio_value:.2f}x", "target": target,
            "met": "" if met is None else ("yes" if met else "MISSED")}


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "python": platform.python_version(),
            "cpus": os.cpu_count(), "platform": platform.platform(), "load_1m": round(load[0], 2)}


def write_result(name: str, result: dict[str, Any], out_dir: Path = RESULTS) -> Path:
    """bench/results/<name>.json with the machine note added."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **result}, indent=2) + "\n")
    return path


def print_table(rows: Sequence[dict[str, Any]], file: Any = None) -> None:
    """The rows as a fixed-width table (also valid Markdown)."""
    headers = ["figure", "value", "baseline (same run)", "ratio", "target", "met"]
    keys = ["figure", "value", "baseline", "ratio", "target", "met"]
    cells = [[str(r.get(k, "")) for k in keys] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    print(line(headers), file=file)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|", file=file)
    for c in cells:
        print(line(c), file=file)


def embed_model_path() -> Path:
    """The local all-MiniLM-L6-v2 folder the tests use (assembled once per machine)."""
    from tests.fixtures.embed_model import assemble_model

    return assemble_model()


def plt_or_none() -> Any:
    """matplotlib.pyplot with the Agg backend, or None when matplotlib is not installed (plots are skipped)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot written")
        return None
    return plt


def save_plot(fig: Any, ax: Any, path: Path) -> Path:
    """Legend beside the data (never over it), saved at 110 dpi, the figure closed."""
    import matplotlib.pyplot as plt

    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
