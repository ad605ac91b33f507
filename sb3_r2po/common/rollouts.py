"""Evaluate one candidate for exactly K episodes on a VecEnv, keeping every trajectory (the one rollout path).

Episodes go to sub-environments as they become free until K have been *started*; every started episode then runs to
its end, so the K episodes are an unbiased sample (the first K to *finish* would favour short ones). A bare VecEnv
steps each busy sub-environment alone (``env_method("step")``, the env's own values) and an idle one waits, so its
``Monitor`` logs only R2PO's episodes; a ``SubprocVecEnv`` steps in lock-step (in parallel) while all are busy.
Through VecEnv wrappers (they must see every step) all sub-environments step in lock-step, and the idle ones' steps
are counted but never shown to the LLM.

Racing (ours, off by default) evaluates a challenger in chunks of ``m`` episodes and stops once the one-sided upper
confidence bound ``mean + z * std(ddof=1) / sqrt(m)`` (``z = 1.645``, about 95 %) is below the incumbent's mean; only the
episodes run are charged. A heuristic: with few identical returns the bound is the mean itself.
"""

from __future__ import annotations

import functools
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TimeLimit
from stable_baselines3.common.env_util import is_wrapped
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    VecCheckNan,
    VecEnv,
    VecEnvWrapper,
    VecMonitor,
    VecTransposeImage,
    VecVideoRecorder,
    is_vecenv_wrapped,
)

PASS_THROUGH_WRAPPERS: tuple[type[VecEnvWrapper], ...] = (VecMonitor, VecCheckNan, VecVideoRecorder)
"""VecEnv wrappers that leave observations and rewards as the env gives them: the only ones R2PO accepts."""

EndReason = str
"""``"terminated"``, ``"truncated"`` (the env's time limit), ``"capped"`` (R2PO's ``max_episode_steps``) or
``"non-finite"`` (a NaN or infinite observation or reward, or a reward that makes the return overflow: the episode is
cut there, that observation is not kept and such a reward counts as 0)."""

OVERFLOW_RISK = sys.float_info.max / 2**32
"""Rewards up to this magnitude cannot make a return overflow (within 2**32 steps); larger ones are checked."""


def finite_total(values: Sequence[float] | np.ndarray) -> float:
    """The sum of ``values``: numpy's when it is finite, else the exact sum correctly rounded."""
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        plain = float(np.sum(x))
    if math.isfinite(plain) or not np.isfinite(x).all():
        return plain
    exact = sum(map(Fraction, x.tolist()), Fraction(0))  # rare (a partial sum overflowed): exact rational arithmetic
    try:
        return float(exact)  # correctly rounded
    except OverflowError:  # the exact sum is beyond the float range
        return math.inf if exact > 0 else -math.inf


def finite_mean(values: Sequence[float] | np.ndarray) -> float:
    """The mean of ``values``, finite when every value is (numpy's mean of ``[1e308, 1e308]`` is ``inf``): numpy's when
    finite, else the mean of the values scaled by their largest magnitude, scaled back."""
    return _finite(np.mean, values)


def finite_std(values: Sequence[float] | np.ndarray) -> float:
    """The (population) standard deviation of ``values`` (finite when every value is)."""
    return _finite(np.std, values)


def _finite(statistic: Callable[[np.ndarray], Any], values: Sequence[float] | np.ndarray) -> float:
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        plain = float(statistic(x))
    if np.isfinite(plain) or not np.isfinite(x).all():
        return plain
    scale = float(np.abs(x).max())
    return scale * float(statistic(x / scale))


