"""Evaluate one candidate for exactly K episodes on a VecEnv, keeping every trajectory.

Episodes are assigned to sub-environments as they become free until K have been *started*; every
started episode is then run to its end, so the K episodes are an unbiased sample (taking the first K
to *finish* would favour short episodes).

A plain ``DummyVecEnv`` is stepped one sub-environment at a time, directly: no VecEnv buffer copies, and a
sub-environment with nothing left to do simply waits. Any other VecEnv goes through the VecEnv API: a bare one
(``SubprocVecEnv``) steps all sub-environments in lock-step while each runs an episode, then each busy one alone
(``env_method("step")``), so an idle one starts no episode (its ``Monitor`` logs only R2PO's episodes). Through
VecEnv wrappers idle sub-environments keep stepping in lock-step; those steps are discarded and never shown to the
LLM, but they are real environment interactions and the step hook counts them.

Episodes R2PO's cap cuts reach ``Monitor`` files as truncations where :func:`cap_episodes` can put the cap beneath
the ``Monitor`` (:class:`EpisodeCap`).

A running episode is recorded as plain Python values (a flat observation as a list of floats, copied from the
env's array) and turned into float64 arrays once, when it ends. Every step is checked for non-finite values
as it happens, so an episode is cut at the same step whatever the recording.
"""

from __future__ import annotations

import functools
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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

from sb3_r2po.common import finite

PASS_THROUGH_WRAPPERS: tuple[type[VecEnvWrapper], ...] = (VecMonitor, VecCheckNan, VecVideoRecorder)
"""VecEnv wrappers that leave observations and rewards as the env gives them: the only ones R2PO accepts."""

EndReason = str
"""How an episode ended: ``"terminated"`` (the task ended), ``"truncated"`` (the env's time limit) or
``"capped"`` (R2PO's own ``max_episode_steps`` cap, for envs without a time limit) or ``"non-finite"`` (the
env returned a NaN or infinite observation or reward, or a finite reward that makes the exact return overflow: the
episode is cut there, the step's observation is not kept and such a reward counts as 0)."""

OVERFLOW_RISK = sys.float_info.max / 2**32
"""Rewards up to this magnitude cannot make a return overflow (within 2**32 steps); larger ones are checked."""


