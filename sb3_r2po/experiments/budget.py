"""
Counting a run's training episodes and stopping it at its budget.

Training episodes are read from the ``Monitor`` of every sub-environment of the training env, after every
environment step (:class:`EpisodeBudget`): an episode counts when it ends, episodes ending in the same vector step are
ordered by sub-environment index. Baselines stop at the vector step in which the ``budget``-th episode ends (counting
all sub-environments together; sb3-contrib's ARS ignores a callback's ``False``, so it is stopped by
:class:`BudgetReached` at the same point). An R2PO run also appends its episodes to an :class:`EpisodeLog` after every
rollout, so that a run resumed from its checkpoint knows the returns of the episodes before the cut.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import StopTrainingOnMaxEpisodes
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper

from sb3_r2po.common.files import append_line, atomic_write


class BudgetReached(Exception):
    """Raised by :class:`EpisodeBudget` to stop an algorithm that ignores a callback's ``False`` (ARS)."""


def find_monitors(venv: VecEnv) -> list[Monitor]:
    """The ``Monitor`` of every sub-environment of a (possibly wrapped, e.g. ``VecNormalize``) ``DummyVecEnv``."""
    while isinstance(venv, VecEnvWrapper):
        venv = venv.venv
    if not isinstance(venv, DummyVecEnv):
        raise TypeError(f"the comparison needs a DummyVecEnv training env, got {type(venv).__name__}")
    monitors = []
    for env in venv.envs:
        inner = env
        while not isinstance(inner, Monitor):
            if not hasattr(inner, "env"):
                raise TypeError("a sub-environment of the training env has no Monitor wrapper")
            inner = inner.env
        monitors.append(inner)
    return monitors


class EpisodeLog:
    """
    A run's training episodes on disk, one ``[return, length]`` JSON line per episode, in order (``episodes.jsonl`` of
    the run directory). Lines are appended and synced; a last line a crash left without its newline is ignored.

    :param path: The file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> tuple[list[float], list[int]]:
        """The returns and lengths of the complete lines (none when there is no file)."""
        if not self.path.exists():
            return [], []
        returns: list[float] = []
        lengths: list[int] = []
        for line in self.path.read_bytes().split(b"\n")[:-1]:  # the last piece: empty, or a line cut by a crash
            value, length = json.loads(line)
            returns.append(float(value))
            lengths.append(int(length))
        return returns, lengths

    def keep(self, n: int) -> tuple[list[float], list[int]]:
        """
        Keep the first ``n`` episodes (the ones a checkpoint holds; a resumed run runs the later ones again).

        :raises RuntimeError: when the file holds fewer than ``n`` episodes.
        """
        returns, lengths = self.read()
        if len(returns) < n:
            raise RuntimeError(f"{self.path} holds {len(returns)} episodes, the checkpoint {n}: the run cannot resume")
        returns, lengths = returns[:n], lengths[:n]
        atomic_write(self.path, b"".join(self._line(r, n) for r, n in zip(returns, lengths, strict=True)))
        return returns, lengths

    def append(self, returns: list[float], lengths: list[int]) -> None:
        """Append episodes (nothing when there are none)."""
        if returns:
            append_line(self.path, b"".join(self._line(r, n) for r, n in zip(returns, lengths, strict=True)))

    @staticmethod
    def _line(value: float, length: int) -> bytes:
        return json.dumps([value, length]).encode("utf-8") + b"\n"


class EpisodeBudget(StopTrainingOnMaxEpisodes):
    """
    Record every training episode (return and length, from the training env's Monitors, in the order they end)
    and stop training at the step in which the ``budget``-th episode ends.

    Unlike its parent, ``max_episodes`` counts all sub-environments together (the parent counts it per env and
    stops after ``max_episodes * n_envs``). The Monitors are polled, not the ``dones`` of ``locals``, because
    ARS's evaluation loop calls ``on_step()`` without them.

    :param budget: The episode budget over all sub-environments.
    :param hard_stop: Raise :class:`BudgetReached` at the budget (for algorithms that ignore ``False``).
    :param progress: A tqdm bar advanced by one per recorded episode.
    :param returns: Returns of episodes run before (a resumed run's): they count towards the budget.
    :param lengths: Their lengths.
    :param log: Where to append the episodes after every rollout (``None``: nowhere).
    """

    def __init__(
        self,
        budget: int,
        hard_stop: bool = False,
        progress: Any = None,
        returns: list[float] | None = None,
        lengths: list[int] | None = None,
        log: EpisodeLog | None = None,
    ) -> None:
        super().__init__(max_episodes=budget)
        self.hard_stop = hard_stop
        self.progress = progress
        self.returns: list[float] = list(returns or [])
        self.lengths: list[int] = list(lengths or [])
        self.n_episodes = len(self.returns)
        self.log = log
        self._logged = len(self.returns)
        self._monitors: list[Monitor] = []
        self._seen: list[int] = []

    def _init_callback(self) -> None:
        self._total_max_episodes = self.max_episodes  # all sub-environments together
        self._monitors = find_monitors(self.training_env)
        self._seen = [len(m.get_episode_rewards()) for m in self._monitors]

    def poll(self) -> int:
        """Record the episodes that ended since the last call, by sub-environment index; return how many."""
        new = 0
        for i, monitor in enumerate(self._monitors):
            rewards, lengths = monitor.get_episode_rewards(), monitor.get_episode_lengths()
            for j in range(self._seen[i], len(rewards)):
                self.returns.append(float(rewards[j]))
                self.lengths.append(int(lengths[j]))
                new += 1
            self._seen[i] = len(rewards)
        return new

    def _on_step(self) -> bool:
        new = self.poll()
        self.n_episodes += new
        if self.progress is not None and new:
            self.progress.update(new)
        if self.n_episodes < self._total_max_episodes:
            return True
        if self.hard_stop:
            raise BudgetReached
        return False

    def _on_rollout_end(self) -> None:
        self.flush()

    def flush(self) -> None:
        """Append the episodes recorded since the last flush to the log."""
        if self.log is not None:
            self.log.append(self.returns[self._logged :], self.lengths[self._logged :])
            self._logged = len(self.returns)
