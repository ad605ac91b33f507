"""Racing: stop evaluating a challenger once it statistically cannot beat the incumbent.

A challenger (the Critic's revision, or a second Search proposal) only matters if its K-episode mean reaches
the incumbent's mean (keep-best). With racing on, it is evaluated in chunks; after each chunk of ``m`` episodes
(``m < K``) the evaluation stops when the one-sided upper confidence bound of its mean is below the incumbent::

    mean(returns) + z * std(returns, ddof=1) / sqrt(m)  <  incumbent

(``z = 1.645``: about 95 % one-sided under a normal approximation). Only the episodes run are charged, and the
Critic-facing record keeps them. The rule is a heuristic, not a guarantee: with few, identical returns the
standard deviation is 0 and the bound is the mean itself. ``benchmarks/racing.py`` measures the episodes saved
and how often the decision differs from the full-K one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def upper_bound(returns: Sequence[float], z: float) -> float:
    """One-sided upper confidence bound of the mean of ``returns``."""
    values = np.asarray(returns, dtype=np.float64)
    if values.size < 2:
        return float("inf")
    return float(values.mean() + z * values.std(ddof=1) / np.sqrt(values.size))


def should_stop(returns: Sequence[float], incumbent: float, z: float) -> bool:
    """Whether a challenger with these returns so far cannot reach ``incumbent`` (see the module docstring)."""
    return upper_bound(returns, z) < incumbent


def race(returns: Sequence[float], incumbent: float, chunk: int, z: float) -> int:
    """How many of ``returns`` racing would have run (a multiple of ``chunk``, or all of them)."""
    for m in range(chunk, len(returns), chunk):
        if should_stop(returns[:m], incumbent, z):
            return m
    return len(returns)
