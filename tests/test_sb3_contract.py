"""R2PO holds Stable-Baselines3's callback and logging contract: each test runs the same callback or env against R2PO
and against A2C (an SB3 algorithm) and asserts the same observable behaviour."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import UNTIL_BUDGET
from stable_baselines3 import A2C
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import KVWriter, Logger

from sb3_r2po import R2PO

LOCALS = ("new_obs", "actions", "rewards", "dones", "infos", "env")
"""The rollout loop's locals that SB3 callbacks read."""


def build(algo: str, env: Any, **r2po_settings: Any) -> BaseAlgorithm:
    """R2PO (example LLM, K = 2, one warm-up episode) or A2C on ``env``, seeded."""
    if algo == "a2c":
        return A2C("MlpPolicy", env, n_steps=4, seed=0)
    settings = {"n_eval_episodes": 2, "warmup_episodes": 1, "max_episodes": 5, **r2po_settings}
    return R2PO("MlpLinear", env, llm="example", seed=0, **settings)


class Stop(BaseCallback):
    """Returns ``verdict()`` at every step; counts its calls."""

    def __init__(self, verdict: Callable[[], Any]) -> None:
        super().__init__()
        self.verdict = verdict
        self.calls = 0

    def _on_step(self) -> Any:
        self.calls += 1
        return self.verdict()


NO = {
    "False": lambda: False,
    "np.bool_(False)": lambda: np.bool_(False),
    "torch.tensor(False)": lambda: th.tensor(False),
    "None": lambda: None,
    "0": lambda: 0,
}


@pytest.mark.parametrize("algo", ["r2po", "a2c"])
@pytest.mark.parametrize("verdict", list(NO))
def test_a_falsy_callback_stops_training_after_its_first_call(algo: str, verdict: str) -> None:
    model = build(algo, "CartPole-v1")
    callback = Stop(NO[verdict])
    model.learn(10_000, callback=callback)
    assert callback.calls == 1 and model.num_timesteps == 1
    if isinstance(model, R2PO):  # stopped inside the warm-up's first episode: nothing asked, nothing recorded
        assert model.history == [] and model.llm_stats["calls"] == 0


@pytest.mark.parametrize("algo", ["r2po", "a2c"])
def test_a_truthy_non_bool_keeps_training(algo: str) -> None:
    callback = Stop(lambda: np.bool_(True))
    model = build(algo, "CartPole-v1", max_episodes=None)
    model.learn(40, callback=callback)
    assert model.num_timesteps >= 40 and callback.calls == model.num_timesteps


class RecordLocals(BaseCallback):
    """Keeps the rollout loop's locals of every step."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[dict[str, Any]] = []

    def _on_step(self) -> bool:
        self.steps.append({name: self.locals[name] for name in LOCALS})
        return True


@pytest.mark.parametrize("algo", ["r2po", "a2c"])
@pytest.mark.parametrize("n_envs", [1, 2])
def test_callbacks_read_the_rollout_locals_under_sb3s_names(algo: str, n_envs: int) -> None:
    env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=0)
    model = build(algo, env)
    callback = RecordLocals()
    model.learn(60, callback=callback)
    assert callback.steps
    ended = 0
    for step in callback.steps:
        assert step["env"] is model.get_env()
        assert isinstance(step["new_obs"], np.ndarray) and step["new_obs"].shape == (n_envs, 4)
        assert np.asarray(step["actions"]).shape[0] == n_envs
        assert np.asarray(step["rewards"]).shape == (n_envs,) and np.asarray(step["dones"]).shape == (n_envs,)
        assert isinstance(step["infos"], (list, tuple)) and len(step["infos"]) == n_envs
        for done, info in zip(step["dones"], step["infos"], strict=True):
            if done:  # the terminal observation is in the info; new_obs already holds the next episode's first one
                assert info["terminal_observation"].shape == (4,)
                ended += 1
    assert ended > 0


class SuccessEnv(gym.Env):
    """Two steps per episode, a constant observation; ``info["is_success"]`` at the end: whether the action was 1."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t == 2
        info = {"is_success": bool(action == 1)} if done else {}
        return np.zeros(1, dtype=np.float32), float(action), done, False, info


class Capture(KVWriter):
    """Keeps every dumped set of metrics."""

    def __init__(self) -> None:
        self.dumps: list[dict[str, Any]] = []

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        self.dumps.append(dict(key_values))


@pytest.mark.parametrize("algo", ["r2po", "a2c"])
def test_a_success_reporting_env_logs_its_success_rate(algo: str) -> None:
    model = build(algo, SuccessEnv())
    capture = Capture()
    model.set_logger(Logger(folder=None, output_formats=[capture]))
    model.learn(40, log_interval=1)
    rates = [dump["rollout/success_rate"] for dump in capture.dumps if "rollout/success_rate" in dump]
    assert rates and all(0.0 <= rate <= 1.0 for rate in rates)
    assert list(model.ep_success_buffer) and all(isinstance(s, (bool, np.bool_)) for s in model.ep_success_buffer)


def test_r2po_success_rate_counts_every_finished_episode() -> None:
    """The observation is constant, so a candidate takes the same action twice: return 2 is a success, 0 a failure.
    The buffer holds one report per finished episode (warm-up included), in order."""
    model = build("r2po", SuccessEnv(), max_episodes=5)
    model.learn(UNTIL_BUDGET)
    returns = []  # every evaluated episode: a warm-up entry's, an iteration's candidate (K equal ones) and revision
    for record in model.history:
        if record["kind"] == "warmup":
            returns += record["returns"]
        else:
            returns += [record["search"]["mean_return"]] * 2 + record["revision"]["returns"]
    assert len(model.ep_success_buffer) == model.episodes_used == 5
    assert sorted(model.ep_success_buffer) == sorted(r == 2.0 for r in returns)


def test_the_settings_are_the_models_attributes_and_assigning_one_is_checked() -> None:
    """SB3's habit (``model.n_steps`` on PPO): ``model.n_eval_episodes`` reads ``model.settings``; an assignment replaces
    the settings through the same checks as the constructor; derived values are read-only."""
    model = R2PO("MlpLinear", "CartPole-v1", llm="example", n_eval_episodes=3, max_episodes=40)
    assert (model.n_eval_episodes, model.max_episodes, model.target) == (3, 40, model.settings.target) == (3, 40, 500.0)
    model.max_episodes = 60
    assert model.settings.max_episodes == 60 and "max_episodes" not in vars(model)
    with pytest.raises(ValueError, match="n_eval_episodes"):
        model.n_eval_episodes = 0
    assert model.settings.n_eval_episodes == 3
    with pytest.raises(AttributeError):
        model.target = 1.0
