"""The SB3 surface of the linear policy beside sb3-contrib ARS: the observation spaces it takes (``MultiDiscrete`` and
``MultiBinary`` through SB3's preprocessing), the error for those it does not take (whatever wrapper SB3 added), and
ARS's ``with_bias`` and ``squash_output`` policy arguments."""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import BanditEnv
from sb3_contrib import ARS
from stable_baselines3.common.preprocessing import preprocess_obs
from stable_baselines3.common.vec_env import DummyVecEnv, VecTransposeImage

from sb3_r2po import R2PO, ExampleLLM
from sb3_r2po.common.rollouts import check_vec_env
from sb3_r2po.prompts.tasks import generic_task_description
from sb3_r2po.r2po.policies import OBSERVATION_SPACES, LinearPolicy, ProjectedMlpPolicy, RandomFeaturesPolicy


class SpaceEnv(gym.Env):
    """Observations drawn from ``observation_space``; reward 1 when the action is the parity of the observation's first
    value, five steps an episode."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space | None = None) -> None:
        self.observation_space = observation_space
        self.action_space = spaces.Discrete(2) if action_space is None else action_space
        self.t, self.obs = 0, observation_space.sample()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.t, self.obs = 0, self.observation_space.sample()
        return self.obs, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        first = int(np.asarray(self.obs).reshape(-1)[0]) if not isinstance(self.obs, dict | tuple) else 0
        reward = float(int(np.asarray(action).reshape(-1)[0] > 0) == first % 2)
        self.t, self.obs = self.t + 1, self.observation_space.sample()
        return self.obs, reward, False, self.t >= 5, {}


MULTI_SPACES = [spaces.MultiDiscrete([3, 4, 2]), spaces.MultiBinary(5), spaces.MultiBinary((2, 3))]


@pytest.mark.parametrize("space", MULTI_SPACES, ids=str)
def test_features_are_sb3s_preprocessing(space: spaces.Space) -> None:
    """``y = preprocess_obs(s) @ W + b``: one-hot per MultiDiscrete value, MultiBinary values as they are."""
    policy = LinearPolicy(space, spaces.Discrete(3))
    params = np.random.default_rng(0).normal(size=policy.parameter_space.size)
    observations = np.stack([space.sample() for _ in range(16)])
    features = preprocess_obs(th.as_tensor(observations), space).numpy().reshape(16, -1)
    assert features.shape[1] == policy.obs_dim  # get_flattened_obs_dim
    w, b = policy.weights(params)
    np.testing.assert_allclose(policy.outputs(params)(observations), features @ w + b, rtol=1e-12)


@pytest.mark.parametrize("space", MULTI_SPACES, ids=str)
def test_r2po_and_ars_act_alike_and_both_train(space: spaces.Space) -> None:
    """ARS's linear policy with R2PO's weights gives R2PO's actions; both algorithms train on the env; R2PO's
    prediction is in the action space."""
    ars = ARS("LinearPolicy", SpaceEnv(space), n_delta=2, policy_kwargs=dict(with_bias=True), seed=0)
    ars.learn(20)
    model = R2PO("MlpLinear", SpaceEnv(space), llm="example", n_eval_episodes=2, warmup_episodes=2, max_episodes=10, seed=0)
    model.learn(10_000)
    assert [r["kind"] for r in model.history][:2] == ["warmup", "warmup"] and len(model.history) > 2
    model.policy.set_flat(np.random.default_rng(0).normal(size=model.policy.parameter_space.size))  # no ties in argmax
    w, b = model.policy.weights()
    with th.no_grad():
        ars.policy.action_net[0].weight.copy_(th.as_tensor(w.T))
        ars.policy.action_net[0].bias.copy_(th.as_tensor(b))
    space.seed(0)
    observations = np.stack([space.sample() for _ in range(32)])
    np.testing.assert_array_equal(model.predict(observations)[0], ars.predict(observations)[0])
    action, _ = model.predict(space.sample())
    assert model.action_space.contains(action)


def test_one_hot_features_are_named_in_the_layout_and_the_task() -> None:
    space = spaces.MultiDiscrete([3, 2], start=[1, 0])
    model = R2PO("MlpLinear", SpaceEnv(space), llm="example", seed=0)
    lines = model.policy.layout_lines()
    assert lines[0].startswith("Linear policy: y = x @ W + b, with x the 5 one-hot features of the 2 observation values s")
    assert lines[2:7] == (
        "- params[0], params[1]: W[0] (weights of x[0]: s[0] = 1, one-hot over 3)",
        "- params[2], params[3]: W[1] (weights of x[1]: s[0] = 2, one-hot over 3)",
        "- params[4], params[5]: W[2] (weights of x[2]: s[0] = 3, one-hot over 3)",
        "- params[6], params[7]: W[3] (weights of x[3]: s[1] = 0, one-hot over 2)",
        "- params[8], params[9]: W[4] (weights of x[4]: s[1] = 1, one-hot over 2)",
    )
    actions = model.policy.act(np.array([[1, 0], [3, 1]]), np.array([0, 1, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0], dtype=float))
    assert actions.tolist() == [1, 0]  # s[0] = 1 weighs for action 1, s[0] = 3 for action 0
    assert generic_task_description(space, spaces.Discrete(2)).observations == (
        "s[0]: an integer in 1..3",
        "s[1]: an integer in 0..1",
    )
    assert generic_task_description(spaces.MultiBinary(2), spaces.Discrete(2)).observations == ("s[0]: 0 or 1", "s[1]: 0 or 1")
    with pytest.raises(ValueError, match=r"observation \[4, 0\] is outside the observation space"):
        model.policy.act(np.array([[4, 0]]))


def _image_env(shape: tuple[int, ...]) -> SpaceEnv:
    return SpaceEnv(spaces.Box(0, 255, shape, dtype=np.uint8))


UNSUPPORTED = [
    pytest.param(spaces.Box(0, 255, (32, 32, 3), dtype=np.uint8), "image", id="channel-last image"),
    pytest.param(spaces.Box(0, 255, (3, 32, 32), dtype=np.uint8), "image", id="channel-first image"),
    pytest.param(spaces.Dict({"a": spaces.Box(-1, 1, (2,))}), "Dict", id="Dict"),
    pytest.param(spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3))), "Tuple", id="Tuple"),
    pytest.param(spaces.Graph(spaces.Box(-1, 1, (2,)), spaces.Discrete(2)), "Graph", id="Graph"),
]


@pytest.mark.parametrize("space, kind", UNSUPPORTED)
@pytest.mark.parametrize("policy", ["MlpLinear", "ProjectedMlp"])
def test_unsupported_spaces_are_named_whatever_sb3_wraps(space: spaces.Space, kind: str, policy: str) -> None:
    """The error names the env's own space and the supported ones, never a wrapper SB3 added (VecTransposeImage for the
    channel-last image) nor SB3's own failure (Graph)."""
    with pytest.raises(ValueError) as error:
        R2PO(policy, SpaceEnv(space), llm="example")
    message = str(error.value)
    assert f"does not support the observation space {space} ({kind} observations)" in message
    assert OBSERVATION_SPACES in message and "VecTransposeImage" not in message and "Remove the wrapper" not in message