@dataclass
class Episode:
    """
    One recorded episode. :func:`run_episodes` gives float64 arrays (one row per observation or action); lists of
    arrays and of floats work as well.

    :param observations: ``T + 1`` observations, the last one being the observation after the final step.
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
        """The sum of the rewards, finite whenever the exact sum is (:func:`~sb3_r2po.common.finite.total`; computed once:
        an episode's record is not changed after it is made)."""
        return finite.total(self.rewards) if len(self.rewards) else 0.0

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
    :param n_steps: Environment steps taken (the sum of the step hook's ``n_steps``).
    :param successes: The ``info["is_success"]`` of each finished episode's last step that reports one, in the order
        the episodes finished (what SB3's success rate counts).
    """

    episodes: list[Episode]
    stopped: bool = False
    stop_requested: bool = False
    n_steps: int = 0
    successes: list[Any] = field(default_factory=list)

    @functools.cached_property
    def returns(self) -> np.ndarray:
        """The episodes' returns, in order (computed once: read-only)."""
        returns = np.array([ep.total_return for ep in self.episodes], dtype=np.float64)
        returns.setflags(write=False)
        return returns


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


def check_vec_env(env: VecEnv | None, cap: int | None = None) -> None:
    """
    Raise a ``ValueError`` when ``env`` is wrapped in a VecEnv wrapper that changes observations or rewards; with
    ``cap`` (R2PO's episode cap), then let its ``Monitor`` files see the episodes the cap cuts (:func:`cap_episodes`).

    R2PO compares fixed parameter vectors by their returns in the env's own units: ``VecNormalize`` would score
    them in normalized, drifting units (and feed the policy drifting observations), ``VecFrameStack`` changes the
    observation the policy's layout describes. Only :data:`PASS_THROUGH_WRAPPERS` are accepted; a ``Monitor`` (or
    any gymnasium wrapper) on each sub-environment is fine. A ``VecTransposeImage``, which SB3 adds to an env with
    image observations, is refused for what it says: image observations, named by the env's own space.
    """
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


TIME_LIMIT_ATTRIBUTE = "_max_episode_steps"
"""The attribute a gymnasium ``TimeLimit`` (and any subclass: rl_zoo3's ``PatchedTimeLimit``, :class:`EpisodeCap`) sets:
a ``SubprocVecEnv`` worker is asked whether its env has it (``has_wrapper_attr``) rather than sent the class, which no
longer pickles once importing rl_zoo3 has replaced gymnasium's ``TimeLimit`` by its subclass."""


class EpisodeCap(TimeLimit):
    """
    R2PO's episode cap as a gymnasium ``TimeLimit``, put beneath a sub-environment's ``Monitor`` by
    :func:`cap_episodes`: the Monitor logs an episode the cap cuts, as a truncation. The step that cuts says so in its
    info (``info[CAPPED]``): R2PO records the episode as ``"capped"``, as it does where it cuts an episode itself.

    :param env: The environment (without a time limit of its own).
    :param max_episode_steps: R2PO's episode cap.
    """

    def __init__(self, env: gym.Env, max_episode_steps: int) -> None:
        super().__init__(env, max_episode_steps)
        self.cap, self.steps = max_episode_steps, 0

    def reset(self, **kwargs: Any) -> Any:
        """The env's reset; the step count starts again."""
        self.steps = 0
        return super().reset(**kwargs)

    def step(self, action: Any) -> Any:
        """The env's step, truncated at the cap; the cutting step's info says ``CAPPED``."""
        observation, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        if truncated and not terminated and self.steps >= self.cap:
            info = {**info, CAPPED: True}
        return observation, reward, terminated, truncated, info


def _unlimited_monitor(env: gym.Env) -> Monitor | None:
    """The outermost ``Monitor`` of ``env``'s wrappers when no time limit lies beneath it (its file would miss the
    episodes R2PO's cap cuts), else ``None``."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, Monitor):
            return None if is_wrapped(env.env, TimeLimit) else env
        env = env.env
    return None


def cap_episodes(env: VecEnv | None, cap: int) -> None:
    """
    Let ``Monitor`` files see the episodes R2PO's episode cap cuts. R2PO ends an episode at ``cap`` steps and resets
    the env; a ``Monitor`` logs an episode only when the env ends it, so it would never log such an episode.

    In a ``DummyVecEnv`` (the one SB3 builds from an id or a gymnasium env, or the user's), an :class:`EpisodeCap`
    goes beneath each sub-environment's ``Monitor`` that has no time limit beneath it (under a ``VecMonitor``: around
    a sub-environment without a time limit). The sub-environments of any other VecEnv (``SubprocVecEnv``) are out of
    R2PO's reach: where a ``Monitor`` or ``VecMonitor`` records an env without a time limit, one ``UserWarning`` names
    ``TimeLimit`` as the fix. Through VecEnv wrappers idle sub-environments step (:func:`run_episodes`): with several
    sub-environments and a ``Monitor`` or ``VecMonitor``, one ``UserWarning`` says that its files log more episodes.

    :param env: The VecEnv R2PO trains on (``None``: nothing to do).
    :param cap: R2PO's episode cap (``R2PO.episode_cap``).
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
    if monitored and not all(env.env_method("has_wrapper_attr", TIME_LIMIT_ATTRIBUTE)):
        warnings.warn(
            f"R2PO ends an episode of this env at {cap} steps (its episode cap; the env has no time limit), but the "
            "env's Monitor does not see that cut and never logs the episode: its Monitor file will miss them. Wrap "
            f"each env in gymnasium.wrappers.TimeLimit(env, max_episode_steps={cap}) before the Monitor (in the "
            "function that makes it).",
            UserWarning,
            stacklevel=3,
        )


def _row(x: Any) -> tuple[Any, bool]:
    """A copy of the observation or action ``x`` to record, and whether it is finite. A flat array becomes a list of
    Python numbers (exact: every float and integer dtype converts to float64 exactly; cheaper than an array copy);
    anything else a float64 array."""
    try:
        row = x.tolist()
        total = sum(row)  # a TypeError for a scalar or a nested list (an array with another shape)
    except (AttributeError, TypeError):
        array = np.array(x, dtype=np.float64)
        return array, bool(np.isfinite(array).all())
    # a NaN or infinity makes the sum non-finite; finite values whose sum overflows are checked one by one
    return row, math.isfinite(total) or all(map(math.isfinite, row))


def _stack(rows: list[Any]) -> np.ndarray | list[Any]:
    """The recorded rows as one float64 array (a list of float64 arrays where their shapes differ)."""
    try:
        return np.array(rows, dtype=np.float64)
    except ValueError:
        return [np.array(row, dtype=np.float64) for row in rows]


def _overflows(rewards: list[float], reward: float) -> bool:
    """Whether adding the finite ``reward`` makes the exact sum of ``rewards`` overflow."""
    return not math.isfinite(finite.total([*rewards, reward]))


class _Track:
    """The running episode of one sub-environment, recorded as Python values (see :func:`_row`)."""

    __slots__ = ("actions", "index", "observations", "rewards")

    def __init__(self, index: int, observation: Any) -> None:
        self.index = index
        self.observations: list[Any] = [_row(observation)[0]]
        self.actions: list[Any] = []
        self.rewards: list[float] = []

    def add(self, action: Any, observation: Any, reward: float, env_end: EndReason | None, cap: int) -> EndReason | None:
        """Append one step; how the episode ended with it (``env_end``, the cap or a non-finite value), else ``None``."""
        self.actions.append(action)
        row, finite = _row(observation)
        # one comparison in the common case; NaN fails it, and so does a reward large enough to risk an overflow
        usable = -OVERFLOW_RISK <= reward <= OVERFLOW_RISK or (math.isfinite(reward) and not _overflows(self.rewards, reward))
        if not (usable and finite):
            # a broken env or a policy that blew the simulation up: end the episode here, keep only finite numbers
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


class _Evaluation:
    """The bookkeeping of one :func:`run_episodes` call: which sub-environment runs which episode, the finished ones."""

    def __init__(self, n_episodes: int, cap: int) -> None:
        self.n_episodes, self.cap = n_episodes, cap
        self.started, self.n_steps = 0, 0
        self.tracks: list[_Track | None] = []
        self.finished: list[Episode] = []
        self.successes: list[Any] = []

    def start(self, observations: list[Any]) -> None:
        """The first episodes, from the env's reset observations."""
        self.tracks = [None] * len(observations)
        for i, observation in enumerate(observations):
            self.begin(i, observation)

    @property
    def running(self) -> bool:
        return len(self.finished) < self.started

    def begin(self, i: int, observation: Any) -> None:
        """Start the next episode on sub-environment ``i``, which idles once ``n_episodes`` have been started."""
        if self.started < self.n_episodes:
            self.tracks[i] = _Track(self.started, observation)
            self.started += 1
        else:
            self.tracks[i] = None

    def restart(self, ended: list[int], observations: list[Any]) -> None:
        """Start the next episodes on the sub-environments ``ended`` (ascending) whose episodes ended."""
        for i in ended:
            self.begin(i, observations[i])

    def end(self, track: _Track, end: EndReason, info: dict) -> None:
        self.finished.append(track.episode(end))
        success = info.get("is_success")
        if success is not None:
            self.successes.append(success)

    def result(self, stop_requested: bool = False) -> RolloutResult:
        done = sorted(self.finished, key=lambda ep: ep.index)
        stopped = stop_requested and len(done) < self.n_episodes
        return RolloutResult(done, stopped, stop_requested, self.n_steps, self.successes)


def _batch(observations: list[Any]) -> np.ndarray:
    """The observations of all sub-environments as one array, first axis = sub-environment."""
    if len(observations) == 1 and type(observations[0]) is np.ndarray:
        return observations[0][None]  # what np.asarray(observations) builds, as a view
    return np.asarray(observations)


def _report(
    on_step: StepHook, obs: list[Any], actions: Any, rewards: list[float], infos: list[Any], ended: list[int], n_steps: int
) -> object:
    """Call the step hook with this vector step: ``dones`` True at the sub-environments ``ended`` whose counted episode
    finished, an idle sub-environment's info an empty dict."""
    dones = np.zeros(len(obs), dtype=bool)
    dones[ended] = True
    infos = [{} if info is None else info for info in infos]
    return on_step(VecStep(np.asarray(obs), np.asarray(actions), np.array(rewards), dones, infos, n_steps))


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
    run = _Evaluation(n_episodes, max_episode_steps)
    if type(env) is DummyVecEnv:
        return _run_direct(env, act, run, on_step)
    return _run_vec_env(env, act, run, on_step)


def _run_direct(
    env: DummyVecEnv, act: Callable[[np.ndarray], np.ndarray], run: _Evaluation, on_step: StepHook | None
) -> RolloutResult:
    """A plain DummyVecEnv: its sub-environments are stepped directly, which skips the VecEnv's buffer copies and
    lets idle sub-environments wait instead of stepping. Resets follow DummyVecEnv's rules (seeded first reset
    through the VecEnv, unseeded resets after that)."""
    obs = list(env.reset())
    run.start(obs)
    return _run_each(env.envs, act, run, on_step, obs)


def _env_end(terminated: bool, info: dict[str, Any]) -> EndReason:
    """How the env ended an episode: ``"capped"`` where R2PO's :class:`EpisodeCap` cut it (it says so in ``info``)."""
    return "terminated" if terminated else ("capped" if info.get(CAPPED, False) else "truncated")


def _run_each(
    envs: Sequence[Any], act: Callable[[np.ndarray], np.ndarray], run: _Evaluation, on_step: StepHook | None, obs: list[Any]
) -> RolloutResult:
    """Step every busy sub-environment of ``envs`` (objects with gymnasium's ``step`` and ``reset``) on its own, from
    the observations ``obs``; an idle one waits."""
    tracks, cap = run.tracks, run.cap
    rewards: list[float] = [0.0] * len(envs)  # this step's (an idle sub-environment's stay 0.0 and None)
    infos: list[dict[str, Any] | None] = [None] * len(envs)
    while run.running:
        actions = act(_batch(obs))
        rows = np.asarray(actions).tolist()
        ended: list[int] = []
        n_steps = 0
        for i, track in enumerate(tracks):
            if track is None:  # idle: it waits
                rewards[i], infos[i] = 0.0, None
                continue
            n_steps += 1
            next_obs, reward, terminated, truncated, info = envs[i].step(actions[i])
            rewards[i] = reward = float(reward)
            if terminated or truncated:  # the env ended the episode: reset it, as DummyVecEnv's auto-reset does
                obs[i] = envs[i].reset()[0]
                info = {**info, "terminal_observation": next_obs, "TimeLimit.truncated": bool(truncated and not terminated)}
                end = track.add(rows[i], next_obs, reward, _env_end(terminated, info), cap)
            else:
                obs[i] = next_obs
                end = track.add(rows[i], next_obs, reward, None, cap)
                if end is not None:  # the cap or a non-finite value ended the episode, not the env: reset it
                    obs[i] = envs[i].reset()[0]
            infos[i] = info
            if end is not None:
                ended.append(i)
                run.end(track, end, info)
        run.n_steps += n_steps
        if ended:
            run.restart(ended, obs)
        if on_step is not None and not _report(on_step, obs, actions, rewards, infos, ended, n_steps):
            return run.result(stop_requested=True)
    return run.result()


class _SubEnv:
    """Sub-environment ``index`` of a VecEnv, stepped and reset alone through ``env_method`` (no auto-reset)."""

    def __init__(self, env: VecEnv, index: int) -> None:
        self.env, self.index = env, index

    def step(self, action: Any) -> Any:
        return self.env.env_method("step", action, indices=[self.index])[0]

    def reset(self) -> Any:
        return self.env.env_method("reset", indices=[self.index])[0]


def _run_vec_env(
    env: VecEnv, act: Callable[[np.ndarray], np.ndarray], run: _Evaluation, on_step: StepHook | None
) -> RolloutResult:
    """Any VecEnv, through the VecEnv API (auto-reset) while every sub-environment runs a counted episode. Once one is
    idle (no episode left to start), a bare VecEnv (``SubprocVecEnv``) steps only the busy ones, each alone
    (:class:`_SubEnv`), so an idle one starts no episode that its ``Monitor`` would log; through VecEnv wrappers (they
    must see every step) idle sub-environments keep stepping in lock-step."""
    obs = list(env.reset())
    run.start(obs)
    bare = not isinstance(env, VecEnvWrapper)
    while run.running:
        if bare and None in run.tracks:
            return _run_each([_SubEnv(env, i) for i in range(env.num_envs)], act, run, on_step, obs)
        actions = act(_batch(obs))
        rows = np.asarray(actions).tolist()
        new_obs, vec_rewards, vec_dones, infos = env.step(actions)
        assert isinstance(new_obs, np.ndarray)  # Box and Discrete observations (the policies' spaces)
        rewards, ended, cut = [float(r) for r in vec_rewards], list[int](), list[int]()
        for i, track in enumerate(run.tracks):
            obs[i] = new_obs[i]
            if track is None:
                continue
            next_obs, env_end = new_obs[i], None
            if vec_dones[i]:
                next_obs = infos[i].get("terminal_observation", new_obs[i])
                env_end = _env_end(not infos[i].get("TimeLimit.truncated", False), infos[i])
            end = track.add(rows[i], next_obs, rewards[i], env_end, run.cap)
            if end is not None:
                ended.append(i)
                run.end(track, end, infos[i])
                if env_end is None:
                    cut.append(i)
        run.n_steps += len(obs)
        for i in cut:
            obs[i] = _reset_one(env, i)
        run.restart(ended, obs)
        if on_step is not None and not _report(on_step, obs, actions, rewards, list(infos), ended, len(obs)):
            return run.result(stop_requested=True)
    return run.result()


def _reset_one(env: VecEnv, index: int) -> Any:
    """Reset sub-environment ``index`` of ``env`` alone (an episode the cap or a non-finite value cut)."""
    # past the pass-through wrappers (check_vec_env): a VecMonitor does not see the cut, and counts the cut
    # episode and the next one as one in its own statistics (R2PO's episodes are unaffected)
    result = env.env_method("reset", indices=[index])[0]
    return result[0] if isinstance(result, tuple) else result


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
