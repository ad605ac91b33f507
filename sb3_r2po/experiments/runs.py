"""
A run as one value (:class:`RunSpec`), what it measured (:class:`RunResult`), and building and running it
(:func:`run_one`): the one path every runner (``compare``, ``ablate``, the benchmarks, the executors) builds models by.

How a run is built and measured:

1. **Models** are built by RL Zoo's own ``ExperimentManager``, exactly as ``python -m sb3_r2po.zoo train --algo
   <algo> --env <env>`` builds them, from the hyperparameter file :func:`~sb3_r2po.experiments.configs.hyperparams_file`
   picks. So ``n_envs``, ``normalize``, ``policy_kwargs``, ``env_wrapper``, ``env_kwargs``, ``frame_stack`` and
   schedules such as ``lin_7.3e-4`` mean what they mean in the zoo. R2PO (and its variants) reads
   ``sb3_r2po/zoo/configs/r2po.yml`` with ``llm``, ``variant``, ``max_episodes = budget`` and the spec's ``settings`` set
   on top.
   The ``callback`` entries of the files are ignored: :class:`~sb3_r2po.experiments.budget.EpisodeBudget` replaces them.
2. **Training episodes** are read from the ``Monitor`` of every sub-environment of the training env
   (:class:`~sb3_r2po.experiments.budget.EpisodeBudget`). ARS and R2PO run every episode on the training env, so all
   of their episodes are training episodes (R2PO's warm-up included).
3. **The budget**: baselines stop at the vector step in which the ``budget``-th episode ends; with ``n_envs > 1`` that
   step can end up to ``n_envs - 1`` more episodes: they are recorded as run (``episodes_run``) but left out of
   ``returns``. R2PO stops itself when another K-episode evaluation no longer fits in ``max_episodes = budget``.
4. **Step horizon**: ``learn(total_timesteps=max(n_timesteps of the file, budget x episode cap))``, so the episode
   budget, not the step count, ends every run (a baseline run whose horizon ran out first is reported with a
   ``RuntimeWarning``; raise ``n_timesteps`` in the file for it). Schedules anneal over that horizon.
5. **Resuming**: an R2PO run keeps its checkpoint in ``run_dir/checkpoint`` and its training episodes in
   ``run_dir/episodes.jsonl``; :func:`run_one` on a directory that holds a checkpoint of an interrupted attempt loads
   it and continues, so no episode is charged twice and the history equals the uninterrupted run's.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from tqdm.auto import tqdm

from sb3_r2po.experiments.budget import BudgetReached, EpisodeBudget, EpisodeLog
from sb3_r2po.experiments.configs import (
    IGNORE_STOP,
    R2PO_METHODS,
    episode_cap,
    hyperparams_file,
    method_algo,
    r2po_entry,
    r2po_overrides,
    zoo_entry,
)
from sb3_r2po.zoo import ALGO_NAME, register_r2po

ATTEMPT_LOCK = ".attempt.lock"
"""The lock file in a run directory: an attempt of the run holds it from :func:`prepare_run`, before it reads the
directory, to :func:`finish_run`, so two attempts of one run (two commands on one results store, a Ray task and its
retry) never work on its directory at once."""

CHECKPOINT = "checkpoint"
"""The sub-directory of a run directory that is an R2PO run's ``checkpoint_dir``."""

EPISODES = "episodes.jsonl"
"""The file of a run directory holding an R2PO run's training episodes (:class:`EpisodeLog`)."""

HISTORY_KEYS = ("kind", "mean_return", "n_episodes", "episodes")
"""What :attr:`RunResult.history` keeps of each of R2PO's history entries (the whole history is in the checkpoint)."""

TIMING = ("wall_time_s", "resumed")
"""Fields of :class:`RunResult` that depend on the machine or on interruptions, not on the run's outcome."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _canonical(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples become lists): what a spec's settings hold after a round trip."""
    return json.loads(json.dumps(value))


