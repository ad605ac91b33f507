"""A fixed 3x3 grid maze with internal walls (``R2PO/Maze3x3-v0``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

Cell = tuple[int, int]

#: Internal walls between two adjacent cells ``(x, y)``: the closed boundaries of the reference's ``maze2d_3x3.npy``
#: (R2PO repository, ``envs/gym-maze-master/gym_maze/envs/maze_samples/``; ``Maze.is_open``). ``y = 0`` is the top row::
#:
#:     +---+---+---+
#:     | S         |      y = 0
#:     +   +---+   +
#:     |   |       |      y = 1
#:     +   +---+---+
#:     |         G |      y = 2
#:     +---+---+---+
#:
#: The shortest path is S, S, E, E (4 steps); the middle cell (1, 1) is reachable only from (2, 1).
MAZE_WALLS: frozenset[frozenset[Cell]] = frozenset(
    {
        frozenset({(0, 1), (1, 1)}),
        frozenset({(1, 0), (1, 1)}),
        frozenset({(1, 1), (1, 2)}),
        frozenset({(2, 1), (2, 2)}),
    }
)

#: Action -> (dx, dy). ``y`` grows southwards (row 0 is the north edge), ``x`` grows eastwards.
MOVES: dict[int, Cell] = {0: (0, -1), 1: (0, 1), 2: (1, 0), 3: (-1, 0)}


class Maze3x3Env(gym.Env[np.int64, np.int64]):
    """
    A 3x3 grid maze from ``(x, y) = (0, 0)`` (north-west) to the goal ``(2, 2)``; ``y`` grows southwards. Actions: 0
    north, 1 south, 2 east, 3 west; a move into a wall (:data:`MAZE_WALLS`) or off the grid stays. Observation:
    ``Discrete(9)``, the cell ``y * 3 + x``. Reward: +1 on reaching the goal (which terminates), ``-0.1 / 9`` on every
    other step, so the best return is ``1 - 3 * 0.1 / 9`` (about 0.967); ``gymnasium.make`` caps episodes at 20 steps.
    The reference's ``maze-sample-3x3-v0`` (R2PO repository, ``envs/gym-maze-master``) as its world sees it, except
    that it returns ``(x, y)``, truncates after 200 steps and plays actions -1..-4; here anything outside 0..3 is
    rejected.

    :param render_mode: ``None``, ``"ansi"`` (a text picture of the grid) or ``"rgb_array"`` (the grid drawn
        with numpy; Stable-Baselines3 asks for this mode when it makes an env from its id).
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}  # noqa: RUF012

    size: int = 3
    start: Cell = (0, 0)
    goal: Cell = (2, 2)
    step_penalty: float = -0.1 / 9
    goal_reward: float = 1.0

    def __init__(self, render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"Unsupported render_mode {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = spaces.Discrete(self.size * self.size)
        self.action_space = spaces.Discrete(4)
        self.position: Cell = self.start

    @classmethod
    def cell_to_state(cls, cell: Cell) -> int:
        """State index ``y * 3 + x`` of ``cell = (x, y)``."""
        return cell[1] * cls.size + cell[0]

    @classmethod
    def state_to_cell(cls, state: int) -> Cell:
        """Cell ``(x, y)`` of state index ``state``."""
        return int(state) % cls.size, int(state) // cls.size

    @classmethod
    def next_cell(cls, cell: Cell, action: int) -> Cell:
        """Where ``action`` (0 N, 1 S, 2 E, 3 W) leads from ``cell`` (itself when a wall or the border blocks it)."""
        dx, dy = MOVES[int(action)]
        x, y = cell[0] + dx, cell[1] + dy
        if not (0 <= x < cls.size and 0 <= y < cls.size) or frozenset({cell, (x, y)}) in MAZE_WALLS:
            return cell
        return x, y

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.int64, dict[str, Any]]:
        super().reset(seed=seed)
        self.position = self.start
        return np.int64(self.cell_to_state(self.position)), {}

    def step(self, action: int | np.integer) -> tuple[np.int64, float, bool, bool, dict[str, Any]]:
        """Move one cell (0 N, 1 S, 2 E, 3 W) unless a wall or the border blocks it (``info["blocked"]``); never truncates
        (the time limit is the registered env's); ``ValueError`` for an action outside 0..3."""
        if not self.action_space.contains(action):
            raise ValueError(f"Invalid action {action!r}: expected 0 (N), 1 (S), 2 (E) or 3 (W)")
        new_position = self.next_cell(self.position, int(action))
        blocked = new_position == self.position
        self.position = new_position
        terminated = self.position == self.goal
        reward = self.goal_reward if terminated else self.step_penalty
        return np.int64(self.cell_to_state(self.position)), reward, terminated, False, {"blocked": blocked}

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "rgb_array":
            return self._render_rgb()
        if self.render_mode != "ansi":
            return None
        lines = []
        for y in range(self.size):
            row = ""
            for x in range(self.size):
                cell = (x, y)
                row += "A" if cell == self.position else "G" if cell == self.goal else "S" if cell == self.start else "."
                if x < self.size - 1:
                    row += "|" if frozenset({cell, (x + 1, y)}) in MAZE_WALLS else " "
            lines.append(row)
            if y < self.size - 1:
                lines.append(" ".join("-" if frozenset({(x, y), (x, y + 1)}) in MAZE_WALLS else " " for x in range(self.size)))
        return "\n".join(lines) + "\n"

    def _render_rgb(self, cell: int = 32) -> np.ndarray:
        n = self.size * cell
        frame = np.full((n + 1, n + 1, 3), 255, dtype=np.uint8)
        for colour, (x, y) in (((0, 200, 0), self.goal), ((0, 0, 220), self.position)):
            frame[y * cell + 4 : (y + 1) * cell - 3, x * cell + 4 : (x + 1) * cell - 3] = colour
        frame[[0, n], :] = 0
        frame[:, [0, n]] = 0
        for wall in MAZE_WALLS:
            (ax, ay), (bx, by) = sorted(wall)
            if ax == bx:  # horizontal wall between rows ay and by
                frame[by * cell - 1 : by * cell + 2, ax * cell : (ax + 1) * cell + 1] = 0
            else:  # vertical wall between columns ax and bx
                frame[ay * cell : (ay + 1) * cell + 1, bx * cell - 1 : bx * cell + 2] = 0
        return frame
