"""Learning curves of runs (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sb3_r2po.experiments.stats import rolling_mean, run_label


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
