"""Behaviours that mutation testing (docs/mutation.md, ``benchmarks/mutation.py``) found unguarded: each test here
kills a mutant that survived the module's own test files."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.common.rollouts import success_tolerance
from sb3_r2po.r2po.run_state import find, perturb_best, reached, shown_history

SPACE = ParameterSpace(2, low=-5, high=5, decimals=1)


def _record(i: int, mean: float, params: list[float] | None = None, kind: str = "search") -> dict[str, Any]:
    params = [float(i), 0.0] if params is None else params
    return {"iteration": i, "kind": kind, "params": params, "mean_return": mean, "min_return": mean, "n_episodes": 4}


def test_shown_history_shows_all_entries_when_fewer_than_recent() -> None:
    """``recent`` latest of a shorter history is all of it, the first entry included even when it is the worst
    (mutant: the recent window starting at index 1)."""
    history = [_record(0, -5.0), _record(1, 3.0), _record(2, 1.0)]
    assert shown_history(history, best_k=1, recent=5) == history
    assert shown_history(history, best_k=0, recent=3) == history


def test_reached_includes_the_tolerance_boundary() -> None:
    """A minimum return exactly ``success_tolerance`` below the target reaches it: the reference's ``np.isclose`` is
    ``<=`` (mutant: ``>`` instead of ``>=``)."""
    floor = 500.0 - success_tolerance(500.0)
    assert np.isclose(floor, 500.0, atol=max(1e-6, 1e-3 * 500.0))  # the reference's test accepts the boundary
    assert reached([{**_record(0, 500.0), "min_return": floor}], target=500.0, n_episodes=4)
    assert not reached([{**_record(0, 500.0), "min_return": np.nextafter(floor, -np.inf)}], target=500.0, n_episodes=4)


def test_perturb_best_perturbs_the_best_record_and_avoids_the_history() -> None:
    """The fallback is a small Gaussian step from the best record (the highest mean, not the latest or the first), and
    never a vector of the history."""
    history = [_record(0, 1.0, [-4.0, -4.0]), _record(1, 9.0, [2.0, 2.0]), _record(2, 3.0, [4.0, -4.0])]
    rng = np.random.default_rng(0)
    for _ in range(50):
        params = perturb_best(history, SPACE, 0.3, rng)
        assert find(history, params) is None
        assert np.abs(params - 2.0).max() <= 2.0  # about 6 standard deviations: near the best, far from the others


def test_perturb_best_samples_the_space_without_history() -> None:
    """An empty history: a draw of the space's own sampling, from the same generator state."""
    params = perturb_best([], SPACE, 0.3, np.random.default_rng(4))
    np.testing.assert_array_equal(params, SPACE.sample(np.random.default_rng(4)))


def test_perturb_best_leaves_a_neighbourhood_the_history_fills() -> None:
    """When every perturbation lands on a history vector (step 0: the best itself), the fallback is a sample of the
    space that is not the best."""
    history = [_record(0, 9.0, [2.0, 2.0])]
    params = perturb_best(history, SPACE, 0.0, np.random.default_rng(1))
    assert find(history, params) is None


def test_the_mutation_command_names_existing_files() -> None:
    """Every module ``benchmarks/mutation.py`` mutates, and every test file it runs against it, exists (a module
    merged into another must be renamed there, or the documented command fails)."""
    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("mutation_benchmark", root / "benchmarks" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for source, tests in module.MODULES.values():
        assert (root / source).is_file(), source
        assert all((root / test).is_file() for test in tests), tests
