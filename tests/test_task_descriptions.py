import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import sb3_r2po.envs  # noqa: F401  (registers the custom envs)
from sb3_r2po.prompts.tasks import DESCRIPTIONS, TASK_DESCRIPTIONS, TaskDescription, describe_task, generic_task_description

ENV_IDS = [
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
]
MUJOCO_IDS = {"InvertedPendulum-v5", "InvertedDoublePendulum-v5", "Swimmer-v5"}


def test_all_ten_registered():
    assert set(DESCRIPTIONS) == set(ENV_IDS)
    for env_id in ENV_IDS:
        assert TASK_DESCRIPTIONS[env_id] is DESCRIPTIONS[env_id]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_description_matches_spaces(env_id):
    if env_id in MUJOCO_IDS:
        pytest.importorskip("mujoco")
    env = gym.make(env_id)
    description = describe_task(env_id, env.observation_space, env.action_space)
    assert description is DESCRIPTIONS[env_id]

    if isinstance(env.observation_space, spaces.Box):
        assert len(description.observations) == int(np.prod(env.observation_space.shape))
    else:
        assert isinstance(env.observation_space, spaces.Discrete)
        assert len(description.observations) == 1

    if isinstance(env.action_space, spaces.Discrete):
        assert len(description.actions) == int(env.action_space.n)
    else:
        assert isinstance(env.action_space, spaces.Box)
        assert len(description.actions) == int(np.prod(env.action_space.shape))
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_description_fields_non_empty(env_id):
    description = DESCRIPTIONS[env_id]
    assert isinstance(description, TaskDescription)
    for text in (description.summary, description.reward, description.episode_end):
        assert isinstance(text, str) and text.strip()
    for line in (*description.observations, *description.actions):
        assert isinstance(line, str) and line.strip()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_description_lines_are_indexed(env_id):
    """Box dimensions are described as ``s[i]`` / ``a[j]`` in order, discrete actions as ``k:``."""
    if env_id in MUJOCO_IDS:
        pytest.importorskip("mujoco")
    env = gym.make(env_id)
    description = DESCRIPTIONS[env_id]
    if isinstance(env.observation_space, spaces.Box):
        for i, line in enumerate(description.observations):
            assert line.startswith(f"s[{i}]:")
    if isinstance(env.action_space, spaces.Box):
        for j, line in enumerate(description.actions):
            assert line.startswith(f"a[{j}]:")
    else:
        for k, line in enumerate(description.actions):
            assert line.startswith(f"{k}:")
    env.close()


def _text(env_id: str) -> str:
    description = DESCRIPTIONS[env_id]
    return " ".join(
        (description.summary, *description.observations, *description.actions, description.reward, description.episode_end)
    )


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_descriptions_state_no_time_limit(env_id):
    """The reference's descriptions (env_descriptions/*.j2) never state an episode cap; the trajectories show it."""
    text = _text(env_id).lower()
    assert "truncat" not in text
    spec = gym.spec(env_id)
    if spec.max_episode_steps is not None:
        assert f"{spec.max_episode_steps} steps" not in text


# Facts our older descriptions gave away and the reference's do not reveal (fidelity report, section 6.2).
NOT_REVEALED = {
    "CartPole-v1": ["0.05", "0.2095", "12 degrees", "10 n", "500", "leans", "typically"],
    "InvertedPendulum-v5": ["0.01", "tips the pole", "rail", "finite", "1000", "[-0.2, 0.2]"],
    "InvertedDoublePendulum-v5": ["gaussian", "clipped", "9.3", "0.64", "1.2 m", "0.005", "1 m", "1000"],
    "MountainCar-v0": ["rock", "momentum", "back and forth", "too weak", "-0.52", "0.5", "0.0025", "cos", "200", "-0.6"],
    "MountainCarContinuous-v0": ["rock", "momentum", "back and forth", "too weak", "0.45", "0.0015", "cos", "999", "-0.6"],
    "Swimmer-v5": ["three", "1.75", "0.04", "front-middle", "never terminates", "1000"],
    "R2PO/Pong-v0": (
        "opponent|follows the ball|never miss|800|600|80 pixels|pixel|(400, 300)|serve|bounce|downwards|y = 0|x = 15|45|"
        "1000|reverses"
    ).split("|"),
    "FrozenLake-v1": "sfff|fhfh|fffh|hfff|hffg|holes 5|5, 7|11 and 12|in place|perpendicular|100".split("|"),
    "R2PO/Maze3x3-v0": ["(0,0)", "(0,1)", "(1,1)", "(2,1)", "between", "in place", "blocked", "deterministic", "20"],
    "R2PO/Nim-v0": ["optimal", "misère", "misere", "4k", "multiple of 4", "random", "first", "illegal", "0 otherwise"],
}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_descriptions_reveal_nothing_the_reference_keeps_back(env_id):
    text = _text(env_id).lower()
    leaked = [fact for fact in NOT_REVEALED[env_id] if fact in text]
    assert not leaked, f"{env_id} reveals {leaked}"


