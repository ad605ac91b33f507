"""Grids of runs: env x method x seed (:func:`grid`) and the named grids (:data:`GRIDS`): ``paper``, the R2PO paper's
(arXiv 2605.08315) envs, seeds, methods and budgets, with its published numbers (:data:`PUBLISHED`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sb3_r2po.experiments.runs import R2PO_METHODS, RunSpec, r2po_entry

PAPER_ENVS: tuple[str, ...] = (
    "CartPole-v1",
    "InvertedPendulum-v5",
    "InvertedDoublePendulum-v5",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Swimmer-v5",
    "R2PO/Pong-v0",
    "FrozenLake-v1",
    "R2PO/Maze3x3-v0",
    "R2PO/Nim-v0",
)
PAPER_SEEDS: tuple[int, ...] = tuple(range(10))  # the paper's ten runs per method
PAPER_BUDGET = 4000  # a baseline's; an R2PO method gets 4000 after its warm-up (its entry's max_episodes)

PAPER_BASELINES = {"discrete": ("ppo", "a2c", "dqn", "trpo"), "continuous": ("ppo", "a2c", "sac", "trpo")}
CONTINUOUS_ACTIONS = ("InvertedPendulum-v5", "InvertedDoublePendulum-v5", "MountainCarContinuous-v0", "Swimmer-v5")

_PUBLISHED_ROWS = (  # env, ProPS, ProPS+, best SB3 (algorithm, mean, std), R2PO, R2PO's best iteration
    ("R2PO/Nim-v0", (-0.59, 0.21), (-0.25, 0.07), ("a2c", 0.01, 0.32), (0.61, 0.03), 1.0),
    ("R2PO/Pong-v0", (0.74, 0.63), (1.22, 0.58), ("ppo", 1.02, 0.74), (2.51, 0.21), 3.0),
    ("Swimmer-v5", (89.22, 48.68), (162.05, 66.07), ("trpo", 44.60, 7.30), (260.35, 36.05), 294.6),
    ("MountainCarContinuous-v0", (-23.45, 41.65), (17.90, 37.48), ("sac", 82.33, 2.57), (81.61, 5.18), 98.75),
    ("MountainCar-v0", (-199.31, 2.18), (-195.81, 3.73), ("dqn", -199.99, 0.02), (-147.84, 7.11), -111.0),
    ("InvertedDoublePendulum-v5", (79.44, 16.50), (86.71, 17.70), ("trpo", 86.04, 0.33), (158.51, 68.41), None),
    ("InvertedPendulum-v5", (234.14, 169.76), (309.52, 247.92), ("trpo", 24.35, 0.13), (756.08, 154.50), 1000.0),
    ("FrozenLake-v1", (0.05, 0.05), (0.37, 0.06), ("trpo", 0.02, 0.02), (0.62, 0.07), 0.93),
    ("CartPole-v1", (258.09, 138.58), (253.06, 133.35), ("trpo", 216.92, 63.34), (474.67, 16.90), 500.0),
    ("R2PO/Maze3x3-v0", (-1.03, 0.18), (0.76, 0.05), ("a2c", 0.83, 0.13), (0.83, 0.06), 0.97),
)

PUBLISHED: dict[str, dict[str, Any]] = {
    env_id: {"props": props, "props_plus": plus, "sb3": (sb3[0], sb3[1:]), "r2po": r2po, "best": best}
    for env_id, props, plus, sb3, r2po, best in _PUBLISHED_ROWS
}
"""The paper's table of mean return across training (arXiv 2605.08315; mean +- std over 10 runs) of ProPS, ProPS+, the
best SB3 algorithm and R2PO per env, and R2PO's best iteration (``None``: not published)."""


