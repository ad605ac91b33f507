"""The reference's two compact nonlinear policies, ``ProjectedMlp`` and ``RandomFeatures``: the weights decoded from a
seed as the reference's definitions build them, the parameter spaces and warm-up draws, a search that improves, and
save/load/predict."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from helpers import UNTIL_BUDGET

from sb3_r2po import R2PO, ExampleLLM
from sb3_r2po.r2po.policies import (
    POLICY_ALIASES,
    PROJECTED_MLP_SEED,
    RANDOM_FEATURES_SEED,
    ProjectedMlpPolicy,
    RandomFeaturesPolicy,
)

SWIMMER_OBS = spaces.Box(-np.inf, np.inf, shape=(8,), dtype=np.float64)  # Swimmer-v5's spaces, without mujoco
SWIMMER_ACT = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)


def _observations(n: int = 64, scale: float = 10.0) -> np.ndarray:
    """Observations wide enough to reach the action bounds and the random features' observation clip."""
    return np.random.default_rng(7).normal(0.0, scale, size=(n, 8))


def test_aliases_and_reference_defaults() -> None:
    assert POLICY_ALIASES["ProjectedMlp"] is ProjectedMlpPolicy and POLICY_ALIASES["RandomFeatures"] is RandomFeaturesPolicy
    # the reference's Swimmer configs: projection_seed_base 3000 / random_feature_seed_base 1000, plus run index 1
    assert (PROJECTED_MLP_SEED, RANDOM_FEATURES_SEED) == (3001, 1001)
    mlp = ProjectedMlpPolicy(SWIMMER_OBS, SWIMMER_ACT)
    space = mlp.parameter_space  # latent_dim_layer1 + latent_dim_layer2 = 5 + 5, in [-6, 6] at 1 decimal
    assert (space.size, space.low, space.high, space.decimals, space.init_std) == (10, -6.0, 6.0, 1, 2.0)
    assert mlp.layer_sizes == (8 * 4 + 4, 4 * 2 + 2) and mlp.projection_seed == 3001
    features = RandomFeaturesPolicy(SWIMMER_OBS, SWIMMER_ACT)
    space = features.parameter_space  # a 2 x 8 readout plus 2 biases, in [-2, 2] at 1 decimal
    assert (space.size, space.low, space.high, space.decimals, space.init_std) == (18, -2.0, 2.0, 1, 0.75)
    assert (features.obs_scale, features.obs_clip, features.output_gain, features.projection_seed) == (3.0, 5.0, 0.5, 1001)


def test_projected_mlp_decodes_the_reference_construction() -> None:
    """Q1, Q2: the Q factors of RandomState(seed).randn(36, 5), then .randn(10, 5) from the same generator; layer l's
    flat weights (W row-major (in, out), then b) are Q_l @ z_l; y = tanh(s W1 + b1) W2 + b2, clipped."""
    seed = 3004
    policy = ProjectedMlpPolicy(SWIMMER_OBS, SWIMMER_ACT, projection_seed=seed)
    rng = np.random.RandomState(seed)
    q1, _ = np.linalg.qr(rng.randn(36, 5))
    q2, _ = np.linalg.qr(rng.randn(10, 5))
    np.testing.assert_array_equal(policy.fixed_matrices()[0], q1)
    np.testing.assert_array_equal(policy.fixed_matrices()[1], q2)
    np.testing.assert_allclose(q1.T @ q1, np.eye(5), atol=1e-12)  # orthonormal columns: a QR projection

    latent = np.array([1.5, -2.0, 0.3, 4.1, -0.7, 2.2, -1.1, 0.0, 3.3, -5.9])
    flat1, flat2 = q1 @ latent[:5], q2 @ latent[5:]
    w1, b1, w2, b2 = policy.weights(latent)
    np.testing.assert_allclose(w1, flat1[:32].reshape(8, 4), rtol=0, atol=1e-12)
    np.testing.assert_allclose(b1, flat1[32:], rtol=0, atol=1e-12)
    np.testing.assert_allclose(w2, flat2[:8].reshape(4, 2), rtol=0, atol=1e-12)
    np.testing.assert_allclose(b2, flat2[8:], rtol=0, atol=1e-12)
    obs = _observations()
    expected = np.clip(np.tanh(obs @ w1 + b1) @ w2 + b2, -1.0, 1.0).astype(np.float32)
    actions = policy.act(obs, latent)
    assert actions.dtype == np.float32 and actions.shape == (64, 2)
    np.testing.assert_allclose(actions, expected, rtol=0, atol=1e-6)
    assert np.any(np.abs(actions) == 1.0) and np.any(np.abs(actions) < 1.0)  # both clipped and inside outputs tested
    raw = (np.tanh(obs @ w1 + b1) @ w2 + b2).astype(np.float32)  # the ablations' rule: the raw output, unclipped
    np.testing.assert_allclose(policy.actor(latent, clip=False)(obs), raw, rtol=0, atol=1e-6)
    # another seed, other projections
    other = ProjectedMlpPolicy(SWIMMER_OBS, SWIMMER_ACT, projection_seed=seed + 1)
    assert not np.allclose(other.fixed_matrices()[0], q1)


