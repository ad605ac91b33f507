"""Learning curves of runs and the intervals of their figures (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sb3_r2po.experiments.stats import iqm_interval, rolling_mean, run_label, summarize


def plot_curves(
    runs: Sequence[dict[str, Any]], path: Path, env_id: str, window: int, threshold: float | None, budget: int
) -> None:
    """
    Write the learning curves: per method, the ``window``-episode rolling mean of the training returns, mean over
    seeds (line) +- std over seeds (shaded), against training episodes; the threshold as a dashed line.

    :param runs: Runs of one env, each with ``method`` and ``returns`` (as ``runs.json`` holds them).
    :param path: The image file to write (its suffix gives the format).
    :param env_id: The env, for the title.
    :param window: The rolling-mean window.
    :param threshold: The threshold line (``None``: none).
    :param budget: The x-axis extent.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    methods = list(dict.fromkeys(run_label(r) for r in runs))
    colors = [f"C{i}" for i in range(10)]
    for index, method in enumerate(methods):
        curves = [rolling_mean(r["returns"], window) for r in runs if run_label(r) == method]
        length = max((c.size for c in curves), default=0)
        if length == 0:
            continue
        stacked = np.full((len(curves), length), np.nan)
        for row, curve in enumerate(curves):
            stacked[row, : curve.size] = curve
        counts = np.sum(~np.isnan(stacked), axis=0)
        mean = np.nansum(stacked, axis=0) / counts
        std = np.sqrt(np.nansum((stacked - mean) ** 2, axis=0) / counts)
        x = np.arange(1, length + 1)
        color = colors[index % len(colors)]
        ax.plot(x, mean, color=color, linewidth=2, label=f"{method} ({len(curves)} seeds)")
        ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)
    if threshold is not None:
        ax.axhline(threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {threshold:g}")
    ax.set_xlim(1, max(budget, 2))
    ax.set_xlabel("training episodes (evaluation episodes are not charged)")
    ax.set_ylabel(f"return, {window}-episode rolling mean")
    ax.set_title(f"{env_id}: mean +- std over seeds, budget {budget} training episodes")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.savefig(path)


def plot_intervals(runs: Sequence[dict[str, Any]], path: Path, env_id: str, window: int) -> None:
    """
    Write the interval figure of ``results.md``'s figures (mean return over training, best and final ``window``-episode
    rolling mean): one panel per figure, one row per method, the IQM over seeds (dot) with its 95 % stratified bootstrap
    confidence interval (thick bar, :func:`~sb3_r2po.experiments.stats.iqm_interval`) and the mean +- std over seeds
    (diamond, thin bar) below it; the number of runs in the row's label.

    :param runs: Runs of one env, each with ``method`` and ``returns`` (as ``runs.json`` holds them).
    :param path: The image file to write (its suffix gives the format).
    :param env_id: The env, for the title.
    :param window: The rolling-mean window.
    """
    from matplotlib.figure import Figure

    methods = list(dict.fromkeys(run_label(r) for r in runs))
    stats = {m: [summarize(r["returns"], window) for r in runs if run_label(r) == m] for m in methods}
    panels = (
        ("mean", "mean return over training"),
        ("best", f"best {window}-ep. rolling mean"),
        ("final", f"final (last {window} ep.)"),
    )
    fig = Figure(figsize=(12, 1.2 + 0.6 * len(methods)), dpi=120, layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    labels = [f"{m} ({len(stats[m])} run{'s' if len(stats[m]) != 1 else ''})" for m in methods]
    for ax, (key, title) in zip(axes, panels, strict=True):
        for row, method in enumerate(methods):
            values = np.asarray([s[key] for s in stats[method]], dtype=np.float64)
            color = f"C{row % 10}"
            iqm, low, high = iqm_interval(values)
            if not np.isnan(iqm):
                ax.plot([low, high], [row, row], color=color, linewidth=6, alpha=0.5, solid_capstyle="butt")
                ax.plot([iqm], [row], "o", color=color, label="IQM [95 % CI]" if row == 0 else None)
            finite = values[np.isfinite(values)]
            if finite.size:
                mean, std = float(finite.mean()), float(finite.std())
                ax.errorbar([mean], [row + 0.25], xerr=[std], fmt="D", color=color, markerfacecolor="white",
                            capsize=3, linewidth=1, label="mean +- std" if row == 0 else None)  # fmt: skip
        ax.set_title(title)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(methods)), labels)
    axes[0].set_ylim(len(methods) - 0.5, -0.5)
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small")
    fig.suptitle(f"{env_id}: IQM with 95 % stratified bootstrap CI (rliable) and mean +- std over seeds")
    fig.savefig(path)