def test_an_image_env_sb3_wrapped_is_refused_as_an_image() -> None:
    """An env SB3 made and wrapped itself (an env id, ``set_env``) reaches R2PO already in VecTransposeImage: the
    error names the image space, not the wrapper as something to remove."""
    env = VecTransposeImage(DummyVecEnv([lambda: _image_env((32, 32, 3))]))
    with pytest.raises(ValueError, match=re.escape("do not take image observations, got Box(0, 255, (32, 32, 3), uint8)")):
        check_vec_env(env)


def test_without_bias_the_layout_prompts_and_history_have_no_bias() -> None:
    prompts: list[str] = []

    class Recording(ExampleLLM):
        def chat(self, messages, *, temperature=0.0):  # type: ignore[no-untyped-def]
            prompts.append(messages[-1]["content"])
            return super().chat(messages, temperature=temperature)

    model = R2PO(
        "MlpLinear",
        "CartPole-v1",
        llm=Recording(),
        policy_kwargs=dict(with_bias=False),
        n_eval_episodes=1,
        warmup_episodes=2,
        max_episodes=4,
        max_episode_steps=20,
        seed=0,
    )
    assert model.policy.parameter_space.size == 8  # 4 x 2 weights, no bias
    model.learn(10_000)
    assert {len(r["params"]) for r in model.history} == {8}
    critic = next(p for p in prompts if "## Policy" in p)
    assert "Linear policy: y = s @ W (no bias), with s the 4 observation values, W of shape (4, 2);" in critic
    assert "b (bias)" not in critic and "params[8]" not in critic and "params[7]" in critic
    _, b = model.policy.weights()
    np.testing.assert_array_equal(b, [0.0, 0.0])


