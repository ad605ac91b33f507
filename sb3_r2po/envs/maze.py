"""A fixed 3x3 grid maze with internal walls (``R2PO/Maze3x3-v0``)."""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

Cell = tuple[int, int]

#: Internal walls between two adjacent cells ``(x, y)``: the closed boundaries of the reference's ``maze2d_3x3.npy``
#: (R2PO repository, ``envs/gym-maze-master/gym_maze/envs/maze_samples/``); ``y = 0`` is the top row::
#:
#:     +---+---+---+
#:     | S         |
#:     +   +---+   +
#:     |   |       |
#:     +   +---+---+
#:     |         G |
#:     +---+---+---+
MAZE_WALLS: frozenset[frozenset[Cell]] = frozenset(
    frozenset(wall) for wall in (((0, 1), (1, 1)), ((1, 0), (1, 1)), ((1, 1), (1, 2)), ((2, 1), (2, 2)))
)

MOVES: dict[int, Cell] = {0: (0, -1), 1: (0, 1), 2: (1, 0), 3: (-1, 0)}  # action -> (dx, dy): N, S, E, W


class Maze3x3Env(gym.Env[np.int64, np.int64]):
    """A 3x3 grid maze from ``(x, y) = (0, 0)`` (north-west) to the goal ``(2, 2)``; ``y`` grows southwards. Actions: 0
    north, 1 south, 2 east, 3 west; a move into a wall (:data:`MAZE_WALLS`) or off the grid stays. Observation:
    ``Discrete(9)``, the cell ``y * 3 + x``. Reward: +1 on reaching the goal (which terminates), ``-0.1 / 9`` on every
    other step, so the best return (the path S, S, E, E) is ``1 - 3 * 0.1 / 9`` (about 0.967); ``gymnasium.make`` caps
    episodes at 20 steps. How it differs from the reference's ``maze-sample-3x3-v0``: the Fidelity page.

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
        return cell[1] * cls.size + cell[0]

    @classmethod
    def state_to_cell(cls, state: int) -> Cell:
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
        """Move one cell unless a wall or the border blocks it (``info["blocked"]``); never truncates (the registered
        env's time limit does)."""
        if not self.action_space.contains(action):
            raise ValueError(f"Invalid action {action!r}: expected 0 (N), 1 (S), 2 (E) or 3 (W)")
        previous, self.position = self.position, self.next_cell(self.position, int(action))
        terminated = self.position == self.goal
        reward = self.goal_reward if terminated else self.step_penalty
        return np.int64(self.cell_to_state(self.position)), reward, terminated, False, {"blocked": self.position == previous}

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "ansi":
            symbols = {self.start: "S", self.goal: "G", self.position: "A"}  # the agent over the goal over the start
            grid = [[" "] * (2 * self.size - 1) for _ in range(2 * self.size - 1)]
            for x, y in itertools.product(range(self.size), repeat=2):
                grid[2 * y][2 * x] = symbols.get((x, y), ".")
            for wall in MAZE_WALLS:
                (ax, ay), (bx, by) = sorted(wall)
                grid[ay + by][ax + bx] = "-" if ax == bx else "|"
            return "".join("".join(row) + "\n" for row in grid)
        if self.render_mode != "rgb_array":
            return None
        cell = 32
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
