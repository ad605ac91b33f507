"""``run_episodes``: K started episodes run to their end, in start order, with their terminal observations."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import TimeLimit
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

from sb3_r2po.common.rollouts import run_episodes


class Counter(gym.Env):
    """Observation: the step count ``t`` of the episode; reward 1 per step; ``terminated`` after ``length`` steps
    (never when ``length`` is None)."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (1,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int | None) -> None:
        self.length, self.t = length, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.array([float(self.t)], dtype=np.float32), 1.0, self.length is not None and self.t >= self.length, False, {}


def act(observations: np.ndarray) -> np.ndarray:
    return np.zeros(len(observations), dtype=np.int64)


def vec(kind: str, *envs: gym.Env):
    env = DummyVecEnv([lambda e=e: e for e in envs])
    return env if kind == "direct" else VecMonitor(env)  # VecMonitor: the VecEnv-API path


@pytest.mark.parametrize("kind", ["direct", "vec_env_api"])
def test_the_k_started_episodes_run_to_their_end_in_start_order(kind: str) -> None:
    """Sub-environment 0 has 1-step episodes, 1 has 5-step ones; K = 3: episodes 0 (env 0), 1 (env 1), 2 (env 0).
    Taking the first 3 to finish would give three 1-step episodes."""
    env = vec(kind, Counter(1), Counter(5))
    counted = []
    result = run_episodes(env, act, 3, 100, lambda step: counted.append((int(step.dones.sum()), step.n_steps)) or True)
    assert [ep.length for ep in result.episodes] == [1, 5, 1]
    assert [ep.index for ep in result.episodes] == [0, 1, 2]
    assert all(ep.end == "terminated" for ep in result.episodes)
    for ep in result.episodes:  # T + 1 observations: the reset one, ..., the terminal one (not the next reset)
        assert [float(o[0]) for o in ep.observations] == list(range(ep.length + 1))
    assert sum(d for d, _ in counted) == 3 and len(counted) == 5
    # environment steps: the direct path steps only the busy sub-environments, the VecEnv API steps all of them
    assert sum(n for _, n in counted) == (1 + 5 + 1 if kind == "direct" else 2 * 5)


@pytest.mark.parametrize("kind", ["direct", "vec_env_api"])
def test_time_limits_truncate_and_the_cap_cuts_and_resets(kind: str) -> None:
    env = vec(kind, TimeLimit(Counter(None), max_episode_steps=2))
    result = run_episodes(env, act, 2, 100, None)
    assert [(ep.end, ep.length) for ep in result.episodes] == [("truncated", 2), ("truncated", 2)]
    env = vec(kind, Counter(None))
    result = run_episodes(env, act, 2, 3, None)
    assert [(ep.end, ep.length) for ep in result.episodes] == [("capped", 3), ("capped", 3)]
    # the capped episode's sub-environment is reset: the next episode starts at t = 0 again
    assert [float(o[0]) for o in result.episodes[1].observations] == [0.0, 1.0, 2.0, 3.0]
    assert result.returns.tolist() == [3.0, 3.0]


def test_a_stop_request_returns_the_finished_episodes_only() -> None:
    env = vec("direct", Counter(1), Counter(5))
    result = run_episodes(env, act, 3, 100, lambda step: not step.dones.any())
    assert result.stopped and result.stop_requested and [ep.length for ep in result.episodes] == [1]
