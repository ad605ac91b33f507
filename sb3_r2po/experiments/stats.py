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

Over the runs of a method (its seeds), each figure is reported twice: mean +- std (:func:`mean_std`) and the
interquartile mean with its 95 % stratified bootstrap confidence interval (:func:`iqm_interval`, :func:`iqm_cell`;
the ``rliable`` library, installed with the ``zoo`` extra), with a fixed random state so that a result always gives
the same report.
"""

from __future__ import annotations

import functools
import math
import warnings
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


BOOTSTRAP_REPS = 2000
"""Bootstrap resamples of an interval (:func:`iqm_interval`)."""

BOOTSTRAP_SEED = 0
"""Seed each interval's bootstrap starts from (:func:`iqm_interval`): one result, one report."""

CONFIDENCE = 0.95
"""Coverage of the intervals."""


def _rliable() -> tuple[Any, Any]:
    """rliable's ``library`` and ``metrics`` modules, imported when an interval is computed (an optional dependency)."""
    try:
        from rliable import library, metrics  # type: ignore[import-untyped]
    except ImportError as error:
        raise ImportError(
            "the reports' confidence intervals need rliable, installed with the zoo extra: pip install 'sb3-r2po[zoo]'"
        ) from error
    return library, metrics


def iqm_interval(
    values: Sequence[float] | np.ndarray, reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float, float]:
    """
    The interquartile mean of one figure over runs (the mean of the middle 50 %: ``scipy.stats.trim_mean(values,
    0.25)``, rliable's ``aggregate_iqm``) and its :data:`CONFIDENCE` stratified bootstrap confidence interval over the
    runs (rliable's ``get_interval_estimates``, percentile method, one task).

    :param values: The figure of each run.
    :param reps: Bootstrap resamples.
    :param seed: Seed of the bootstrap's resampling (numpy's global generator, which rliable draws from, seeded for the
        call and restored after it): the same values always give the same interval.
    :return: ``(iqm, low, high)``; all three NaN when there is no value or a value is not finite. With one run the
        interval is the point itself (a resample of one run is that run).
    """
    figures = tuple(float(v) for v in np.asarray(values, dtype=np.float64).ravel())
    if not figures or not all(math.isfinite(v) for v in figures):
        return math.nan, math.nan, math.nan
    return _bootstrap(figures, reps, seed)


@functools.lru_cache(maxsize=4096)
def _bootstrap(figures: tuple[float, ...], reps: int, seed: int) -> tuple[float, float, float]:
    """:func:`iqm_interval` of finite ``figures``, kept for the next table or figure that shows the same values (about
    0.2-0.5 s a call: rliable's bootstrap calls the IQM once per resample)."""
    scores = np.asarray(figures, dtype=np.float64).reshape(-1, 1)  # (runs, tasks): one task
    library, metrics = _rliable()
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
    """``"iqm [low, high]"`` of :func:`iqm_interval` over ``values``, two decimals, ``(1 run)`` appended when the
    interval rests on one run (a point, no interval); ``n/a`` without finite values: one cell of the reports' tables."""
    iqm, low, high = iqm_interval(values)
    if math.isnan(iqm):
        return "n/a"
    return f"{iqm:.2f} [{low:.2f}, {high:.2f}]" + (" (1 run)" if len(values) == 1 else "")


def interval_note(runs: int | Sequence[int]) -> str:
    """The sentence a report gives its intervals: what they are and how many runs each rests on (``runs``: the count
    per method, or one count)."""
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
    """The training episodes of a method's runs: one number, or the range."""
    return str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


def threshold_cell(values: list[int | None]) -> str:
    """Episodes to threshold over seeds: mean +- std of the seeds that reached it, how many did in brackets."""
    reached = [v for v in values if v is not None]
    if not reached:
        return f"not reached (0/{len(values)})"
    return f"{mean_std([float(v) for v in reached])} ({len(reached)}/{len(values)})"
