"""``run_episodes``: K started episodes run to their end, in start order, with their terminal observations."""

from __future__ import annotations

from contextlib import nullcontext

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
    return env if kind == "bare" else VecMonitor(env)  # VecMonitor: lock-step through a VecEnv wrapper


@pytest.mark.parametrize("kind", ["bare", "wrapped"])
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
    # environment steps: a bare VecEnv steps only the busy sub-environments, a wrapped one steps all of them
    assert sum(n for _, n in counted) == (1 + 5 + 1 if kind == "bare" else 2 * 5)


@pytest.mark.parametrize("kind", ["bare", "wrapped"])
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
    env = vec("bare", Counter(1), Counter(5))
    result = run_episodes(env, act, 3, 100, lambda step: not step.dones.any())
    assert result.stopped and result.stop_requested and [ep.length for ep in result.episodes] == [1]


class Scripted(gym.Env):
    """Replays fixed observations and rewards: ``observations[t]`` after step ``t`` (``observations[0]`` at reset),
    ``rewards[t - 1]`` for step ``t``; terminated after the last reward. Records the actions it is given."""

    action_space = gym.spaces.Box(-1.0, 1.0, (2,))

    def __init__(self, observations: list, rewards: list[float]) -> None:
        self.observations = [np.asarray(o, dtype=np.float32) for o in observations]
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, self.observations[0].shape)
        self.rewards, self.t, self.actions = rewards, 0, []

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self.observations[0].copy(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.actions.append(np.array(action))
        self.t += 1
        return self.observations[self.t].copy(), self.rewards[self.t - 1], self.t == len(self.rewards), False, {}


def linear(observations: np.ndarray) -> np.ndarray:
    """Actions that depend on the observation (float32, as a Box action space's dtype)."""
    flat = observations.reshape(len(observations), -1)
    return np.stack([flat[:, 0] / 10, -flat[:, -1] / 10], axis=1).astype(np.float32)


@pytest.mark.parametrize("kind", ["bare", "wrapped"])
@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_episodes_hold_exactly_what_the_env_gave_as_float64(kind: str, shape: tuple[int, ...]) -> None:
    """Each step's observation, action and reward, recorded exactly (float32 values converted to float64 without
    rounding), the arrays of one episode stacked with a row per step, whatever the observation's shape. Rewards are
    the env's own from a bare VecEnv; through a VecEnv wrapper they are what the VecEnv returns (SB3's DummyVecEnv
    keeps them as float32)."""
    rng = np.random.default_rng(0)
    observations = [rng.normal(size=shape).astype(np.float32) for _ in range(5)]
    rewards = [0.1, -2.5, 1e-7, 3.0]
    env = Scripted(observations, rewards)
    (episode,) = run_episodes(vec(kind, env), linear, 1, 100, None).episodes
    assert (episode.end, episode.length) == ("terminated", 4)
    assert episode.observations.dtype == episode.actions.dtype == episode.rewards.dtype == np.float64
    assert episode.observations.shape == (5, *shape) and episode.actions.shape == (4, 2)
    assert np.array_equal(episode.observations, np.array(observations, dtype=np.float64))
    assert np.array_equal(episode.rewards, np.array(rewards, dtype=np.float64 if kind == "bare" else np.float32))
    # the actions recorded are the ones the env was given
    assert np.array_equal(episode.actions, np.array(env.actions, dtype=np.float64))
    assert np.array_equal(episode.actions, linear(np.array(observations[:4])).astype(np.float64))


@pytest.mark.parametrize("kind", ["bare", "wrapped"])
@pytest.mark.parametrize(
    ("broken", "kept_rewards"),
    [
        ("observation", [1.0, 1.0]),  # the NaN observation after step 2 is not kept: the episode ends at step 2
        ("reward", [1.0, 0.0]),  # an infinite reward counts 0
        ("overflow", [1.0, 1e308, 0.0]),  # finite, but the return would overflow: counts 0
    ],
)
def test_a_non_finite_step_cuts_the_episode_there(kind: str, broken: str, kept_rewards: list[float]) -> None:
    if broken == "overflow" and kind == "wrapped":
        kept_rewards = [1.0, 0.0]  # DummyVecEnv's float32 reward buffer already made 1e308 infinite
    observations = [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]
    rewards = [1.0, 1.0, 1.0, 1.0]
    if broken == "observation":
        observations[2] = [np.nan, 2.0]
    elif broken == "reward":
        rewards[1] = np.inf
    else:
        rewards[1:3] = [1e308, 1e308]
    env = vec(kind, Scripted(observations, rewards))
    warnings = pytest.warns(RuntimeWarning, match="overflow") if kind == "wrapped" and broken == "overflow" else nullcontext()
    with warnings:
        first, second = run_episodes(env, linear, 2, 100, None).episodes
    assert first.end == "non-finite" and first.rewards.tolist() == kept_rewards
    assert np.isfinite(first.observations).all() and len(first.observations) == first.length + 1
    assert first.observations[-1].tolist() == first.observations[-2].tolist()  # the last finite one, repeated
    assert second.index == 1 and second.observations[0].tolist() == [0.0, 0.0]  # the env was reset after the cut


def test_a_bare_and_a_wrapped_vec_env_record_the_same_episodes() -> None:
    """Two sub-environments of different episode lengths, K = 5: the same episodes either way."""
    results = {}
    for kind in ("bare", "wrapped"):
        env = vec(kind, TimeLimit(Counter(None), max_episode_steps=3), Counter(2))
        results[kind] = run_episodes(env, act, 5, 100, None).episodes
    for a, b in zip(results["bare"], results["wrapped"], strict=True):
        assert (a.index, a.end) == (b.index, b.end)
        assert np.array_equal(a.observations, b.observations) and np.array_equal(a.actions, b.actions)
        assert np.array_equal(a.rewards, b.rewards)
