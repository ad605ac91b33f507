"""SB3's rollout loop around :func:`~sb3_r2po.common.rollouts.run_episodes`: the step and episode counters, the success
rate, then ``callback.locals`` and ``callback.on_step()``, after every vector step.

The callback that SB3's ``learn(callback=None)`` builds (a ``ConvertCallback`` of ``None``) does nothing and never stops
training; with it, nothing is called per step and the counters advance once per rollout call, by the same amounts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback, ConvertCallback
from stable_baselines3.common.vec_env import VecEnv

from sb3_r2po.common.rollouts import RolloutResult, VecStep, run_episodes

Count = Callable[[int, int, list[Any]], None]
"""Advances the model's counters: ``(environment steps, finished episodes, their info["is_success"] values)``."""


def is_noop(callback: BaseCallback) -> bool:
    """Whether ``callback`` is SB3's stand-in for ``callback=None``: it reads nothing and always continues."""
    return type(callback) is ConvertCallback and callback.callback is None


def rollout(
    env: VecEnv,
    act: Callable[[np.ndarray], np.ndarray],
    n_episodes: int,
    max_episode_steps: int,
    callback: BaseCallback,
    count: Count,
    extra_locals: dict[str, Any],
) -> RolloutResult:
    """
    :func:`~sb3_r2po.common.rollouts.run_episodes` inside SB3's rollout loop.

    :param env: The environment.
    :param act: The batched policy.
    :param n_episodes: Episodes to run.
    :param max_episode_steps: Cap on the length of every episode.
    :param callback: Called after every vector step, after ``count``; its locals are the :class:`VecStep`'s fields
        (``new_obs``, ``actions``, ``rewards``, ``dones``, ``infos``, ``n_steps``) and ``extra_locals``; a falsy
        ``on_step()`` stops the rollout.
    :param count: Advances the model's counters (see :data:`Count`).
    :param extra_locals: More ``callback.locals`` (R2PO's: ``env`` and ``params``).
    :return: The rollout's result.
    """
    if is_noop(callback):
        result = run_episodes(env, act, n_episodes, max_episode_steps)
        count(result.n_steps, len(result.episodes), result.successes)
        return result

    def on_step(step: VecStep) -> object:
        finished = [info for info, done in zip(step.infos, step.dones.tolist(), strict=True) if done]
        count(step.n_steps, len(finished), [s for s in (info.get("is_success") for info in finished) if s is not None])
        callback.update_locals({**step._asdict(), **extra_locals})
        return callback.on_step()

    return run_episodes(env, act, n_episodes, max_episode_steps, on_step)
