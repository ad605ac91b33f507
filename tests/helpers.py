"""Test helpers: a scripted chat model, a deterministic bandit env whose return is known from the parameters, and
``UNTIL_BUDGET`` (the fixture that builds models, ``make_r2po``, is in ``conftest.py``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from sb3_r2po.llm.base import ChatReply, Message

UNTIL_BUDGET = sys.maxsize
"""``model.learn(UNTIL_BUDGET)``: train until the run ends by itself. ``learn(total_timesteps)`` is a lower bound on the
steps and no run reaches this one, so what ends training is the ``max_episodes`` budget (the usual case), the target
with ``stop_at_target``, a callback, or an error."""


class ScriptedLLM:
    """Answers with the given replies in order (the last one repeats) and records every prompt."""

    def __init__(self, replies: Sequence[str]) -> None:
        self.replies = list(replies)
        self.calls: list[list[Message]] = []

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        self.calls.append([dict(m) for m in messages])
        index = min(len(self.calls) - 1, len(self.replies) - 1)
        return ChatReply(text=self.replies[index], prompt_tokens=10, completion_tokens=5, seconds=0.001)

    def prompts(self) -> list[str]:
        return [call[-1]["content"] for call in self.calls]


class BanditEnv(gym.Env):
    """One-step env: observation [1.0], action in [-10, 10], reward = the action. So the return of a linear
    policy (W, b) is clip(W + b, -10, 10) exactly, in every episode."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Box(-10.0, 10.0, shape=(1,), dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.ones(1, dtype=np.float32), {}

    def step(self, action):
        return np.ones(1, dtype=np.float32), float(np.asarray(action).reshape(-1)[0]), True, False, {}


class EndlessEnv(gym.Env):
    """An env that never ends by itself (no time limit): for the episode cap."""

    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012  (make_vec_env asks for rgb_array; gymnasium warns otherwise)
    observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        return np.zeros(2, dtype=np.float32), 1.0, False, False, {}


def vector(*values: float) -> str:
    """A reply holding ``values`` in the indexed format."""
    return ", ".join(f"params[{i}]: {v}" for i, v in enumerate(values))


class NaNEnv(gym.Env):
    """Returns a NaN observation at step 3 and a NaN reward at step 5 when the action is 1."""

    observation_space = spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.full(2, self.t, dtype=np.float32)
        reward = 1.0
        if int(action) == 1 and self.t == 3:
            obs[0] = np.nan
        if int(action) == 0 and self.t == 5:
            reward = float("nan")
        return obs, reward, self.t >= 8, False, {}
