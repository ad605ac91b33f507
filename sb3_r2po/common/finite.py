"""Sums, means and standard deviations of finite values that stay finite whenever the exact result is.

Rewards and returns near the float limit are finite one by one, but numpy's sums of them may not be: a plain mean of
``[1e308, 1e308]`` is ``inf``, a standard deviation ``nan``, and numpy's pairwise sum of ``[1e308, -1e308] * 8`` is
``nan`` though the exact sum is 0. These functions give numpy's result whenever it is finite (bit for bit), and
otherwise compute it without overflow: a sum exactly (in rational arithmetic, then rounded), a mean or
standard deviation on values scaled by their largest magnitude (of values within ``[-M, M]`` it is at most ``M``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np


def total(values: Sequence[float] | np.ndarray) -> float:
    """The sum of ``values``: numpy's when it is finite, else the exact sum correctly rounded (``+-inf`` only when that
    exceeds the float range, or a value is infinite; ``nan`` when a value is ``nan``)."""
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        plain = float(np.sum(x))
    if math.isfinite(plain) or not np.isfinite(x).all():
        return plain
    exact = sum(map(Fraction, x.tolist()), Fraction(0))  # rare (a partial sum overflowed): exact rational arithmetic
    try:
        return float(exact)  # correctly rounded
    except OverflowError:  # the exact sum is beyond the float range
        return math.inf if exact > 0 else -math.inf


def mean(values: Sequence[float] | np.ndarray) -> float:
    """The mean of ``values`` (finite when every value is)."""
    return _finite(np.mean, values)


def std(values: Sequence[float] | np.ndarray) -> float:
    """The (population) standard deviation of ``values`` (finite when every value is)."""
    return _finite(np.std, values)


def _finite(statistic: Callable[[np.ndarray], Any], values: Sequence[float] | np.ndarray) -> float:
    """``statistic(values)``, computed on the values scaled by their largest magnitude when the plain one overflows."""
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        plain = float(statistic(x))
    if np.isfinite(plain) or not np.isfinite(x).all():
        return plain
    scale = float(np.abs(x).max())
    return scale * float(statistic(x / scale))
