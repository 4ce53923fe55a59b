"""Binomial intervals of a rate (of disagreement, of accuracy): Wilson's score interval, and the exact
(Clopper-Pearson) lower bound the audit alerts rest on. Pure."""

from __future__ import annotations

import functools
import math


@functools.lru_cache(maxsize=4096)  # a window's counts repeat from snapshot to snapshot
def exact_lower_bound(disagreed: int, audited: int, alpha: float = 0.05) -> float:
    """The Clopper-Pearson (exact) lower bound of a disagreement rate at 1 - ``alpha`` two-sided: the
    rate at which ``disagreed`` or more of ``audited`` happen with probability ``alpha / 2``, that is
    the ``alpha / 2`` quantile of Beta(disagreed, audited - disagreed + 1). Unlike Wilson's, it never
    claims more than the counts show (1 of 1: 0.025)."""
    if disagreed == 0:
        return 0.0
    if disagreed == audited:  # the closed form
        return (alpha / 2) ** (1 / audited)
    a, b = disagreed, audited - disagreed + 1
    low, high = 0.0, disagreed / audited  # P(X >= disagreed) = I_rate(a, b) rises with the rate
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if _regularized_beta(middle, a, b) < alpha / 2 else (low, middle)
    return low


def _regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), by the continued fraction (modified Lentz), on the side where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _regularized_beta(1.0 - x, b, a)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return math.exp(log_front) * fraction / a


def wilson_interval(disagreed: int, audited: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95 % Wilson score interval of a disagreement rate; (0, 1) before any audit."""
    if audited == 0:
        return 0.0, 1.0
    p = disagreed / audited
    centre = (p + z * z / (2 * audited)) / (1 + z * z / audited)
    half = z * math.sqrt(p * (1 - p) / audited + z * z / (4 * audited * audited)) / (1 + z * z / audited)
    return max(0.0, centre - half), min(1.0, centre + half)
