import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from sb3_r2po import R2PO, ExampleLLM
from sb3_r2po.r2po.policies import MAX_TABULAR_STATES, LinearPolicy, TabularPolicy


def test_linear_layout_is_state_major_with_bias_last() -> None:
    policy = LinearPolicy(spaces.Box(-1, 1, (3,)), spaces.Discrete(2))
    assert policy.parameter_space.size == 3 * 2 + 2
    theta = np.arange(8, dtype=np.float64)
    policy.set_flat(theta)
    w, b = policy.weights()
    assert w[1, 0] == theta[1 * 2 + 0] and w[2, 1] == theta[2 * 2 + 1]
    np.testing.assert_array_equal(b, [6.0, 7.0])
    obs = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
    # y = s @ W + b: first row y = [0+6, 1+7] -> argmax 1; second row y = [-4+6, -5+7] = [2, 2] -> tie -> 0
    np.testing.assert_array_equal(policy.act(obs), [1, 0])


@pytest.mark.parametrize(
    "env_id, n_params", [("CartPole-v1", 10), ("MountainCar-v0", 9), ("MountainCarContinuous-v0", 3), ("Pendulum-v1", 4)]
)
def test_parameter_counts(env_id: str, n_params: int) -> None:
    env = gym.make(env_id)
    assert LinearPolicy(env.observation_space, env.action_space).parameter_space.size == n_params


def test_box_actions_are_clipped() -> None:
    policy = LinearPolicy(spaces.Box(-1, 1, (1,)), spaces.Box(-2, 2, (1,), dtype=np.float32))
    policy.set_flat(np.array([10.0, 0.0]))
    actions = policy.act(np.array([[1.0], [-1.0], [0.1]]))
    np.testing.assert_allclose(actions.reshape(-1), [2.0, -2.0, 1.0])
    assert actions.dtype == np.float32
    # each action dimension is clipped to its own bounds
    wide = LinearPolicy(
        spaces.Box(-1, 1, (1,)), spaces.Box(np.array([-1.0, -3.0], np.float32), np.array([1.0, 3.0], np.float32))
    )
    wide.set_flat(np.array([10.0, 10.0, 0.0, 0.0]))
    np.testing.assert_allclose(wide.act(np.array([[1.0], [-1.0]])), [[1.0, 3.0], [-1.0, -3.0]])


def test_the_raw_actor_does_not_clip_but_predict_does() -> None:
    """``actor(params, clip=False)`` is the reference ablations' rule (the env gets the raw output); the policy's own
    forward pass, hence ``predict()``, always clips."""
    policy = LinearPolicy(spaces.Box(-1, 1, (1,)), spaces.Box(-2, 2, (1,), dtype=np.float32))
    params = np.array([10.0, 0.5])
    observations = np.array([[1.0], [-1.0], [0.1]])
    raw = policy.actor(params, clip=False)(observations)
    np.testing.assert_allclose(raw.reshape(-1), [10.5, -9.5, 1.5])
    assert raw.dtype == np.float32 and raw.shape == (3, 1)
    np.testing.assert_allclose(policy.actor(params)(observations).reshape(-1), [2.0, -2.0, 1.5])
    policy.set_flat(params)
    predicted, _ = policy.predict(observations.astype(np.float32), deterministic=True)
    np.testing.assert_allclose(predicted.reshape(-1), [2.0, -2.0, 1.5])
    discrete = LinearPolicy(spaces.Box(-1, 1, (1,)), spaces.Discrete(2))  # argmax: always inside the space
    discrete_params = np.array([1.0, -1.0, 0.0, 0.0])
    assert discrete.actor(discrete_params, clip=False)(observations).tolist() == [0, 1, 0]


def test_tabular_policy() -> None:
    policy = TabularPolicy(spaces.Discrete(4), spaces.Discrete(3))
    assert policy.parameter_space.values == (0, 1, 2)
    policy.set_flat(np.array([2.0, 1.0, 0.0, 2.0]))
    np.testing.assert_array_equal(policy.act(np.array([0, 1, 2, 3])), [2, 1, 0, 2])
    shifted = TabularPolicy(spaces.Discrete(3, start=1), spaces.Discrete(2, start=5))
    assert shifted.parameter_space.values == (5, 6)
    np.testing.assert_array_equal(shifted.get_flat(), [5.0, 5.0, 5.0])  # starts at a legal table: the first action
    shifted.set_flat(np.array([5.0, 6.0, 5.0]))
    np.testing.assert_array_equal(shifted.act(np.array([1, 2, 3])), [5, 6, 5])


def test_predict_matches_the_numpy_forward() -> None:
    model = R2PO("MlpLinear", "CartPole-v1", llm=ExampleLLM())
    model.policy.set_flat(np.linspace(-3, 3, 10).round(1))
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    np.testing.assert_array_equal(model.predict(obs, deterministic=True)[0], model.policy.act(obs))


