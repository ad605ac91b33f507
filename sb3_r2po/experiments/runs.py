"""A run as one value (:class:`RunSpec`), its hyperparameters (the zoo's files, ours in ``sb3_r2po/zoo/configs/``), its
result (:class:`RunResult`), the :class:`ResultsStore` (``root/runs/<run_id>/``) and :func:`run_one`, the one path every
runner builds and trains models by (RL Zoo's ``ExperimentManager`` with :class:`EpisodeBudget`)."""

from __future__ import annotations

import argparse
import contextlib
import copy
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

import gymnasium as gym
from filelock import FileLock, Timeout
from stable_baselines3.common.callbacks import StopTrainingOnMaxEpisodes
from tqdm.auto import tqdm

from sb3_r2po.common.files import append_line, atomic_write
from sb3_r2po.prompts import prompt_preset
from sb3_r2po.r2po.arguments import VARIANTS
from sb3_r2po.zoo import ALGO_NAME, config_dir, config_env_ids, register_r2po, resolve_train_args
from sb3_r2po.zoo.settings import apply_variant, read_entries

ATTEMPT_LOCK = ".attempt.lock"  # held from prepare_run to finish_run: one attempt per run directory
CHECKPOINT = "checkpoint"  # an R2PO run's checkpoint_dir in its run directory
EPISODES = "episodes.jsonl"  # its training episodes (EpisodeLog)
HISTORY_KEYS = ("kind", "mean_return", "n_episodes", "episodes")  # kept per history entry in RunResult.history
TIMING = ("wall_time_s", "resumed")  # fields that depend on the machine or on interruptions
RESULT = "result.json"  # a finished run's RunResult
BASELINES = ("ppo", "a2c", "dqn", "sac", "td3", "trpo", "ars")  # stable-baselines3's, then sb3-contrib's
R2PO_METHODS: tuple[str, ...] = tuple(VARIANTS)  # each is R2PO with that variant
IGNORE_STOP = ("ars",)  # their learn() ignores a callback's False: stopped with an exception

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def hyperparams_file(algo: str, env_id: str) -> Path:
    """The file ``python -m sb3_r2po.zoo train --algo algo --env env_id`` reads: ours or the zoo's ``<algo>.yml``."""
    resolved = resolve_train_args(["--algo", algo, "--env", env_id])
    if resolved[0] == "--conf-file":
        return Path(resolved[1])
    import rl_zoo3

    return Path(rl_zoo3.__file__).resolve().parent / "hyperparams" / f"{algo}.yml"


def zoo_entry(path: Path, env_id: str) -> dict[str, Any]:
    """A copy of the file's entry for ``env_id`` (else ``default``; Atari's ``atari`` entry is not handled)."""
    entries = read_entries(path)
    return copy.deepcopy(dict(entries.get(env_id, entries.get("default", {}))))


def r2po_entry(env_id: str, variant: str | None = None) -> dict[str, Any]:
    """``env_id``'s entry of ``r2po.yml`` (else ``default``) resolved for ``variant`` (``None``: the entry's own)."""
    return apply_variant(zoo_entry(config_dir() / f"{ALGO_NAME}.yml", env_id), variant)[0]


def method_algo(method: str) -> str:
    """The zoo ``--algo`` of a method (``r2po`` for the variants); ``ValueError`` for an unknown one."""
    if method in R2PO_METHODS:
        return ALGO_NAME
    if method in BASELINES:
        return method
    raise ValueError(f"unknown method {method!r}: choose from {', '.join([*R2PO_METHODS, *BASELINES])}")


def episode_cap(env_id: str, variant: str | None = None) -> tuple[int, bool]:
    """``(cap, added)`` of an R2PO ``variant`` (``None``: R2PO's, the baselines'): its ``env_kwargs``' ``max_episode_steps``,
    else the env's time limit, else its entry's (default 1000), which the caller adds as ``env_kwargs`` (``added``)."""
    entry = r2po_entry(env_id, variant)
    own = (entry.get("env_kwargs") or {}).get("max_episode_steps") or gym.spec(env_id).max_episode_steps
    return (int(own), False) if own else (int(entry.get("max_episode_steps", 1000)), True)


def r2po_settings(
    n_eval_episodes: int | None = None, warmup_episodes: int | None = None, prompts: str | None = None
) -> dict[str, Any]:
    """R2PO's settings from a command line's options: a prompt preset's parameters, K and the warm-up (those given)."""
    given = {"n_eval_episodes": n_eval_episodes, "warmup_episodes": warmup_episodes}
    preset = prompt_preset(prompts) if prompts is not None else {}
    return {**preset, **{key: value for key, value in given.items() if value is not None}}


