"""Means and standard deviations of finite values that stay finite.

Returns near the float limit are finite one by one, but their sum is not: a plain mean of ``[1e308, 1e308]`` is
``inf`` and a standard deviation ``nan``. These functions give numpy's result whenever it is finite (bit for bit),
and otherwise compute it on values scaled by their largest magnitude, which cannot overflow (a mean or standard
deviation of values within ``[-M, M]`` is at most ``M``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


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
