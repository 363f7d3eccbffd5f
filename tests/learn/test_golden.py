"""Behaviour pinned: the learning code gives the same outputs on the recorded corpus as when they were written
(``tests/learn/golden.py``: evidence, fixes, shapes, recipes, the gate, credit, instructions blocks)."""

from __future__ import annotations

from typing import Any

from tests.learn.golden import CORPUS, EXPECTED, outputs, read


def _first_difference(got: Any, want: Any, path: str = "") -> str | None:
    if isinstance(got, dict) and isinstance(want, dict):
        for key in sorted(set(got) | set(want)):
            if key not in got or key not in want:
                return f"{path}/{key}: {'missing' if key not in got else 'unexpected'}"
            found = _first_difference(got[key], want[key], f"{path}/{key}")
            if found:
                return found
        return None
    if isinstance(got, list) and isinstance(want, list):
        for index, (a, b) in enumerate(zip(got, want, strict=False)):
            found = _first_difference(a, b, f"{path}/{index}")
            if found:
                return found
        return f"{path}: {len(got)} items, expected {len(want)}" if len(got) != len(want) else None
    return None if got == want else f"{path}:\n  got  {got!r}\n  want {want!r}"


def test_the_corpus_gives_the_recorded_outputs() -> None:
    got = outputs(read(CORPUS))
    difference = _first_difference(got, read(EXPECTED))
    assert difference is None, difference
