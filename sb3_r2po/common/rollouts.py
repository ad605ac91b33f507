"""Evaluate one candidate for exactly K episodes on a VecEnv, keeping every trajectory, and the evidence the Critic
sees of them (statistics, the chosen trajectories, the revision rule) in our or the reference's format; racing (ours,
off by default): :func:`run_race`. Which episodes run where: the design decisions page, "Several envs".
"""

from __future__ import annotations

import functools
import itertools
import math
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal, NamedTuple

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

#: The VecEnv wrappers R2PO accepts: they leave observations and rewards as the env gives them.
PASS_THROUGH_WRAPPERS: tuple[type[VecEnvWrapper], ...] = (VecMonitor, VecCheckNan, VecVideoRecorder)

EndReason = str
"""``"terminated"``, ``"truncated"`` (the env's time limit), ``"capped"`` (R2PO's ``max_episode_steps``) or
``"non-finite"`` (a non-finite observation or reward, or a reward that overflows the return: the episode ends there,
that observation is not kept, such a reward counts as 0)."""

OVERFLOW_RISK = sys.float_info.max / 2**32  # smaller rewards cannot overflow a return (within 2**32 steps)


def finite_total(values: Sequence[float] | np.ndarray) -> float:
    """The sum of ``values``: numpy's when it is finite, else the exact sum correctly rounded."""
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        plain = float(np.sum(x))
    if math.isfinite(plain) or not np.isfinite(x).all():
        return plain
    exact = sum(map(Fraction, x.tolist()), Fraction(0))  # a partial sum overflowed: exact rational arithmetic
    try:
        return float(exact)
    except OverflowError:
        return math.inf if exact > 0 else -math.inf


def finite_mean(values: Sequence[float] | np.ndarray) -> float:
    """The mean of ``values``, finite when every value is (numpy's of ``[1e308, 1e308]`` is ``inf``)."""
    return _finite(np.mean, values)


def finite_std(values: Sequence[float] | np.ndarray) -> float:
    """The (population) standard deviation of ``values``, finite when every value is."""
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
    """One recorded episode (:func:`run_episodes` gives float64 arrays, one row per step; lists work as well).

    :param observations: ``T + 1`` observations, the last one after the final step.
    :param actions: ``T`` actions.
    :param rewards: ``T`` rewards.
    :param end: How the episode ended (:data:`EndReason`).
    :param index: Its position in the order the evaluation started its episodes.
    """

    observations: np.ndarray | list[Any] = field(default_factory=list)
    actions: np.ndarray | list[Any] = field(default_factory=list)
    rewards: np.ndarray | list[float] = field(default_factory=list)
    end: EndReason = "running"
    index: int = 0

    @functools.cached_property
    def total_return(self) -> float:
        """The sum of the rewards (:func:`finite_total`)."""
        return finite_total(self.rewards)

    @property
    def length(self) -> int:
        return len(self.rewards)


@dataclass
class RolloutResult:
    """The outcome of :func:`run_episodes`.

    :param episodes: The finished episodes, in the order they were started.
    :param stopped: Whether the step hook asked to stop before all episodes finished (the result is incomplete).
    :param stop_requested: Whether the step hook asked to stop, also in the step that finished the last episode.
    :param n_steps: Environment steps taken.
    """

    episodes: list[Episode]
    stopped: bool = False
    stop_requested: bool = False
    n_steps: int = 0

    @functools.cached_property
    def returns(self) -> np.ndarray:
        """The episodes' returns, in order (read-only)."""
        returns = np.array([ep.total_return for ep in self.episodes], dtype=np.float64)
        returns.setflags(write=False)
        return returns


