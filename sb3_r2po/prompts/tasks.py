"""Task descriptions shown to the LLM: the ten R2PO environments' (registered, from ``tasks.yml`` beside this module)
and generated text for any other."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from gymnasium import spaces


@dataclass(frozen=True)
class TaskDescription:
    """What the LLM is told about an environment.

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


def _fields(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: tuple(value) if isinstance(value, list) else value for key, value in fields.items()}


_DATA = yaml.safe_load((Path(__file__).resolve().parent / "tasks.yml").read_text(encoding="utf-8"))

DESCRIPTIONS: dict[str, TaskDescription] = {env: TaskDescription(**_fields(f)) for env, f in _DATA["environments"].items()}
"""The ten environments' descriptions by gymnasium id, read from ``tasks.yml`` beside this module."""

TASK_DESCRIPTIONS: dict[str, TaskDescription] = dict(DESCRIPTIONS)
"""Registered descriptions by gymnasium env id (e.g. ``"CartPole-v1"``)."""

POLICY_TASK_DESCRIPTIONS: dict[tuple[str, str], TaskDescription] = {
    (env_id, policy): replace(DESCRIPTIONS[env_id], **_fields(f))
    for env_id, by_policy in _DATA["policies"].items()
    for policy, f in by_policy.items()
}
"""Registered descriptions of an env for one policy class, by ``(env id, policy class name)`` (``tasks.yml``'s
``policies``, then :func:`register_task_description`): they win over :data:`TASK_DESCRIPTIONS` for that policy."""


def register_task_description(env_id: str, description: TaskDescription, policy: str | None = None) -> None:
    """Register (or replace) the description of ``env_id``; with ``policy`` (a policy class name), for that policy only."""
    if policy is None:
        TASK_DESCRIPTIONS[env_id] = description
    else:
        POLICY_TASK_DESCRIPTIONS[(env_id, policy)] = description


def _ranges(name: str, box: spaces.Box, kind: str = "") -> tuple[str, ...]:
    bounds = zip(box.low.reshape(-1), box.high.reshape(-1), strict=True)
    return tuple(f"{name}[{i}]: {kind}range [{float(lo):.3g}, {float(hi):.3g}]" for i, (lo, hi) in enumerate(bounds))


def generic_task_description(observation_space: spaces.Space, action_space: spaces.Space) -> TaskDescription:
    """A description generated from the spaces alone (one line per observation dimension or for the state index, one
    per action or action dimension), for environments without a registered one."""
    if isinstance(observation_space, spaces.Box):
        observations = _ranges("s", observation_space)
    elif isinstance(observation_space, spaces.Discrete):
        first = int(observation_space.start)
        observations = (f"the state is an integer index in {first}..{first + int(observation_space.n) - 1}",)
    elif isinstance(observation_space, spaces.MultiDiscrete):
        starts = np.broadcast_to(observation_space.start, observation_space.shape).reshape(-1).tolist()
        pairs = enumerate(zip(observation_space.nvec.reshape(-1).tolist(), starts, strict=True))
        observations = tuple(f"s[{i}]: an integer in {first}..{first + n - 1}" for i, (n, first) in pairs)
    elif isinstance(observation_space, spaces.MultiBinary):
        observations = tuple(f"s[{i}]: 0 or 1" for i in range(int(np.prod(observation_space.shape))))
    else:
        observations = (str(observation_space),)
    if isinstance(action_space, spaces.Discrete):
        actions = tuple(f"action {int(action_space.start) + i}" for i in range(int(action_space.n)))
    elif isinstance(action_space, spaces.Box):
        actions = _ranges("a", action_space, "continuous, ")
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
    """The registered description of ``env_id`` for ``policy`` (a class name), else of ``env_id``, else a generated one."""
    if env_id is not None and policy is not None and (env_id, policy) in POLICY_TASK_DESCRIPTIONS:
        return POLICY_TASK_DESCRIPTIONS[(env_id, policy)]
    if env_id is not None and env_id in TASK_DESCRIPTIONS:
        return TASK_DESCRIPTIONS[env_id]
    return generic_task_description(observation_space, action_space)