@dataclass
class Episode:
    """
    One recorded episode (:func:`run_episodes` gives float64 arrays, one row per step; lists work as well).

    :param observations: ``T + 1`` observations, the last one after the final step.
    :param actions: ``T`` actions.
    :param rewards: ``T`` rewards.
    :param end: How the episode ended (see :data:`EndReason`).
    :param index: The order in which the episode was started within its evaluation (0-based).
    """

    observations: np.ndarray | list[Any] = field(default_factory=list)
    actions: np.ndarray | list[Any] = field(default_factory=list)
    rewards: np.ndarray | list[float] = field(default_factory=list)
    end: EndReason = "running"
    index: int = 0

    @functools.cached_property
    def total_return(self) -> float:
        """The sum of the rewards, finite whenever the exact sum is (:func:`finite_total`)."""
        return finite_total(self.rewards) if len(self.rewards) else 0.0

    @property
    def length(self) -> int:
        return len(self.rewards)


@dataclass
class RolloutResult:
    """
    The outcome of :func:`run_episodes`.

    :param episodes: The finished episodes, in the order they were started.
    :param stopped: True when the step hook asked to stop before all episodes finished (the result is incomplete).
    :param stop_requested: True when the step hook asked to stop, also in the step that finished the last episode.
    :param n_steps: Environment steps taken (the sum of the step hook's ``n_steps``).
    :param successes: The ``info["is_success"]`` of each finished episode's last step that reports one, in finishing order.
    """

    episodes: list[Episode]
    stopped: bool = False
    stop_requested: bool = False
    n_steps: int = 0
    successes: list[Any] = field(default_factory=list)

    @functools.cached_property
    def returns(self) -> np.ndarray:
        """The episodes' returns, in order (read-only)."""
        returns = np.array([ep.total_return for ep in self.episodes], dtype=np.float64)
        returns.setflags(write=False)
        return returns


class VecStep(NamedTuple):
    """
    What one vector step did, under the names of an SB3 algorithm's rollout loop (``callback.locals``).

    :param new_obs: The observations to act on next (after an end: the reset one; ``infos[i]["terminal_observation"]``).
    :param actions: The actions taken, one row per sub-environment (an idle sub-environment's is not applied).
    :param rewards: The rewards (0 for an idle sub-environment).
    :param dones: True only where a counted episode finished.
    :param infos: The step infos (empty for an idle sub-environment).
    :param n_steps: Environment steps taken (a bare VecEnv steps only the busy sub-environments).
    """

    new_obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    infos: list[dict]
    n_steps: int


StepHook = Callable[[VecStep], object]
"""Called after every vector step; a falsy return stops at once, as ``callback.on_step()`` does in SB3."""


def check_vec_env(env: VecEnv | None, cap: int | None = None) -> None:
    """Raise a ``ValueError`` for a VecEnv wrapper other than :data:`PASS_THROUGH_WRAPPERS`; with ``cap``, then
    :func:`cap_episodes`."""
    wrapper = env
    while isinstance(wrapper, VecEnvWrapper):
        if isinstance(wrapper, VecTransposeImage):
            raise ValueError(
                f"R2PO's policies do not take image observations, got {wrapper.venv.observation_space} (the env's "
                "observation space; SB3 wraps an image env in VecTransposeImage): use an env with vector observations "
                "(Box, MultiDiscrete, MultiBinary) or Discrete ones."
            )
        if not isinstance(wrapper, PASS_THROUGH_WRAPPERS):
            allowed = ", ".join(w.__name__ for w in PASS_THROUGH_WRAPPERS)
            raise ValueError(
                f"R2PO cannot train through {type(wrapper).__name__}: it compares parameter vectors by their returns "
                f"in the env's own units, on the env's own observations. Remove the wrapper (VecEnv wrappers "
                f"accepted: {allowed})."
            )
        wrapper = wrapper.venv
    if cap is not None:
        cap_episodes(env, cap)


CAPPED = "r2po_episode_cap"
"""The step info key by which :class:`EpisodeCap` says that it cut the episode at R2PO's cap."""


