"""Task descriptions shown to the LLM: the ten R2PO environments' (registered) and generated text for any other. Each
of the ten states only what the reference's ``env_descriptions/<env>.j2`` states, in our words, with its mistakes
corrected (the fidelity page lists them); initial states, dynamics, maps, walls, holes and the Nim opponent's strategy
stay out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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


_MOUNTAIN_CAR_STATE = (
    "s[0]: position, in [-1.2, 0.6]; negative is left, positive is right",
    "s[1]: velocity, in [-0.07, 0.07]; negative is to the left, positive to the right",
)  # both MountainCar tasks

DESCRIPTIONS: dict[str, TaskDescription] = {
    "CartPole-v1": TaskDescription(
        summary=(
            "Balance a pole that stands upright on a cart, attached to it by an unactuated joint, by pushing the cart "
            "to the left or to the right along a frictionless track: keep the pole upright and the cart within the "
            "positions [-2.4, 2.4]."
        ),
        observations=(
            "s[0]: cart position, in [-4.8, 4.8]",
            "s[1]: cart velocity, in (-inf, inf)",
            "s[2]: pole angle in radians, in [-0.418, 0.418]",
            "s[3]: pole angular velocity, in (-inf, inf)",
        ),
        actions=("0: push the cart to the left", "1: push the cart to the right"),
        reward="+1 for every step on which the pole is upright and the cart is within [-2.4, 2.4]",
        episode_end="when the pole falls over or the cart leaves the allowed positions",
    ),
    "InvertedPendulum-v5": TaskDescription(
        summary=(
            "A cart moves along a straight line and carries a pole hinged at one end, the other end free. Balance the "
            "pole on top of the cart by pushing the cart left or right with a continuous force."
        ),
        observations=(
            "s[0]: cart position in metres, in (-inf, inf)",
            "s[1]: pole angle in radians, in (-inf, inf)",
            "s[2]: cart velocity in m/s, in (-inf, inf)",
            "s[3]: pole angular velocity in rad/s, in (-inf, inf)",
        ),
        actions=("a[0]: force applied to the cart in newtons, continuous in [-3, 3]",),
        reward="+1 for every step on which the pole is upright",
        episode_end="when the pole falls over, i.e. its angle goes above 0.2 rad or below -0.2 rad",
    ),
    "InvertedDoublePendulum-v5": TaskDescription(
        summary=(
            "A cart moves along a straight line and carries a first pole; a second pole is attached to the far end of "
            "the first, so only the second pole has a free end. Balance the second pole on top of the first, itself on "
            "top of the cart, by applying continuous forces to the cart, while moving the cart and the poles as little "
            "as possible."
        ),
        observations=(
            "s[0]: position of the cart along the track",
            "s[1]: sine of the angle between the cart and the first pole",
            "s[2]: sine of the angle between the two poles",
            "s[3]: cosine of the angle between the cart and the first pole",
            "s[4]: cosine of the angle between the two poles",
            "s[5]: velocity of the cart",
            "s[6]: angular velocity of the angle between the cart and the first pole",
            "s[7]: angular velocity of the angle between the two poles",
            "s[8]: constraint force on the cart along x",
        ),
        actions=("a[0]: force applied to the cart, continuous in [-1, 1]; positive pushes right, negative pushes left",),
        reward=(
            "alive bonus - distance penalty - velocity penalty: a fixed bonus (10 by default) for every step on which "
            "the pendulum is healthy, minus a penalty measuring how far the free end of the second pole moves, minus a "
            "penalty for moving too fast"
        ),
        episode_end="when the pendulum is no longer healthy",
    ),
    "MountainCar-v0": TaskDescription(
        summary=(
            "A car is in a U-shaped valley. Reach the flag at the far right side of the hill: choose actions that get "
            "the car to the far right side as fast as possible."
        ),
        observations=_MOUNTAIN_CAR_STATE,
        actions=("0: accelerate to the left", "1: do not accelerate", "2: accelerate to the right"),
        reward="-1 for each step",
        episode_end="when the car reaches the flag at the far right side of the hill",
    ),
    "MountainCarContinuous-v0": TaskDescription(
        summary=(
            "A car is in a U-shaped valley, and a torque can be applied to it (negative to the left, positive to the "
            "right). Reach the flag at the far right side of the hill."
        ),
        observations=_MOUNTAIN_CAR_STATE,
        actions=("a[0]: torque applied to the car, continuous in [-1, 1]; negative to the left, positive to the right",),
        reward="-0.1 * a[0]^2 for each step, and +100 when the car reaches the goal",
        episode_end="when the car reaches the flag at the far right side of the hill",
    ),
    "Swimmer-v5": TaskDescription(
        summary=(
            "A swimmer made of segments (links) chained by rotor joints, each rotor joining two links, floats in a "
            "two-dimensional pool. It always starts in the same position, up to a small random deviation drawn from a "
            "uniform distribution. Move as fast as possible to the right by applying torques at the rotors and using "
            "the fluid's friction, while keeping the control cost low."
        ),
        observations=(
            "s[0]: angle of the front tip in radians, in (-inf, inf)",
            "s[1]: angle of the first rotor in radians, in (-inf, inf)",
            "s[2]: angle of the second rotor in radians, in (-inf, inf)",
            "s[3]: velocity of the tip along the x-axis in m/s, in (-inf, inf)",
            "s[4]: velocity of the tip along the y-axis in m/s, in (-inf, inf)",
            "s[5]: angular velocity of the front tip in rad/s, in (-inf, inf)",
            "s[6]: angular velocity of the first rotor in rad/s, in (-inf, inf)",
            "s[7]: angular velocity of the second rotor in rad/s, in (-inf, inf)",
        ),
        actions=(
            "a[0]: first torque applied between the links, continuous in [-1, 1]",
            "a[1]: second torque applied between the links, continuous in [-1, 1]",
        ),
        reward="x-velocity - 0.0001 * (a[0]^2 + a[1]^2) for each step",
        episode_end="not stated; the trajectories show where episodes end",
    ),
    "R2PO/Pong-v0": TaskDescription(
        summary=(
            "A 2D plane in which you are a paddle on the left side (the low-x side) that moves freely along the "
            "vertical (y) axis, and a ball moves in the plane. Always hit the ball back."
        ),
        observations=(
            "s[0]: the paddle's y",
            "s[1]: the ball's x",
            "s[2]: the ball's y",
            "s[3]: the ball's velocity along x",
            "s[4]: the ball's velocity along y",
        ),
        actions=("0: move the paddle up", "1: move the paddle down", "2: do nothing"),
        reward="+1 every time the paddle hits the ball",
        episode_end="the game is over when the paddle misses the ball",
    ),
    "FrozenLake-v1": TaskDescription(
        summary=(
            "A 4x4 grid world (4 rows, 4 columns) on a frozen lake, where the agent moves left, down, right or up. The "
            "lake is slippery: each action moves the agent in one of three directions, with equal probability. The goal "
            "is state 15, the bottom-right cell. Some cells are holes that end the game when the agent steps onto one; "
            "where they are is not given: find the holes by reading the trajectories of the policies tried so far, and "
            "choose actions that cannot make the agent fall into one."
        ),
        observations=(
            "the state is the cell the agent is in, 0..15, numbered row by row: the top row is 0 to 3, the second row "
            "4 to 7, the third row 8 to 11 and the bottom row 12 to 15",
        ),
        actions=(
            "0: move down, left or up, each with probability 1/3",
            "1: move right, down or left, each with probability 1/3",
            "2: move up, right or down, each with probability 1/3",
            "3: move left, up or right, each with probability 1/3",
        ),
        reward="+1 on reaching state 15 (the goal); every other state gives 0",
        episode_end="when the agent reaches the goal or steps onto a hole",
    ),
    "R2PO/Maze3x3-v0": TaskDescription(
        summary=(
            "A 3x3 grid world maze (3 rows, 3 columns). The agent starts in the top-left cell, state 0, and the goal is "
            "the bottom-right cell, state 8. There are walls inside the maze that the agent cannot pass through; where "
            "they are is not given: explore the maze and find the walls by reading the trajectories of the policies "
            "tried so far."
        ),
        observations=("the state is the cell the agent is in, numbered row by row from the top: 0 1 2 / 3 4 5 / 6 7 8",),
        actions=("0: move up", "1: move down", "2: move right", "3: move left"),
        reward="+1 on the step that reaches the goal state 8, -0.1/9 (about -0.0111) on every other step",
        episode_end="when the agent reaches the goal state 8",
    ),
    "R2PO/Nim-v0": TaskDescription(
        summary=(
            "The game of Nim. It starts with 10 sticks; the agent and the environment take turns, each removing 1, 2 or "
            "3 sticks. The agent wins if the environment removes the last stick, and the environment wins if the agent "
            "removes the last stick."
        ),
        observations=("the state is the number of sticks left, 0..10",),
        actions=("0: remove 1 stick", "1: remove 2 sticks", "2: remove 3 sticks"),
        reward="+1 if the agent wins, -1 if the environment wins",
        episode_end="when the last stick is removed",
    ),
}
"""The ten environments' descriptions by gymnasium id."""

