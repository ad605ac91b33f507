"""Questions asked of a run's history (``R2PO.history``, a list of :meth:`HistoryEntry.to_dict` records)."""

from __future__ import annotations

from typing import Any

import numpy as np

from sb3_r2po.common.evidence import success_tolerance
from sb3_r2po.common.parameters import ParameterSpace

Record = dict[str, Any]

MAX_DRAWS = 1000
"""Random draws in a row that may repeat history vectors before :func:`draw_new` gives up (a tiny parameter space)."""


def best_record(history: list[Record]) -> Record | None:
    """
    The best record: the highest K-episode mean among iteration records, or, before the first iteration, the best
    warm-up record. ``None`` for an empty history.
    """
    evaluated = [r for r in history if r["kind"] != "warmup"] or history
    if not evaluated:
        return None
    return max(evaluated, key=lambda r: r["mean_return"])


def find(history: list[Record], params: np.ndarray) -> Record | None:
    """The record holding ``params``, if any."""
    for record in history:
        if np.array_equal(np.asarray(record["params"]), params):
            return record
    return None


def shown_history(history: list[Record], best_k: int | None, recent: int | None) -> list[Record]:
    """The history as prompts show it: all of it, or the best ``best_k`` plus the ``recent`` latest (in order)."""
    if best_k is None and recent is None:
        return history
    n = len(history)
    latest = set(range(max(0, n - (recent or 0)), n))
    ranked = sorted(range(n), key=lambda i: (-history[i]["mean_return"], i))
    return [history[i] for i in sorted(latest | set(ranked[: best_k or 0]))]


def duplicate_error(history: list[Record], params: np.ndarray) -> str | None:
    """Why a reply repeating a history vector is unusable (with ``reject_duplicates``); ``None`` for a new vector."""
    record = find(history, params)
    if record is None:
        return None
    return (
        f"this vector was already evaluated (iteration {record['iteration']}, mean return "
        f"{record['mean_return']:.4g}); propose a vector that is not in the history"
    )


def perturb_best(history: list[Record], space: ParameterSpace, step_size: float, rng: np.random.Generator) -> np.ndarray:
    """A Gaussian perturbation of the best candidate at ``step_size`` that is not in the history (the fallback)."""
    best = best_record(history)
    for _ in range(100):
        params = space.sample(rng) if best is None else space.perturb(np.asarray(best["params"]), step_size, rng)
        if find(history, params) is None:
            return params
    return space.sample(rng)


def draw_new(
    history: list[Record], space: ParameterSpace, rng: np.random.Generator, draws: int = MAX_DRAWS
) -> np.ndarray | None:
    """A random vector that is not in the history; ``None`` when ``draws`` draws in a row all repeated one."""
    for _ in range(draws):
        params = space.sample(rng)
        if find(history, params) is None:
            return params
    return None


def reached(history: list[Record], target: float, n_episodes: int) -> bool:
    """Whether a record of at least ``n_episodes`` episodes reached ``target`` in each (to the success tolerance)."""
    floor = target - success_tolerance(target)
    return any(r["n_episodes"] >= n_episodes and r["min_return"] >= floor for r in history)