@dataclass(frozen=True)
class RunSpec:
    """
    One run of a grid: an env, a method, a seed, an episode budget, and for R2PO methods the llm string and settings.

    :param env_id: The gymnasium id.
    :param method: ``r2po``, a variant name (``props``, ``rep_traj``, ...) or a baseline (``ppo``, ``ars``, ...).
    :param seed: The seed of the model and the env.
    :param budget: Training episodes.
    :param llm: The llm string (R2PO methods only; ``None`` for a baseline, whatever is given). When a built backend
        answers the run (:func:`run_one`'s ``llm``), the string names it.
    :param settings: R2PO keyword overrides on top of ``sb3_r2po/zoo/configs/r2po.yml`` (JSON-able values), as ``(key, value)``
        pairs sorted by key; a mapping is accepted and sorted.
    """

    env_id: str
    method: str
    seed: int
    budget: int
    llm: str | None = None
    settings: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        method_algo(self.method)  # an unknown method fails here, before anything runs
        items = self.settings.items() if isinstance(self.settings, Mapping) else self.settings
        settings = tuple(sorted(((str(key), _canonical(value)) for key, value in items), key=lambda item: item[0]))
        object.__setattr__(self, "settings", settings)
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "budget", int(self.budget))
        if self.method not in R2PO_METHODS:
            object.__setattr__(self, "llm", None)
        if self.budget < 1:
            raise ValueError(f"a run's budget must be >= 1 episode, got {self.budget}")

    def __hash__(self) -> int:  # settings may hold lists and dicts (JSON values): hashed through the run id
        return hash(self.run_id)

    @property
    def is_r2po(self) -> bool:
        """Whether the method is R2PO or one of its variants."""
        return self.method in R2PO_METHODS

    @property
    def settings_dict(self) -> dict[str, Any]:
        """:attr:`settings` as a dict."""
        return dict(self.settings)

    @property
    def run_id(self) -> str:
        """Stable, unique and filesystem-safe: the readable fields, then a hash of the whole spec."""
        digest = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode("utf-8")).hexdigest()[:12]
        readable = _UNSAFE.sub("_", f"{self.env_id}-{self.method}-s{self.seed}-b{self.budget}")
        return f"{readable}-{digest}"

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-able data (``settings`` as a dict)."""
        return {
            "env_id": self.env_id,
            "method": self.method,
            "seed": self.seed,
            "budget": self.budget,
            "llm": self.llm,
            "settings": self.settings_dict,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        """The spec of :meth:`to_dict`'s data."""
        return cls(
            env_id=str(data["env_id"]),
            method=str(data["method"]),
            seed=int(data["seed"]),
            budget=int(data["budget"]),
            llm=data.get("llm"),
            settings=tuple(dict(data.get("settings") or {}).items()),
        )


@dataclass
class RunResult:
    """
    What a run measured. JSON round trip exact (:meth:`to_dict`, :meth:`from_dict`).

    :param spec: The run.
    :param algo: The zoo ``--algo`` it was built as.
    :param returns: Training-episode returns, in the order the episodes ended (the first ``budget``).
    :param lengths: Their lengths.
    :param episodes_run: Episodes run (a multi-env baseline's last step may end a few beyond the budget).
    :param timesteps: Environment steps run.
    :param horizon: The ``learn()`` step horizon.
    :param hyperparams: The hyperparameters as the zoo read them (JSON-able; ``checkpoint_dir`` left out).
    :param hyperparams_file: The file they came from.
    :param wall_time_s: Building and training, in seconds (a lockstep run's: the shared time; a resumed run's: the
        last attempt's).
    :param iterations: R2PO's iterations (``None`` for a baseline).
    :param llm_calls: R2PO's LLM calls.
    :param llm_stats: R2PO's ``llm_stats``.
    :param history: Per history entry of R2PO: ``kind``, ``mean_return``, ``n_episodes`` and ``episodes`` (the episodes
        run when it was written).
    :param iteration_returns: The mean return of each iteration's kept candidate (the warm-up left out).
    :param history_file: The whole history (R2PO's ``history.json``), relative to the run directory.
    :param resumed: How many times the run was resumed from its checkpoint.
    """

    spec: RunSpec
    algo: str
    returns: list[float]
    lengths: list[int]
    episodes_run: int
    timesteps: int
    horizon: int
    hyperparams: dict[str, Any]
    hyperparams_file: str
    wall_time_s: float
    iterations: int | None = None
    llm_calls: int | None = None
    llm_stats: dict[str, float] | None = None
    history: list[dict[str, Any]] | None = None
    iteration_returns: list[float] | None = None
    history_file: str | None = None
    resumed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-able data (the spec as :meth:`RunSpec.to_dict`)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["spec"] = self.spec.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        """The result of :meth:`to_dict`'s data."""
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["spec"] = RunSpec.from_dict(data["spec"])
        return cls(**values)

    def outcome(self) -> dict[str, Any]:
        """:meth:`to_dict` without what depends on the machine or on interruptions (:data:`TIMING`, LLM seconds, the
        hyperparameter file's location): two runs of one spec with a deterministic LLM have equal outcomes."""
        data = {key: value for key, value in self.to_dict().items() if key not in TIMING and key != "hyperparams_file"}
        if self.llm_stats is not None:
            data["llm_stats"] = {key: value for key, value in self.llm_stats.items() if key != "seconds"}
        return data

    def record(self) -> dict[str, Any]:
        """The run as ``python -m sb3_r2po.compare`` writes it to ``runs.json``."""
        record: dict[str, Any] = {
            "env": self.spec.env_id,
            "method": self.spec.method,
            "algo": self.algo,
            "seed": self.spec.seed,
            "returns": self.returns,
            "lengths": self.lengths,
            "episodes_run": self.episodes_run,
            "timesteps": self.timesteps,
            "horizon": self.horizon,
            "wall_time_s": self.wall_time_s,
            "hyperparams": self.hyperparams,
            "hyperparams_file": self.hyperparams_file,
        }
        if self.spec.is_r2po:
            record.update(iterations=self.iterations, llm_calls=self.llm_calls, llm_stats=self.llm_stats)
            record.update(history=self.history, iteration_returns=self.iteration_returns)
        record["run_id"] = self.spec.run_id
        return record

    def full_history(self, run_dir: str | Path) -> list[dict[str, Any]]:
        """R2PO's whole history (its ``history.json`` in ``run_dir``); empty for a baseline."""
        if self.history_file is None:
            return []
        return json.loads((Path(run_dir) / self.history_file).read_text(encoding="utf-8"))


