"""The cheapest benchmark runs and writes its JSON (benchmarks themselves are not part of the suite)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_retrieval_quality_writes_its_figures(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "retrieval_quality.py"), "--pairs", "6", "--no-distractors",
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "retrieval_quality.json").read_text())
    assert result["pairs"] == 6 and result["lessons_in_bank"] == 6
    for method in ("dense", "hybrid", "builder"):
        assert set(result[method]) >= {"recall@1", "recall@5", "mrr"}
        assert 0.0 <= result[method]["recall@1"] <= result[method]["recall@5"] <= 1.0
    assert result["hybrid"]["recall@5"] > 0.5  # six unrelated lessons: the right one ranks near the top
    assert {r["figure"] for r in result["rows"]} >= {"retrieval recall@5 (hybrid)", "retrieval MRR (hybrid)"}
    assert result["machine"]["cpus"] and "recall@5" in proc.stdout