def test_no_wall_list_in_the_maze_description():
    """Neither our walls nor any adjacent-cell pair appears; the walls must be found from the trajectories."""
    from sb3_r2po.envs.maze import MAZE_WALLS, Maze3x3Env

    text = _text("R2PO/Maze3x3-v0")
    for wall in MAZE_WALLS:
        a, b = sorted(wall)
        for fmt in ("({}, {})", "({},{})"):
            assert fmt.format(*a) not in text and fmt.format(*b) not in text
        sa, sb = Maze3x3Env.cell_to_state(a), Maze3x3Env.cell_to_state(b)
        for pair in (f"{sa} and {sb}", f"{sa}-{sb}", f"{sa}/{sb}", f"{sa}|{sb}"):
            assert pair not in text
    assert "walls" in text and "trajectories" in text and "not given" in text


def test_no_hole_list_in_the_frozenlake_description():
    text = _text("FrozenLake-v1")
    assert "5, 7" not in text and "12" not in text.replace("12 to 15", "")
    assert "SFFF" not in text and "HFFG" not in text
    assert "holes" in text and "trajectories" in text and "not given" in text


def test_no_opponent_strategy_in_the_descriptions():
    for env_id in ("R2PO/Nim-v0", "R2PO/Pong-v0"):
        text = _text(env_id).lower()
        for word in ("optimal", "opponent", "strategy", "4k", "random", "tracks", "follows"):
            assert word not in text, (env_id, word)


@pytest.mark.parametrize("env_id", ["MountainCar-v0", "MountainCarContinuous-v0"])
def test_no_solution_hint_in_the_mountain_car_descriptions(env_id):
    text = _text(env_id).lower()
    for hint in ("rock", "momentum", "back and forth", "build", "too weak", "swing"):
        assert hint not in text
    assert "far right" in text


@pytest.mark.parametrize(
    "env_id, n_params",
    [
        ("CartPole-v1", 10),  # the reference's cartpole.j2 says 18
        ("InvertedPendulum-v5", 5),
        ("InvertedDoublePendulum-v5", 10),
        ("MountainCar-v0", 9),
        ("MountainCarContinuous-v0", 3),
        ("Swimmer-v5", 18),  # the reference's swimmer.j2 says 5
        ("R2PO/Pong-v0", 18),
        ("FrozenLake-v1", 16),
        ("R2PO/Maze3x3-v0", 9),
        ("R2PO/Nim-v0", 11),
    ],
)
def test_layouts_come_from_the_policy_and_stay_right(env_id, n_params):
    """The descriptions carry no parameter layout; the policy renders it, with the right count and shape."""
    from sb3_r2po.r2po.policies import LinearPolicy, TabularPolicy

    if env_id in MUJOCO_IDS:
        pytest.importorskip("mujoco")
    assert "params" not in _text(env_id) and "parameter" not in _text(env_id).lower()
    env = gym.make(env_id)
    if isinstance(env.observation_space, spaces.Discrete):
        policy = TabularPolicy(env.observation_space, env.action_space)
        assert policy.layout_lines()[0].startswith(
            f"Tabular policy: params[s] is the action taken in state s, for the {n_params} "
        )
    else:
        policy = LinearPolicy(env.observation_space, env.action_space)
        n, m = policy.obs_dim, policy.act_dim
        lines = policy.layout_lines()
        assert f"W of shape ({n}, {m})" in lines[0]
        assert len(lines) == 2 + n + 1  # header, layout rule, one line per W row, one for b
        assert lines[-1] == "- " + ", ".join(f"params[{n * m + j}]" for j in range(m)) + ": b (bias)"
        assert ("largest y[j]" in lines[0]) == isinstance(env.action_space, spaces.Discrete)
    assert policy.parameter_space.size == n_params
    env.close()


def test_generic_description_states_the_real_state_range():
    description = generic_task_description(spaces.Discrete(4, start=10), spaces.Discrete(2, start=5))
    assert description.observations == ("the state is an integer index in 10..13",)
    assert description.actions == ("action 5", "action 6")
    assert generic_task_description(spaces.Discrete(4), spaces.Discrete(2)).observations == (
        "the state is an integer index in 0..3",
    )
