"""
A run as one value (:class:`RunSpec`), what it measured (:class:`RunResult`), where it is kept (:class:`ResultsStore`),
how its training episodes are counted (:class:`EpisodeBudget`) and building and running it (:func:`run_one`), the one
path ``compare``, ``ablate``, the benchmarks and the executors build models by.

Models are built by RL Zoo's ``ExperimentManager`` from :func:`~sb3_r2po.experiments.configs.hyperparams_file`, as
``python -m sb3_r2po.zoo train`` builds them (R2PO methods get ``llm``, ``variant``, ``max_episodes = budget`` and the
spec's settings on top); :class:`EpisodeBudget` replaces the files' ``callback``s. Baselines stop at the vector step in
which the ``budget``-th episode ends (ARS through :class:`BudgetReached`), R2PO when another K-episode evaluation no
longer fits. ``root/runs/<run_id>/`` keeps ``result.json`` and, for R2PO, ``checkpoint/`` and ``episodes.jsonl``; an
interrupted attempt resumes from its checkpoint, so no episode is charged twice.
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from stable_baselines3.common.callbacks import StopTrainingOnMaxEpisodes
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnvWrapper
from tqdm.auto import tqdm

from sb3_r2po.common.files import append_line, atomic_write
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

ATTEMPT_LOCK = ".attempt.lock"  # held from prepare_run to finish_run: one attempt per run directory
CHECKPOINT = "checkpoint"  # an R2PO run's checkpoint_dir in its run directory
EPISODES = "episodes.jsonl"  # its training episodes (EpisodeLog)
HISTORY_KEYS = ("kind", "mean_return", "n_episodes", "episodes")  # kept per history entry in RunResult.history
TIMING = ("wall_time_s", "resumed")  # fields that depend on the machine or on interruptions
RESULT = "result.json"  # a finished run's RunResult

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _canonical(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples become lists)."""
    return json.loads(json.dumps(value))


