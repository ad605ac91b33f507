"""Racing: stop evaluating a challenger once it statistically cannot beat the incumbent.

With racing on, a challenger is evaluated in chunks of ``m`` episodes; it stops when the one-sided upper confidence
bound ``mean + z * std(ddof=1) / sqrt(m)`` (``z = 1.645``, about 95 %) is below the incumbent's mean. Only the
episodes run are charged. A heuristic: with few identical returns the bound is the mean itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from sb3_r2po.common.rollouts import Episode, RolloutResult


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


def run_race(
    run: Callable[[int], RolloutResult | None],
    n_episodes: int,
    chunk: int,
    incumbent: float,
    z: float,
    stop_requested: Callable[[], bool],
) -> RolloutResult | None:
    """
    Evaluate a challenger in chunks of ``chunk`` episodes until ``n_episodes`` ran or it cannot reach ``incumbent``.

    :param run: Runs the next ``m`` episodes of the challenger; ``None`` when a callback stopped training meanwhile.
    :param stop_requested: Whether a callback asked to stop (an incomplete race then returns ``None``).
    :return: The episodes run, renumbered in order; ``None`` when training stopped before the race ended.
    """
    episodes: list[Episode] = []
    while len(episodes) < n_episodes:
        part = run(min(chunk, n_episodes - len(episodes)))
        if part is None or (stop_requested() and len(episodes) + len(part.episodes) < n_episodes):
            return None
        for episode in part.episodes:
            episode.index += len(episodes)
        episodes += part.episodes
        if len(episodes) < n_episodes and should_stop([ep.total_return for ep in episodes], incumbent, z):
            break
    return RolloutResult(episodes)