_PROJECTED: dict[str, Any] = {
    "policy": "ProjectedMlp",
    "policy_kwargs": {"hidden_dim": 4, "latent_dim_layer1": 5, "latent_dim_layer2": 5},
}
_FEATURES: dict[str, Any] = {
    "policy": "RandomFeatures",
    "param_bounds": [-2.0, 2.0],
    "policy_kwargs": {"hidden_dim": 8, "obs_scale": 3.0, "obs_clip": 5.0, "output_gain": 0.5, "init_std": 0.75},
}
PAPER_POLICY_RUNS: tuple[tuple[str, str, int, int, dict[str, Any]], ...] = (  # the reference's configs/swimmer/ files:
    ("Swimmer-v5", "props", 20, 3000, _PROJECTED),  # swimmer_props_random_projection_qr.yaml
    ("Swimmer-v5", "props_plus", 20, 3000, _PROJECTED),  # swimmer_propsp_random_projection_qr.yaml
    ("Swimmer-v5", "props_plus", 100, 1000, _FEATURES),  # swimmer_propsp_random_features_tanh_same_dim.yaml
)
"""The reference's runs of its nonlinear policies: env, method, warm-up, the projections' seed base (``projection_seed``
= base + seed + 1) and the settings over the method's entry; 200 iterations of K = 20 after the warm-up."""

PAPER_POLICY_ITERATIONS = 200  # the configs' num_episodes


def paper_policy_specs(
    llm: str | None, env_id: str, method: str, seeds: Sequence[int], budget: int | None, settings: Mapping[str, Any] | None
) -> list[RunSpec]:
    """The :data:`PAPER_POLICY_RUNS` runs of ``env_id`` and ``method`` per seed (``budget`` ``None``: warm-up + 200 x 20;
    ``settings`` over the run's own, ``policy_kwargs`` merged)."""
    specs, extra = [], dict(settings or {})
    for warmup, seed_base, own in [run[2:] for run in PAPER_POLICY_RUNS if run[:2] == (env_id, method)]:
        runs = budget if budget is not None else warmup + PAPER_POLICY_ITERATIONS * 20
        fixed = {**own, "warmup_episodes": warmup, "n_eval_episodes": 20, "max_iterations": PAPER_POLICY_ITERATIONS, **extra}
        for seed in seeds:
            kwargs = {**own["policy_kwargs"], "projection_seed": seed_base + seed + 1, **extra.get("policy_kwargs", {})}
            specs.append(RunSpec(env_id, method, seed, runs, llm, tuple({**fixed, "policy_kwargs": kwargs}.items())))
    return specs


def grid(
    envs: Sequence[str],
    methods: Sequence[str],
    seeds: Sequence[int],
    budget: int,
    llm: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> list[RunSpec]:
    """Every env x method x seed (nested in that order) at one budget; ``settings`` for the R2PO methods only."""
    return [
        RunSpec(env_id, method, seed, budget, llm, tuple((settings or {}).items()) if method in R2PO_METHODS else ())
        for env_id in envs
        for method in methods
        for seed in seeds
    ]


def paper_grid(
    llm: str | None,
    envs: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    budget: int | None = None,
    settings: Mapping[str, Any] | None = None,
    policies: bool = True,
) -> list[RunSpec]:
    """
    The ``paper`` grid, or the part of it the arguments select.

    :param llm: R2PO's llm string.
    :param envs: A subset of :data:`PAPER_ENVS` (``None``: all ten).
    :param methods: The methods (``None``: R2PO, its variants and the paper's SB3 algorithms for the env's action
        space; given: those of them the env runs).
    :param seeds: The seeds (``None``: :data:`PAPER_SEEDS`).
    :param budget: One budget for every run (``None``: 4000, an R2PO method's plus its warm-up: its ``max_episodes``).
    :param settings: R2PO keyword overrides.
    :param policies: Whether the grid also holds the reference's runs of its nonlinear policies
        (:data:`PAPER_POLICY_RUNS`, after their method's runs of the env).
    """
    specs = []
    for env_id in envs or PAPER_ENVS:
        own = (*R2PO_METHODS, *PAPER_BASELINES["continuous" if env_id in CONTINUOUS_ACTIONS else "discrete"])
        for method in own if methods is None else [m for m in methods if m in own]:
            runs = budget if budget is not None else PAPER_BUDGET
            if budget is None and method in R2PO_METHODS:
                runs = int(r2po_entry(env_id, method).get("max_episodes", PAPER_BUDGET))
            specs += grid([env_id], [method], seeds or PAPER_SEEDS, runs, llm, settings)
            if policies:
                specs += paper_policy_specs(llm, env_id, method, seeds or PAPER_SEEDS, budget, settings)
    return specs


GRIDS = ("paper",)  # the named grids (--grid)
