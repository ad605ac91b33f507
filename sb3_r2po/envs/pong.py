"""Single-agent Pong against a ball-chasing paddle (``R2PO/Pong-v0``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class PongEnv(gym.Env[np.ndarray, np.int64]):
    """
    Pong on an 800 x 600 court (screen pixels, ``y`` downwards): the agent's paddle on the left, a ball-chasing opponent
    on the right. The rules of the reference's ``Pong-v0`` (R2PO repository, ``envs/pong.py``) without pygame; the same
    seed gives the same episode.

    Paddles are 10 x 80 (centres :attr:`paddle_y`, :attr:`opponent_y` in [40, 560], starting at 300); the agent's
    moves 5 per step; the ball is a 10 x 10 square (:attr:`ball`: its top-left corner, from (400, 300)), served at
    horizontal speed -5 or +5 and vertical speed uniform in [-5, 5] (the env's ``np_random``). One step: the agent's
    paddle moves (0 up, 1 down, 2 stays); the opponent moves 5 towards the ball's ``y``; the ball moves and bounces
    off a wall at ``y <= 0`` or ``y >= 590``; a ball moving left with ``x <= 10`` within the agent's paddle is hit
    (+1; likewise right with ``x >= 780`` for the opponent), reversing its horizontal speed and setting the vertical
    one to ``5 * (2 * h - 1)`` (``h``: where it meets the paddle, 0 top to 1 bottom); the episode terminates once the
    ball's ``x`` is below 0 or above 790, and is truncated after 1000 steps. The best return is 3.

    Observation (``Box`` of 5 ``float32``): own paddle centre y, ball x, ball y, ball horizontal and vertical speed.
    Unlike the reference, actions outside 0..2 are rejected, rewards are floats, ``info["returned"]`` and
    ``info["missed_by"]`` (``"agent"``, ``"opponent"`` or ``None``) are reported, and the observation bounds hold
    every reachable observation.

    :param render_mode: ``None`` or ``"rgb_array"`` (a 600 x 800 RGB image drawn with numpy).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 60}  # noqa: RUF012

    width: float = 800.0
    height: float = 600.0
    paddle_width: float = 10.0
    paddle_height: float = 80.0
    paddle_speed: float = 5.0
    ball_speed: float = 5.0
    ball_size: float = 10.0
    max_steps: int = 1000

    def __init__(self, render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"Unsupported render_mode {render_mode!r}")
        self.render_mode = render_mode
        half = self.paddle_height / 2
        # Reachable ranges under the rules above (see the class docstring).
        v = self.ball_speed
        low = np.array([half, -v, -v, -v, -v], dtype=np.float32)
        high = np.array([self.height - half, self.width - self.ball_size + v, self.height + v, v, v], dtype=np.float32)
        self.observation_space = spaces.Box(low=low, high=high, dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.paddle_y = self.opponent_y = self.height / 2
        self.ball = np.array([self.width / 2, self.height / 2], dtype=np.float64)
        self.velocity = np.array([-self.ball_speed, 0.0], dtype=np.float64)
        self.steps = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.paddle_y, *self.ball, *self.velocity], dtype=np.float32)

    def _clip_paddle(self, y: float) -> float:
        half = self.paddle_height / 2
        return float(np.clip(y, half, self.height - half))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.paddle_y = self.opponent_y = self.height / 2
        self.ball = np.array([self.width / 2, self.height / 2], dtype=np.float64)
        # Same draws, in the same order, as the reference's reset (envs/pong.py).
        dx = float(self.np_random.choice([-self.ball_speed, self.ball_speed]))
        dy = float(self.np_random.uniform(-self.ball_speed, self.ball_speed))
        self.velocity = np.array([dx, dy], dtype=np.float64)
        self.steps = 0
        return self._obs(), {}

    def _hits(self, paddle_y: float) -> bool:
        top = paddle_y - self.paddle_height / 2
        return bool(top <= self.ball[1] <= top + self.paddle_height)

    def _return_ball(self, paddle_y: float) -> None:
        """Send the ball back (the reference's ``_handle_paddle_hit``)."""
        top = paddle_y - self.paddle_height / 2
        self.velocity[0] = -self.velocity[0]
        where = (self.ball[1] - top) / self.paddle_height
        self.velocity[1] = self.ball_speed * (2 * where - 1)

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Move the agent's paddle (0 up, 1 down, 2 stay), then the opponent's, then the ball (see the class docstring)."""
        if not self.action_space.contains(action):
            raise ValueError(f"Invalid action {action!r}: expected 0 (up), 1 (down) or 2 (stay)")
        action = int(action)
        if action == 0:
            self.paddle_y = self._clip_paddle(self.paddle_y - self.paddle_speed)
        elif action == 1:
            self.paddle_y = self._clip_paddle(self.paddle_y + self.paddle_speed)
        # Bang-bang opponent: it compares its centre with the ball's y and never stands still.
        move = self.paddle_speed if self.opponent_y < self.ball[1] else -self.paddle_speed
        self.opponent_y = self._clip_paddle(self.opponent_y + move)
        self.ball += self.velocity
        if self.ball[1] <= 0 or self.ball[1] >= self.height - self.ball_size:
            self.velocity[1] = -self.velocity[1]
        leftwards = self.velocity[0] < 0
        returned = bool(leftwards and self.ball[0] <= self.paddle_width and self._hits(self.paddle_y))
        if returned:
            self._return_ball(self.paddle_y)
        elif not leftwards and self.ball[0] >= self.width - self.paddle_width - self.ball_size and self._hits(self.opponent_y):
            self._return_ball(self.opponent_y)
        missed_by = "agent" if self.ball[0] < 0 else "opponent" if self.ball[0] > self.width - self.ball_size else None
        self.steps += 1
        info: dict[str, Any] = {"returned": returned, "missed_by": missed_by}
        return self._obs(), 1.0 if returned else 0.0, missed_by is not None, self.steps >= self.max_steps, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((int(self.height), int(self.width), 3), dtype=np.uint8)
        half = int(self.paddle_height / 2)
        pw = int(self.paddle_width)
        for x0, y in ((0, self.paddle_y), (int(self.width) - pw, self.opponent_y)):
            yc = round(y)
            frame[max(0, yc - half) : yc + half, x0 : x0 + pw] = 255
        bx, by, size = round(float(self.ball[0])), round(float(self.ball[1])), int(self.ball_size)
        frame[max(0, by) : max(0, by + size), max(0, bx) : max(0, bx + size)] = 255
        return frame
