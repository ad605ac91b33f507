"""Evaluate one candidate for exactly K episodes on a VecEnv, keeping every trajectory.

Episodes are assigned to sub-environments as they become free until K have been *started*; every
started episode is then run to its end, so the K episodes are an unbiased sample (taking the first K
to *finish* would favour short episodes).

A plain ``DummyVecEnv`` is stepped one sub-environment at a time, directly: no VecEnv buffer copies, and a
sub-environment with nothing left to do simply waits. Any other VecEnv (``SubprocVecEnv``, VecEnv wrappers)
goes through the VecEnv API; there, idle sub-environments must keep stepping in lock-step with the others;
those steps are discarded and never shown to the LLM, but they are real environment interactions and the
step hook counts them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, VecCheckNan, VecEnv, VecEnvWrapper, VecMonitor, VecVideoRecorder

PASS_THROUGH_WRAPPERS: tuple[type[VecEnvWrapper], ...] = (VecMonitor, VecCheckNan, VecVideoRecorder)
"""VecEnv wrappers that leave observations and rewards as the env gives them: the only ones R2PO accepts."""

EndReason = str
"""How an episode ended: ``"terminated"`` (the task ended), ``"truncated"`` (the env's time limit) or
``"capped"`` (R2PO's own ``max_episode_steps`` cap, for envs without a time limit) or ``"non-finite"`` (the
env returned a NaN or infinite observation or reward, or a finite reward that would make the return overflow: the
episode is cut there, the step's observation is not kept and such a reward counts as 0)."""

OVERFLOW_RISK = sys.float_info.max / 2**32
"""Rewards up to this magnitude cannot make a return overflow (within 2**32 steps); larger ones are checked."""


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
    :param stopped: True when the step hook asked to stop before all episodes finished (the result is incomplete).
    :param stop_requested: True when the step hook asked to stop, also in the step that finished the last episode
        (then the result is complete, and only what comes after it must not run).
    """

    episodes: list[Episode]
    stopped: bool = False
    stop_requested: bool = False

    @property
    def returns(self) -> np.ndarray:
        return np.array([ep.total_return for ep in self.episodes], dtype=np.float64)


class VecStep(NamedTuple):
    """
    What one vector step did, under the names of an SB3 algorithm's rollout loop (``callback.locals``).

    :param new_obs: The observations to act on next, one row per sub-environment (where an episode ended: the reset
        observation, as a VecEnv's auto-reset gives; the terminal one is in ``infos[i]["terminal_observation"]``).
    :param actions: The actions taken, one row per sub-environment (an idle sub-environment's is not applied).
    :param rewards: The rewards (0 for an idle sub-environment).
    :param dones: True only where a counted episode finished.
    :param infos: The step infos (empty for an idle sub-environment).
    :param n_steps: Environment steps taken (the direct path steps only the busy sub-environments).
    """

    new_obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    infos: list[dict]
    n_steps: int


StepHook = Callable[[VecStep], object]
"""Called after every vector step; a falsy return (``False``, ``None``, ``np.bool_(False)``, a false tensor) stops at
once, as ``callback.on_step()`` does in SB3's algorithms."""


class _Step(NamedTuple):
    """What one sub-environment did in one vector step."""

    next_obs: np.ndarray  # observation after the action (the terminal observation when the episode ended)
    reward: float
    end: EndReason | None  # None while the episode runs
    continue_obs: np.ndarray  # observation to act on next (the reset observation when the episode ended)
    info: dict


def check_vec_env(env: VecEnv) -> None:
    """
    Raise a ``ValueError`` when ``env`` is wrapped in a VecEnv wrapper that changes observations or rewards.

    R2PO compares fixed parameter vectors by their returns in the env's own units: ``VecNormalize`` would score
    them in normalized, drifting units (and feed the policy drifting observations), ``VecFrameStack`` changes the
    observation the policy's layout describes. Only :data:`PASS_THROUGH_WRAPPERS` are accepted; a ``Monitor`` (or
    any gymnasium wrapper) on each sub-environment is fine.
    """
    wrapper = env
    while isinstance(wrapper, VecEnvWrapper):
        if not isinstance(wrapper, PASS_THROUGH_WRAPPERS):
            allowed = ", ".join(w.__name__ for w in PASS_THROUGH_WRAPPERS)
            raise ValueError(
                f"R2PO cannot train through {type(wrapper).__name__}: it compares parameter vectors by their returns "
                f"in the env's own units, on the env's own observations. Remove the wrapper (VecEnv wrappers "
                f"accepted: {allowed})."
            )
        wrapper = wrapper.venv


class _VecStepper:
    """Any VecEnv, through the VecEnv API (auto-reset). Idle sub-environments step along."""

    def __init__(self, env: VecEnv) -> None:
        self.env = env

    def reset(self) -> list[np.ndarray]:
        return list(self.env.reset())

    def step(self, actions: np.ndarray, obs: list[np.ndarray], active: list[bool]) -> tuple[list[_Step], int]:
        new_obs, rewards, dones, infos = self.env.step(actions)
        assert isinstance(new_obs, np.ndarray)  # Box and Discrete observations (the policies' spaces)
        steps = []
        for i in range(len(obs)):
            if dones[i]:
                end = "truncated" if infos[i].get("TimeLimit.truncated", False) else "terminated"
                steps.append(
                    _Step(infos[i].get("terminal_observation", new_obs[i]), float(rewards[i]), end, new_obs[i], infos[i])
                )
            else:
                steps.append(_Step(new_obs[i], float(rewards[i]), None, new_obs[i], infos[i]))
        return steps, len(obs)

    def reset_one(self, index: int) -> np.ndarray:
        # past the pass-through wrappers (check_vec_env): a VecMonitor does not see the cut, and counts the cut
        # episode and the next one as one in its own statistics (R2PO's episodes are unaffected)
        result = self.env.env_method("reset", indices=[index])[0]
        return result[0] if isinstance(result, tuple) else result


class _DirectStepper(_VecStepper):
    """A plain DummyVecEnv: its sub-environments are stepped directly, which skips the VecEnv's buffer copies and
    lets idle sub-environments wait instead of stepping. Resets follow DummyVecEnv's rules (seeded first reset
    through the VecEnv, unseeded resets after that)."""

    def __init__(self, env: DummyVecEnv) -> None:
        super().__init__(env)
        self.envs = env.envs

    def step(self, actions: np.ndarray, obs: list[np.ndarray], active: list[bool]) -> tuple[list[_Step], int]:
        steps = []
        for i, env in enumerate(self.envs):
            if not active[i]:
                steps.append(_Step(obs[i], 0.0, None, obs[i], {}))
                continue
            next_obs, reward, terminated, truncated, info = env.step(actions[i])
            if terminated or truncated:
                reset_obs, _ = env.reset()
                # what DummyVecEnv's auto-reset would put in the info, so callbacks see the same keys either way
                info = {**info, "terminal_observation": next_obs, "TimeLimit.truncated": bool(truncated and not terminated)}
                steps.append(_Step(next_obs, float(reward), "terminated" if terminated else "truncated", reset_obs, info))
            else:
                steps.append(_Step(next_obs, float(reward), None, next_obs, info))
        return steps, sum(active)

    def reset_one(self, index: int) -> np.ndarray:
        return self.envs[index].reset()[0]


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
    :param on_step: Hook called after every vector step (see :data:`StepHook`).
    :return: The finished episodes; fewer than ``n_episodes`` only when ``on_step`` asked to stop.
    """
    stepper = _DirectStepper(env) if type(env) is DummyVecEnv else _VecStepper(env)
    n_envs = env.num_envs
    obs = stepper.reset()
    running: list[Episode | None] = [None] * n_envs
    finished: list[Episode] = []
    started = 0
    for i in range(n_envs):
        if started < n_episodes:
            running[i] = Episode(observations=[_copy(obs[i])], index=started)
            started += 1

    while started > len(finished):
        active = [ep is not None for ep in running]
        actions = act(np.asarray(obs))
        steps, n_steps = stepper.step(actions, obs, active)
        dones = np.zeros(n_envs, dtype=bool)
        for i, ep in enumerate(running):
            step = steps[i]
            obs[i] = step.continue_obs
            if ep is None or not _advance(ep, step, actions[i], max_episode_steps):
                continue
            if ep.end in ("non-finite", "capped") and step.end is None:  # the env did not end it: start the next one
                obs[i] = stepper.reset_one(i)
            dones[i] = True
            finished.append(ep)
            if started < n_episodes:
                running[i] = Episode(observations=[_copy(obs[i])], index=started)
                started += 1
            else:
                running[i] = None
        if on_step is not None:
            infos = [step.info for step in steps]
            rewards = np.array([step.reward for step in steps])
            if not on_step(VecStep(np.asarray(obs), np.asarray(actions), rewards, dones, infos, n_steps)):
                done = sorted(finished, key=lambda ep: ep.index)
                return RolloutResult(done, stopped=len(done) < n_episodes, stop_requested=True)
    return RolloutResult(sorted(finished, key=lambda ep: ep.index))


def _advance(ep: Episode, step: _Step, action: np.ndarray, max_episode_steps: int) -> bool:
    """Append one step to ``ep``; whether the episode ended with it (its ``end`` is then set)."""
    ep.actions.append(_copy(action))
    next_obs = _copy(step.next_obs)
    usable = bool(np.isfinite(step.reward)) and not _overflows(ep, step.reward)
    if not (usable and np.isfinite(next_obs).all()):
        # a broken env or a policy that blew the simulation up: end the episode here, keep only finite numbers
        ep.rewards.append(step.reward if usable else 0.0)
        ep.observations.append(ep.observations[-1])
        ep.end = "non-finite"
        return True
    ep.rewards.append(step.reward)
    ep.observations.append(next_obs)
    if step.end is not None:
        ep.end = step.end
    elif ep.length >= max_episode_steps:
        ep.end = "capped"
    return ep.end != "running"


def _overflows(ep: Episode, reward: float) -> bool:
    """Whether adding ``reward`` makes the episode's return overflow (each reward finite, their sum not)."""
    if abs(reward) <= OVERFLOW_RISK:  # 2**32 such rewards cannot overflow: the common case costs one comparison
        return False
    with np.errstate(over="ignore", invalid="ignore"):
        return not np.isfinite(np.sum([*ep.rewards, reward]))


def _copy(x: np.ndarray) -> np.ndarray:
    return np.array(x, dtype=np.float64, copy=True)


def env_spec(env: VecEnv | None) -> tuple[str | None, float | None, int | None]:
    """The id, reward threshold and time limit of ``env``'s first sub-env, when it has a spec."""
    if env is None:
        return None, None, None
    try:
        spec = env.get_attr("spec", indices=[0])[0]
    except Exception:  # a VecEnv that cannot answer: treat as no spec
        spec = None
    if spec is None:
        return None, None, None
    return spec.id, spec.reward_threshold, spec.max_episode_steps