def test_projected_mlp_without_bias_and_scaled() -> None:
    policy = ProjectedMlpPolicy(SWIMMER_OBS, SWIMMER_ACT, with_bias=False, decoded_weight_scale=0.5, projection_seed=5)
    rng = np.random.RandomState(5)
    q1, _ = np.linalg.qr(rng.randn(32, 5))
    q2, _ = np.linalg.qr(rng.randn(8, 5))
    latent = np.linspace(-3, 3, 10)
    w1, b1, w2, b2 = policy.weights(latent)
    np.testing.assert_allclose(w1, 0.5 * (q1 @ latent[:5]).reshape(8, 4), atol=1e-12)
    np.testing.assert_allclose(w2, 0.5 * (q2 @ latent[5:]).reshape(4, 2), atol=1e-12)
    assert not b1.any() and not b2.any()


def test_random_features_match_the_reference_construction() -> None:
    """R = RandomState(seed).randn(8, 8) / sqrt(8), then c = uniform(-0.1, 0.1, 8) from the same generator;
    h = tanh(R clip(s / 3, -5, 5) + c); y = 0.5 (theta h + bias), theta action-major; the action is y clipped."""
    seed = 1003
    policy = RandomFeaturesPolicy(SWIMMER_OBS, SWIMMER_ACT, projection_seed=seed)
    rng = np.random.RandomState(seed)
    r = rng.randn(8, 8) / np.sqrt(8)
    c = rng.uniform(-0.1, 0.1, size=8)
    np.testing.assert_array_equal(policy.fixed_matrices()[0], r)
    np.testing.assert_array_equal(policy.fixed_matrices()[1], c)

    params = np.round(np.random.default_rng(3).uniform(-2, 2, size=18), 1)
    theta, bias = params[:16].reshape(2, 8), params[16:]
    obs = _observations(scale=30.0)  # beyond 3 * 5: the observation clip matters
    expected = []
    for s in obs:
        hidden = np.tanh(r @ np.clip(s / 3.0, -5.0, 5.0) + c)
        expected.append(np.clip(0.5 * (theta @ hidden) + 0.5 * bias, -1.0, 1.0))
    np.testing.assert_allclose(policy.act(obs, params), np.array(expected, dtype=np.float32), rtol=0, atol=1e-6)
    assert not np.allclose(np.clip(obs / 3.0, -5, 5), obs / 3.0)


def test_discrete_actions_take_the_argmax() -> None:
    env = gym.make("CartPole-v1")
    for policy in (
        ProjectedMlpPolicy(env.observation_space, env.action_space),
        RandomFeaturesPolicy(env.observation_space, env.action_space),
    ):
        params = policy.parameter_space.sample(np.random.default_rng(0))
        obs = np.random.default_rng(1).normal(size=(50, 4))
        actions = policy.act(obs, params)
        assert actions.shape == (50,) and set(actions.tolist()) <= {0, 1}
        assert "the action is the index j of the largest y[j] (j = 0..1)" in policy.layout_lines()[0]


def test_warmup_draws_follow_the_reference() -> None:
    """The reference's initialize_policy: N(0, 2) latents clipped to [-6, 6], N(0, 0.75) readouts clipped to [-2, 2],
    each rounded to one decimal."""
    rng = np.random.default_rng(0)
    latent_space = ProjectedMlpPolicy(SWIMMER_OBS, SWIMMER_ACT).parameter_space
    readout_space = RandomFeaturesPolicy(SWIMMER_OBS, SWIMMER_ACT).parameter_space
    latents = np.stack([latent_space.sample(rng) for _ in range(1000)])
    readouts = np.stack([readout_space.sample(rng) for _ in range(500)])
    assert abs(latents.std() - 2.0) < 0.05 and abs(readouts.std() - 0.75) < 0.03
    assert np.abs(readouts).max() == 2.0 and np.abs(latents).max() <= 6.0
    for values in (latents, readouts):
        np.testing.assert_array_equal(values, np.round(values, 1))


