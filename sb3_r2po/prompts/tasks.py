"""Task descriptions shown to the LLM: a registry for known environments, generated text for any other (one line per
observation dimension or for the state index, one per action or action dimension, the reward and the episode end)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gymnasium import spaces


@dataclass(frozen=True)
class TaskDescription:
    """
    What the LLM is told about an environment.

    :param summary: One or two sentences: the goal.
    :param observations: One line per observation dimension (``Box``, ``MultiDiscrete``, ``MultiBinary``: flattened), or
        a single line describing the state index (``Discrete``).
    :param actions: One line per discrete action, or per action dimension for ``Box`` actions.
    :param reward: How reward is given.
    :param episode_end: When an episode ends.
    """

    summary: str
    observations: tuple[str, ...]
    actions: tuple[str, ...]
    reward: str
    episode_end: str


TASK_DESCRIPTIONS: dict[str, TaskDescription] = {}
"""Registered descriptions by gymnasium env id (e.g. ``"CartPole-v1"``)."""

POLICY_TASK_DESCRIPTIONS: dict[tuple[str, str], TaskDescription] = {}
"""Registered descriptions of an env for one policy class, by ``(env id, policy class name)``: they win over
:data:`TASK_DESCRIPTIONS` for that policy (the reference words some env descriptions per policy)."""


def register_task_description(env_id: str, description: TaskDescription, policy: str | None = None) -> None:
    """Register (or replace) the description of ``env_id``; with ``policy`` (a policy class name), for that policy only."""
    if policy is None:
        TASK_DESCRIPTIONS[env_id] = description
    else:
        POLICY_TASK_DESCRIPTIONS[(env_id, policy)] = description


def _fmt(x: float) -> str:
    return "-inf" if x == -np.inf else "inf" if x == np.inf else f"{x:.3g}"


def generic_task_description(observation_space: spaces.Space, action_space: spaces.Space) -> TaskDescription:
    """A description generated from the spaces alone, for environments without a registered one."""
    if isinstance(observation_space, spaces.Box):
        low, high = observation_space.low.reshape(-1), observation_space.high.reshape(-1)
        observations = tuple(
            f"s[{i}]: range [{_fmt(lo)}, {_fmt(hi)}]" for i, (lo, hi) in enumerate(zip(low, high, strict=True))
        )
    elif isinstance(observation_space, spaces.Discrete):
        first = int(observation_space.start)
        observations = (f"the state is an integer index in {first}..{first + int(observation_space.n) - 1}",)
    elif isinstance(observation_space, spaces.MultiDiscrete):
        nvec = observation_space.nvec.reshape(-1).tolist()
        starts = np.broadcast_to(observation_space.start, observation_space.shape).reshape(-1).tolist()
        observations = tuple(
            f"s[{i}]: an integer in {first}..{first + n - 1}" for i, (n, first) in enumerate(zip(nvec, starts, strict=True))
        )
    elif isinstance(observation_space, spaces.MultiBinary):
        observations = tuple(f"s[{i}]: 0 or 1" for i in range(int(np.prod(observation_space.shape))))
    else:
        observations = (str(observation_space),)
    if isinstance(action_space, spaces.Discrete):
        start = int(action_space.start)
        actions = tuple(f"action {start + i}" for i in range(int(action_space.n)))
    elif isinstance(action_space, spaces.Box):
        low, high = action_space.low.reshape(-1), action_space.high.reshape(-1)
        actions = tuple(
            f"a[{j}]: continuous, range [{_fmt(lo)}, {_fmt(hi)}]" for j, (lo, hi) in enumerate(zip(low, high, strict=True))
        )
    else:
        actions = (str(action_space),)
    return TaskDescription(
        summary="An unknown control task: maximise the total reward of an episode.",
        observations=observations,
        actions=actions,
        reward="the environment's reward; higher total reward per episode is better",
        episode_end="when the environment signals termination or the episode length cap is reached",
    )


def describe_task(
    env_id: str | None, observation_space: spaces.Space, action_space: spaces.Space, policy: str | None = None
) -> TaskDescription:
    """The registered description of ``env_id`` for ``policy`` (a policy class name), else of ``env_id``, else one
    generated from the spaces."""
    if env_id is not None and policy is not None and (env_id, policy) in POLICY_TASK_DESCRIPTIONS:
        return POLICY_TASK_DESCRIPTIONS[(env_id, policy)]
    if env_id is not None and env_id in TASK_DESCRIPTIONS:
        return TASK_DESCRIPTIONS[env_id]
    return generic_task_description(observation_space, action_space)