class VecStep(NamedTuple):
    """What one vector step did, under the names of an SB3 algorithm's rollout loop (``callback.locals``).

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


def check_vec_env(env: VecEnv | None, cap: int | None = None) -> None:
    """``ValueError`` for a VecEnv wrapper not in :data:`PASS_THROUGH_WRAPPERS`; then, with ``cap``, :func:`cap_episodes`."""
    wrapper = env
    while isinstance(wrapper, VecEnvWrapper):
        if isinstance(wrapper, VecTransposeImage):
            raise ValueError(
                f"R2PO's policies do not take image observations, got {wrapper.venv.observation_space} (the env's "
                "observation space; SB3 wraps an image env in VecTransposeImage): use an env with vector observations "
                "(Box, MultiDiscrete, MultiBinary) or Discrete ones."
            )
        if not isinstance(wrapper, PASS_THROUGH_WRAPPERS):
            raise ValueError(
                f"R2PO cannot train through {type(wrapper).__name__}: it compares parameter vectors by their returns "
                f"in the env's own units, on the env's own observations. Remove the wrapper (VecEnv wrappers "
                f"accepted: {', '.join(w.__name__ for w in PASS_THROUGH_WRAPPERS)})."
            )
        wrapper = wrapper.venv
    if cap is not None:
        cap_episodes(env, cap)


CAPPED = "r2po_episode_cap"  #: The step info key by which :class:`EpisodeCap` says that it cut the episode.


class EpisodeCap(TimeLimit):
    """R2PO's episode cap as a ``TimeLimit`` beneath a ``Monitor`` (on an env without a time limit of its own), so the
    Monitor logs the episodes it cuts; the cutting step's info has :data:`CAPPED` (R2PO records them as ``"capped"``)."""

    def step(self, action: Any) -> Any:
        observation, reward, terminated, truncated, info = super().step(action)
        assert self._elapsed_steps is not None  # TimeLimit counts the steps since its reset
        if truncated and not terminated and self._elapsed_steps >= self._max_episode_steps:
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
    """Let ``Monitor`` files see the episodes R2PO's ``cap`` cuts: in a ``DummyVecEnv`` an :class:`EpisodeCap` goes
    beneath each ``Monitor`` without a time limit (under a ``VecMonitor``: around each sub-environment without one);
    otherwise a ``UserWarning`` names the fix, as it does for VecEnv wrappers whose monitors log idle sub-environments."""
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
    # what every TimeLimit sets, asked of SubprocVecEnv workers (rl_zoo3's TimeLimit subclass does not pickle)
    monitored = any(env.env_is_wrapped(Monitor)) or vec_monitored
    if monitored and not all(env.env_method("has_wrapper_attr", "_max_episode_steps")):
        warnings.warn(
            f"R2PO ends an episode of this env at {cap} steps (its episode cap; the env has no time limit), but the "
            "env's Monitor does not see that cut and never logs the episode: its Monitor file will miss them. Wrap "
            f"each env in gymnasium.wrappers.TimeLimit(env, max_episode_steps={cap}) before the Monitor (in the "
            "function that makes it).",
            UserWarning,
            stacklevel=3,
        )


def _stack(rows: list[np.ndarray]) -> np.ndarray | list[np.ndarray]:
    """The rows as one float64 array (a list where their shapes differ)."""
    try:
        return np.array(rows, dtype=np.float64)
    except ValueError:
        return rows


class _Track:
    def __init__(self, index: int, observation: Any, timeout: float | None) -> None:
        self.index, self.started, self.timeout = index, time.monotonic(), timeout
        self.observations: list[np.ndarray] = [np.array(observation, dtype=np.float64)]
        self.actions: list[np.ndarray] = []
        self.rewards: list[float] = []

    def add(self, action: Any, observation: Any, reward: float, env_end: EndReason | None, cap: int) -> EndReason | None:
        """Append one step; how the episode ended with it (``env_end``, the cap or a non-finite value), else ``None``."""
        if self.timeout is not None and time.monotonic() - self.started > self.timeout:
            raise TimeoutError(f"episode {self.index} ran past its {self.timeout:g} s timeout")
        self.actions.append(action)
        row = np.array(observation, dtype=np.float64)
        # one comparison in the common case; NaN fails it, and so does a reward large enough to risk an overflow
        usable = -OVERFLOW_RISK <= reward <= OVERFLOW_RISK or (
            math.isfinite(reward) and math.isfinite(finite_total([*self.rewards, reward]))
        )
        if not (usable and np.isfinite(row).all()):  # end the episode here, keep only finite numbers
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


