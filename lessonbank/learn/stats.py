"""Interval estimates, for the report's arms and each lesson's causal credit (``lessonbank.learn.causal``): Wilson
for a proportion, Newcombe for a difference of two, and Student's t for means and Welch's t (Welch-Satterthwaite
degrees of freedom) for their differences: a control arm often has a handful of runs, where a normal interval
would be too narrow (by 30 % at five).

Hand-written on the standard library (``statistics.NormalDist``, and Student's t through the regularized
incomplete beta function), so neither the report nor the worker needs SciPy; each is checked against published
values in ``tests/test_report.py``.
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


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        even = m * (b - m) * x / ((qam + m2) * (a + m2))
        odd = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        for numerator in (even, odd):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` (> 0, not necessarily whole) degrees of freedom."""
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_value(df: float, confidence: float = CONFIDENCE) -> float:
    """The two-sided quantile of Student's t with ``df`` degrees of freedom (12.706 for 1, 2.776 for 4 at
    95 %); the normal one (``z_value``) for infinite ``df``."""
    if math.isinf(df):
        return z_value(confidence)
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    target = 0.5 + confidence / 2
    low, high = 0.0, 1.0
    while t_cdf(high, df) < target:
        high *= 2.0
    for _ in range(200):  # bisection: t_cdf is increasing; 200 halvings reach the float's precision
        middle = (low + high) / 2.0
        if middle in (low, high):
            break
        low, high = (middle, high) if t_cdf(middle, df) < target else (low, middle)
    return (low + high) / 2.0


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
    """Mean with Student's t interval (mean ± t(n-1)·s/√n); no interval below two values."""
    if not values:
        return Estimate(None)
    m = statistics.fmean(values)
    if len(values) < 2:
        return Estimate(m)
    half = t_value(len(values) - 1, confidence) * statistics.stdev(values) / math.sqrt(len(values))
    return Estimate(m, m - half, m + half)


def mean_difference(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """``mean(a) - mean(b)`` with Welch's t interval: the unpooled standard error, and the Welch-Satterthwaite
    degrees of freedom."""
    if not a or not b:
        return Estimate(None)
    d = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return Estimate(d)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0.0:
        return Estimate(d, d, d)  # every run of each arm the same: no spread to widen the difference
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    half = t_value(df, confidence) * math.sqrt(va + vb)
    return Estimate(d, d - half, d + half)