class EpisodeCap(TimeLimit):
    """
    R2PO's episode cap as a ``TimeLimit`` beneath a ``Monitor`` (:func:`cap_episodes`), so the Monitor logs the episodes
    it cuts; the cutting step's info says ``CAPPED`` (R2PO records the episode as ``"capped"``).

    :param env: The environment (without a time limit of its own).
    :param max_episode_steps: R2PO's episode cap.
    """

    def __init__(self, env: gym.Env, max_episode_steps: int) -> None:
        super().__init__(env, max_episode_steps)
        self.cap, self.steps = max_episode_steps, 0

    def reset(self, **kwargs: Any) -> Any:
        """Reset the env and the episode's step count."""
        self.steps = 0
        return super().reset(**kwargs)

    def step(self, action: Any) -> Any:
        observation, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        if truncated and not terminated and self.steps >= self.cap:
            info = {**info, CAPPED: True}
        return observation, reward, terminated, truncated, info


def _unlimited_monitor(env: gym.Env) -> Monitor | None:
    """The outermost ``Monitor`` of ``env``'s wrappers when no time limit lies beneath it, else ``None``."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, Monitor):
            return None if is_wrapped(env.env, TimeLimit) else env
        env = env.env
    return None


def cap_episodes(env: VecEnv | None, cap: int) -> None:
    """
    Let ``Monitor`` files see the episodes R2PO's ``cap`` cuts: in a ``DummyVecEnv`` an :class:`EpisodeCap` goes beneath
    each ``Monitor`` without a time limit beneath it (under a ``VecMonitor``: around each sub-environment without one);
    any other VecEnv gets a ``UserWarning`` naming ``TimeLimit`` as the fix, as do VecEnv wrappers whose monitor files
    log more episodes (idle sub-environments step there). ``env=None``: nothing to do.
    """
    if env is None:
        return
    base, vec_monitored = env.unwrapped, is_vecenv_wrapped(env, VecMonitor)
    if isinstance(env, VecEnvWrapper) and env.num_envs > 1 and (vec_monitored or any(env.env_is_wrapped(Monitor))):
        warnings.warn(
            f"R2PO steps idle sub-environments along through VecEnv wrappers ({type(env).__name__}): their Monitor "
            "files will also log episodes R2PO does not count. For files that match R2PO's episodes, pass the VecEnv "
            "without wrappers (a Monitor in each env, as make_vec_env puts it).",
            UserWarning,
            stacklevel=3,
        )
    if type(base) is DummyVecEnv:
        for i, sub_env in enumerate(base.envs):
            if (monitor := _unlimited_monitor(sub_env)) is not None:
                monitor.env = EpisodeCap(monitor.env, cap)
            elif vec_monitored and not is_wrapped(sub_env, TimeLimit):  # a VecMonitor sees the sub-environment's ends
                base.envs[i] = EpisodeCap(sub_env, cap)
        return
    monitored = any(env.env_is_wrapped(Monitor)) or vec_monitored
    # what every TimeLimit sets, asked of SubprocVecEnv workers (rl_zoo3's TimeLimit subclass does not pickle)
    if monitored and not all(env.env_method("has_wrapper_attr", "_max_episode_steps")):
        warnings.warn(
            f"R2PO ends an episode of this env at {cap} steps (its episode cap; the env has no time limit), but the "
            "env's Monitor does not see that cut and never logs the episode: its Monitor file will miss them. Wrap "
            f"each env in gymnasium.wrappers.TimeLimit(env, max_episode_steps={cap}) before the Monitor (in the "
            "function that makes it).",
            UserWarning,
            stacklevel=3,
        )


def _row(x: Any) -> tuple[np.ndarray, bool]:
    """A float64 copy of ``x``, and whether it is finite."""
    array = np.array(x, dtype=np.float64)
    return array, bool(np.isfinite(array).all())


def _stack(rows: list[np.ndarray]) -> np.ndarray | list[np.ndarray]:
    """The rows as one float64 array (a list where their shapes differ)."""
    try:
        return np.array(rows, dtype=np.float64)
    except ValueError:
        return rows


class _Track:
    def __init__(self, index: int, observation: Any) -> None:
        self.index = index
        self.observations: list[np.ndarray] = [_row(observation)[0]]
        self.actions: list[np.ndarray] = []
        self.rewards: list[float] = []

    def add(self, action: Any, observation: Any, reward: float, env_end: EndReason | None, cap: int) -> EndReason | None:
        """Append one step; how the episode ended with it (``env_end``, the cap or a non-finite value), else ``None``."""
        self.actions.append(action)
        row, finite_row = _row(observation)
        # one comparison in the common case; NaN fails it, and so does a reward large enough to risk an overflow
        usable = -OVERFLOW_RISK <= reward <= OVERFLOW_RISK or (
            math.isfinite(reward) and math.isfinite(finite_total([*self.rewards, reward]))
        )
        if not (usable and finite_row):  # end the episode here, keep only finite numbers
            self.rewards.append(reward if usable else 0.0)
            self.observations.append(self.observations[-1])
            return "non-finite"
        self.rewards.append(reward)
        self.observations.append(row)
        if env_end is not None:
            return env_end
        return "capped" if len(self.rewards) >= cap else None

    def episode(self, end: EndReason) -> Episode:
        rewards = np.array(self.rewards, dtype=np.float64)
        return Episode(_stack(self.observations), _stack(self.actions), rewards, end, self.index)


def _env_end(terminated: bool, info: dict[str, Any]) -> EndReason:
    return "terminated" if terminated else ("capped" if info.get(CAPPED, False) else "truncated")


def _reset_one(env: VecEnv, index: int) -> Any:
    """Reset sub-environment ``index`` alone, past any VecEnv wrapper."""
    result = env.env_method("reset", indices=[index])[0]
    return result[0] if isinstance(result, tuple) else result


def _step_alone(env: VecEnv, index: int, action: Any) -> tuple[Any, float, EndReason | None, dict, Any]:
    """Step sub-environment ``index`` of a bare VecEnv alone: observation, reward, how the env ended the episode (else
    ``None``), the info as a VecEnv gives it, and the observation to act on next (the reset one after an end)."""
    next_obs, reward, terminated, truncated, info = env.env_method("step", action, indices=[index])[0]
    if not (terminated or truncated):
        return next_obs, float(reward), None, info, next_obs
    info = {**info, "terminal_observation": next_obs, "TimeLimit.truncated": bool(truncated and not terminated)}
    return next_obs, float(reward), _env_end(terminated, info), info, _reset_one(env, index)


def _auto_reset_step(observation: Any, done: bool, info: dict) -> tuple[Any, EndReason | None]:
    """The observation a VecEnv step reached (the terminal one at an end) and how the env ended the episode (else ``None``)."""
    if not done:
        return observation, None
    return info.get("terminal_observation", observation), _env_end(not info.get("TimeLimit.truncated", False), info)


class _Evaluation:
    """One :func:`run_episodes` call's bookkeeping: which sub-environment runs which episode, the finished ones."""

    def __init__(self, n_episodes: int, observations: list[Any]) -> None:
        self.n_episodes, self.started, self.n_steps = n_episodes, 0, 0
        self.tracks: list[_Track | None] = [None] * len(observations)
        self.finished: list[Episode] = []
        self.successes: list[Any] = []
        for i, observation in enumerate(observations):
            self.begin(i, observation)

    def begin(self, i: int, observation: Any) -> None:
        """Start the next episode on sub-environment ``i`` (idle once ``n_episodes`` have started)."""
        self.tracks[i] = None
        if self.started < self.n_episodes:
            self.tracks[i], self.started = _Track(self.started, observation), self.started + 1

    def end(self, track: _Track, end: EndReason, info: dict) -> None:
        self.finished.append(track.episode(end))
        if info.get("is_success") is not None:
            self.successes.append(info["is_success"])

    def result(self, stop_requested: bool) -> RolloutResult:
        done = sorted(self.finished, key=lambda ep: ep.index)
        stopped = stop_requested and len(done) < self.n_episodes
        return RolloutResult(done, stopped, stop_requested, self.n_steps, self.successes)


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
    obs = list(env.reset())
    run = _Evaluation(n_episodes, obs)
    wrapped = isinstance(env, VecEnvWrapper)  # wrappers must see every step: idle sub-environments step along
    parallel = not isinstance(env, DummyVecEnv)  # a SubprocVecEnv steps its busy workers together (DummyVecEnv's
    stop = False  # float32 reward buffer would round the rewards, and stepping it alone costs nothing)
    while len(run.finished) < run.started and not stop:
        lock_step = wrapped or (parallel and all(track is not None for track in run.tracks))
        actions = act(np.asarray(obs))
        recorded = np.array(actions, dtype=np.float64)  # before the env sees them
        rewards, infos = [0.0] * len(obs), [dict[str, Any]() for _ in obs]
        if lock_step:
            new_obs, vec_rewards, dones, vec_infos = env.step(actions)
            assert isinstance(new_obs, np.ndarray)  # Box and Discrete observations (the policies' spaces)
            obs, rewards, infos = list(new_obs), [float(r) for r in vec_rewards], list(vec_infos)
        ended: list[int] = []
        for i, track in enumerate(run.tracks):
            if track is None:  # idle: a bare VecEnv does not step it
                continue
            if lock_step:
                next_obs, env_end = _auto_reset_step(obs[i], dones[i], infos[i])
            else:
                next_obs, rewards[i], env_end, infos[i], obs[i] = _step_alone(env, i, actions[i])
            end = track.add(recorded[i], next_obs, rewards[i], env_end, max_episode_steps)
            if end is not None:
                ended.append(i)
                run.end(track, end, infos[i])
                if env_end is None:  # the cap or a non-finite value ended the episode, not the env: reset it
                    obs[i] = _reset_one(env, i)
        n_steps = len(obs) if lock_step else sum(track is not None for track in run.tracks)
        run.n_steps += n_steps
        for i in ended:
            run.begin(i, obs[i])
        if on_step is not None:
            counted = np.zeros(len(obs), dtype=bool)
            counted[ended] = True
            stop = not on_step(VecStep(np.asarray(obs), np.asarray(actions), np.array(rewards), counted, infos, n_steps))
    return run.result(stop)


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