def _reset_one(env: VecEnv, index: int) -> Any:
    result = env.env_method("reset", indices=[index])[0]
    return result[0] if isinstance(result, tuple) else result


def _step_alone(env: VecEnv, index: int, action: Any) -> tuple[Any, float, bool, dict]:
    """Step sub-environment ``index`` alone; the answer is a VecEnv step's (after an end, the reset observation)."""
    next_obs, reward, terminated, truncated, info = env.env_method("step", action, indices=[index])[0]
    if not (terminated or truncated):
        return next_obs, float(reward), False, info
    info = {**info, "terminal_observation": next_obs, "TimeLimit.truncated": bool(truncated and not terminated)}
    return _reset_one(env, index), float(reward), True, info


def _auto_reset_step(observation: Any, done: bool, info: dict) -> tuple[Any, EndReason | None]:
    """The observation a VecEnv step reached (the terminal one at an end) and how the env ended the episode (else ``None``)."""
    if not done:
        return observation, None
    if not info.get("TimeLimit.truncated", False):
        return info.get("terminal_observation", observation), "terminated"
    return info.get("terminal_observation", observation), "capped" if info.get(CAPPED, False) else "truncated"


def run_episodes(
    env: VecEnv,
    act: Callable[[np.ndarray], np.ndarray],
    n_episodes: int,
    max_episode_steps: int,
    on_step: Callable[[VecStep], object] | None = None,
    episode_timeout: float | None = None,
) -> RolloutResult:
    """Run exactly ``n_episodes`` episodes of the policy ``act`` on ``env``.

    :param env: The vectorized environment; it is reset first.
    :param act: Batched policy: observations of all sub-envs in, their actions out.
    :param n_episodes: Number of episodes to run (K).
    :param max_episode_steps: An episode reaching this length ends as ``"capped"``.
    :param on_step: Called after every vector step; a falsy return stops at once, as SB3's ``callback.on_step()``.
    :param episode_timeout: Seconds (wall time) an episode may last; past them a ``TimeoutError`` ends the run.
    :return: The finished episodes; fewer than ``n_episodes`` only when ``on_step`` asked to stop.
    """
    obs = list(env.reset())
    order = itertools.count()  # the next episode's index: those from n_episodes on leave the sub-environment idle
    tracks = [_Track(k, o, episode_timeout) if (k := next(order)) < n_episodes else None for o in obs]
    finished: list[Episode] = []
    total_steps = 0
    wrapped = isinstance(env, VecEnvWrapper)  # wrappers must see every step: idle sub-environments step along
    parallel = not isinstance(env, DummyVecEnv)  # a SubprocVecEnv steps its busy workers together (DummyVecEnv's
    stop = False  # float32 reward buffer would round the rewards, and stepping it alone costs nothing)
    while any(track is not None for track in tracks) and not stop:
        lock_step = wrapped or (parallel and all(track is not None for track in tracks))
        actions = act(np.asarray(obs))
        recorded = np.array(actions, dtype=np.float64)  # before the env sees them
        rewards, dones, infos = [0.0] * len(obs), np.zeros(len(obs), dtype=bool), [dict[str, Any]() for _ in obs]
        if lock_step:
            new_obs, vec_rewards, dones, vec_infos = env.step(actions)
            assert isinstance(new_obs, np.ndarray)  # Box and Discrete observations (the policies' spaces)
            obs, rewards, infos = list(new_obs), [float(r) for r in vec_rewards], list(vec_infos)
        ended: list[int] = []
        for i, track in enumerate(tracks):
            if track is None:  # idle: a bare VecEnv does not step it
                continue
            if not lock_step:
                obs[i], rewards[i], dones[i], infos[i] = _step_alone(env, i, actions[i])
            next_obs, env_end = _auto_reset_step(obs[i], dones[i], infos[i])
            end = track.add(recorded[i], next_obs, rewards[i], env_end, max_episode_steps)
            if end is not None:
                ended.append(i)
                finished.append(track.episode(end))
                if env_end is None:  # the cap or a non-finite value ended the episode, not the env: reset it
                    obs[i] = _reset_one(env, i)
        n_steps = len(obs) if lock_step else sum(track is not None for track in tracks)
        total_steps += n_steps
        for i in ended:
            tracks[i] = _Track(k, obs[i], episode_timeout) if (k := next(order)) < n_episodes else None
        if on_step is not None:
            counted = np.zeros(len(obs), dtype=bool)
            counted[ended] = True
            stop = not on_step(VecStep(np.asarray(obs), np.asarray(actions), np.array(rewards), counted, infos, n_steps))
    done = sorted(finished, key=lambda ep: ep.index)
    return RolloutResult(done, stop and len(done) < n_episodes, stop, total_steps)


