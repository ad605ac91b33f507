"""Misère Nim against an optimal opponent (``R2PO/Nim-v0``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class NimEnv(gym.Env[np.int64, np.int64]):
    """A single pile of sticks, misère rule: whoever takes the last stick loses. The agent moves first from
    ``initial_sticks``; action ``a`` (``Discrete(3)``) removes ``a + 1`` sticks; the opponent then removes ``(sticks + 3)
    % 4`` when that is a legal positive move, else a random legal one (``np_random``). Observation: the sticks left
    (``Discrete(initial_sticks + 1)``). Reward: +1 when the opponent takes the last stick, -1 when the agent does or
    takes more than remain (both end the episode), else 0; with 10 sticks the agent can always win. Actions outside
    0..2 raise ``ValueError`` (the reference's ``Nim-v0`` takes the counts 1..3: the Fidelity page).

    :param initial_sticks: Sticks on the pile at the start of an episode.
    :param render_mode: ``None``, ``"ansi"`` (a one-line text picture of the pile) or ``"rgb_array"`` (the
        sticks drawn with numpy; Stable-Baselines3 asks for this mode when it makes an env from its id).
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}  # noqa: RUF012

    def __init__(self, initial_sticks: int = 10, render_mode: str | None = None) -> None:
        if initial_sticks < 1:
            raise ValueError(f"initial_sticks must be positive, got {initial_sticks}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"Unsupported render_mode {render_mode!r}")
        self.initial_sticks = self.sticks = int(initial_sticks)
        self.render_mode = render_mode
        self.observation_space = spaces.Discrete(self.initial_sticks + 1)
        self.action_space = spaces.Discrete(3)

    @staticmethod
    def action_to_move(action: int) -> int:
        return int(action) + 1

    def opponent_move(self, sticks: int) -> int:
        """The sticks the opponent removes with ``sticks >= 1`` remaining."""
        move = (sticks + 3) % 4
        return move if 1 <= move <= min(3, sticks) else int(self.np_random.integers(1, min(3, sticks) + 1))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.int64, dict[str, Any]]:
        super().reset(seed=seed)
        self.sticks = self.initial_sticks
        return np.int64(self.sticks), {}

    def step(self, action: int | np.integer) -> tuple[np.int64, float, bool, bool, dict[str, Any]]:
        """The agent takes ``action + 1`` sticks, then the opponent moves (the class docstring says the rewards)."""
        if not self.action_space.contains(action):
            raise ValueError(f"Invalid action {action!r}: expected an integer in 0..2")
        move = self.action_to_move(int(action))
        if move > self.sticks:
            return np.int64(self.sticks), -1.0, True, False, {"illegal_move": True, "agent_move": move}
        self.sticks -= move
        if self.sticks == 0:
            return np.int64(self.sticks), -1.0, True, False, {"illegal_move": False, "agent_move": move}
        reply = self.opponent_move(self.sticks)
        self.sticks -= reply
        info = {"illegal_move": False, "agent_move": move, "opponent_move": reply}
        return np.int64(self.sticks), 1.0 if self.sticks == 0 else 0.0, self.sticks == 0, False, info

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "ansi":
            return f"{'|' * self.sticks} ({self.sticks} sticks)\n"
        if self.render_mode != "rgb_array":
            return None
        frame = np.full((64, 16 * self.initial_sticks + 8, 3), 255, dtype=np.uint8)
        for i in range(self.sticks):
            frame[8:56, 8 + 16 * i : 16 + 16 * i] = (139, 90, 43)
        return frame