def upper_bound(returns: Sequence[float], z: float) -> float:
    """One-sided upper confidence bound of the mean of ``returns``."""
    values = np.asarray(returns, dtype=np.float64)
    if values.size < 2:
        return float("inf")
    return float(values.mean() + z * values.std(ddof=1) / np.sqrt(values.size))


def should_stop(returns: Sequence[float], incumbent: float, z: float) -> bool:
    """Whether a challenger with these returns so far cannot reach ``incumbent`` (racing, see the module docstring)."""
    return upper_bound(returns, z) < incumbent


def race(returns: Sequence[float], incumbent: float, chunk: int, z: float) -> int:
    """How many of ``returns`` racing would have run (a multiple of ``chunk``, or all of them)."""
    for m in range(chunk, len(returns), chunk):
        if should_stop(returns[:m], incumbent, z):
            return m
    return len(returns)


def run_race(
    run: Callable[[int], RolloutResult | None],
    n_episodes: int,
    chunk: int,
    incumbent: float,
    z: float,
    stop_requested: Callable[[], bool],
) -> RolloutResult | None:
    """
    Evaluate a challenger in chunks of ``chunk`` episodes until ``n_episodes`` ran or it cannot reach ``incumbent``.

    :param run: Runs the next ``m`` episodes of the challenger; ``None`` when a callback stopped training meanwhile.
    :param stop_requested: Whether a callback asked to stop (an incomplete race then returns ``None``).
    :return: The episodes run, renumbered in order; ``None`` when training stopped before the race ended.
    """
    episodes: list[Episode] = []
    while len(episodes) < n_episodes:
        part = run(min(chunk, n_episodes - len(episodes)))
        if part is None or (stop_requested() and len(episodes) + len(part.episodes) < n_episodes):
            return None
        for episode in part.episodes:
            episode.index += len(episodes)
        episodes += part.episodes
        if len(episodes) < n_episodes and should_stop([ep.total_return for ep in episodes], incumbent, z):
            break
    return RolloutResult(episodes)
