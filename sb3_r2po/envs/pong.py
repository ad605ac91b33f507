"""Single-agent Pong against a ball-tracking paddle (``R2PO/Pong-v0``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class PongEnv(gym.Env[np.ndarray, np.int64]):
    """
    Pong on an 800 x 600 court: the agent's paddle on the left, an opponent paddle on the right.

    Coordinates are screen pixels: ``x`` grows to the right (0 is the agent's edge, 800 the
    opponent's), ``y`` grows downwards (0 is the top wall, 600 the bottom wall).

    Geometry (all in pixels and pixels per step):

    - paddles are ``paddle_width`` = 10 wide and ``paddle_height`` = 80 tall; the agent's paddle
      occupies ``x`` in [0, 10], the opponent's ``x`` in [790, 800]; paddle centres are kept in
      [40, 560] so a paddle never leaves the court; both start centred (y = 300);
    - both paddles move at most ``paddle_speed`` = 5 per step;
    - the ball has radius ``ball_radius`` = 5 and moves ``ball_speed`` = 5 horizontally per step;
      its vertical speed is drawn at serve time uniformly in [-5, 5] and only changes sign on wall
      bounces (a paddle hit reverses the horizontal direction only).

    Serve: the ball starts at the court centre (400, 300); the horizontal direction (towards the
    agent or towards the opponent) and the vertical speed are drawn from the env's seeded
    ``np_random`` at reset.

    One step: the agent's paddle moves (action 0 up, i.e. towards y = 0; 1 down; 2 stay), the
    opponent's paddle moves towards the ball's ``y`` by at most ``paddle_speed``, then the ball moves
    and bounces off the top and bottom walls. When the ball reaches a paddle line it is returned if
    its centre is within ``paddle_height / 2 + ball_radius`` of that paddle's centre; otherwise it
    leaves the court and the episode terminates.

    Reward: +1 each time the agent's paddle returns the ball, 0 otherwise.

    Because the opponent moves as fast as the ball can move vertically and starts level with it, it
    never misses: an episode ends when the agent misses or at the time limit (1000 steps when made
    with ``gymnasium.make``). A crossing of the court takes 154 steps, so within 1000 steps the
    agent meets the ball exactly 3 times whichever way it is served (first contact at step 77 or
    231): a perfect policy scores 3, and so does simply moving the paddle towards the ball's ``y``.

    Observation (``Box`` of 5 ``float32``): own paddle centre y, ball x, ball y, ball dx, ball dy.

    :param render_mode: ``None`` or ``"rgb_array"`` (a 600 x 800 RGB image drawn with numpy).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 60}  # noqa: RUF012

    width: float = 800.0
    height: float = 600.0
    paddle_width: float = 10.0
    paddle_height: float = 80.0
    paddle_speed: float = 5.0
    ball_speed: float = 5.0
    ball_radius: float = 5.0

    def __init__(self, render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"Unsupported render_mode {render_mode!r}")
        self.render_mode = render_mode
        half = self.paddle_height / 2
        low = np.array([half, 0.0, 0.0, -self.ball_speed, -self.ball_speed], dtype=np.float32)
        high = np.array(
            [self.height - half, self.width, self.height, self.ball_speed, self.ball_speed],
            dtype=np.float32,
        )
        self.observation_space = spaces.Box(low=low, high=high, dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.paddle_y = self.height / 2
        self.opponent_y = self.height / 2
        self.ball = np.array([self.width / 2, self.height / 2], dtype=np.float64)
        self.velocity = np.array([-self.ball_speed, 0.0], dtype=np.float64)

    def _obs(self) -> np.ndarray:
        obs = np.array([self.paddle_y, *self.ball, *self.velocity], dtype=np.float32)
        space = self.observation_space
        assert isinstance(space, spaces.Box)
        return np.clip(obs, space.low, space.high)

    def _clip_paddle(self, y: float) -> float:
        half = self.paddle_height / 2
        return float(np.clip(y, half, self.height - half))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.paddle_y = self.height / 2
        self.opponent_y = self.height / 2
        self.ball = np.array([self.width / 2, self.height / 2], dtype=np.float64)
        direction = -1.0 if self.np_random.random() < 0.5 else 1.0
        dy = float(self.np_random.uniform(-self.ball_speed, self.ball_speed))
        self.velocity = np.array([direction * self.ball_speed, dy], dtype=np.float64)
        return self._obs(), {}

    def _hits(self, paddle_y: float) -> bool:
        return abs(self.ball[1] - paddle_y) <= self.paddle_height / 2 + self.ball_radius

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"Invalid action {action!r}: expected 0 (up), 1 (down) or 2 (stay)")
        action = int(action)
        if action == 0:
            self.paddle_y = self._clip_paddle(self.paddle_y - self.paddle_speed)
        elif action == 1:
            self.paddle_y = self._clip_paddle(self.paddle_y + self.paddle_speed)
        gap = self.ball[1] - self.opponent_y
        self.opponent_y = self._clip_paddle(self.opponent_y + float(np.clip(gap, -self.paddle_speed, self.paddle_speed)))

        self.ball += self.velocity
        top, bottom = self.ball_radius, self.height - self.ball_radius
        if self.ball[1] < top:
            self.ball[1] = 2 * top - self.ball[1]
            self.velocity[1] = abs(self.velocity[1])
        elif self.ball[1] > bottom:
            self.ball[1] = 2 * bottom - self.ball[1]
            self.velocity[1] = -abs(self.velocity[1])

        reward, terminated = 0.0, False
        info: dict[str, Any] = {"returned": False, "missed_by": None}
        left_line = self.paddle_width + self.ball_radius
        right_line = self.width - self.paddle_width - self.ball_radius
        if self.velocity[0] < 0 and self.ball[0] <= left_line:
            if self._hits(self.paddle_y):
                self.ball[0] = 2 * left_line - self.ball[0]
                self.velocity[0] = abs(self.velocity[0])
                reward = 1.0
                info["returned"] = True
            else:
                terminated = True
                info["missed_by"] = "agent"
        elif self.velocity[0] > 0 and self.ball[0] >= right_line:
            if self._hits(self.opponent_y):
                self.ball[0] = 2 * right_line - self.ball[0]
                self.velocity[0] = -abs(self.velocity[0])
            else:
                terminated = True
                info["missed_by"] = "opponent"
        return self._obs(), reward, terminated, False, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((int(self.height), int(self.width), 3), dtype=np.uint8)
        half = int(self.paddle_height / 2)
        pw = int(self.paddle_width)
        for x0, y in ((0, self.paddle_y), (int(self.width) - pw, self.opponent_y)):
            yc = round(y)
            frame[max(0, yc - half) : yc + half, x0 : x0 + pw] = 255
        bx, by, r = round(float(self.ball[0])), round(float(self.ball[1])), int(self.ball_radius)
        frame[max(0, by - r) : by + r + 1, max(0, bx - r) : bx + r + 1] = 255
        return frame
