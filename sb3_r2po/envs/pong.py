"""Single-agent Pong against a ball-chasing paddle (``R2PO/Pong-v0``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class PongEnv(gym.Env[np.ndarray, np.int64]):
    """Pong on an 800 x 600 court (``y`` downwards): the agent's paddle on the left, a ball-chasing opponent on the right;
    the reference's ``Pong-v0`` (R2PO repository, ``envs/pong.py``) without pygame, the same seed giving the same
    episode. The ball is served from the centre at horizontal speed -5 or +5 and vertical speed uniform in [-5, 5]
    (``np_random``). One step: the agent's paddle moves (0 up, 1 down, 2 stays), the opponent's moves towards the
    ball's ``y``, the ball moves and bounces off the walls; a ball that meets a paddle is sent back (+1 when the
    agent's), its vertical speed ``5 * (2 * h - 1)`` (``h``: where it met the paddle, 0 top to 1 bottom). The episode
    terminates when a paddle misses and is truncated after 1000 steps; the best return is 3. Observation (``Box`` of 5
    ``float32``): own paddle centre y, ball x, ball y, ball horizontal and vertical speed. Ours: float rewards,
    ``info["returned"]``, ``info["missed_by"]`` (``"agent"``, ``"opponent"`` or ``None``); the Fidelity page: the rest.

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
        half, v = self.paddle_height / 2, self.ball_speed  # the reachable ranges below
        low = np.array([half, -v, -v, -v, -v], dtype=np.float32)
        high = np.array([self.height - half, self.width - self.ball_size + v, self.height + v, v, v], dtype=np.float32)
        self.observation_space = spaces.Box(low=low, high=high, dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self._serve(-self.ball_speed, 0.0)

    def _serve(self, dx: float, dy: float) -> None:
        self.paddle_y = self.opponent_y = self.height / 2
        self.ball = np.array([self.width / 2, self.height / 2], dtype=np.float64)
        self.velocity = np.array([dx, dy], dtype=np.float64)
        self.steps = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.paddle_y, *self.ball, *self.velocity], dtype=np.float32)

    def _clip_paddle(self, y: float) -> float:
        return float(np.clip(y, self.paddle_height / 2, self.height - self.paddle_height / 2))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        dx = float(self.np_random.choice([-self.ball_speed, self.ball_speed]))  # the reference's draws, in its order
        self._serve(dx, float(self.np_random.uniform(-self.ball_speed, self.ball_speed)))
        return self._obs(), {}

    def _return_if_hit(self, paddle_y: float) -> bool:
        """Send the ball back when it meets the paddle (the reference's ``_handle_paddle_hit``)."""
        top = paddle_y - self.paddle_height / 2
        if not top <= self.ball[1] <= top + self.paddle_height:
            return False
        where = (self.ball[1] - top) / self.paddle_height
        self.velocity[0] = -self.velocity[0]
        self.velocity[1] = self.ball_speed * (2 * where - 1)
        return True

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Move the agent's paddle (0 up, 1 down, 2 stay), then the opponent's, then the ball (see the class docstring)."""
        if not self.action_space.contains(action):
            raise ValueError(f"Invalid action {action!r}: expected 0 (up), 1 (down) or 2 (stay)")
        if int(action) != 2:
            self.paddle_y = self._clip_paddle(self.paddle_y + (self.paddle_speed if int(action) == 1 else -self.paddle_speed))
        # Bang-bang opponent: it compares its centre with the ball's y and never stands still.
        move = self.paddle_speed if self.opponent_y < self.ball[1] else -self.paddle_speed
        self.opponent_y = self._clip_paddle(self.opponent_y + move)
        self.ball += self.velocity
        if self.ball[1] <= 0 or self.ball[1] >= self.height - self.ball_size:
            self.velocity[1] = -self.velocity[1]
        leftwards = self.velocity[0] < 0
        returned = bool(leftwards and self.ball[0] <= self.paddle_width and self._return_if_hit(self.paddle_y))
        if not leftwards and self.ball[0] >= self.width - self.paddle_width - self.ball_size:
            self._return_if_hit(self.opponent_y)
        missed_by = "agent" if self.ball[0] < 0 else "opponent" if self.ball[0] > self.width - self.ball_size else None
        self.steps += 1
        info: dict[str, Any] = {"returned": returned, "missed_by": missed_by}
        return self._obs(), 1.0 if returned else 0.0, missed_by is not None, self.steps >= self.max_steps, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((int(self.height), int(self.width), 3), dtype=np.uint8)
        half, pw = int(self.paddle_height / 2), int(self.paddle_width)
        for x0, y in ((0, self.paddle_y), (int(self.width) - pw, self.opponent_y)):
            yc = round(y)
            frame[max(0, yc - half) : yc + half, x0 : x0 + pw] = 255
        bx, by, size = round(float(self.ball[0])), round(float(self.ball[1])), int(self.ball_size)
        frame[max(0, by) : max(0, by + size), max(0, bx) : max(0, bx + size)] = 255
        return frame