def env_spec(env: VecEnv | None) -> tuple[str | None, float | None, int | None]:
    """The id, reward threshold and time limit of the spec of ``env``'s first sub-env (``None`` each without one)."""
    try:
        spec = None if env is None else env.get_attr("spec", indices=[0])[0]
    except Exception:  # a VecEnv that cannot answer: treat as no spec
        spec = None
    if spec is None:
        return None, None, None
    return spec.id, spec.reward_threshold, spec.max_episode_steps


def should_stop(returns: Sequence[float], incumbent: float, z: float) -> bool:
    """Whether a challenger with these returns so far cannot reach ``incumbent`` (racing): the one-sided upper
    confidence bound of their mean, ``mean + z * std(ddof=1) / sqrt(m)``, is below it (never on one return)."""
    values = np.asarray(returns, dtype=np.float64)
    return values.size >= 2 and float(values.mean() + z * values.std(ddof=1) / np.sqrt(values.size)) < incumbent


def race(returns: Sequence[float], incumbent: float, chunk: int, z: float) -> int:
    """How many of ``returns`` racing would have run (a multiple of ``chunk``, or all of them)."""
    return next((m for m in range(chunk, len(returns), chunk) if should_stop(returns[:m], incumbent, z)), len(returns))


def run_race(
    run: Callable[[int], RolloutResult | None],
    n_episodes: int,
    chunk: int,
    incumbent: float,
    z: float,
    stop_requested: Callable[[], bool],
) -> RolloutResult | None:
    """Evaluate a challenger in chunks of ``chunk`` episodes until ``n_episodes`` ran or it cannot reach ``incumbent``;
    ``None`` when ``run`` gave ``None`` or ``stop_requested()`` before the race ended."""
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


@dataclass(frozen=True)
class EpisodeStatistics:
    """Aggregate statistics of K episodes (``successes`` and ``failures``: ``None`` without a target)."""

    n_episodes: int
    mean_return: float
    std_return: float
    min_return: float
    max_return: float
    mean_length: float
    min_length: int
    max_length: int
    successes: int | None
    failures: int | None
    endings: dict[str, int]


def success_tolerance(target: float) -> float:
    """How far below ``target`` a return still reaches it, as the reference's ``np.isclose`` (500: 499.495 and above)."""
    return max(1e-6, 1e-3 * max(1.0, abs(target))) + 1e-5 * abs(target)