Report = Callable[[RunResult], None]
"""Called by an executor with every result as it is saved (the command lines print a line)."""


@dataclass
class PreparedRun:
    """A model built by the zoo (or resumed from its checkpoint) and ready to learn, with what :func:`finish_run`
    needs to measure it."""

    spec: RunSpec
    algo: str
    model: Any
    horizon: int
    callback: EpisodeBudget
    bar: Any
    saved_hyperparams: dict[str, Any]
    conf: Path
    log_folder: tempfile.TemporaryDirectory
    start: float
    resumed: bool = False
    run_dir: Path | None = None
    lock: FileLock | None = None

    @property
    def steps_left(self) -> int:
        """The ``total_timesteps`` to pass to ``learn()``: the horizon less the steps a resumed run has run."""
        return max(1, self.horizon - int(self.model.num_timesteps)) if self.resumed else self.horizon

    def learn(self) -> None:
        """Train the model until its budget is spent (in this thread)."""
        try:
            self.model.learn(total_timesteps=self.steps_left, callback=self.callback, reset_num_timesteps=not self.resumed)
        except BudgetReached:
            pass


def _jsonable(value: Any) -> Any:
    """A JSON-serialisable form of a hyperparameter value (its ``str`` when it is not one already)."""
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


def _manager(
    spec: RunSpec, algo: str, conf: Path, run_dir: Path | None, device: str, log_folder: str, backend: bool
) -> tuple[Any, int]:
    """The zoo's ``ExperimentManager`` of ``spec`` (R2PO's overrides as the zoo's ``--hyperparams``; ``llm=None`` when
    a ``backend`` object will answer) and the episode cap."""
    from rl_zoo3.exp_manager import ExperimentManager

    settings = spec.settings_dict
    custom: dict[str, Any] | None = None
    variant = spec.method if algo == ALGO_NAME else None
    env_kwargs: dict[str, Any] | None = None
    if algo == ALGO_NAME:
        if spec.llm is None:
            raise ValueError(f"method {spec.method!r} needs an llm string")
        custom = {**r2po_overrides(spec.method, spec.env_id, spec.llm, spec.budget, None, None), **settings}
        if backend:  # the object answers (set_llm); the spec's llm names it in the record
            custom["llm"] = None
        if run_dir is not None:
            custom["checkpoint_dir"] = str(run_dir / CHECKPOINT)
    cap, add_cap = episode_cap(spec.env_id, variant)  # an R2PO variant may have its own (the reference's Maze variants)
    if add_cap:  # an env without a time limit: every method gets the same cap (merged with the file's env_kwargs)
        cap = int(settings.get("max_episode_steps", cap))  # R2PO's own cap, when the spec sets it
        entry = r2po_entry(spec.env_id, variant) if algo == ALGO_NAME else zoo_entry(conf, spec.env_id)
        own = settings.get("env_kwargs") or entry.get("env_kwargs") or {}  # the spec's replace the file's, as in the zoo
        env_kwargs = {**own, "max_episode_steps": cap}
    return ExperimentManager(
        argparse.Namespace(),
        algo,
        spec.env_id,
        log_folder,
        eval_freq=-1,  # no evaluation env: nothing but training episodes
        hyperparams=custom,
        env_kwargs=env_kwargs,
        seed=spec.seed,
        log_interval=-2,  # no auto-logging
        verbose=0,
        device=device,
        config=str(conf),
    ), cap