def test_bounds_and_invalid_settings() -> None:
    policy = RandomFeaturesPolicy(SWIMMER_OBS, SWIMMER_ACT, param_bounds=(-1.0, 1.0), hidden_dim=3, with_bias=False)
    assert (policy.parameter_space.size, policy.parameter_space.high) == (6, 1.0)
    with pytest.raises(ValueError, match=r"latent_dim_layer2 must be in 1\.\.10"):
        ProjectedMlpPolicy(SWIMMER_OBS, SWIMMER_ACT, latent_dim_layer2=11)
    with pytest.raises(ValueError, match="hidden_dim"):
        RandomFeaturesPolicy(SWIMMER_OBS, SWIMMER_ACT, hidden_dim=0)
    with pytest.raises(ValueError, match="Discrete observations"):
        ProjectedMlpPolicy(spaces.Discrete(4), SWIMMER_ACT)
    with pytest.raises(ValueError, match="bounded Box"):
        RandomFeaturesPolicy(SWIMMER_OBS, spaces.Box(-np.inf, np.inf, shape=(2,)))
    with pytest.raises(TypeError, match="hiden_dim"):  # a misspelt policy_kwargs name is refused, not ignored
        ProjectedMlpPolicy(SWIMMER_OBS, SWIMMER_ACT, hiden_dim=3)  # type: ignore[call-arg]


def test_r2po_bounds_default_to_the_policy_and_explicit_ones_win() -> None:
    model = R2PO("RandomFeatures", "Pendulum-v1", llm="example", seed=0)
    assert (model.policy.parameter_space.low, model.policy.parameter_space.high) == (-2.0, 2.0)
    model = R2PO("RandomFeatures", "Pendulum-v1", llm="example", seed=0, param_bounds=(-3.0, 3.0))
    assert (model.policy.parameter_space.low, model.policy.parameter_space.high) == (-3.0, 3.0)
    model = R2PO("ProjectedMlp", "Pendulum-v1", llm="example", seed=0)
    assert (model.policy.parameter_space.low, model.policy.parameter_space.high) == (-6.0, 6.0)


@pytest.mark.parametrize("policy, budget", [("ProjectedMlp", 205), ("RandomFeatures", 405)])
def test_a_search_improves_on_the_warmup(policy: str, budget: int) -> None:
    """The example LLM's local search (sb3_r2po.llm.example) through the whole loop: over four seeds on
    InvertedPendulum, the best K-episode mean of the iterations is well above the warm-up's best single episode."""
    pytest.importorskip("mujoco")
    warmup_best, search_best = [], []
    for seed in range(4):
        settings = dict(n_eval_episodes=2, warmup_episodes=5, max_episodes=budget, seed=seed)
        model = R2PO(policy, "InvertedPendulum-v5", llm="example", **settings)
        model.learn(UNTIL_BUDGET)
        assert model.iteration >= 45
        warmup_best.append(max(r["mean_return"] for r in model.history if r["kind"] == "warmup"))
        search_best.append(max(r["mean_return"] for r in model.history if r["kind"] != "warmup"))
    assert np.mean(search_best) >= 1.5 * np.mean(warmup_best) and np.mean(search_best) - np.mean(warmup_best) >= 15


@pytest.mark.parametrize(
    "policy, kwargs",
    [
        ("ProjectedMlp", dict(projection_seed=77, hidden_dim=3, latent_dim_layer1=4, latent_dim_layer2=2)),
        ("RandomFeatures", dict(projection_seed=78, hidden_dim=5, output_gain=0.8)),
    ],
)
def test_save_load_round_trip_is_exact(tmp_path, policy: str, kwargs: dict) -> None:
    model = R2PO(
        policy,
        "Pendulum-v1",
        llm="example:0",
        n_eval_episodes=2,
        warmup_episodes=3,
        max_episodes=9,
        seed=0,
        policy_kwargs=kwargs,
    )
    model.learn(UNTIL_BUDGET)
    model.save(tmp_path / "model.zip")
    loaded = R2PO.load(tmp_path / "model.zip", env=gym.make("Pendulum-v1"))
    assert type(loaded.policy) is type(model.policy) and loaded.policy.projection_seed == kwargs["projection_seed"]
    assert loaded.history == model.history
    np.testing.assert_array_equal(loaded.policy.get_flat(), model.policy.get_flat())
    for mine, theirs in zip(model.policy.weights(), loaded.policy.weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    for name, buffer in model.policy.named_buffers():
        np.testing.assert_array_equal(dict(loaded.policy.named_buffers())[name].numpy(), buffer.numpy())
    obs = np.stack([model.observation_space.sample() for _ in range(32)])
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])


@pytest.mark.parametrize("policy", ["ProjectedMlp", "RandomFeatures"])
def test_swimmer_trains_saves_loads_and_predicts(tmp_path, policy: str) -> None:
    pytest.importorskip("mujoco")
    model = R2PO(policy, "Swimmer-v5", llm="example", n_eval_episodes=1, warmup_episodes=2, max_episodes=4, seed=0)
    model.learn(UNTIL_BUDGET)
    assert model.iteration >= 1 and len(model.history) >= 3
    model.save(tmp_path / "swimmer")
    loaded = R2PO.load(tmp_path / "swimmer", env=gym.make("Swimmer-v5"))
    obs = np.stack([model.observation_space.sample() for _ in range(16)])
    actions, _ = loaded.predict(obs, deterministic=True)
    assert actions.shape == (16, 2) and loaded.action_space.contains(actions[0].astype(np.float32))
    np.testing.assert_array_equal(actions, model.predict(obs, deterministic=True)[0])


