"""Hostile environments: finite values at the float limit (and non-finite ones) never make a non-finite statistic.

Every case runs R2PO (the example LLM, with a run directory) on an env that replays a fixed reward script, then
checks that ``history.json`` is strict JSON (no ``NaN``/``Infinity``), that every number in the history is finite,
and that no prompt shows ``nan`` or ``inf``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from helpers import UNTIL_BUDGET
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_r2po.common.rollouts import finite_mean, finite_std, finite_total, run_episodes
from sb3_r2po.llm.recording import read_records

BIG = sys.float_info.max
TINY = 5e-324


class ScriptedRewards(gym.Env):
    """Episode ``n`` pays ``script[n % len(script)]``, one reward per step, then terminates; ``obs`` is observed."""

    action_space = spaces.Discrete(2)

    def __init__(self, script: list[list[float]], obs: float = 0.5) -> None:
        self.script, self.obs, self.episode = script, obs, -1
        self.observation_space = spaces.Box(-BIG, BIG, shape=(2,), dtype=np.float64)  # a range the prompt can show

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.episode, self.t = self.episode + 1, 0
        return np.array([self.obs, 1.0]), {}

    def step(self, action):
        rewards = self.script[self.episode % len(self.script)]
        reward, self.t = rewards[self.t], self.t + 1
        return np.array([self.obs, 1.0]), reward, self.t == len(rewards), False, {}


CORPUS: dict[str, dict[str, Any]] = {
    "two maximal rewards in one episode": {"script": [[BIG, BIG]]},
    "two maximal negative rewards": {"script": [[-BIG, -BIG]]},
    "one maximal reward per episode (the mean over K overflows)": {"script": [[BIG]]},
    "alternating signs across episodes (the std overflows)": {"script": [[BIG], [-BIG]]},
    "alternating signs within an episode": {"script": [[BIG, -BIG, BIG, -BIG]]},
    "16 rewards alternating 1e308 and -1e308 (numpy's pairwise sum overflows; the exact return is 0)": {
        "script": [[1e308, -1e308] * 8]
    },
    "ten rewards of 1e308": {"script": [[1e308] * 10]},
    "a thousand rewards of 1e306": {"script": [[1e306] * 1000]},
    "rewards just below the overflow check": {"script": [[BIG / 2**33] * 50]},
    "subnormal rewards": {"script": [[TINY] * 5, [-TINY] * 5]},
    "zero and maximal rewards mixed": {"script": [[0.0, BIG], [BIG, 0.0], [0.0]]},
    "a NaN reward": {"script": [[1.0, float("nan"), 1.0]]},
    "an infinite reward": {"script": [[float("inf")]]},
    "a negative infinite reward after finite ones": {"script": [[1.0, 2.0, float("-inf")]]},
    "maximal observations": {"script": [[1.0, 1.0]], "obs": BIG},
    "infinite observations": {"script": [[1.0, 1.0]], "obs": float("inf")},
    "NaN observations": {"script": [[1.0, 1.0]], "obs": float("nan")},
    "maximal observations and rewards": {"script": [[BIG, BIG]], "obs": -BIG},
}
"""The hostile envs (docs/reliability.md cites their number)."""

NON_FINITE_WORD = re.compile(r"\b(nan|inf|infinity)\b", re.IGNORECASE)


def _strict(constant: str) -> float:
    raise ValueError(f"history.json holds the non-JSON constant {constant}")


@pytest.mark.parametrize("case", list(CORPUS))
def test_a_hostile_env_never_makes_a_non_finite_statistic(tmp_path: Path, make_r2po, case: str) -> None:
    env = ScriptedRewards(**CORPUS[case])
    run = tmp_path / "run"
    for variant in ("r2po", "rep_traj"):  # the median trajectory with its statistics; the representative one with rewards
        model = make_r2po(
            env,
            llm="example",
            variant=variant,
            n_eval_episodes=3,
            warmup_episodes=2,
            max_episodes=14,
            seed=0,
            checkpoint_dir=str(run / variant),
        )
        model.learn(UNTIL_BUDGET)
        history = json.loads((run / variant / "history.json").read_text(), parse_constant=_strict)
        assert history == model.history and len(history) > 2
        numbers = [value for record in history for value in _numbers(record)]
        assert numbers and all(np.isfinite(numbers))
        prompts = [m["content"] for r in read_records(run / variant / "llm_calls.jsonl") for m in r["messages"]]
        assert prompts and not any(NON_FINITE_WORD.search(prompt) for prompt in prompts), case


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [n for item in value.values() for n in _numbers(item)]
    return [n for item in value for n in _numbers(item)]


@pytest.mark.parametrize(
    "values",
    [[BIG, BIG], [-BIG, -BIG, -BIG], [BIG, -BIG], [1e308] * 7, [BIG, 0.0, TINY], [1.0, 2.0, 3.0], [0.1] * 10],
)
def test_finite_means_and_deviations_are_numpys_whenever_numpys_are_finite(values: list[float]) -> None:
    x = np.asarray(values)
    with np.errstate(over="ignore", invalid="ignore"):
        plain_mean, plain_std = float(x.mean()), float(x.std())
    assert np.isfinite(finite_mean(x)) and np.isfinite(finite_std(x))
    assert min(values) <= finite_mean(x) <= max(values) and 0.0 <= finite_std(x) <= max(abs(v) for v in values)
    if np.isfinite(plain_mean):
        assert finite_mean(x) == plain_mean
    if np.isfinite(plain_std):
        assert finite_std(x) == plain_std


def test_a_return_whose_exact_sum_is_finite_is_exact(make_r2po) -> None:
    """numpy's pairwise sum of ``[1e308, -1e308] * 8`` is ``nan`` (its first partial sum adds 1e308 to 1e308): the
    episodes run to their end with the exact return 0, and every mean and deviation the history records is 0."""
    env = DummyVecEnv([lambda: ScriptedRewards([[1e308, -1e308] * 8])])
    result = run_episodes(env, lambda obs: np.zeros(len(obs), dtype=np.int64), 3, 100)
    assert [(ep.length, ep.end, ep.total_return) for ep in result.episodes] == [(16, "terminated", 0.0)] * 3
    model = make_r2po(ScriptedRewards([[1e308, -1e308] * 8]), llm="example", n_eval_episodes=2, max_episodes=10)
    model.learn(UNTIL_BUDGET)
    assert len(model.history) > 2 and all(r["mean_return"] == 0.0 and r["std_return"] == 0.0 for r in model.history)


@pytest.mark.parametrize(
    "values, exact",
    [([1e308, -1e308] * 8, 0.0), ([BIG, -BIG, TINY], TINY), ([BIG, BIG, -BIG], BIG), ([1.0, 2.0, 3.5], 6.5), ([], 0.0)],
)
def test_finite_totals_are_exact_where_numpy_overflows(values: list[float], exact: float) -> None:
    assert finite_total(values) == exact
    assert finite_total([BIG, BIG]) == np.inf and finite_total([-BIG, -BIG]) == -np.inf
