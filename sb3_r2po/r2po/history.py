"""Questions asked of a run's history (``R2PO.history``, a list of :meth:`HistoryEntry.to_dict` records)."""

from __future__ import annotations

from typing import Any

import numpy as np

from sb3_r2po.common.evidence import success_tolerance
from sb3_r2po.common.parameters import ParameterSpace

Record = dict[str, Any]


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


def shown_history(history: list[Record], best_k: int | None, recent: int | None, slack: int = 0) -> list[Record]:
    """
    The history as prompts show it: all of it, or the best ``best_k`` plus the ``recent`` latest (in history order).

    With ``slack`` > 0 the shown entries only grow, by appending, until there would be more than
    ``best_k + recent + slack`` of them; then they are cut back to the best ``best_k`` plus the ``recent`` latest. Between
    cut-backs a prompt's history is the previous prompt's plus the new entries (a prefix cache reuses all of it). The
    best ``best_k`` and the ``recent`` latest are always among the shown entries.
    """
    if best_k is None and recent is None:
        return history
    n, best_k, recent = len(history), best_k or 0, recent or 0
    ranked = sorted(range(n), key=lambda i: (-history[i]["mean_return"], i))

    def window(end: int) -> list[int]:  # the best best_k and the recent latest of history[:end], in history order
        best = [i for i in ranked if i < end][:best_k]
        return sorted(set(range(max(0, end - recent), end)).union(best))

    if slack == 0:
        return [history[i] for i in window(n)]
    limit, cut = best_k + recent + slack, 0
    kept: list[int] = []
    while len(kept) + n - cut > limit:  # the window is cut back at the entry that would exceed the limit
        cut += limit - len(kept) + 1
        kept = window(cut)
    return [history[i] for i in kept] + history[cut:]


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


def reached(history: list[Record], target: float, n_episodes: int) -> bool:
    """Whether a record of at least ``n_episodes`` episodes reached ``target`` in each (to the success tolerance)."""
    floor = target - success_tolerance(target)
    return any(r["n_episodes"] >= n_episodes and r["min_return"] >= floor for r in history)