class AttemptInProgressError(RuntimeError):
    """Another attempt of the same run held the run directory's :data:`ATTEMPT_LOCK` for longer than this one waits."""


def hold_attempt(spec: RunSpec, directory: Path, wait_s: float = 0.0) -> FileLock:
    """
    Take ``directory``'s :data:`ATTEMPT_LOCK` for an attempt of ``spec`` (the directory is created).

    :param spec: The run.
    :param directory: Its run directory.
    :param wait_s: How long to wait for another attempt to release it.
    :raises AttemptInProgressError: when another attempt holds it for longer.
    """
    directory.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(directory / ATTEMPT_LOCK), timeout=wait_s, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        waited = f" for more than {wait_s:g} s" if wait_s > 0 else ""
        raise AttemptInProgressError(
            f"run {spec.run_id}: another attempt held {directory / ATTEMPT_LOCK}{waited} (another command working on "
            "the same results store, a Ray task of an earlier command still running, or a lost node whose lock the "
            "shared storage has not released yet); run the command again once it has ended"
        ) from None
    return lock


def prepare_run(
    spec: RunSpec,
    run_dir: str | Path | None = None,
    llm: Any | None = None,
    device: str = "cpu",
    progress: bool = False,
    lock_wait_s: float = 0.0,
) -> PreparedRun:
    """
    Build one run's model with RL Zoo's ``ExperimentManager``; an R2PO run whose ``run_dir/checkpoint`` holds a
    ``model.zip`` is loaded from it instead (on the env the zoo built), with the episodes it had run. The run
    directory's :data:`ATTEMPT_LOCK` is held from here to :func:`finish_run`.

    :param spec: The run.
    :param run_dir: The run directory (``None``: no checkpoint, nothing to resume).
    :param llm: An already-built backend answering the R2PO run (``None``: the spec's llm string).
    :param device: Torch device of the model.
    :param progress: Show a per-episode progress bar.
    :param lock_wait_s: How long to wait for another attempt of the run to release the directory's lock.
    :raises AttemptInProgressError: when another attempt holds it for longer.
    """
    directory = None if run_dir is None else Path(run_dir)
    lock = None if directory is None else hold_attempt(spec, directory, lock_wait_s)
    try:
        run = _prepare(spec, directory, llm, device, progress)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    run.lock = lock
    return run


def _prepare(spec: RunSpec, directory: Path | None, llm: Any | None, device: str, progress: bool) -> PreparedRun:
    """:func:`prepare_run` once the run directory, if any, is held."""
    import sb3_r2po  # noqa: F401  (registers the custom envs)

    register_r2po()  # before the zoo's modules are imported (they share ALGOS)
    algo = method_algo(spec.method)
    conf = hyperparams_file(algo, spec.env_id)
    start = time.perf_counter()
    log_folder = tempfile.TemporaryDirectory(prefix="sb3_r2po_run_")
    manager, cap = _manager(spec, algo, conf, directory, device, log_folder.name, llm is not None)
    with contextlib.redirect_stdout(io.StringIO()):  # the zoo prints the hyperparameters and paths
        setup = manager.setup_experiment()
    assert setup is not None
    model, saved_hyperparams = setup
    horizon = max(int(manager.n_timesteps), spec.budget * cap)
    returns: list[float] = []
    lengths: list[int] = []
    log = None
    resumed = False
    if algo == ALGO_NAME and directory is not None:
        log = EpisodeLog(directory / EPISODES)
        checkpoint = directory / CHECKPOINT / "model.zip"
        if checkpoint.exists():
            model = _resume(model, checkpoint, spec.llm if llm is None else llm, device)
            returns, lengths = log.keep(model.episodes_used)
            resumed = True
        else:  # nothing to resume: an attempt cut before its first history entry starts over
            shutil.rmtree(directory / CHECKPOINT, ignore_errors=True)
            log.keep(0)
    if algo == ALGO_NAME and llm is not None and not resumed:
        model.set_llm(llm)
    bar = tqdm(
        total=spec.budget, initial=len(returns), desc=f"{spec.method} seed {spec.seed}", unit="ep", leave=False,
        disable=not progress,
    )  # fmt: skip
    callback = EpisodeBudget(spec.budget, algo in IGNORE_STOP, bar, returns, lengths, log)
    hyperparams = {key: _jsonable(value) for key, value in saved_hyperparams.items() if key != "checkpoint_dir"}
    if algo == ALGO_NAME:
        hyperparams["llm"] = spec.llm
    return PreparedRun(spec, algo, model, horizon, callback, bar, _canonical(hyperparams), conf, log_folder, start, resumed,
                       directory)  # fmt: skip


