"""Executors carry out a grid of :class:`~sb3_r2po.experiments.runs.RunSpec`: ``serial``, ``lockstep`` or ``ray``. Each
skips the runs its store holds, saves each result as its run ends and returns the results in the specs' order; with a
deterministic LLM they give equal results. With Ray the store must be on storage every node mounts at the same path."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sb3_r2po.experiments.runs import PreparedRun, Report, ResultsStore, RunResult, RunSpec, finish_run, prepare_run, run_one

EXECUTORS = ("serial", "lockstep", "ray")
LOCK_WAIT_S = 180.0  # a Ray task's wait for another attempt's ATTEMPT_LOCK (a lost node's NFSv4 lease: 90 s by default)
LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0" before ray is imported: a started node serves loopback only


@dataclass
class SerialExecutor:
    """
    One run after another, in this process.

    :param llm: A built backend answering every R2PO run in turn (``None``: each run's llm string).
    :param device: Torch device of the models.
    :param progress: Per-episode progress bars.
    :param on_result: Called with each result as it is saved.
    """

    llm: Any | None = None
    device: str = "cpu"
    progress: bool = False
    on_result: Report | None = None

    def run(self, specs: Sequence[RunSpec], store: ResultsStore) -> list[RunResult]:
        """Run the specs the store has no result for; return every spec's result, in the order of ``specs``."""
        for spec in store.missing(dict.fromkeys(specs)):
            store.save(run_one(spec, store.run_dir(spec), self.llm, self.device, self.progress), self.on_result)
        return store.gather(specs)


def lockstep_groups(specs: Sequence[RunSpec]) -> list[list[RunSpec]]:
    """The groups that train together: R2PO runs equal but for their seed, and every other run alone."""
    groups: dict[Any, list[RunSpec]] = {}
    for index, spec in enumerate(specs):
        groups.setdefault(replace(spec, seed=0) if spec.is_r2po else index, []).append(spec)
    return list(groups.values())


@dataclass
class LockstepExecutor(SerialExecutor):
    """
    The R2PO runs that differ only in their seed train together (:func:`sb3_r2po.lockstep.learn_in_lockstep`), every
    other run alone; each run's ``wall_time_s`` is the group's.

    :param max_batch: The largest batch sent to the LLM at once (``None``: all waiting calls).
    """

    max_batch: int | None = None

    def run(self, specs: Sequence[RunSpec], store: ResultsStore) -> list[RunResult]:
        from sb3_r2po.lockstep import learn_in_lockstep

        for group in lockstep_groups(store.missing(dict.fromkeys(specs))):
            if len(group) == 1:
                SerialExecutor.run(self, group, store)
                continue
            runs: list[PreparedRun] = []
            try:
                for spec in group:  # each holds its run directory until finish_run, also when a later one fails to start
                    runs.append(prepare_run(spec, store.run_dir(spec), self.llm, self.device, self.progress))
                learn_in_lockstep(
                    [r.model for r in runs],
                    max(r.steps_left for r in runs),
                    callbacks=[r.callback for r in runs],
                    max_batch=self.max_batch,
                    reset_num_timesteps=not any(r.resumed for r in runs),
                )
            finally:
                results = [finish_run(r) for r in runs]
            for result in results:
                store.save(result, self.on_result)
        return store.gather(specs)


@dataclass(frozen=True)
class RunFailure:
    """A run that ended with an ``error`` (type and message) instead of a result; ``details``: Ray's account of it."""

    spec: RunSpec
    error: str
    details: str


class RunsFailed(RuntimeError):
    """Raised by :meth:`RayExecutor.run` after every run has ended when some failed (the others' ``results`` are saved)."""

    def __init__(self, failures: Sequence[RunFailure], results: Sequence[RunResult]) -> None:
        self.failures, self.results = list(failures), list(results)
        lines = [f"{len(self.failures)} run(s) failed ({len(self.results)} finished and saved):"]
        lines += [f"- {failure.spec.run_id}: {failure.error}" for failure in self.failures]
        lines += [f"\n{failure.spec.run_id}:\n{failure.details}" for failure in self.failures]
        super().__init__("\n".join(lines))


def train_in_worker(spec_data: Mapping[str, Any], run_dir: str, device: str, lock_wait_s: float) -> dict[str, Any]:
    """A run's Ray task: :func:`~sb3_r2po.experiments.runs.run_one` on its (absolute, shared) ``run_dir``, as data."""
    return run_one(RunSpec.from_dict(spec_data), run_dir, device=device, lock_wait_s=lock_wait_s).to_dict()


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours the task's name in its tracebacks


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def _failure(spec: RunSpec, error: Exception) -> RunFailure:
    """What a task's error says about its run (the run's own exception, or why Ray gave up on the task)."""
    import ray.exceptions

    if isinstance(error, ray.exceptions.RayTaskError):
        cause = error.cause
        return RunFailure(spec, f"{type(cause).__name__}: {cause}", _ANSI.sub("", str(error)))  # the task, its traceback
    kind = "its worker died more often than Ray retries" if isinstance(error, ray.exceptions.WorkerCrashedError) else "Ray"
    return RunFailure(spec, f"{type(error).__name__} ({kind}): {error}", str(error))


@dataclass
class RayExecutor:
    """
    One Ray task per run, retried when its worker dies (an R2PO run resumes from its checkpoint; the run directory's
    lock keeps a retry from working beside an attempt that is not dead after all); an exception in a run is not
    retried: the other runs go on, then :class:`RunsFailed` names every failed run. Only this process writes
    ``result.json``, as the results arrive. A local Ray serves this machine only (:data:`LOCAL_ONLY`).

    :param address: The Ray cluster to connect to (``"auto"``: the one started on this machine with ``ray start``,
        ``"ray://HOST:10001"``, ...); ``None``: start a local Ray on this machine (loopback only, no dashboard), or use
        the Ray this process has already started or connected to.
    :param max_retries: How many times Ray runs a task again after its worker died.
    :param num_cpus: CPUs a run's task holds (how many runs share a node: its CPUs divided by this).
    :param num_gpus: GPUs a run's task holds (``0``: R2PO's own work is CPU work; the LLM is the server's).
    :param cluster_cpus: CPUs of the local Ray (``address=None`` only; ``None``: this machine's).
    :param device: Torch device of the models in the workers.
    :param on_result: Called with each result as it is saved.
    :param lock_wait_s: How long a task waits for another attempt of its run to end (:func:`train_in_worker`).
    :param runtime_env: Ray's ``runtime_env`` for the job (e.g. ``{"env_vars": {...}}``, ``{"pip": [...]}``; ``None``:
        the workers' own environment, which must have ``sb3_r2po`` installed).
    """

    address: str | None = None
    max_retries: int = 3
    num_cpus: float = 1
    num_gpus: float = 0
    cluster_cpus: int | None = None
    device: str = "cpu"
    on_result: Report | None = None
    lock_wait_s: float = LOCK_WAIT_S
    runtime_env: dict[str, Any] | None = None
    started: bool = field(default=False, init=False)  # whether this executor started (or connected) Ray

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.num_cpus <= 0:
            raise ValueError(f"num_cpus must be > 0, got {self.num_cpus}")
        if self.cluster_cpus is not None and self.address is not None:
            raise ValueError("cluster_cpus is the size of a local Ray; a cluster at an address has its own")

    def start(self) -> None:
        """Start a local Ray or join ``address`` (unless Ray is up); ``RuntimeError`` if a local one serves other hosts."""
        if self.address is None:
            os.environ.setdefault(LOCAL_ONLY, "0")  # read when ray is imported (see start's error otherwise)
        import ray

        if ray.is_initialized():
            return
        local: dict[str, Any] = {"num_cpus": self.cluster_cpus, "include_dashboard": False} if self.address is None else {}
        ray.init(address=self.address, runtime_env=self.runtime_env, **local)
        self.started = True
        if self.address is None and not _is_loopback(node := ray.util.get_node_ip_address()):
            self.shutdown()
            raise RuntimeError(
                f"the local Ray's node address is {node}, so its servers would listen beyond this machine: set "
                f"{LOCAL_ONLY}=0 before ray is imported, or start Ray yourself and pass its address"
            )

    def shutdown(self) -> None:
        """Shut down the Ray this executor started (a local Ray stops; a cluster stays up, this process leaves it)."""
        if self.started:
            import ray

            ray.shutdown()
            self.started = False

    def run(self, specs: Sequence[RunSpec], store: ResultsStore) -> list[RunResult]:
        """Run the specs without a result, a Ray task each, saving each result as it arrives; every spec's result in
        order (:class:`RunsFailed` when some failed). Cut short (Ctrl-C): the running tasks are cancelled."""
        if not (pending := store.missing(dict.fromkeys(specs))):
            return store.gather(specs)
        self.start()  # before ray is imported here: a local Ray's switch is read on import
        import ray

        task = ray.remote(max_retries=self.max_retries, num_cpus=self.num_cpus, num_gpus=self.num_gpus)(train_in_worker)
        refs = {
            task.remote(spec.to_dict(), str(store.run_dir(spec).resolve()), self.device, self.lock_wait_s): spec
            for spec in pending
        }
        failures: list[RunFailure] = []
        waiting = list(refs)
        try:
            while waiting:
                [ref], waiting = ray.wait(waiting, num_returns=1)
                try:
                    store.save(RunResult.from_dict(ray.get(ref)), self.on_result)
                except ray.exceptions.RayError as error:
                    failures.append(_failure(refs[ref], error))
        except BaseException:
            for ref in waiting:
                ray.cancel(ref, force=True)
            raise
        if failures:
            raise RunsFailed(failures, store.results(specs))
        return store.gather(specs)


def make_executor(name: str, ray_address: str | None = None, **options: Any) -> SerialExecutor | RayExecutor:
    """
    The executor called ``name``.

    :param name: ``serial``, ``lockstep`` or ``ray``.
    :param ray_address: The Ray cluster (``ray`` only; ``None``: a local Ray).
    :param options: The executor's keyword arguments (``llm``, ``device``, ``progress``, ``on_result``, ``max_batch``;
        ``ray`` takes those of :class:`RayExecutor` and ignores ``progress`` and ``max_batch``).
    :raises ValueError: for another name, a ``ray_address`` of a local executor, or a built ``llm`` given to ``ray``.
    """
    if name == "ray":
        if options.pop("llm", None) is not None:
            raise ValueError(
                "the ray executor cannot take a built llm backend: each run is answered by the llm its spec names, a string "
                "every worker builds its own backend from (e.g. 'http://HOST:8000/v1#openai/gpt-oss-20b'); pass llm=None"
            )
        return RayExecutor(address=ray_address, **{k: v for k, v in options.items() if k not in ("progress", "max_batch")})
    if ray_address is not None:
        raise ValueError(f"ray_address is for the ray executor, not {name!r}")
    if name not in EXECUTORS:
        raise ValueError(f"unknown executor {name!r}: choose from {', '.join(EXECUTORS)}")
    return LockstepExecutor(**options) if name == "lockstep" else SerialExecutor(**options)