@dataclass(frozen=True)
class RunSpec:
    """
    One run of a grid.

    :param env_id: The gymnasium id.
    :param method: ``r2po``, a variant name or a baseline (``ppo``, ``ars``, ...).
    :param seed: The seed of the model and the env.
    :param budget: Training episodes.
    :param llm: The llm string (R2PO methods only; ``None`` for a baseline, whatever is given).
    :param settings: R2PO keyword overrides on top of ``sb3_r2po/zoo/configs/r2po.yml`` (JSON-able), as ``(key, value)``
        pairs sorted by key; a mapping is accepted.
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
        return self.method in R2PO_METHODS

    @property
    def settings_dict(self) -> dict[str, Any]:
        return dict(self.settings)

    @property
    def run_id(self) -> str:
        """Stable, unique and filesystem-safe: the readable fields, then a hash of the whole spec."""
        digest = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode("utf-8")).hexdigest()[:12]
        readable = _UNSAFE.sub("_", f"{self.env_id}-{self.method}-s{self.seed}-b{self.budget}")
        return f"{readable}-{digest}"

    def to_dict(self) -> dict[str, Any]:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "settings": self.settings_dict}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        settings = tuple(dict(data.get("settings") or {}).items())
        return cls(str(data["env_id"]), str(data["method"]), data["seed"], data["budget"], data.get("llm"), settings)


@dataclass
class RunResult:
    """
    What a run measured; an exact JSON round trip (:meth:`to_dict`, :meth:`from_dict`).

    :param spec: The run.
    :param algo: The zoo ``--algo`` it was built as.
    :param returns: Training-episode returns in the order the episodes ended (the first ``budget``).
    :param lengths: Their lengths.
    :param episodes_run: Episodes run (a multi-env baseline's last step may end a few beyond the budget).
    :param timesteps: Environment steps run.
    :param horizon: The ``learn()`` step horizon.
    :param hyperparams: The hyperparameters as the zoo read them (JSON-able; ``checkpoint_dir`` left out).
    :param hyperparams_file: The file they came from.
    :param wall_time_s: Building and training (lockstep: the shared time; resumed: the last attempt's).
    :param iterations: R2PO's iterations (``None`` for a baseline).
    :param llm_calls: R2PO's LLM calls.
    :param llm_stats: R2PO's ``llm_stats``.
    :param history: :data:`HISTORY_KEYS` of each of R2PO's history entries.
    :param iteration_returns: The mean return of each iteration's kept candidate (the warm-up left out).
    :param history_file: R2PO's ``history.json``, relative to the run directory.
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
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["spec"] = self.spec.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["spec"] = RunSpec.from_dict(data["spec"])
        return cls(**values)

    def outcome(self) -> dict[str, Any]:
        """:meth:`to_dict` without :data:`TIMING`, LLM seconds and the file's location: equal for two runs of one spec
        with a deterministic LLM."""
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
        }
        keys = ["returns", "lengths", "episodes_run", "timesteps", "horizon", "wall_time_s", "hyperparams", "hyperparams_file"]
        if self.spec.is_r2po:
            keys += ["iterations", "llm_calls", "llm_stats", "history", "iteration_returns"]
        record.update((key, getattr(self, key)) for key in keys)
        record["run_id"] = self.spec.run_id
        return record

    def full_history(self, run_dir: str | Path) -> list[dict[str, Any]]:
        """R2PO's whole history (its ``history.json`` in ``run_dir``); empty for a baseline."""
        if self.history_file is None:
            return []
        return json.loads((Path(run_dir) / self.history_file).read_text(encoding="utf-8"))


class ResultsStore:
    """Results of runs under ``root`` (created when needed)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def run_dir(self, spec: RunSpec) -> Path:
        """``root/runs/<run_id>/`` (created)."""
        directory = self.root / "runs" / spec.run_id
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def result(self, spec: RunSpec) -> RunResult | None:
        """The finished result of ``spec`` or ``None``; ``ValueError`` when the directory holds another spec's."""
        path = self.root / "runs" / spec.run_id / RESULT
        if not path.exists():
            return None
        result = RunResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
        if result.spec != spec:
            raise ValueError(f"{path} holds the result of another run ({result.spec}), not of {spec}")
        return result

    def save(self, result: RunResult, on_result: Report | None = None) -> None:
        """Write ``result`` to its run directory atomically (a reader sees no result or the whole one), then report it."""
        atomic_write(self.run_dir(result.spec) / RESULT, json.dumps(result.to_dict(), indent=1).encode("utf-8"))
        if on_result is not None:
            on_result(result)

    def results(self, specs: Iterable[RunSpec]) -> list[RunResult]:
        """The finished results of ``specs``, in their order (runs without one are left out)."""
        return [result for result in map(self.result, specs) if result is not None]

    def missing(self, specs: Iterable[RunSpec]) -> list[RunSpec]:
        """The specs without a finished result, in their order."""
        return [spec for spec in specs if self.result(spec) is None]

    def gather(self, specs: Sequence[RunSpec]) -> list[RunResult]:
        """Every spec's finished result, in order; ``RuntimeError`` when one has none."""
        missing = self.missing(specs)
        if missing:
            raise RuntimeError(f"run {missing[0].run_id} has no result in {self.root}")
        return self.results(specs)


class BudgetReached(Exception):
    """Raised by :class:`EpisodeBudget` to stop an algorithm that ignores a callback's ``False`` (ARS)."""


class EpisodeLog:
    """A run's training episodes, a ``[return, length]`` JSON line each, appended and synced; a last line without its
    newline (a crash) is ignored."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> tuple[list[float], list[int]]:
        if not self.path.exists():
            return [], []
        pairs = [json.loads(line) for line in self.path.read_bytes().split(b"\n")[:-1]]  # last: empty, or cut by a crash
        return [float(value) for value, _ in pairs], [int(length) for _, length in pairs]

    def keep(self, n: int) -> tuple[list[float], list[int]]:
        """Keep the first ``n`` episodes (a checkpoint's); ``RuntimeError`` when there are fewer."""
        returns, lengths = self.read()
        if len(returns) < n:
            raise RuntimeError(f"{self.path} holds {len(returns)} episodes, the checkpoint {n}: the run cannot resume")
        returns, lengths = returns[:n], lengths[:n]
        atomic_write(self.path, self._lines(returns, lengths))
        return returns, lengths

    def append(self, returns: list[float], lengths: list[int]) -> None:
        if returns:
            append_line(self.path, self._lines(returns, lengths))

    @staticmethod
    def _lines(returns: list[float], lengths: list[int]) -> bytes:
        return b"".join(json.dumps([r, n]).encode("utf-8") + b"\n" for r, n in zip(returns, lengths, strict=True))


class EpisodeBudget(StopTrainingOnMaxEpisodes):
    """
    Record every training episode (from the Monitors, in the order they end) and stop at the step in which the
    ``budget``-th episode ends, counting all sub-envs together. The Monitors are polled because ARS calls ``on_step()``
    without ``dones``.

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
        venv = self.training_env
        while isinstance(venv, VecEnvWrapper):
            venv = venv.venv
        if not isinstance(venv, DummyVecEnv):
            raise TypeError(f"the comparison needs a DummyVecEnv training env, got {type(venv).__name__}")
        self._monitors = []
        for inner in venv.envs:  # the Monitor of every sub-env
            while not isinstance(inner, Monitor):
                if not hasattr(inner, "env"):
                    raise TypeError("a sub-environment of the training env has no Monitor wrapper")
                inner = inner.env
            self._monitors.append(inner)
        self._seen = [len(m.get_episode_rewards()) for m in self._monitors]

    def poll(self) -> int:
        """Record the episodes ended since the last call, by sub-env index; return how many."""
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
        if self.log is not None:
            self.log.append(self.returns[self._logged :], self.lengths[self._logged :])
            self._logged = len(self.returns)


Report = Callable[[RunResult], None]  # called by an executor with every result as it is saved


@dataclass
class PreparedRun:
    """A model built by the zoo (or resumed from its checkpoint), ready to learn, and what :func:`finish_run` needs."""

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
        """``learn()``'s ``total_timesteps``: the horizon less the steps a resumed run has run."""
        return max(1, self.horizon - int(self.model.num_timesteps)) if self.resumed else self.horizon

    def learn(self) -> None:
        try:
            self.model.learn(total_timesteps=self.steps_left, callback=self.callback, reset_num_timesteps=not self.resumed)
        except BudgetReached:
            pass


def _jsonable(value: Any) -> Any:
    """``value``, or its ``str`` when JSON cannot hold it."""
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


def _manager(
    spec: RunSpec, algo: str, conf: Path, run_dir: Path | None, device: str, log_folder: str, backend: bool
) -> tuple[Any, int]:
    """The zoo's ``ExperimentManager`` of ``spec`` (R2PO's overrides as ``--hyperparams``) and the episode cap."""
    from rl_zoo3.exp_manager import ExperimentManager

    settings = spec.settings_dict
    custom: dict[str, Any] | None = None
    variant = spec.method if algo == ALGO_NAME else None
    env_kwargs: dict[str, Any] | None = None
    if algo == ALGO_NAME:
        if spec.llm is None:
            raise ValueError(f"method {spec.method!r} needs an llm string")
        custom = {**r2po_overrides(spec.method, spec.env_id, spec.llm, spec.budget), **settings}
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
    """Another attempt of the run held its :data:`ATTEMPT_LOCK` for longer than this one waits."""


def prepare_run(
    spec: RunSpec,
    run_dir: str | Path | None = None,
    llm: Any | None = None,
    device: str = "cpu",
    progress: bool = False,
    lock_wait_s: float = 0.0,
) -> PreparedRun:
    """
    Build one run's model with RL Zoo's ``ExperimentManager``, or load an R2PO run's ``run_dir/checkpoint/model.zip``
    (on the env the zoo built) with the episodes it had run. Holds :data:`ATTEMPT_LOCK` until :func:`finish_run`.
    The parameters are :func:`run_one`'s (``run_dir`` ``None``: no checkpoint, nothing to resume).
    """
    directory = None if run_dir is None else Path(run_dir)
    lock = None
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(directory / ATTEMPT_LOCK), timeout=lock_wait_s, thread_local=False)
        try:
            lock.acquire()
        except Timeout:
            waited = f" for more than {lock_wait_s:g} s" if lock_wait_s > 0 else ""
            raise AttemptInProgressError(
                f"run {spec.run_id}: another attempt held {directory / ATTEMPT_LOCK}{waited} (another command working on "
                "the same results store, a Ray task of an earlier command still running, or a lost node whose lock the "
                "shared storage has not released yet); run the command again once it has ended"
            ) from None
    try:
        run = _prepare(spec, directory, llm, device, progress)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    run.lock = lock
    return run


def _prepare(spec: RunSpec, directory: Path | None, llm: Any | None, device: str, progress: bool) -> PreparedRun:
    from sb3_r2po import R2PO  # also registers the custom envs

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
        if checkpoint.exists():  # the checkpoint's model on the env the zoo built
            answer = spec.llm if llm is None else llm
            model = R2PO.load(checkpoint, model.get_env(), device, llm=answer, checkpoint_dir=str(checkpoint.parent))
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


def finish_run(run: PreparedRun) -> RunResult:
    """Close a run's env and log folder, release its run directory, and return its measurements."""
    try:
        return _measure(run)
    finally:
        if run.lock is not None:
            run.lock.release()


def _measure(run: PreparedRun) -> RunResult:
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
    Build the model (:func:`prepare_run`; an interrupted R2PO attempt resumes from ``run_dir/checkpoint``), train it to
    its budget and return the result.

    :param spec: The run.
    :param run_dir: Its directory (created).
    :param llm: A built backend answering an R2PO run (one backend for many runs); ``None``: the spec's llm string.
    :param device: Torch device of the model.
    :param progress: Show a per-episode progress bar.
    :param lock_wait_s: How long to wait for another attempt's :data:`ATTEMPT_LOCK`.
    :raises AttemptInProgressError: when another attempt holds it for longer.
    """
    run = prepare_run(spec, run_dir, llm, device, progress, lock_wait_s)
    try:
        run.learn()
    finally:
        result = finish_run(run)
    return result
