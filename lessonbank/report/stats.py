"""Interval estimates for the report: Wilson for a proportion, Newcombe for a difference of two, and a
normal interval with Welch's standard error for means and their differences.

Hand-written on the standard library (``statistics.NormalDist``), so the report needs no SciPy; each is
checked against published values in ``tests/test_report.py``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95


def z_value(confidence: float = CONFIDENCE) -> float:
    """The two-sided standard normal quantile (1.959964 for 95 %)."""
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2)


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its interval (``low``/``high`` are None when it cannot be computed)."""

    estimate: float | None
    low: float | None = None
    high: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high}

    def negated(self) -> Estimate:
        def neg(value: float | None) -> float | None:
            return None if value is None else 0.0 - value  # never -0.0 (printed "-0.00"), unlike -value

        return Estimate(neg(self.estimate), neg(self.high), neg(self.low))


def wilson(successes: int, n: int, confidence: float = CONFIDENCE) -> Estimate:
    """Wilson score interval of ``successes`` out of ``n`` (Newcombe 1998, method 3)."""
    if n <= 0:
        return Estimate(None)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..{n}, got {successes}")
    z = z_value(confidence)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Estimate(p, low, high)


def newcombe(s1: int, n1: int, s2: int, n2: int, confidence: float = CONFIDENCE) -> Estimate:
    """Difference ``s1/n1 - s2/n2`` with Newcombe's hybrid score interval (Newcombe 1998, method 10)."""
    first, second = wilson(s1, n1, confidence), wilson(s2, n2, confidence)
    if first.estimate is None or second.estimate is None:
        return Estimate(None)
    p1, l1, u1 = first.estimate, first.low or 0.0, first.high or 0.0
    p2, l2, u2 = second.estimate, second.low or 0.0, second.high or 0.0
    d = p1 - p2
    return Estimate(d, d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2))


def mean(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """Mean with a normal interval (mean ± z·s/√n); no interval below two values."""
    if not values:
        return Estimate(None)
    m = statistics.fmean(values)
    if len(values) < 2:
        return Estimate(m)
    half = z_value(confidence) * statistics.stdev(values) / math.sqrt(len(values))
    return Estimate(m, m - half, m + half)


def mean_difference(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """``mean(a) - mean(b)`` with a normal interval on Welch's (unpooled) standard error."""
    if not a or not b:
        return Estimate(None)
    d = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return Estimate(d)
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    half = z_value(confidence) * se
    return Estimate(d, d - half, d + half)