BOX_ACTIONS = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 4.0], np.float32))


def test_squash_output_is_ars_tanh_into_the_bounds() -> None:
    policy = LinearPolicy(spaces.Box(-1, 1, (3,)), BOX_ACTIONS, squash_output=True)
    assert policy.squash_output and "tanh" in policy.layout_lines()[0]
    params = np.array([3.0, -2.0, 0.5, 1.0, -4.0, 6.0, 0.2, -0.3])
    policy.set_flat(params)
    observations = np.random.default_rng(1).uniform(-1, 1, size=(64, 3)).astype(np.float32)
    w, b = policy.weights()
    expected = BOX_ACTIONS.low + (np.tanh(observations @ w + b) + 1) / 2 * (BOX_ACTIONS.high - BOX_ACTIONS.low)
    actions = policy.actor(params)(observations)
    np.testing.assert_allclose(actions, expected, rtol=1e-6)
    assert actions.dtype == np.float32 and all(BOX_ACTIONS.contains(a) for a in actions)
    np.testing.assert_array_equal(policy.actor(params, clip=False)(observations), actions)  # always inside the bounds
    np.testing.assert_allclose(policy.predict(observations)[0], actions, rtol=1e-6)
    ars = ARS(
        "LinearPolicy", SpaceEnv(policy.observation_space, BOX_ACTIONS), policy_kwargs=dict(with_bias=True, squash_output=True)
    )
    with th.no_grad():
        ars.policy.action_net[0].weight.copy_(th.as_tensor(w.T))
        ars.policy.action_net[0].bias.copy_(th.as_tensor(b))
    np.testing.assert_allclose(ars.predict(observations)[0], actions, rtol=1e-5, atol=1e-6)
    clipped = LinearPolicy(spaces.Box(-1, 1, (3,)), BOX_ACTIONS)
    assert not clipped.squash_output and "clipped" in clipped.layout_lines()[0]
    assert not LinearPolicy(spaces.Box(-1, 1, (3,)), spaces.Discrete(2), squash_output=True).squash_output  # as ARS


@pytest.mark.parametrize("policy_class", [ProjectedMlpPolicy, RandomFeaturesPolicy])
def test_nonlinear_policies_squash_alike(policy_class: type) -> None:
    policy = policy_class(spaces.Box(-1, 1, (3,)), BOX_ACTIONS, squash_output=True, with_bias=False)
    params = policy.parameter_space.sample(np.random.default_rng(0))
    policy.set_flat(params)
    observations = np.random.default_rng(1).uniform(-1, 1, size=(16, 3)).astype(np.float32)
    y = policy.outputs(params)(observations)
    expected = BOX_ACTIONS.low + (np.tanh(y) + 1) / 2 * (BOX_ACTIONS.high - BOX_ACTIONS.low)
    np.testing.assert_allclose(policy.act(observations), expected, rtol=1e-6)
    np.testing.assert_allclose(policy.predict(observations)[0], expected, rtol=1e-6)


def test_policy_kwargs_survive_save_and_load(tmp_path) -> None:
    model = R2PO("MlpLinear", BanditEnv(), llm="example", policy_kwargs=dict(with_bias=False, squash_output=True), seed=0)
    model.policy.set_flat(np.array([0.7]))
    model.save(tmp_path / "model.zip")
    loaded = R2PO.load(tmp_path / "model.zip", env=BanditEnv())
    assert loaded.policy.parameter_space.size == 1 and loaded.policy.squash_output
    np.testing.assert_array_equal(
        loaded.predict(np.ones((1, 1), np.float32))[0], model.predict(np.ones((1, 1), np.float32))[0]
    )
