"""The custom R2PO environments: importing this package registers ``R2PO/Nim-v0``, ``R2PO/Pong-v0`` and
``R2PO/Maze3x3-v0`` with gymnasium (again on a reload, without a warning); their task descriptions are in
:mod:`sb3_r2po.prompts.tasks`."""

from __future__ import annotations

from typing import Any

import gymnasium

from sb3_r2po.envs.maze import Maze3x3Env
from sb3_r2po.envs.nim import NimEnv
from sb3_r2po.envs.pong import PongEnv

NIM_ID = "R2PO/Nim-v0"
PONG_ID = "R2PO/Pong-v0"
MAZE_ID = "R2PO/Maze3x3-v0"

_REGISTRATIONS: dict[str, dict[str, Any]] = {
    NIM_ID: {"entry_point": "sb3_r2po.envs.nim:NimEnv", "max_episode_steps": 1000, "reward_threshold": 1.0},
    PONG_ID: {"entry_point": "sb3_r2po.envs.pong:PongEnv", "max_episode_steps": 1000, "reward_threshold": 3.0},
    MAZE_ID: {"entry_point": "sb3_r2po.envs.maze:Maze3x3Env", "max_episode_steps": 20, "reward_threshold": 0.9},
}


def register_envs() -> None:
    """Register the custom environments with gymnasium, skipping ids that are already registered."""
    for env_id, kwargs in _REGISTRATIONS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, **kwargs)


register_envs()

__all__ = ["MAZE_ID", "NIM_ID", "PONG_ID", "Maze3x3Env", "NimEnv", "PongEnv", "register_envs"]