def summarize(episodes: Sequence[Episode], target: float | None = None) -> EpisodeStatistics:
    """Aggregate statistics of ``episodes``; a success is a return >= ``target`` (minus a tiny tolerance)."""
    if not episodes:
        raise ValueError("Cannot summarize zero episodes")
    returns = np.array([ep.total_return for ep in episodes], dtype=np.float64)
    lengths = np.array([ep.length for ep in episodes], dtype=np.int64)
    successes = None if target is None else int(np.sum(returns >= target - success_tolerance(target)))
    return EpisodeStatistics(
        n_episodes=len(episodes),
        mean_return=finite_mean(returns),
        std_return=finite_std(returns),
        min_return=float(returns.min()),
        max_return=float(returns.max()),
        mean_length=float(lengths.mean()),
        min_length=int(lengths.min()),
        max_length=int(lengths.max()),
        successes=successes,
        failures=None if successes is None else len(episodes) - successes,
        endings=dict(Counter(ep.end for ep in episodes)),
    )


def closest_index(returns: Sequence[float], value: float) -> int:
    """Index of the return closest to ``value``; ties go to the lowest index."""
    return int(np.argmin(np.abs(np.asarray(returns, dtype=np.float64) - value)))


def median(values: Sequence[float]) -> float:
    """What ``np.median(values)`` gives (NaN when one is NaN), without overflowing the mean of two huge values."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    if ordered.size == 0 or np.isnan(ordered[-1]):  # sort puts NaN last
        return math.nan
    low, high = float(ordered[(ordered.size - 1) // 2]), float(ordered[ordered.size // 2])  # equal for an odd size
    return (low + high) / 2 if math.isfinite(low + high) else low / 2 + high / 2


LARGEST_INTEGER_PRINTED = 1e15  # from here sig keeps the exponent form


def sig(x: float, digits: int = 3) -> str:
    """A number to ``digits`` significant figures, compactly (``0.0123``, ``-1.5``, ``500``, ``nan``); a value that rounds
    to ``10**digits`` or more is a rounded integer (``305``, not ``3e+02``) below ``LARGEST_INTEGER_PRINTED``."""
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    text = format(x, f".{digits}g")
    if "e+" in text and abs(x) < LARGEST_INTEGER_PRINTED:
        text = f"{x:.0f}"
    return "0" if text in ("-0", "0") else text


def digits_apart(x: float, other: float | None, digits: int = 4) -> int:
    """The fewest significant figures, at least ``digits``, at which :func:`sig` tells ``x`` from ``other``."""
    if other is None or x == other or not (np.isfinite(x) and np.isfinite(other)):
        return digits
    for n in range(digits, 18):  # 17 significant figures tell any two float64 values apart
        if sig(x, n) != sig(other, n):
            return n
    return 17


def _rows(x: np.ndarray | list[np.ndarray]) -> np.ndarray | list[np.ndarray]:
    """The observations or actions of an episode as flat float64 rows: a 2-D array, or a list where shapes differ."""
    if isinstance(x, np.ndarray) and x.ndim >= 1 and x.size:
        return np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    return [np.asarray(row, dtype=np.float64).reshape(-1) for row in x]


def _vector(row: np.ndarray, digits: int) -> str:
    texts = [sig(v, digits) if math.isfinite(v) else "non-finite" for v in row.tolist()]
    return texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"


def _shown(n: int, max_steps: int | None) -> tuple[list[range], int]:
    """The ranges of ``n`` steps shown (all, or a head of ``max(1, max_steps // 2)`` and a tail of the rest), and how many
    are omitted."""
    if max_steps is None or n <= max_steps:
        return [range(n)], 0
    head = max(1, max_steps // 2)
    tail = max(0, max_steps - head)
    return [range(head), range(n - tail, n)], n - head - tail


def _runs(episode: Episode, part: range, fold: bool) -> Iterator[tuple[int, int]]:
    """Runs ``t..u`` of identical steps (reward, action, observation) in ``part``; without ``fold``, one step each."""
    columns = (episode.rewards, episode.actions, episode.observations)
    t = part.start
    while t < part.stop:
        u = t
        while fold and u + 1 < part.stop and all(np.array_equal(np.asarray(c[t]), np.asarray(c[u + 1])) for c in columns):
            u += 1
        yield t, u
        t = u + 1


@dataclass(frozen=True)
class RenderedTrajectory:
    """A trajectory as prompt ``lines``, the number of steps ``omitted`` and the episode's ``length``."""

    lines: tuple[str, ...]
    omitted: int
    length: int = 0


_ENDINGS = {
    "terminated": "terminated",
    "truncated": "truncated by the time limit",
    "capped": "stopped at the step cap",
    "non-finite": "stopped: the environment returned a non-finite value",
}


def render_trajectory(
    episode: Episode, max_steps: int | None = 40, digits: int = 3, fold: bool = True, rewards: bool = True
) -> RenderedTrajectory:
    """An episode as one line per step ``t: s -> a`` (``, r=...`` when rewards vary, else one reward line first), head
    and tail when it is longer than ``max_steps`` (``None``: all), then how it ended and the final observation.
    ``fold`` writes a run of equal steps once (``t=3..7 (5 identical steps): ...``); ``rewards=False`` shows none."""
    n = episode.length
    observations, actions = _rows(episode.observations), _rows(episode.actions)
    step_rewards = np.asarray(episode.rewards, dtype=np.float64)
    constant_reward = n > 0 and bool(np.all(step_rewards == step_rewards[0]))
    shown, omitted = _shown(n, max_steps)
    lines: list[str] = []
    if constant_reward and rewards:
        lines.append(f"(reward {sig(float(step_rewards[0]), digits)} at every step)")
    for part_index, part in enumerate(shown):
        if part_index == 1:
            lines.append(f"... {omitted} steps omitted ...")
        for t, u in _runs(episode, part, fold):
            body = f"s={_vector(observations[t], digits)} -> a={_vector(actions[t], digits)}"
            if rewards and not constant_reward:
                body += f", r={sig(float(step_rewards[t]), digits)}"
            label = f"t={t}" if u == t else f"t={t}..{u} ({u - t + 1} identical steps)"
            lines.append(f"{label}: {body}")
    lines.append(
        f"end after {n} steps ({_ENDINGS.get(episode.end, episode.end)}): final s={_vector(observations[-1], digits)}"
    )
    return RenderedTrajectory(tuple(lines), omitted, n)


def render_excerpt(episode: Episode, max_steps: int = 8, digits: int = 3) -> str:
    """A history entry's rollout excerpt: :func:`render_trajectory`'s lines joined by ``" | "``, without rewards."""
    return " | ".join(render_trajectory(episode, max_steps, digits, fold=False, rewards=False).lines)


TraceStyle = Literal["chain", "ends", "steps"]
"""The reference's Critic trajectories: ``chain``, ``s->a->s' | ... | s->a->[TERMINATED]`` (r2po); ``ends``, the same
with 25 first and 25 last steps, each part's last step ``[GOAL]`` or ``[END]`` (three_traj); ``steps``, a line per step
with its reward (rep_traj, always_critic, critic_only)."""

ValueStyle = Literal["int", "list", "wrapped", "nested"]
"""The reference's ``_format_value``: ``int`` a state or tabular action (``5``); ``list`` a vector (``[0.0123, -1.5]``);
``wrapped`` a linear policy's discrete action (``[1]``); ``nested`` a continuous action (``[[0.123...]]``, every digit)."""


@dataclass(frozen=True)
class ReferenceTrace:
    """The reference's trajectory format of one variant: how the Critic's trajectories are written (``trace``), how
    observations and actions are, and ``cap``, the reference's ``max_traj_length`` (:func:`reference_marker`)."""

    trace: TraceStyle = "chain"
    observation: ValueStyle = "list"
    action: ValueStyle = "list"
    cap: int = 1000


def reference_number(x: float, digits: int = 3) -> str:
    """A float as the reference's ``_format_number`` writes it: 3 significant figures (``digits``: ours)."""
    return format(float(x), f".{digits}g")


def reference_value(row: np.ndarray, style: ValueStyle, digits: int = 3) -> str:
    """An observation or action row as the reference writes it (:data:`ValueStyle`); a non-finite entry: ``non-finite``."""
    values = row.tolist()
    if not all(math.isfinite(v) for v in values):
        texts = [reference_number(v, digits) if math.isfinite(v) else "non-finite" for v in values]
        return texts[0] if style == "int" else "[" + ", ".join(texts) + "]"
    if style == "int":
        return str(int(values[0]))
    if style == "wrapped":
        return "[" + ", ".join(str(int(v)) for v in values) + "]"
    if style == "nested" and digits == 3:
        return "[" + str(values) + "]"
    text = "[" + ", ".join(reference_number(v, digits) for v in values) + "]"
    return "[" + text + "]" if style == "nested" else text


def _reference_steps(episode: Episode, fmt: ReferenceTrace, digits: int = 3) -> list[tuple[str, str, float]]:
    observations, actions = _rows(episode.observations), _rows(episode.actions)
    return [
        (
            reference_value(observations[t], fmt.observation, digits),
            reference_value(actions[t], fmt.action, digits),
            float(episode.rewards[t]),
        )
        for t in range(episode.length)
    ]


def reference_marker(episode: Episode, cap: int) -> str:
    """``[ROLLOUT_CAP]`` at ``cap`` steps or our cap, else ``[TERMINATED]`` (the reference's); ``[NON_FINITE]`` (ours)."""
    if episode.end == "non-finite":
        return "[NON_FINITE]"
    return "[ROLLOUT_CAP]" if episode.length >= cap or episode.end == "capped" else "[TERMINATED]"


def _reference_part(
    episode: Episode, steps: list[tuple[str, str, float]], part: range, trace: TraceStyle, marker: str, digits: int, fold: bool
) -> list[str]:
    texts = []
    for t, u in _runs(episode, part, fold):
        s, a, r = steps[t]
        if trace == "steps":
            label = f"step {t}" if u == t else f"steps {t}-{u} ({u - t + 1} identical steps)"
            texts.append(f"  {label}: state={s} -> action={a} -> reward={reference_number(r, digits)}")
        else:
            if u > t:  # steps t..u-1 led back to the same state
                texts.append(f"{s}->{a}->{s} ({u - t} identical steps)")
            texts.append(f"{s}->{a}->{steps[u + 1][0] if u + 1 < len(steps) else marker}")
    return texts


def reference_trajectory(
    episode: Episode, fmt: ReferenceTrace, max_steps: int | None = None, digits: int = 3, fold: bool = False
) -> RenderedTrajectory:
    """An episode as the reference's Critics write it (:data:`TraceStyle`); ours, for ``chain`` and ``steps``:
    ``max_steps`` keeps head and tail, ``digits`` the figures, ``fold`` writes a run of identical steps once."""
    steps = _reference_steps(episode, fmt, digits)
    if not steps:
        return RenderedTrajectory(("No trajectory available.",), 0, 0)
    n, ends = len(steps), fmt.trace == "ends"
    shown, omitted = _shown(n, 50 if ends else max_steps)
    marker, texts = reference_marker(episode, fmt.cap), []
    for part in shown:
        if part is not shown[0]:
            texts.append(("  " if fmt.trace == "steps" else "") + f"... {omitted} omitted steps ...")
        if ends:  # each part's last step ends [GOAL] (a positive reward) or [END]
            last = "[GOAL]" if steps[part.stop - 1][2] > 0 else "[END]"
            texts += _reference_part(episode, steps[: part.stop], part, "chain", last, digits, False)
        else:
            texts += _reference_part(episode, steps, part, fmt.trace, marker, digits, fold)
    return RenderedTrajectory(tuple(texts) if fmt.trace == "steps" else (" | ".join(texts),), omitted, n)


def reference_excerpt(episode: Episode, fmt: ReferenceTrace, max_steps: int = 8, digits: int = 3) -> str:
    """A history entry's ``rollout_excerpt`` as the reference writes it (a ``chain``; ``max_steps >= 2``)."""
    return reference_trajectory(episode, replace(fmt, trace="chain"), max_steps, digits).lines[0]


def reference_table(episode: Episode, fmt: ReferenceTrace) -> tuple[str, ...]:
    """An episode as the reference's ProPS+ tabular history writes it: ``State | Action | Reward``, then ``s | a | r``."""
    return ("State | Action | Reward", *(f"{s} | {a} | {r}" for s, a, r in _reference_steps(episode, fmt)))


@dataclass(frozen=True)
class EvidencePackage:
    """Everything the Critic is shown about a candidate's K episodes, as :func:`build_evidence` makes it (its parameters
    say what each field holds; ``tau_c`` is ``None`` without a rule, ``above_tau_c`` whether the mean return reaches it;
    ``trajectory_returns`` and ``trajectory_indices`` are each shown trajectory's return and position, by name)."""

    statistics: EpisodeStatistics | None
    trajectories: dict[str, RenderedTrajectory]
    trajectory_returns: dict[str, float]
    tau_c: float | None
    above_tau_c: bool
    step_rewards: bool = True
    trajectory_indices: dict[str, int] = field(default_factory=dict)
    reference: bool = False


SELECTORS: dict[str, Callable[[Sequence[float]], int]] = {
    "median": lambda returns: closest_index(returns, median(returns)),
    "mean": lambda returns: closest_index(returns, finite_mean(returns)),
    "worst": lambda returns: int(np.argmin(returns)),
    "best": lambda returns: int(np.argmax(returns)),
}
"""How each named trajectory is picked from the K returns: the one closest to the median or the mean, the worst or the
best (ties to the lowest index)."""


def build_evidence(
    episodes: Sequence[Episode],
    target: float | None,
    tau_c: float | None,
    max_steps: int | None = None,
    *,
    digits: int = 3,
    fold: bool = False,
    statistics: bool = True,
    trajectories: Sequence[str] = ("median",),
    rule: bool = True,
    step_rewards: bool = True,
    reference: ReferenceTrace | None = None,
) -> EvidencePackage:
    """The evidence package of a candidate: by default statistics, the median trajectory and the revision rule.

    :param episodes: The K episodes of the candidate.
    :param target: The target return (defines success); may be ``None``.
    :param tau_c: Revision-rule threshold; ``None`` disables the rule.
    :param max_steps: Steps shown of each trajectory (head and tail); ``None``: all.
    :param digits: Significant figures in rendered trajectories.
    :param fold: Write runs of identical steps once.
    :param statistics: Whether to include the aggregate statistics.
    :param trajectories: Which trajectories to show, by name (see :data:`SELECTORS`).
    :param rule: Whether to include the revision rule (needs ``tau_c``).
    :param step_rewards: Whether :func:`render_trajectory` shows the rewards.
    :param reference: Write the trajectories in the reference's format (:func:`reference_trajectory`); ``None``: ours.
    """
    stats = summarize(episodes, target)
    indices = {name: SELECTORS[name]([ep.total_return for ep in episodes]) for name in trajectories}
    shown = {name: episodes[i] for name, i in indices.items()}
    threshold = tau_c if rule else None
    if reference is None:
        rendered = {name: render_trajectory(ep, max_steps, digits, fold, step_rewards) for name, ep in shown.items()}
    else:
        rendered = {name: reference_trajectory(ep, reference, max_steps, digits, fold) for name, ep in shown.items()}
    return EvidencePackage(
        statistics=stats if statistics else None,
        trajectories=rendered,
        trajectory_returns={name: ep.total_return for name, ep in shown.items()},
        tau_c=threshold,
        above_tau_c=threshold is not None and stats.mean_return >= threshold,
        step_rewards=step_rewards,
        trajectory_indices=indices,
        reference=reference is not None,
    )
