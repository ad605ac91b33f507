"""SB3 ``Monitor`` files agree with R2PO: every episode R2PO counts is one Monitor row with its return and length
(episodes cut at R2PO's episode cap included, as truncations), and no other episode is, for ``n_envs`` 1 and 4 with
``DummyVecEnv`` and ``SubprocVecEnv``; where R2PO cannot reach a Monitor, it warns."""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import TimeLimit
from helpers import UNTIL_BUDGET
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor, load_results
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecMonitor

from sb3_r2po import R2PO
from sb3_r2po.common.rollouts import EpisodeCap, cap_episodes, run_episodes

CAP = 12
"""R2PO's episode cap in these tests (``max_episode_steps``); about a third of the episodes reach it."""


class Lengths(gym.Env):
    """No time limit; an episode lasts 1 to 17 steps (drawn at reset), each step pays an integer reward from -3 to 3
    (exact sums: Monitor's rounding to 6 decimals changes nothing)."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.length, self.t = int(self.np_random.integers(1, 18)), 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        reward = float(self.np_random.integers(-3, 4)) + float(action)
        return np.array([self.t / 10, reward], dtype=np.float32), reward, self.t >= self.length, False, {}


def limited() -> gym.Env:
    """``Lengths`` with a time limit at R2PO's cap, beneath the Monitor ``make_vec_env`` adds (the fix the warning names)."""
    return TimeLimit(Lengths(), CAP)


def monitor_rows(directory: Path) -> list[tuple[float, int]]:
    frame = load_results(str(directory))
    return sorted(zip(frame["r"].tolist(), frame["l"].tolist(), strict=True))


def r2po_rows(model) -> list[tuple[float, int]]:
    return sorted((float(info["r"]), int(info["l"])) for info in model.ep_info_buffer)


def train(make_r2po, env, max_episodes: int):
    model = make_r2po(  # a window of 1000: ep_info_buffer keeps every episode
        env, max_episode_steps=CAP, n_eval_episodes=3, warmup_episodes=3, max_episodes=max_episodes, stats_window_size=1000
    )
    return model.learn(UNTIL_BUDGET)


def test_a_gym_env_in_the_users_monitor_logs_every_episode_r2po_counts_with_capped_ones(tmp_path: Path, make_r2po) -> None:
    model = train(make_r2po, Monitor(Lengths(), str(tmp_path / "run")), max_episodes=15)
    rows = monitor_rows(tmp_path)
    assert rows == r2po_rows(model) and len(rows) == model.episodes_used == 15
    assert max(length for _, length in rows) == CAP  # episodes cut at the cap are there (the env's run up to 17 steps)


@pytest.mark.parametrize("n_envs", [1, 4])
def test_a_users_dummy_vec_env_gets_r2pos_cap_beneath_its_monitors(tmp_path: Path, make_r2po, n_envs: int) -> None:
    env = make_vec_env(Lengths, n_envs=n_envs, seed=0, monitor_dir=str(tmp_path), vec_env_cls=DummyVecEnv)
    model = train(make_r2po, env, max_episodes=15)
    rows = monitor_rows(tmp_path)
    assert rows == r2po_rows(model) and len(rows) == model.episodes_used == 15
    assert CAP in [length for _, length in rows]
    assert all(isinstance(sub_env.env, EpisodeCap) for sub_env in env.envs)  # beneath each Monitor


@pytest.mark.parametrize("n_envs", [1, 4])
def test_a_subproc_vec_env_logs_no_episode_of_an_idle_sub_env(tmp_path: Path, make_r2po, n_envs: int) -> None:
    """With 4 sub-environments, evaluations of 1 and 3 episodes leave some idle: they must not start episodes."""
    env = make_vec_env(
        limited,
        n_envs=n_envs,
        seed=0,
        monitor_dir=str(tmp_path),
        vec_env_cls=SubprocVecEnv,
        vec_env_kwargs={"start_method": "fork"},
    )
    try:
        model = train(make_r2po, env, max_episodes=12)
    finally:
        env.close()
    rows = monitor_rows(tmp_path)
    assert rows == r2po_rows(model) and len(rows) == model.episodes_used == 12
    assert CAP in [length for _, length in rows]


def test_run_episodes_on_a_subproc_vec_env_steps_only_busy_sub_envs(tmp_path: Path) -> None:
    env = make_vec_env(
        limited,
        n_envs=4,
        seed=1,
        monitor_dir=str(tmp_path),
        vec_env_cls=SubprocVecEnv,
        vec_env_kwargs={"start_method": "fork"},
    )
    try:
        results = [run_episodes(env, lambda obs: np.ones(len(obs), dtype=np.int64), k, CAP) for k in (5, 2, 7)]
    finally:
        env.close()
    episodes = [ep for result in results for ep in result.episodes]
    assert monitor_rows(tmp_path) == sorted((ep.total_return, ep.length) for ep in episodes) and len(episodes) == 14
    assert sum(result.n_steps for result in results) == sum(ep.length for ep in episodes)  # no idle step
    assert {ep.end for ep in episodes} == {"terminated", "truncated"}