# Reference: env_descriptions/swimmer_projected_mlp_qr.j2 and swimmer_random_features.j2 (docs/policies.md).
POLICY_DESCRIPTIONS: dict[tuple[str, str], TaskDescription] = {
    ("Swimmer-v5", "ProjectedMlpPolicy"): replace(
        DESCRIPTIONS["Swimmer-v5"],
        summary=(
            "A swimmer made of segments (links) chained by two rotor joints floats in a two-dimensional pool. Move it to the "
            "right by applying torques at the two joints, without spending more control effort than needed. Good policies "
            "tend to find smooth, coordinated torques that give steady forward swimming."
        ),
    ),
    ("Swimmer-v5", "RandomFeaturesPolicy"): replace(
        DESCRIPTIONS["Swimmer-v5"],
        summary=(
            "A swimmer made of segments (links) chained by two rotor joints floats in a two-dimensional pool. Move it to the "
            "right by applying torques at the two joints, keeping the control effort low. Good policies tend to give smooth, "
            "coordinated torques that move the swimmer forward without large, unstable swings."
        ),
    ),
}
"""Descriptions for one policy class, by ``(gymnasium id, policy class name)``: they replace the env's own for it."""

TASK_DESCRIPTIONS: dict[str, TaskDescription] = dict(DESCRIPTIONS)
"""Registered descriptions by gymnasium env id (e.g. ``"CartPole-v1"``)."""

POLICY_TASK_DESCRIPTIONS: dict[tuple[str, str], TaskDescription] = dict(POLICY_DESCRIPTIONS)
"""Registered descriptions of an env for one policy class, by ``(env id, policy class name)``: they win over
:data:`TASK_DESCRIPTIONS` for that policy."""


def register_task_description(env_id: str, description: TaskDescription, policy: str | None = None) -> None:
    """Register (or replace) the description of ``env_id``; with ``policy`` (a policy class name), for that policy only."""
    if policy is None:
        TASK_DESCRIPTIONS[env_id] = description
    else:
        POLICY_TASK_DESCRIPTIONS[(env_id, policy)] = description


def _fmt(x: float) -> str:
    return "-inf" if x == -np.inf else "inf" if x == np.inf else f"{x:.3g}"


def _ranges(name: str, box: spaces.Box, kind: str = "") -> tuple[str, ...]:
    bounds = zip(box.low.reshape(-1), box.high.reshape(-1), strict=True)
    return tuple(f"{name}[{i}]: {kind}range [{_fmt(float(lo))}, {_fmt(float(hi))}]" for i, (lo, hi) in enumerate(bounds))


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