def _first_prompts(policy: str, variant: str) -> list[str]:
    """The prompts of a short run on Swimmer (the example LLM answers)."""
    example, prompts = ExampleLLM(0), []

    def llm(messages: list[dict[str, str]]) -> str:
        prompts.append(messages[-1]["content"])
        return example.chat(messages).text

    model = R2PO(policy, "Swimmer-v5", llm=llm, variant=variant, n_eval_episodes=1, warmup_episodes=1, max_episodes=3, seed=0)
    model.learn(UNTIL_BUDGET)
    return prompts


def test_prompts_describe_the_policy() -> None:
    """The Critic's policy section and the ProPS+ Search show the layout; ProPS's black-box Search is told the network
    of ProjectedMlp (as the reference's num_optim_projected_mlp_qr.j2) and nothing of RandomFeatures; Swimmer gets the
    reference's per-policy description."""
    pytest.importorskip("mujoco")
    props = _first_prompts("ProjectedMlp", "props")[0]
    assert "-> 4 hidden units with tanh activation -> y (2 values)" in props and "opaque" in props
    assert "Random-feature policy" not in _first_prompts("RandomFeatures", "props")[0]
    plus = _first_prompts("RandomFeatures", "props_plus")[0]
    assert "- params[8] to params[15]: theta[1] (the feature weights of y[1])" in plus
    assert "linear policy" not in plus and "without large, unstable swings" in plus
    plus = _first_prompts("ProjectedMlp", "props_plus")[0]
    assert "linear policy" not in plus and "steady forward swimming" in plus
    search, critic = _first_prompts("RandomFeatures", "r2po")[:2]
    assert "Random-feature policy" not in search and "improving a random-feature policy" in critic
    assert "params[16], params[17]: bias" in critic


def test_the_paper_grid_holds_the_reference_swimmer_runs() -> None:
    """configs/swimmer/swimmer_props_random_projection_qr.yaml, swimmer_propsp_random_projection_qr.yaml and
    swimmer_propsp_random_features_tanh_same_dim.yaml: run s of the grid is the reference's run s + 1."""
    from sb3_r2po.experiments.grids import paper_grid
    from sb3_r2po.experiments.report import run_label

    specs = [s for s in paper_grid("example:0", ["Swimmer-v5"], seeds=[0, 4]) if "policy" in s.settings_dict]
    found = {(s.method, s.settings_dict["policy"], s.seed): (s.budget, s.settings_dict) for s in specs}
    assert set(found) == {(m, p, seed) for m, p in PAPER_RUNS for seed in (0, 4)}
    for (method, policy, seed), (budget, settings) in found.items():
        warmup = 100 if policy == "RandomFeatures" else 20
        assert budget == warmup + 200 * 20 and settings["warmup_episodes"] == warmup
        assert settings["max_iterations"] == 200 and settings["n_eval_episodes"] == 20
        base = 1000 if policy == "RandomFeatures" else 3000
        assert settings["policy_kwargs"]["projection_seed"] == base + seed + 1
        assert run_label({"method": method, "hyperparams": {"policy": policy}}) == f"{method} ({policy})"
    assert found[("props_plus", "RandomFeatures", 0)][1]["param_bounds"] == [-2.0, 2.0]
    assert paper_grid("example:0", ["Swimmer-v5"], ["props"], [0], policies=False)[0].settings_dict == {}


PAPER_RUNS = (("props", "ProjectedMlp"), ("props_plus", "ProjectedMlp"), ("props_plus", "RandomFeatures"))


def test_a_paper_grid_run_builds_through_the_zoo() -> None:
    pytest.importorskip("mujoco")
    from sb3_r2po.experiments.grids import paper_grid
    from sb3_r2po.experiments.runs import prepare_run

    spec = paper_grid("example:0", ["Swimmer-v5"], ["props_plus"], [2])[-1]
    model = prepare_run(spec).model
    assert isinstance(model.policy, RandomFeaturesPolicy) and model.policy.projection_seed == 1003
    space = model.policy.parameter_space
    assert (space.size, space.low, space.high, model.settings.warmup_episodes, model.settings.max_episodes) == (
        18,
        -2.0,
        2.0,
        100,
        4100,
    )
    assert (model.settings.variant, model.settings.step_size, model.settings.target, model.settings.n_eval_episodes) == (
        "props_plus",
        0.1,
        250.0,
        20,
    )
