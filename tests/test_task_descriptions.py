import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import sb3_r2po.envs  # noqa: F401  (registers the custom envs and the descriptions)
from sb3_r2po.envs.descriptions import DESCRIPTIONS
from sb3_r2po.prompts.tasks import TASK_DESCRIPTIONS, TaskDescription, describe_task, generic_task_description

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


@pytest.mark.parametrize("env_id", ["R2PO/Pong-v0", "R2PO/Maze3x3-v0", "R2PO/Nim-v0"])
def test_custom_episode_caps_mentioned(env_id):
    """The descriptions of the custom envs state the truncation their registration uses, where there is one."""
    spec = gym.spec(env_id)
    text = DESCRIPTIONS[env_id].episode_end
    if env_id == "R2PO/Nim-v0":
        # A game lasts at most 5 agent moves; the 1000-step cap never applies.
        assert "terminates" in text
    else:
        assert str(spec.max_episode_steps) in text


def test_generic_description_states_the_real_state_range():
    description = generic_task_description(spaces.Discrete(4, start=10), spaces.Discrete(2, start=5))
    assert description.observations == ("the state is an integer index in 10..13",)
    assert description.actions == ("action 5", "action 6")
    assert generic_task_description(spaces.Discrete(4), spaces.Discrete(2)).observations == (
        "the state is an integer index in 0..3",
    )
