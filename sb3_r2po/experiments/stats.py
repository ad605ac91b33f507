"""
Statistics of runs: per run (:func:`summarize`, :func:`iteration_figures`) and over seeds (:func:`mean_std`,
:func:`iqm_cell`).

Over one run's training-episode returns: **mean**; **best**, the best ``window``-episode rolling mean over full windows
(the mean when there are fewer episodes); **final**, the mean of the last ``window``; **to_threshold**, the episodes
after which the rolling mean (full windows) first reaches the threshold, ``None`` if never. Over R2PO's history: the
mean over iterations of the kept candidates and the best iteration. Over a method's seeds: mean +- std, and the IQM
with its 95 % stratified bootstrap interval (rliable, the ``zoo`` extra; a fixed seed, so one result, one report).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

WINDOW = 20  # default window of the rolling mean
NAMED_POLICIES = ("ProjectedMlp", "ProjectedMlpPolicy", "RandomFeatures", "RandomFeaturesPolicy")  # named in a run's label


def run_label(run: dict[str, Any]) -> str:
    """A run's row in the tables: its method, with a :data:`NAMED_POLICIES` policy (``props_plus (RandomFeatures)``)."""
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
    """``mean``, ``best``, ``final`` and ``to_threshold`` of one run (see the module docstring)."""
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
    """An R2PO run's ``mean_return`` over its iterations' kept candidates and ``best_return`` (NaN without iterations)."""
    if not iteration_returns:
        return {"mean_return": math.nan, "best_return": math.nan}
    return {"mean_return": float(np.mean(iteration_returns)), "best_return": float(np.max(iteration_returns))}


def mean_std(values: Sequence[float]) -> str:
    """``"mean +- std"`` (population std), two decimals."""
    arr = np.asarray(values, dtype=np.float64)
    return f"{arr.mean():.2f} +- {arr.std():.2f}"


BOOTSTRAP_REPS = 2000
BOOTSTRAP_SEED = 0  # each interval's bootstrap starts from it: one result, one report
CONFIDENCE = 0.95


def iqm_interval(
    values: Sequence[float] | np.ndarray, reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float, float]:
    """
    ``(iqm, low, high)``: the interquartile mean of one figure over runs (rliable's ``aggregate_iqm``) and its
    :data:`CONFIDENCE` stratified bootstrap interval (percentile method, ``reps`` resamples, numpy's global generator
    seeded with ``seed`` for the call and restored after it); NaN without values or with a non-finite one.
    """
    figures = tuple(float(v) for v in np.asarray(values, dtype=np.float64).ravel())
    if not figures or not all(math.isfinite(v) for v in figures):
        return math.nan, math.nan, math.nan
    return _bootstrap(figures, reps, seed)


@functools.lru_cache(maxsize=4096)
def _bootstrap(figures: tuple[float, ...], reps: int, seed: int) -> tuple[float, float, float]:
    """:func:`iqm_interval` of finite ``figures``, cached (0.2-0.5 s a call)."""
    try:
        from rliable import library, metrics  # type: ignore[import-untyped]
    except ImportError as error:
        raise ImportError(
            "the reports' confidence intervals need rliable, installed with the zoo extra: pip install 'sb3-r2po[zoo]'"
        ) from error
    scores = np.asarray(figures, dtype=np.float64).reshape(-1, 1)  # (runs, tasks): one task
    # rliable's StratifiedBootstrap draws its resamples from numpy's global generator whatever random_state it gets:
    # seed that for the call and give the caller's state back afterwards
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():  # arch (under rliable) deprecates random_state in favour of a Generator
            warnings.simplefilter("ignore", FutureWarning)
            points, intervals = library.get_interval_estimates(
                {"runs": scores},
                lambda x: np.array([metrics.aggregate_iqm(x)]),
                reps=reps,
                confidence_interval_size=CONFIDENCE,
                random_state=np.random.RandomState(seed),
            )
    finally:
        np.random.set_state(state)
    low, high = np.asarray(intervals["runs"], dtype=np.float64).ravel()[:2]
    return float(np.asarray(points["runs"]).ravel()[0]), float(low), float(high)


def iqm_cell(values: Sequence[float]) -> str:
    """``"iqm [low, high]"`` of :func:`iqm_interval`, two decimals (``(1 run)`` for one run; ``n/a`` without values)."""
    iqm, low, high = iqm_interval(values)
    if math.isnan(iqm):
        return "n/a"
    return f"{iqm:.2f} [{low:.2f}, {high:.2f}]" + (" (1 run)" if len(values) == 1 else "")


def interval_note(runs: int | Sequence[int]) -> str:
    """What a report's intervals are and how many runs each rests on (``runs``: per method, or one count)."""
    counts = sorted({runs} if isinstance(runs, int) else set(runs))
    shown = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    note = (
        f"IQM [95 % CI]: the interquartile mean over the runs (seeds) of a method, {shown} "
        f"{'run' if counts == [1] else 'runs'} each, with its 95 % stratified bootstrap confidence interval (rliable, "
        f"percentile method, {BOOTSTRAP_REPS} resamples, seed {BOOTSTRAP_SEED})."
    )
    if counts[0] == 1:
        note += " With one run a cell is that run's figure and its interval the point itself, marked (1 run): no interval."
    elif counts[0] < 5:
        note += f" With {counts[0]} runs an interval shows their spread, not where further seeds would fall."
    return note


def episodes_cell(counts: list[int]) -> str:
    return str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


def threshold_cell(values: list[int | None]) -> str:
    reached = [v for v in values if v is not None]
    if not reached:
        return f"not reached (0/{len(values)})"
    return f"{mean_std([float(v) for v in reached])} ({len(reached)}/{len(values)})"