def _resume(fresh: Any, checkpoint: Path, llm: Any, device: str) -> Any:
    """The model of ``checkpoint`` on ``fresh``'s env (the zoo's), answered by ``llm``."""
    from sb3_r2po import R2PO

    env = fresh.get_env()
    return R2PO.load(checkpoint, env=env, llm=llm, device=device, checkpoint_dir=str(checkpoint.parent))


def finish_run(run: PreparedRun) -> RunResult:
    """Close a run's env and log folder, release its run directory, and return its measurements."""
    try:
        return _measure(run)
    finally:
        if run.lock is not None:
            run.lock.release()


def _measure(run: PreparedRun) -> RunResult:
    """:func:`finish_run` before the run directory is released."""
    run.bar.close()
    run.callback.poll()
    run.callback.flush()
    model = run.model
    assert model.env is not None
    model.env.close()
    run.log_folder.cleanup()
    spec, budget = run.spec, run.spec.budget
    episodes = len(run.callback.returns)
    if episodes < budget and run.algo != ALGO_NAME:  # R2PO stops itself when K no longer fits
        warnings.warn(
            f"{spec.method} seed {spec.seed} ended after {episodes} of {budget} training episodes "
            f"(its learn() horizon of {run.horizon} steps ran out first)",
            RuntimeWarning,
            stacklevel=2,
        )
    result = RunResult(
        spec=spec,
        algo=run.algo,
        returns=run.callback.returns[:budget],
        lengths=run.callback.lengths[:budget],
        episodes_run=episodes,
        timesteps=int(model.num_timesteps),
        horizon=run.horizon,
        hyperparams=run.saved_hyperparams,
        hyperparams_file=str(run.conf),
        wall_time_s=time.perf_counter() - run.start,
        resumed=int(run.resumed),
    )
    if run.algo == ALGO_NAME:
        if model.episodes_used != episodes:
            raise RuntimeError(f"R2PO ran {model.episodes_used} episodes, the Monitor saw {episodes}")
        history = model.history
        result.iterations = int(model.iteration)
        result.llm_calls = int(model.llm_stats["calls"])
        result.llm_stats = {key: float(value) for key, value in model.llm_stats.items()}
        result.history = [{key: record[key] for key in HISTORY_KEYS} for record in history]
        result.iteration_returns = [float(r["mean_return"]) for r in history if r["kind"] != "warmup"]
        if run.run_dir is not None and (run.run_dir / CHECKPOINT / "history.json").exists():  # none without an entry
            result.history_file = f"{CHECKPOINT}/history.json"
    return result


def run_one(
    spec: RunSpec,
    run_dir: str | Path,
    llm: Any | None = None,
    device: str = "cpu",
    progress: bool = False,
    lock_wait_s: float = 0.0,
) -> RunResult:
    """
    Build the model through the one path (the zoo's hyperparameter files), train it to its budget, return the result.

    An R2PO run keeps ``checkpoint_dir=run_dir/"checkpoint"``; when that already holds a ``model.zip`` from an
    interrupted attempt (a killed process), the run resumes from it (``R2PO.load(..., env=...)``,
    ``learn(..., reset_num_timesteps=False)``), so no episode is charged twice and the history equals the uninterrupted
    run's.

    :param spec: The run.
    :param run_dir: Its directory (created).
    :param llm: An already-built backend answering an R2PO run (so one backend answers many runs, e.g. ``replay:``);
        ``None``: the spec's llm string.
    :param device: Torch device of the model.
    :param progress: Show a per-episode progress bar.
    :param lock_wait_s: How long to wait for another attempt of the run to release the directory's lock.
    :raises AttemptInProgressError: when another attempt holds it for longer.
    """
    run = prepare_run(spec, run_dir, llm, device, progress, lock_wait_s)
    try:
        run.learn()
    finally:
        result = finish_run(run)
    return result


__all__ = [
    "ATTEMPT_LOCK",
    "CHECKPOINT",
    "EPISODES",
    "AttemptInProgressError",
    "PreparedRun",
    "Report",
    "RunResult",
    "RunSpec",
    "finish_run",
    "hold_attempt",
    "prepare_run",
    "run_one",
]
