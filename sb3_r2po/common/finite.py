"""Sums, means and standard deviations that stay finite whenever the exact result is: numpy's result when it is finite
(bit for bit), else a sum in exact rational arithmetic, or a mean or standard deviation of the values scaled by their
largest magnitude (numpy's mean of ``[1e308, 1e308]`` is ``inf``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np


def total(values: Sequence[float] | np.ndarray) -> float:
    """The sum of ``values``: numpy's when it is finite, else the exact sum correctly rounded."""
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
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        plain = float(statistic(x))
    if np.isfinite(plain) or not np.isfinite(x).all():
        return plain
    scale = float(np.abs(x).max())
    return scale * float(statistic(x / scale))