def r2po_overrides(method: str, env_id: str, llm: str, budget: int) -> dict[str, Any]:
    """R2PO's zoo ``--hyperparams`` over ``r2po.yml``, beneath a run's settings: the LLM, the variant, ``max_episodes`` and
    ``max_iterations`` = ``budget`` (lifts the file's planned count), ``Tabular`` for a Discrete env the file lacks."""
    overrides: dict[str, Any] = {"llm": llm, "variant": method, "max_episodes": budget, "max_iterations": budget}
    if env_id not in config_env_ids(ALGO_NAME):  # the default entry is MlpLinear (Box observations)
        env = gym.make(env_id)
        if isinstance(env.observation_space, gym.spaces.Discrete):
            overrides["policy"] = "Tabular"
        env.close()
    return overrides


def comparison_env_settings(env_id: str, methods: Sequence[str], threshold: float | None) -> dict[str, Any]:
    """One env's threshold (``None``: its ``reward_threshold``, else R2PO's ``target_return``) and episode caps."""
    source = "given"
    if threshold is None:
        threshold = gym.spec(env_id).reward_threshold
        threshold = r2po_entry(env_id).get("target_return") if threshold is None else threshold
        threshold = None if threshold is None else float(threshold)
        source = "the env's reward_threshold, else R2PO's target_return"
    cap, added = episode_cap(env_id)
    variant_caps = {m: episode_cap(env_id, m)[0] for m in dict.fromkeys(methods) if m in R2PO_METHODS}
    return {
        "threshold": threshold,
        "threshold_source": source,
        "episode_cap": cap,
        "episode_cap_source": "R2PO's max_episode_steps, added as a TimeLimit" if added else "the env's time limit",
        "variant_episode_caps": {m: c for m, c in variant_caps.items() if c != cap},
    }


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
        canonical = ((str(key), json.loads(json.dumps(value))) for key, value in items)  # as JSON reads it back
        object.__setattr__(self, "settings", tuple(sorted(canonical, key=lambda item: item[0])))
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
        settings = data.get("settings") or ()  # a mapping
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
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "spec": self.spec.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        known = {f.name for f in fields(cls)}
        return cls(**{**{key: value for key, value in data.items() if key in known}, "spec": RunSpec.from_dict(data["spec"])})

    def outcome(self) -> dict[str, Any]:
        """:meth:`to_dict` without :data:`TIMING`, LLM seconds and the file: equal for one spec and a deterministic LLM."""
        data = {key: value for key, value in self.to_dict().items() if key not in TIMING and key != "hyperparams_file"}
        if self.llm_stats is not None:
            data["llm_stats"] = {key: value for key, value in self.llm_stats.items() if key != "seconds"}
        return data

    def record(self) -> dict[str, Any]:
        """The run as ``python -m sb3_r2po.compare`` writes it to ``runs.json``."""
        keys = ["returns", "lengths", "episodes_run", "timesteps", "horizon", "wall_time_s", "hyperparams", "hyperparams_file"]
        if self.spec.is_r2po:
            keys += ["iterations", "llm_calls", "llm_stats", "history", "iteration_returns"]
        head = {"env": self.spec.env_id, "method": self.spec.method, "algo": self.algo, "seed": self.spec.seed}
        return {**head, **{key: getattr(self, key) for key in keys}, "run_id": self.spec.run_id}

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
        if missing := self.missing(specs):
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
        lines = self.path.read_bytes().split(b"\n")[:-1] if self.path.exists() else []  # last: empty, or cut by a crash
        pairs = [json.loads(line) for line in lines]
        return [float(value) for value, _ in pairs], [int(length) for _, length in pairs]

    def keep(self, n: int) -> tuple[list[float], list[int]]:
        """Keep the first ``n`` episodes (a checkpoint's); ``RuntimeError`` when there are fewer."""
        returns, lengths = self.read()
        if len(returns) < n:
            raise RuntimeError(f"{self.path} holds {len(returns)} episodes, the checkpoint {n}: the run cannot resume")
        atomic_write(self.path, self._lines(returns[:n], lengths[:n]))
        return returns[:n], lengths[:n]

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
        self.hard_stop, self.progress, self.log = hard_stop, progress, log
        self.returns: list[float] = list(returns or [])
        self.lengths: list[int] = list(lengths or [])
        self.n_episodes = self._logged = len(self.returns)
        self._seen: list[int] = []

    def _init_callback(self) -> None:
        self._total_max_episodes = self.max_episodes  # all sub-environments together
        self._seen = [len(rewards) for rewards in self.training_env.env_method("get_episode_rewards")]

    def poll(self) -> int:
        """Record the episodes ended since the last call, by sub-env index (from their Monitors); return how many."""
        before = len(self.returns)
        if self._seen:  # the callback has been initialised
            rewards, lengths = (self.training_env.env_method(f"get_episode_{kind}") for kind in ("rewards", "lengths"))
            for i, (env_rewards, env_lengths) in enumerate(zip(rewards, lengths, strict=True)):
                self.returns += [float(r) for r in env_rewards[self._seen[i] :]]
                self.lengths += [int(n) for n in env_lengths[self._seen[i] :]]
                self._seen[i] = len(env_rewards)
        return len(self.returns) - before

    def _on_step(self) -> bool:
        new = self.poll()
        self.n_episodes += new
        if self.progress is not None and new:
            self.progress.update(new)
        if self.hard_stop and self.n_episodes >= self._total_max_episodes:
            raise BudgetReached
        return self.n_episodes < self._total_max_episodes

    def flush(self) -> None:
        if self.log is not None:
            self.log.append(self.returns[self._logged :], self.lengths[self._logged :])
            self._logged = len(self.returns)

    _on_rollout_end = flush


