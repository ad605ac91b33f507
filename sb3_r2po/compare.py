"""Compare R2PO with Stable-Baselines3 baselines on one env, over seeds, at a matched budget of TRAINING episodes.

    python -m sb3_r2po.compare --llm example --env CartPole-v1 --methods r2po ppo ars --seeds 0 1 2 \\
        --budget 300 --out comparison

Every method is charged only for the episodes it trains on; evaluation episodes are not charged (the paper's
SB3 protocol charged 20 evaluation episodes after every training episode). Writes
to ``--out``:

- ``results.md``: the paper-format table (mean return over training, best, final, episodes until the rolling
  mean reaches the threshold; mean +- std over seeds), the definitions, the settings, the exact command and
  the package versions;
- ``curves.png``: learning curves (x = training episodes, the rolling mean, shaded +- std over seeds);
- ``runs.json``: every run's training-episode returns and lengths, in order, and the hyperparameters used.

How a run is built and measured, top to bottom in this file:

1. **Models** are built by RL Zoo's own ``ExperimentManager``, exactly as ``python -m sb3_r2po.zoo train --algo
   <algo> --env <env>`` builds them: the zoo's tuned ``hyperparams/<algo>.yml``, or ours in ``zoo_configs/``
   for the env ids the zoo lacks (:func:`sb3_r2po.zoo.resolve_train_args` picks the file). So ``n_envs``,
   ``normalize``, ``policy_kwargs``, ``env_wrapper``, ``env_kwargs``, ``frame_stack`` and schedules such as
   ``lin_7.3e-4`` mean what they mean in the zoo. R2PO (and its variants, e.g. ``props``) reads
   ``zoo_configs/r2po.yml`` (the paper's per-env settings; a variant with the reference's own settings for the env,
   the entry's ``variants:``, e.g. its warm-up, target and, on the Maze, a 100-step episode cap) with ``llm``,
   ``variant`` and ``max_episodes = budget`` set from the command line. The ``callback`` entries of the files (their
   own episode stops) are ignored: :class:`EpisodeBudget` replaces them.
2. **Training episodes** are read from the ``Monitor`` of every sub-environment of the training env, after every
   environment step (:class:`EpisodeBudget`): an episode counts when it ends, episodes ending in the same
   vector step are ordered by sub-environment index. ARS and R2PO run every episode on the training env, so
   all of their episodes are training episodes (R2PO's warm-up included).
3. **The budget**: baselines stop at the vector step in which the ``budget``-th episode ends (a
   ``StopTrainingOnMaxEpisodes`` counting all sub-environments together, not per env; sb3-contrib's ARS ignores
   a callback's ``False``, so it is stopped by an exception at the same point). With ``n_envs > 1`` that last
   step can end up to ``n_envs - 1`` more episodes: they are recorded as run (``episodes_run``) but left out
   of the curve and the statistics. R2PO stops itself when another K-episode evaluation no longer fits in
   ``max_episodes = budget``: it uses ``warmup + K * floor((budget - warmup) / K)`` episodes at most (exactly
   ``budget`` when ``budget - warmup`` is a multiple of K).
4. **Step horizon**: ``learn(total_timesteps=max(n_timesteps of the file, budget x episode cap))``, so the
   episode budget, not the step count, ends every run, with one exception: with ``n_envs > 1`` sub-environments
   stepping together and (nearly) every episode running to the cap, the last ``n_envs - 1`` episodes may not fit
   (up to ``(budget + n_envs - 1) x cap`` steps are needed). Such a run is reported with a ``RuntimeWarning``;
   raise ``n_timesteps`` in the file for it. (Widening the horizon by default would change the schedules, and so
   the documented results, of every multi-env baseline.) schedules (``lin_...``, DQN's exploration) anneal over
   that horizon.
5. **Statistics** per run (:func:`summarize`) and over seeds (:func:`report`); curves (:func:`plot_curves`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import platform
import shlex
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import StopTrainingOnMaxEpisodes
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper
from tqdm.auto import tqdm

from sb3_r2po.prompts import PROMPT_PRESETS, prompt_preset
from sb3_r2po.variants import VARIANTS
from sb3_r2po.zoo import ALGO_NAME, config_env_ids, config_file, register_r2po, resolve_train_args
from sb3_r2po.zoo.settings import apply_variant

BASELINES: dict[str, str] = {
    "ppo": "stable-baselines3",
    "a2c": "stable-baselines3",
    "dqn": "stable-baselines3",
    "sac": "stable-baselines3",
    "td3": "stable-baselines3",
    "trpo": "sb3-contrib",
    "ars": "sb3-contrib",
}
"""Baseline methods (the zoo's ``--algo`` names) and the package that implements them."""

R2PO_METHODS: tuple[str, ...] = tuple(VARIANTS)
"""R2PO and its variants (``r2po``, ``props``, ``props_plus``, ...): each is R2PO with that ``variant``."""

IGNORE_STOP = ("ars",)
"""Algorithms whose ``learn()`` ignores a callback's ``False``: they are stopped with :class:`BudgetReached`."""

WINDOW = 20
"""Default window of the rolling mean (best, final, episodes to threshold, curves)."""

VERSIONS = ("sb3-r2po", "stable-baselines3", "sb3-contrib", "rl_zoo3", "gymnasium", "torch", "numpy")
"""Packages whose versions are written next to the table."""


# --------------------------------------------------------------------------- 1. which hyperparameters


def hyperparams_file(algo: str, env_id: str) -> Path:
    """
    The hyperparameter file the zoo entry point would read for ``--algo algo --env env_id``: ours
    (``zoo_configs/<algo>.yml``) for R2PO and for the env ids we ship, the zoo's own ``hyperparams/<algo>.yml``
    otherwise.
    """
    resolved = resolve_train_args(["--algo", algo, "--env", env_id])
    if resolved[0] == "--conf-file":
        return Path(resolved[1])
    import rl_zoo3

    return Path(rl_zoo3.__file__).resolve().parent / "hyperparams" / f"{algo}.yml"


def zoo_entry(path: Path, env_id: str) -> dict[str, Any]:
    """The entry of a zoo hyperparameter file for ``env_id`` (the ``default`` entry when there is none), as the zoo
    picks it (Atari's ``atari`` entry is not handled: these are not Atari comparisons)."""
    import yaml

    with open(path) as file:
        entries = yaml.safe_load(file) or {}
    return dict(entries.get(env_id, entries.get("default", {})))


def r2po_entry(env_id: str, variant: str | None = None) -> dict[str, Any]:
    """
    The settings of ``variant`` for ``env_id`` in ``zoo_configs/r2po.yml`` (the ``default`` entry for other envs): the
    entry with the settings its ``variants:`` mapping gives ``variant`` (the reference's own settings for a baseline or
    ablation; :func:`sb3_r2po.zoo.settings.apply_variant`), without the mapping itself.

    :param env_id: The gymnasium id.
    :param variant: The R2PO variant; ``None``: the entry's own (``r2po``).
    """
    path = config_file(ALGO_NAME)
    if path is None:
        raise FileNotFoundError("zoo_configs/r2po.yml not found")
    return apply_variant(zoo_entry(path, env_id), variant)[0]


def is_tabular(env_id: str) -> bool:
    """Whether ``env_id``'s observations are ``Discrete`` (R2PO's ``Tabular`` policy) rather than a ``Box``."""
    import gymnasium as gym
    from gymnasium import spaces

    env = gym.make(env_id)
    try:
        return isinstance(env.observation_space, spaces.Discrete)
    finally:
        env.close()


def method_algo(method: str) -> str:
    """The zoo ``--algo`` of a method: ``r2po`` for R2PO and its variants, the method itself for a baseline."""
    if method in R2PO_METHODS:
        return ALGO_NAME
    if method in BASELINES:
        return method
    raise ValueError(f"unknown method {method!r}: choose from {', '.join([*R2PO_METHODS, *BASELINES])}")


def episode_cap(env_id: str, variant: str | None = None) -> tuple[int, bool]:
    """
    The episode length cap of an R2PO ``variant`` (``None``: R2PO's entry, the cap of the comparison's baselines) in
    ``zoo_configs/r2po.yml``: the ``max_episode_steps`` of its ``env_kwargs`` (which replaces the env's time limit;
    the reference's 100 steps of six Maze variants), else the env's own time limit, else its ``max_episode_steps``
    (default 1000), which every method then gets as a ``TimeLimit``.

    :return: ``(cap, added)``; ``added`` is True when the cap is not the env's (an env without a time limit of its own
        and no ``env_kwargs`` cap): the caller adds it as ``env_kwargs``.
    """
    import gymnasium as gym

    entry = r2po_entry(env_id, variant)
    from_kwargs = (entry.get("env_kwargs") or {}).get("max_episode_steps")
    if from_kwargs:
        return int(from_kwargs), False
    own = gym.spec(env_id).max_episode_steps
    if own:
        return int(own), False
    return int(entry.get("max_episode_steps", 1000)), True


def default_threshold(env_id: str) -> float | None:
    """The threshold of "episodes to threshold": the env's ``reward_threshold``, else R2PO's ``target_return``."""
    import gymnasium as gym

    threshold = gym.spec(env_id).reward_threshold
    if threshold is None:
        threshold = r2po_entry(env_id).get("target_return")
    return None if threshold is None else float(threshold)


def r2po_overrides(
    method: str,
    env_id: str,
    llm: str,
    budget: int,
    n_eval_episodes: int | None,
    warmup_episodes: int | None,
    prompts: str | None = None,
) -> dict[str, Any]:
    """
    The R2PO hyperparameters set on top of ``zoo_configs/r2po.yml``: the LLM, the variant, the budget and, when
    ``prompts`` names a preset (:func:`sb3_r2po.prompts.prompt_preset`), its nine prompt parameters. They win over the
    file's settings for the variant (its ``variants:`` entry), as ``--hyperparams`` do in the zoo.
    """
    overrides: dict[str, Any] = {"llm": llm, "variant": method, "max_episodes": budget}
    if prompts is not None:
        overrides.update(prompt_preset(prompts))
    if n_eval_episodes is not None:
        overrides["n_eval_episodes"] = n_eval_episodes
    if warmup_episodes is not None:
        overrides["warmup_episodes"] = warmup_episodes
    if env_id not in config_env_ids(ALGO_NAME) and is_tabular(env_id):
        overrides["policy"] = "Tabular"  # the default entry is MlpLinear (Box observations)
    return overrides


# --------------------------------------------------------------------------- 2. + 3. counting and stopping


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
    """

    def __init__(self, budget: int, hard_stop: bool = False, progress: Any = None) -> None:
        super().__init__(max_episodes=budget)
        self.hard_stop = hard_stop
        self.progress = progress
        self.returns: list[float] = []
        self.lengths: list[int] = []
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


# --------------------------------------------------------------------------- one run


@dataclass
class PreparedRun:
    """A model built by the zoo and ready to learn, with what :func:`finish_run` needs to measure it."""

    method: str
    algo: str
    seed: int
    budget: int
    model: Any
    horizon: int
    callback: EpisodeBudget
    bar: Any
    saved_hyperparams: dict[str, Any]
    conf: Path
    log_folder: tempfile.TemporaryDirectory
    start: float


def prepare_run(
    method: str,
    env_id: str,
    seed: int,
    budget: int,
    llm: str | None = None,
    n_eval_episodes: int | None = None,
    warmup_episodes: int | None = None,
    device: str = "cpu",
    progress: bool = False,
    prompts: str | None = None,
) -> PreparedRun:
    """Build one method's model on one seed with RL Zoo's ``ExperimentManager`` (arguments as :func:`run_seeds`)."""
    register_r2po()  # before the zoo's modules are imported (they share ALGOS)
    from rl_zoo3.exp_manager import ExperimentManager

    algo = method_algo(method)
    conf = hyperparams_file(algo, env_id)
    custom: dict[str, Any] | None = None
    if algo == ALGO_NAME:
        if llm is None:
            raise ValueError(f"method {method!r} needs an llm string")
        custom = r2po_overrides(method, env_id, llm, budget, n_eval_episodes, warmup_episodes, prompts)
    variant = method if algo == ALGO_NAME else None
    cap, add_cap = episode_cap(env_id, variant)  # an R2PO variant may have its own (the reference's Maze variants)
    env_kwargs = None
    if add_cap:  # an env without a time limit: every method gets the same cap (merged with the file's env_kwargs)
        entry = r2po_entry(env_id, variant) if algo == ALGO_NAME else zoo_entry(conf, env_id)
        env_kwargs = {**(entry.get("env_kwargs") or {}), "max_episode_steps": cap}

    start = time.perf_counter()
    log_folder = tempfile.TemporaryDirectory(prefix="sb3_r2po_compare_")
    manager = ExperimentManager(
        argparse.Namespace(),
        algo,
        env_id,
        log_folder.name,
        eval_freq=-1,  # no evaluation env: nothing but training episodes
        hyperparams=custom,
        env_kwargs=env_kwargs,
        seed=seed,
        log_interval=-2,  # no auto-logging
        verbose=0,
        device=device,
        config=str(conf),
    )
    with contextlib.redirect_stdout(io.StringIO()):  # the zoo prints the hyperparameters and paths
        setup = manager.setup_experiment()
    assert setup is not None
    model, saved_hyperparams = setup
    horizon = max(int(manager.n_timesteps), budget * cap)
    bar = tqdm(total=budget, desc=f"{method} seed {seed}", unit="ep", leave=False, disable=not progress)
    callback = EpisodeBudget(budget, hard_stop=algo in IGNORE_STOP, progress=bar)
    return PreparedRun(method, algo, seed, budget, model, horizon, callback, bar, saved_hyperparams, conf, log_folder, start)


def finish_run(run: PreparedRun) -> dict[str, Any]:
    """Close a run's env and log folder and return its measurements (see :func:`run_seeds`)."""
    run.bar.close()
    run.callback.poll()
    model = run.model
    assert model.env is not None
    model.env.close()
    run.log_folder.cleanup()
    if len(run.callback.returns) < run.budget and run.algo != ALGO_NAME:  # R2PO stops itself when K no longer fits
        warnings.warn(
            f"{run.method} seed {run.seed} ended after {len(run.callback.returns)} of {run.budget} training episodes "
            f"(its learn() horizon of {run.horizon} steps ran out first)",
            RuntimeWarning,
            stacklevel=2,
        )
    result: dict[str, Any] = {
        "method": run.method,
        "algo": run.algo,
        "seed": run.seed,
        "returns": run.callback.returns[: run.budget],
        "lengths": run.callback.lengths[: run.budget],
        "episodes_run": len(run.callback.returns),
        "timesteps": int(model.num_timesteps),
        "horizon": run.horizon,
        "wall_time_s": time.perf_counter() - run.start,
        "hyperparams": {key: _jsonable(value) for key, value in run.saved_hyperparams.items()},
        "hyperparams_file": str(run.conf),
    }
    if run.algo == ALGO_NAME:
        if model.episodes_used != result["episodes_run"]:
            raise RuntimeError(f"R2PO ran {model.episodes_used} episodes, the Monitor saw {result['episodes_run']}")
        result["iterations"] = int(model.iteration)
        result["llm_calls"] = int(model.llm_stats["calls"])
        result["llm_stats"] = {key: float(value) for key, value in model.llm_stats.items()}
        result["history"] = [
            {key: record[key] for key in ("kind", "mean_return", "n_episodes", "episodes")} for record in model.history
        ]
    return result


def run_seeds(
    method: str,
    env_id: str,
    seeds: Sequence[int],
    budget: int,
    llm: str | None = None,
    n_eval_episodes: int | None = None,
    warmup_episodes: int | None = None,
    device: str = "cpu",
    progress: bool = False,
    lockstep: bool = False,
    prompts: str | None = None,
) -> Iterator[dict[str, Any]]:
    """
    Train one method on each seed until the episode budget is spent; yield each run's training episodes as it ends.

    :param method: ``r2po`` (or a variant name such as ``props``) or a baseline (:data:`BASELINES`).
    :param env_id: The gymnasium env id.
    :param seeds: The seeds of the models and the envs.
    :param budget: Training episodes.
    :param llm: R2PO's ``llm`` string (required for R2PO methods).
    :param n_eval_episodes: R2PO's K (default: the hyperparameter file's).
    :param warmup_episodes: R2PO's warm-up episodes (default: the hyperparameter file's).
    :param device: Torch device of the models.
    :param progress: Show a per-episode progress bar.
    :param lockstep: Train the seeds together, their LLM calls sent as batches (:func:`sb3_r2po.lockstep.learn_in_lockstep`;
        R2PO methods only); each run's ``wall_time_s`` is then the shared one. Otherwise one seed after another.
    :param prompts: R2PO's prompt preset (:data:`sb3_r2po.prompts.PROMPT_PRESETS`); ``None``: the file's settings.
    :return: Per run: ``method``, ``algo``, ``seed``, ``returns`` and ``lengths`` (the first ``budget`` training episodes,
        in order), ``episodes_run``, ``timesteps``, ``horizon``, ``wall_time_s``, ``hyperparams`` (as the zoo read them)
        and ``hyperparams_file``; R2PO runs add ``iterations``, ``llm_calls``, ``llm_stats`` (R2PO's ``llm_stats``) and
        ``history`` (per history entry: ``kind``, ``mean_return``, ``n_episodes`` and ``episodes``, the episodes run when
        it was written).
    """

    def prepare(seed: int) -> PreparedRun:
        return prepare_run(method, env_id, seed, budget, llm, n_eval_episodes, warmup_episodes, device, progress, prompts)

    if lockstep:
        from sb3_r2po.lockstep import learn_in_lockstep

        if method not in R2PO_METHODS:
            raise ValueError(f"only R2PO methods train in lockstep, got {method!r}")
        runs = [prepare(seed) for seed in seeds]
        try:
            learn_in_lockstep([r.model for r in runs], max(r.horizon for r in runs), callbacks=[r.callback for r in runs])
        finally:
            results = [finish_run(r) for r in runs]
        yield from results
        return
    for seed in seeds:
        run = prepare(seed)
        try:
            run.model.learn(total_timesteps=run.horizon, callback=run.callback)
        except BudgetReached:
            pass
        finally:
            result = finish_run(run)
        yield result


def _jsonable(value: Any) -> Any:
    """A JSON-serialisable form of a hyperparameter value (its ``str`` when it is not one already)."""
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


# --------------------------------------------------------------------------- 5. statistics


def rolling_mean(returns: Sequence[float] | np.ndarray, window: int) -> np.ndarray:
    """The mean of the last ``window`` returns after every episode (fewer at the start: the mean so far)."""
    values = np.asarray(returns, dtype=np.float64)
    if values.size == 0:
        return values
    sums = np.cumsum(np.insert(values, 0, 0.0))
    ends = np.arange(1, values.size + 1)
    starts = np.maximum(0, ends - window)
    return (sums[ends] - sums[starts]) / (ends - starts)


def summarize(returns: Sequence[float], window: int = WINDOW, threshold: float | None = None) -> dict[str, Any]:
    """
    The table's figures for one run.

    - ``mean``: the mean return over all training episodes;
    - ``best``: the best ``window``-episode rolling mean (over full windows; the mean of all episodes when there are
      fewer than ``window``);
    - ``final``: the mean of the last ``window`` episodes;
    - ``to_threshold``: the number of training episodes after which the ``window``-episode rolling mean first
      reaches ``threshold`` (full windows only), ``None`` when it never does.
    """
    values = np.asarray(returns, dtype=np.float64)
    if values.size == 0:
        return {"mean": math.nan, "best": math.nan, "final": math.nan, "to_threshold": None}
    rolling = rolling_mean(values, window)
    full = rolling[window - 1 :] if values.size >= window else rolling[-1:]
    to_threshold = None
    if threshold is not None and values.size >= window:
        reached = np.flatnonzero(rolling[window - 1 :] >= threshold)
        to_threshold = int(reached[0]) + window if reached.size else None
    return {
        "mean": float(values.mean()),
        "best": float(full.max()),
        "final": float(values[-window:].mean()),
        "to_threshold": to_threshold,
    }


def _episodes_cell(counts: list[int]) -> str:
    return str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


def _threshold_cell(values: list[int | None]) -> str:
    reached = [v for v in values if v is not None]
    if not reached:
        return f"not reached (0/{len(values)})"
    return f"{mean_std([float(v) for v in reached])} ({len(reached)}/{len(values)})"


def table(runs: list[dict[str, Any]], window: int, threshold: float | None) -> str:
    """The markdown table: one row per method, mean +- std over its seeds."""
    methods = list(dict.fromkeys(r["method"] for r in runs))
    target = "n/a" if threshold is None else f"{threshold:g}"
    lines = [
        f"| method | training episodes | mean return over training | best ({window}-ep. rolling mean) "
        f"| final (last {window} ep.) | episodes to {target} (seeds reaching it) | wall time per run (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        stats = [summarize(r["returns"], window, threshold) for r in mine]
        cells = [
            method,
            _episodes_cell([len(r["returns"]) for r in mine]),
            mean_std([s["mean"] for s in stats]),
            mean_std([s["best"] for s in stats]),
            mean_std([s["final"] for s in stats]),
            "n/a" if threshold is None else _threshold_cell([s["to_threshold"] for s in stats]),
            mean_std([r["wall_time_s"] for r in mine]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- 5. curves


def plot_curves(
    runs: list[dict[str, Any]], path: Path, env_id: str, window: int, threshold: float | None, budget: int
) -> None:
    """
    Write the learning curves: per method, the ``window``-episode rolling mean of the training returns, mean over
    seeds (line) +- std over seeds (shaded), against training episodes; the threshold as a dashed line.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    methods = list(dict.fromkeys(r["method"] for r in runs))
    colors = [f"C{i}" for i in range(10)]
    for index, method in enumerate(methods):
        curves = [rolling_mean(r["returns"], window) for r in runs if r["method"] == method]
        length = max((c.size for c in curves), default=0)
        if length == 0:
            continue
        stacked = np.full((len(curves), length), np.nan)
        for row, curve in enumerate(curves):
            stacked[row, : curve.size] = curve
        counts = np.sum(~np.isnan(stacked), axis=0)
        mean = np.nansum(stacked, axis=0) / counts
        std = np.sqrt(np.nansum((stacked - mean) ** 2, axis=0) / counts)
        x = np.arange(1, length + 1)
        color = colors[index % len(colors)]
        ax.plot(x, mean, color=color, linewidth=2, label=f"{method} ({len(curves)} seeds)")
        ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)
    if threshold is not None:
        ax.axhline(threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {threshold:g}")
    ax.set_xlim(1, max(budget, 2))
    ax.set_xlabel("training episodes (evaluation episodes are not charged)")
    ax.set_ylabel(f"return, {window}-episode rolling mean")
    ax.set_title(f"{env_id}: mean +- std over seeds, budget {budget} training episodes")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.savefig(path)


# --------------------------------------------------------------------------- the report


def mean_std(values: Sequence[float]) -> str:
    """``"mean +- std"`` of ``values`` (population std), two decimals: one cell of the reports' tables."""
    arr = np.asarray(values, dtype=np.float64)
    return f"{arr.mean():.2f} +- {arr.std():.2f}"


def package_version(package: str) -> str:
    """The installed version of ``package``, or ``"not installed"``."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> str:
    """Python, the platform and the versions of :data:`VERSIONS`, on one line."""
    packages = ", ".join(f"{p} {package_version(p)}" for p in VERSIONS)
    return f"Python {platform.python_version()} on {platform.platform()} ({os.cpu_count()} CPUs); {packages}"


def report(result: dict[str, Any]) -> str:
    """The markdown report (``results.md``) of :func:`run_comparison`'s result."""
    s = result["settings"]
    runs = result["runs"]
    window, threshold = s["window"], s["threshold"]
    lines = [
        f"# {s['env']}: {', '.join(s['methods'])} at {s['budget']} training episodes",
        "",
        table(runs, window, threshold),
        "",
        "![learning curves](curves.png)",
        "",
        f"Mean +- std over seeds {s['seeds']} (population std). Every method is charged only for the episodes it "
        "trains on; evaluation episodes are not charged (unlike the paper's SB3 protocol, where 20 evaluation "
        "episodes after every training episode counted towards the budget).",
        "",
        "- **training episodes**: episodes each run trained on (R2PO: every episode it ran, warm-up included; it stops "
        "when another K-episode evaluation no longer fits). Baselines stop at the step in which the budget-th episode "
        "ends; with several envs, episodes ending in that same step beyond the budget are left out.",
        "- **mean return over training**: the mean return of all training episodes (for R2PO this includes the "
        "warm-up and rejected revisions; the paper's figure is the mean over iterations of the kept candidates).",
        f"- **best**: the best {window}-episode rolling mean of the training returns (the paper: the best iteration).",
        f"- **final**: the mean return of the last {window} training episodes.",
        f"- **episodes to {'n/a' if threshold is None else f'{threshold:g}'}**: the number of training episodes after "
        f"which the {window}-episode rolling mean first reaches the threshold ({s['threshold_source']}); mean +- std "
        "over the seeds that reached it, how many did in brackets.",
        f"- **wall time per run**: building the model and training, on this machine ({s['torch_threads']} torch thread(s)).",
        "",
        "## Settings",
        "",
        "| method | algorithm (hyperparameter file) | `learn()` horizon | hyperparameters |",
        "|---|---|---|---|",
    ]
    for method in s["methods"]:
        first = next(r for r in runs if r["method"] == method)
        shown = ", ".join(f"{k}={v}" for k, v in first["hyperparams"].items() if k not in ("callback",))
        file = _short(first["hyperparams_file"])
        lines.append(f"| {method} | {first['algo']} (`{file}`) | {first['horizon']:,} steps | {shown} |")
    own_caps = s.get("variant_episode_caps") or {}
    own = "".join(
        f"; {m} {c} steps (its own cap in the reference, `variants:` of `zoo_configs/r2po.yml`)" for m, c in own_caps.items()
    )
    lines += [
        "",
        f"Episode cap: {s['episode_cap']} steps ({s['episode_cap_source']}){own}. Step horizon of `learn()`: the file's "
        f"`n_timesteps` or budget x episode cap, whichever is larger (schedules anneal over it; the budget ends every "
        "run). The files' `callback` entries are replaced by the episode budget.",
    ]
    if any(m in R2PO_METHODS for m in s["methods"]):
        preset = s.get("prompts")
        prompts = f"the prompt preset `{preset}`" if preset else "the prompt settings of the hyperparameter file"
        lines += ["", f"R2PO's LLM: `{s['llm']}`, with {prompts}."]
        if s.get("lockstep"):
            lines += [
                "",
                "The seeds of each R2PO method trained together (`--lockstep`), their LLM calls sent as batches; each "
                "seed's wall time is the shared one.",
            ]
        if str(s["llm"]).split(":")[0] == "example":
            lines += [
                "",
                "**`example` is not an LLM**: it is `ExampleLLM`, a deterministic seeded local search that speaks "
                "R2PO's prompt and reply format. These R2PO numbers say nothing about what a language model achieves.",
            ]
    lines += [
        "",
        f"Total wall time: {result['wall_time_s']:.0f} s.",
        "",
        "## Reproduce",
        "",
        "```bash",
        result["command"],
        "```",
        "",
        result["versions"],
    ]
    return "\n".join(lines) + "\n"


def _short(path: str) -> str:
    """A hyperparameter file path relative to the repository or the zoo package, for the report."""
    p = Path(path)
    return f"{p.parent.name}/{p.name}"


# --------------------------------------------------------------------------- the comparison


def run_comparison(
    env_id: str,
    methods: Sequence[str],
    seeds: Sequence[int],
    budget: int,
    llm: str | None = None,
    window: int = WINDOW,
    threshold: float | None = None,
    n_eval_episodes: int | None = None,
    warmup_episodes: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    command: str = "",
    lockstep: bool = False,
    prompts: str | None = None,
) -> dict[str, Any]:
    """
    Run every method on every seed (method by method; with ``lockstep`` the seeds of an R2PO method train together,
    their LLM calls batched, see :mod:`sb3_r2po.lockstep`) and return ``settings``, ``runs`` (see :func:`run_seeds`),
    ``command``, ``versions`` and ``wall_time_s``.
    """
    import sb3_r2po  # noqa: F401  (registers the custom envs)

    for method in methods:
        method_algo(method)  # fail on an unknown method before anything runs
    if llm is None and any(m in R2PO_METHODS for m in methods):
        raise ValueError("R2PO methods need an llm string (--llm)")
    if prompts is not None:
        prompt_preset(prompts)  # fail on an unknown preset before anything runs
    threshold_source = "given"
    if threshold is None:
        threshold = default_threshold(env_id)
        threshold_source = "the env's reward_threshold, else R2PO's target_return"
    for method in dict.fromkeys(m for m in methods if m in R2PO_METHODS):
        entry = r2po_entry(env_id, method)  # each variant's own warm-up (the reference's settings)
        k = n_eval_episodes if n_eval_episodes is not None else int(entry.get("n_eval_episodes", 20))
        warmup = warmup_episodes if warmup_episodes is not None else int(entry.get("warmup_episodes", 20))
        used = min(budget, warmup) + k * (max(0, budget - warmup) // k)
        if used != budget:
            print(
                f"note: {method} will use {used} of the {budget} episodes (warm-up {warmup}, then K={k} per "
                "evaluation); for an exact match choose budget - warm-up as a multiple of K",
                file=sys.stderr,
            )
    cap, added = episode_cap(env_id)
    variant_caps = {m: episode_cap(env_id, m)[0] for m in dict.fromkeys(methods) if m in R2PO_METHODS}
    settings = {
        "env": env_id,
        "methods": list(methods),
        "seeds": list(seeds),
        "budget": budget,
        "llm": llm,
        "window": window,
        "threshold": threshold,
        "threshold_source": threshold_source,
        "episode_cap": cap,
        "episode_cap_source": "R2PO's max_episode_steps, added as a TimeLimit" if added else "the env's time limit",
        "variant_episode_caps": {m: c for m, c in variant_caps.items() if c != cap},
        "n_eval_episodes": n_eval_episodes,
        "warmup_episodes": warmup_episodes,
        "torch_threads": _torch_threads(),
        "lockstep": lockstep,
        "prompts": prompts,
    }
    start = time.perf_counter()
    runs: list[dict[str, Any]] = []
    with tqdm(total=len(methods) * len(seeds), desc="runs", unit="run", disable=not progress) as bar:
        for method in methods:
            together = lockstep and method in R2PO_METHODS and len(seeds) > 1
            for run in run_seeds(
                method, env_id, seeds, budget, llm, n_eval_episodes, warmup_episodes, device, progress, together, prompts
            ):
                stats = summarize(run["returns"], window, threshold)
                bar.write(
                    f"{method} seed {run['seed']}: {len(run['returns'])} episodes, mean {stats['mean']:.2f}, "
                    f"final {stats['final']:.2f}, {run['wall_time_s']:.1f} s",
                    file=sys.stderr,
                )
                bar.update(1)
                runs.append(run)
    return {
        "settings": settings,
        "runs": runs,
        "command": command,
        "versions": versions(),
        "wall_time_s": time.perf_counter() - start,
    }


def _torch_threads() -> int:
    import torch as th

    return int(th.get_num_threads())


def write_outputs(result: dict[str, Any], out: Path) -> None:
    """Write ``results.md``, ``curves.png`` and ``runs.json`` to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    s = result["settings"]
    plot_curves(result["runs"], out / "curves.png", s["env"], s["window"], s["threshold"], s["budget"])
    (out / "runs.json").write_text(json.dumps(result, indent=1))
    (out / "results.md").write_text(report(result))


def main(argv: list[str] | None = None) -> None:
    """``python -m sb3_r2po.compare ...`` (``--help`` for the options)."""
    parser = argparse.ArgumentParser(
        prog="python -m sb3_r2po.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="CartPole-v1", help="gymnasium env id")
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["r2po", "ppo", "ars"],
        choices=[*R2PO_METHODS, *BASELINES],
        metavar="METHOD",
        help=f"R2PO or a variant ({', '.join(R2PO_METHODS)}) and baselines ({', '.join(BASELINES)})",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--budget", type=int, default=300, help="training episodes per run (the paper: 4000 + R2PO's 20 warm-up episodes)"
    )
    parser.add_argument("--llm", default=None, help="R2PO's llm string (example[:seed], a server URL, ...)")
    parser.add_argument("--n-eval-episodes", type=int, default=None, help="R2PO's K (default: zoo_configs/r2po.yml)")
    parser.add_argument("--warmup-episodes", type=int, default=None, help="R2PO's warm-up (default: zoo_configs/r2po.yml)")
    parser.add_argument(
        "--prompts",
        default=None,
        choices=sorted(PROMPT_PRESETS),
        help="R2PO's prompt preset (sb3_r2po.prompts.PROMPT_PRESETS; default: the settings of zoo_configs/r2po.yml)",
    )
    parser.add_argument("--window", type=int, default=WINDOW, help="rolling-mean window")
    parser.add_argument("--threshold", type=float, default=None, help="default: reward_threshold, else R2PO's target")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch CPU threads during the runs")
    parser.add_argument("--out", default="comparison", help="output directory")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--lockstep",
        action="store_true",
        help="train the seeds of each R2PO method together, their LLM calls sent as batches (GPU or server backends)",
    )
    args = parser.parse_args(argv)
    if args.budget < 1 or args.window < 1:
        parser.error("--budget and --window must be >= 1")
    if args.llm is None and any(m in R2PO_METHODS for m in args.methods):
        parser.error("R2PO methods need --llm")

    import torch as th

    threads = th.get_num_threads()
    th.set_num_threads(args.torch_threads)  # tiny networks: one thread is faster, and far faster on a busy machine
    command = "python -m sb3_r2po.compare " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    try:
        result = run_comparison(
            args.env,
            args.methods,
            args.seeds,
            args.budget,
            llm=args.llm,
            window=args.window,
            threshold=args.threshold,
            n_eval_episodes=args.n_eval_episodes,
            warmup_episodes=args.warmup_episodes,
            device=args.device,
            progress=not args.no_progress,
            command=command,
            lockstep=args.lockstep,
            prompts=args.prompts,
        )
    finally:
        th.set_num_threads(threads)
    out = Path(args.out)
    write_outputs(result, out)
    print((out / "results.md").read_text())


if __name__ == "__main__":
    main()
