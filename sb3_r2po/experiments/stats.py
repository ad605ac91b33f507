"""
Statistics of runs: per run (:func:`summarize`, :func:`iteration_figures`) and over seeds (:func:`mean_std`).

Over the training-episode returns of one run, in the order the episodes ended:

- **mean**: the mean return over all training episodes;
- **best**: the best ``window``-episode rolling mean, over full windows (the mean of all episodes when there are fewer);
- **final**: the mean of the last ``window`` episodes;
- **to_threshold**: the number of training episodes after which the ``window``-episode rolling mean first reaches
  the threshold (full windows only), ``None`` when it never does.

Over R2PO's history (the paper's figures): the mean over iterations of the kept candidates' K-episode means, and the
best iteration (:func:`iteration_figures`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

WINDOW = 20
"""Default window of the rolling mean (best, final, episodes to threshold, curves)."""

NAMED_POLICIES = ("ProjectedMlp", "ProjectedMlpPolicy", "RandomFeatures", "RandomFeaturesPolicy")
"""The ``policy`` hyperparameters a run's label names (R2PO's nonlinear policies); a method's usual policy goes unnamed."""


def run_label(run: dict[str, Any]) -> str:
    """The row (and curve) of a run in the tables and plots: its method, with its policy when that is one of
    :data:`NAMED_POLICIES` (``props_plus (RandomFeatures)``: the paper grid's nonlinear-policy runs)."""
    policy = (run.get("hyperparams") or {}).get("policy")
    return f"{run['method']} ({policy})" if policy in NAMED_POLICIES else str(run["method"])


def rolling_mean(returns: Sequence[float] | np.ndarray, window: int) -> np.ndarray:
    """The mean of the last ``window`` returns after every episode (fewer at the start: the mean so far)."""
    values = np.asarray(returns, dtype=np.float64)
    if values.size == 0:
        return values
    sums = np.cumsum(np.insert(values, 0, 0.0))
    ends = np.arange(1, values.size + 1)
    starts = np.maximum(0, ends - window)
    return (sums[ends] - sums[starts]) / (ends - starts)


def summarize(returns: Sequence[float], window: int = WINDOW, threshold: float | None = None) -> dict[str, Any]:
    """The figures of one run: ``mean``, ``best``, ``final`` and ``to_threshold`` (see the module docstring)."""
    values = np.asarray(returns, dtype=np.float64)
    if values.size == 0:
        return {"mean": math.nan, "best": math.nan, "final": math.nan, "to_threshold": None}
    rolling = rolling_mean(values, window)
    full = rolling[window - 1 :] if values.size >= window else rolling[-1:]
    to_threshold = None
    if threshold is not None and values.size >= window:
        reached = np.flatnonzero(rolling[window - 1 :] >= threshold)
        to_threshold = int(reached[0]) + window if reached.size else None
    return {
        "mean": float(values.mean()),
        "best": float(full.max()),
        "final": float(values[-window:].mean()),
        "to_threshold": to_threshold,
    }


def iteration_figures(iteration_returns: Sequence[float]) -> dict[str, float]:
    """The paper's figures of an R2PO run: ``mean_return`` over its iterations' kept candidates and ``best_return``,
    the best iteration (NaN without an iteration)."""
    if not iteration_returns:
        return {"mean_return": math.nan, "best_return": math.nan}
    return {"mean_return": float(np.mean(iteration_returns)), "best_return": float(np.max(iteration_returns))}


def mean_std(values: Sequence[float]) -> str:
    """``"mean +- std"`` of ``values`` (population std), two decimals: one cell of the reports' tables."""
    arr = np.asarray(values, dtype=np.float64)
    return f"{arr.mean():.2f} +- {arr.std():.2f}"


def episodes_cell(counts: list[int]) -> str:
    """The training episodes of a method's runs: one number, or the range."""
    return str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


def threshold_cell(values: list[int | None]) -> str:
    """Episodes to threshold over seeds: mean +- std of the seeds that reached it, how many did in brackets."""
    reached = [v for v in values if v is not None]
    if not reached:
        return f"not reached (0/{len(values)})"
    return f"{mean_std([float(v) for v in reached])} ({len(reached)}/{len(values)})"