Report = Callable[[RunResult], None]  # called by an executor with every result as it is saved


@dataclass
class PreparedRun:
    """A model built by the zoo (or resumed from its checkpoint), ready to learn, and what :func:`finish_run` needs."""

    spec: RunSpec
    algo: str
    model: Any
    horizon: int
    callback: EpisodeBudget
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
    manager = ExperimentManager(
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
    )
    return manager, cap


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
    """Build a run's model with the zoo's ``ExperimentManager``, or resume an R2PO run's ``run_dir/checkpoint``; hold
    :data:`ATTEMPT_LOCK` until :func:`finish_run`. :func:`run_one`'s parameters (``run_dir`` ``None``: no checkpoint)."""
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
        return _prepare(spec, directory, lock, llm, device, progress)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _prepare(
    spec: RunSpec, directory: Path | None, lock: FileLock | None, llm: Any | None, device: str, progress: bool
) -> PreparedRun:
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
    desc = f"{spec.method} seed {spec.seed}"
    bar = tqdm(total=spec.budget, initial=len(returns), desc=desc, unit="ep", leave=False, disable=not progress)
    callback = EpisodeBudget(spec.budget, algo in IGNORE_STOP, bar, returns, lengths, log)
    hyperparams = {key: value for key, value in saved_hyperparams.items() if key != "checkpoint_dir"}
    if algo == ALGO_NAME:
        hyperparams["llm"] = spec.llm
    hyperparams = json.loads(json.dumps(hyperparams, default=str))  # JSON-able: str() of what JSON cannot hold
    horizon = max(int(manager.n_timesteps), spec.budget * cap)
    return PreparedRun(spec, algo, model, horizon, callback, hyperparams, conf, log_folder, start, resumed, directory, lock)


def finish_run(run: PreparedRun) -> RunResult:
    """Close a run's env and log folder, release its run directory, and return its measurements."""
    try:
        callback, model, spec, budget = run.callback, run.model, run.spec, run.spec.budget
        callback.progress.close()
        callback.poll()
        callback.flush()
        model.env.close()
        run.log_folder.cleanup()
        episodes = len(callback.returns)
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
            returns=callback.returns[:budget],
            lengths=callback.lengths[:budget],
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
            result.iterations = int(model.iteration)
            result.llm_calls = int(model.llm_stats["calls"])
            result.llm_stats = {key: float(value) for key, value in model.llm_stats.items()}
            result.history = [{key: record[key] for key in HISTORY_KEYS} for record in model.history]
            result.iteration_returns = [float(r["mean_return"]) for r in model.history if r["kind"] != "warmup"]
            if run.run_dir is not None and (run.run_dir / CHECKPOINT / "history.json").exists():  # none without an entry
                result.history_file = f"{CHECKPOINT}/history.json"
        return result
    finally:
        if run.lock is not None:
            run.lock.release()


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
        with contextlib.suppress(BudgetReached):
            run.model.learn(total_timesteps=run.steps_left, callback=run.callback, reset_num_timesteps=not run.resumed)
    finally:
        result = finish_run(run)
    return result