def test_a_subproc_vec_env_steps_its_workers_together_while_all_are_busy(tmp_path: Path) -> None:
    """Its workers step in parallel (one ``step_wait`` for all) while each runs an episode; alone only once some idle."""
    env = make_vec_env(limited, n_envs=2, seed=1, vec_env_cls=SubprocVecEnv, vec_env_kwargs={"start_method": "fork"})
    together = []
    step_wait = env.step_wait
    env.step_wait = lambda: together.append(1) or step_wait()  # type: ignore[method-assign]
    try:
        result = run_episodes(env, lambda obs: np.ones(len(obs), dtype=np.int64), 4, CAP)
    finally:
        env.close()
    assert len(result.episodes) == 4 and 0 < len(together) < result.n_steps


def test_the_cap_is_recorded_as_capped_and_the_monitor_sees_a_truncation(tmp_path: Path) -> None:
    monitor = Monitor(Lengths(), str(tmp_path / "run"))
    env = DummyVecEnv([lambda: monitor])
    cap_episodes(env, CAP)
    result = run_episodes(env, lambda obs: np.zeros(len(obs), dtype=np.int64), 20, CAP)
    assert {ep.end for ep in result.episodes} == {"terminated", "capped"}  # as without EpisodeCap
    assert all(ep.length == CAP for ep in result.episodes if ep.end == "capped")
    assert monitor_rows(tmp_path) == sorted((ep.total_return, ep.length) for ep in result.episodes)


def subproc(tmp_path: Path, factory) -> VecEnv:
    return make_vec_env(
        factory, n_envs=1, monitor_dir=str(tmp_path), vec_env_cls=SubprocVecEnv, vec_env_kwargs={"start_method": "fork"}
    )


def test_a_monitor_r2po_cannot_reach_gets_one_warning_naming_time_limit(tmp_path: Path, make_r2po) -> None:
    env = subproc(tmp_path / "unlimited", Lengths)
    try:
        with pytest.warns(UserWarning, match=r"TimeLimit\(env, max_episode_steps=12\)") as caught:
            make_r2po(env, max_episode_steps=CAP)
        assert sum("TimeLimit" in str(w.message) for w in caught) == 1
    finally:
        env.close()
    env = subproc(tmp_path / "limited", limited)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            make_r2po(env, max_episode_steps=CAP)
    finally:
        env.close()


class PatchedTimeLimit(gym.wrappers.TimeLimit):
    """What ``rl_zoo3.gym_patches`` puts in place of gymnasium's ``TimeLimit`` (a subclass, defined in its own module)."""


def test_the_check_survives_rl_zoo3s_time_limit_patch(tmp_path: Path, make_r2po, monkeypatch) -> None:
    """Importing rl_zoo3 replaces gymnasium's ``TimeLimit`` by a subclass in its modules (``rl_zoo3.gym_patches``); the
    class R2PO sends to a ``SubprocVecEnv`` worker must still pickle (it crashed the constructor: PicklingError)."""
    import gymnasium.wrappers.common

    monkeypatch.setattr(gymnasium.wrappers.common, "TimeLimit", PatchedTimeLimit)
    env = subproc(tmp_path / "unlimited", Lengths)
    try:
        with pytest.warns(UserWarning, match=r"TimeLimit\(env, max_episode_steps=12\)"):
            make_r2po(env, max_episode_steps=CAP)
    finally:
        env.close()


def test_load_and_set_env_put_the_cap_beneath_a_monitor_too(tmp_path: Path, make_r2po) -> None:
    make_r2po(Lengths(), max_episode_steps=CAP).save(tmp_path / "model.zip")
    loaded = R2PO.load(tmp_path / "model.zip", env=Monitor(Lengths(), str(tmp_path / "loaded")))
    loaded.set_env(Monitor(Lengths(), str(tmp_path / "set")))
    for model in (loaded, R2PO.load(tmp_path / "model.zip", env=Monitor(Lengths()))):
        monitor = model.get_env().envs[0]
        assert isinstance(monitor, Monitor) and isinstance(monitor.env, EpisodeCap) and model.settings.episode_cap == CAP


def test_monitors_behind_a_vec_env_wrapper_with_several_envs_get_a_warning(tmp_path: Path, make_r2po) -> None:
    """Through a VecEnv wrapper idle sub-environments step along, so their Monitors log episodes R2PO does not count."""
    env = VecMonitor(make_vec_env(limited, n_envs=2, monitor_dir=str(tmp_path)))
    with pytest.warns(UserWarning, match="idle sub-environments") as caught:
        make_r2po(env, max_episode_steps=CAP)
    assert len([w for w in caught if "idle" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_r2po(VecMonitor(DummyVecEnv([limited]), str(tmp_path / "one")), max_episode_steps=CAP)  # one env: none idle
