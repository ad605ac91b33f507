"""Evaluate one candidate for exactly K episodes on a VecEnv, keeping every trajectory.

Episodes are assigned to sub-environments as they become free until K have been *started*; every
started episode is then run to its end, so the K episodes are an unbiased sample (taking the first K
to *finish* would favour short episodes). Sub-environments with nothing left to do keep stepping in
lock-step with the others (a VecEnv cannot pause one env); those steps are discarded and never shown
to the LLM, but they are real environment interactions and are counted by the caller's step hook.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

EndReason = str
"""How an episode ended: ``"terminated"`` (the task ended), ``"truncated"`` (the env's time limit) or
``"capped"`` (R2PO's own ``max_episode_steps`` cap, for envs without a time limit)."""


@dataclass
class Episode:
    """
    One recorded episode.

    :param observations: ``T + 1`` observations, the last one being the observation after the final step.
    :param actions: ``T`` actions.
    :param rewards: ``T`` rewards.
    :param end: How the episode ended (see :data:`EndReason`).
    :param index: The order in which the episode was started within its evaluation (0-based).
    """

    observations: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    end: EndReason = "running"
    index: int = 0

    @property
    def total_return(self) -> float:
        return float(np.sum(self.rewards)) if self.rewards else 0.0

    @property
    def length(self) -> int:
        return len(self.rewards)

    @property
    def is_finite(self) -> bool:
        """False when an observation or reward was NaN or infinite."""
        return bool(np.isfinite(self.rewards).all() and all(np.isfinite(o).all() for o in self.observations))


@dataclass
class RolloutResult:
    """
    The outcome of :func:`run_episodes`.

    :param episodes: The finished episodes, in the order they were started.
    :param stopped: True when the step hook asked to stop before all episodes finished.
    """

    episodes: list[Episode]
    stopped: bool = False

    @property
    def returns(self) -> np.ndarray:
        return np.array([ep.total_return for ep in self.episodes], dtype=np.float64)


StepHook = Callable[[np.ndarray, list[dict], np.ndarray], bool]
"""Called after every VecEnv step with ``(dones, infos, rewards)``; ``dones`` is True only where a
counted episode finished. Return False to stop at once."""


def run_episodes(
    env: VecEnv,
    act: Callable[[np.ndarray], np.ndarray],
    n_episodes: int,
    max_episode_steps: int,
    on_step: StepHook | None = None,
) -> RolloutResult:
    """
    Run exactly ``n_episodes`` episodes of the policy ``act`` on ``env``.

    :param env: The vectorized environment; it is reset first.
    :param act: Batched policy: observations of all sub-envs in, their actions out.
    :param n_episodes: Number of episodes to run (K).
    :param max_episode_steps: Cap on the length of every episode; an episode reaching it ends as ``"capped"``.
    :param on_step: Hook called after every VecEnv step (see :data:`StepHook`).
    :return: The finished episodes; fewer than ``n_episodes`` only when ``on_step`` asked to stop.
    """
    n_envs = env.num_envs
    obs = env.reset()
    running: list[Episode | None] = [None] * n_envs
    finished: list[Episode] = []
    started = 0
    for i in range(n_envs):
        if started < n_episodes:
            running[i] = Episode(observations=[_copy(obs[i])], index=started)
            started += 1

    while any(ep is not None for ep in running):
        actions = act(obs)
        new_obs, rewards, dones, infos = env.step(actions)
        counted_dones = np.zeros(n_envs, dtype=bool)
        for i, ep in enumerate(running):
            if ep is None:
                continue
            ep.actions.append(_copy(actions[i]))
            ep.rewards.append(float(rewards[i]))
            if dones[i]:
                truncated = bool(infos[i].get("TimeLimit.truncated", False))
                ep.end = "truncated" if truncated else "terminated"
                ep.observations.append(_copy(infos[i].get("terminal_observation", new_obs[i])))
            else:
                ep.observations.append(_copy(new_obs[i]))
                if ep.length >= max_episode_steps:
                    ep.end = "capped"
                    new_obs[i] = _reset_one(env, i)
            if ep.end == "running":
                continue
            counted_dones[i] = True
            finished.append(ep)
            if started < n_episodes:
                running[i] = Episode(observations=[_copy(new_obs[i])], index=started)
                started += 1
            else:
                running[i] = None
        obs = new_obs
        if on_step is not None and on_step(counted_dones, infos, rewards) is False:
            return RolloutResult(sorted(finished, key=lambda ep: ep.index), stopped=True)
    return RolloutResult(sorted(finished, key=lambda ep: ep.index))


def _copy(x: np.ndarray) -> np.ndarray:
    return np.array(x, dtype=np.float64, copy=True)


def _reset_one(env: VecEnv, index: int) -> np.ndarray:
    """Reset one sub-environment of a VecEnv (used only for R2PO's own episode cap)."""
    result = env.env_method("reset", indices=[index])[0]
    return result[0] if isinstance(result, tuple) else result