@pytest.mark.parametrize(
    "policy, observation_space, action_space, match",
    [
        ("MlpLinear", spaces.Dict({"a": spaces.Box(-1, 1, (2,))}), spaces.Discrete(2), r"\(Dict observations\)"),
        ("MlpLinear", spaces.Box(0, 255, (32, 32, 3), dtype=np.uint8), spaces.Discrete(2), r"\(image observations\)"),
        ("MlpLinear", spaces.Discrete(4), spaces.Discrete(2), "Tabular"),
        ("MlpLinear", spaces.MultiDiscrete([[2, 3], [2, 2]]), spaces.Discrete(2), "MultiDiscrete observation space of one"),
        ("MlpLinear", spaces.Box(-1, 1, (2,)), spaces.MultiDiscrete([2, 3]), "MultiDiscrete"),
        ("Tabular", spaces.Box(-1, 1, (2,)), spaces.Discrete(2), r"TabularPolicy \('Tabular'\) does not support .* \(Box"),
        ("Tabular", spaces.Discrete(MAX_TABULAR_STATES + 1), spaces.Discrete(2), "limit"),
        ("Tabular", spaces.Discrete(4), spaces.Box(-1, 1, (1,)), "Discrete action"),
    ],
)
def test_unsupported_spaces_raise(
    policy: str, observation_space: spaces.Space, action_space: spaces.Space, match: str
) -> None:
    policy_class = R2PO.policy_aliases[policy]
    with pytest.raises(ValueError, match=match):
        policy_class(observation_space, action_space)


def test_unbounded_box_actions_raise() -> None:
    with pytest.raises(ValueError, match="bounded"):
        LinearPolicy(spaces.Box(-1, 1, (2,)), spaces.Box(-np.inf, np.inf, (1,)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_eval_episodes=0), "n_eval_episodes"),
        (dict(param_bounds=(1, -1)), "reversed"),
        (dict(param_bounds=(1, 1)), "reversed"),
        (dict(step_size=0), "step_size"),
        (dict(max_episodes=0), "max_episodes"),
        (dict(llm="no such llm form!"), "matches no accepted form"),
        (dict(n_eval_episodes=2.5), "n_eval_episodes must be an integer >= 1"),
        (dict(max_episodes=30.0), "max_episodes must be an integer >= 1 or None"),
        (dict(step_size=float("nan")), "step_size must be a finite number > 0"),
        (dict(param_bounds=(1.0,)), "param_bounds must be two finite numbers"),
        (dict(param_bounds=(-np.inf, 1.0)), "param_bounds must be two finite numbers"),
        (dict(param_decimals=1.5), "param_decimals must be an integer >= 0"),
        (dict(trajectory_digits=0), "trajectory_digits must be an integer >= 1"),
        (dict(max_trajectory_steps=0), "max_trajectory_steps must be an integer >= 1 or None"),
        (dict(history_best_k=-2), "history_best_k must be an integer >= 0 or None"),
        (dict(history_recent=2.5), "history_recent must be an integer >= 0 or None"),
        (dict(max_llm_retries=-1), "max_llm_retries must be an integer >= 0"),
        (dict(temperature=-1.0), "temperature must be a finite number >= 0"),
        (dict(racing_z=float("nan")), "racing_z must be a finite number >= 0"),
        (dict(target_return=float("inf")), "target_return must be a finite number or None"),
        (dict(warmup_episodes=True), "warmup_episodes must be an integer >= 0"),
    ],
)
def test_bad_hyperparameters_raise_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        R2PO("MlpLinear", "CartPole-v1", **{"llm": ExampleLLM(), **kwargs})


def test_layout_text_states_nonzero_space_starts() -> None:
    linear = LinearPolicy(spaces.Box(-1, 1, (2,)), spaces.Discrete(3, start=-1))
    text = linear.layout_lines()[0]
    assert "the action is j - 1, with j the index of the largest y[j] (j = 0..2), so the actions are -1..1" in text
    np.testing.assert_array_equal(linear.act(np.zeros((1, 2)), np.array([0, 0, 0, 0, 0, 0, 0, 0, 1.0])), [1])
    plain = LinearPolicy(spaces.Box(-1, 1, (2,)), spaces.Discrete(3)).layout_lines()[0]
    assert "the action is the index j of the largest y[j] (j = 0..2)." in plain
    tabular = TabularPolicy(spaces.Discrete(4, start=10), spaces.Discrete(2, start=5))
    assert tabular.layout_lines() == (
        "Tabular policy: params[s - 10] is the action taken in state s, for the 4 states s = 10..13 "
        "(params[0] is state 10, params[3] is state 13).",
    )
    np.testing.assert_array_equal(tabular.act(np.array([10, 13]), np.array([5, 6, 6, 6.0])), [5, 6])
    negative = TabularPolicy(spaces.Discrete(3, start=-1), spaces.Discrete(2)).layout_lines()[0]
    assert "params[s + 1] is the action taken in state s, for the 3 states s = -1..1" in negative
    # start 0: the plain wording; the value set is stated once, by the prompt's Parameters section
    assert TabularPolicy(spaces.Discrete(4), spaces.Discrete(3)).layout_lines() == (
        "Tabular policy: params[s] is the action taken in state s, for the 4 states s = 0..3.",
    )
