"""
The Ray executor: one Ray task per run, on a local Ray or on a cluster, every R2PO run answered by the LLM its spec
names (one server for the whole grid: ``llm="http://HOST:8000/v1#openai/gpt-oss-20b"``).

- **Where things live.** Each run has its own directory in the store, ``<root>/runs/<run_id>/``
  (:class:`~sb3_r2po.experiments.store.ResultsStore`); the worker that trains the run writes its checkpoint there
  (``checkpoint/``: ``model.zip``, ``history.json``, the transcript of LLM calls) and its training episodes
  (``episodes.jsonl``). The store's root is passed to the workers as an absolute path, so on a cluster it must be
  storage every node mounts at the same path (NFS, a shared volume).
- **Who writes the results.** The driver (the process that called :meth:`RayExecutor.run`) saves each run's
  :class:`~sb3_r2po.experiments.runs.RunResult` into the store as soon as its task returns it; workers never write
  ``result.json``. So the store has one writer, and a command cut at any point continues from it: finished runs are
  read back instead of run again, and an R2PO run cut in the middle resumes from its checkpoint.
- **A lost worker.** A task whose worker process (or node) dies is retried by Ray (``max_retries``); the retry calls
  :func:`~sb3_r2po.experiments.runs.run_one` on the same run directory, which resumes an R2PO run from its last
  history entry (no episode charged twice; with a deterministic LLM the history equals the uninterrupted run's). A
  baseline run has no checkpoint and starts over. An attempt holds its run directory's :data:`ATTEMPT_LOCK` while it
  runs, so a retry waits for an attempt that is not dead after all (a lost node whose lock the shared storage still
  holds; a task of a command that was cut) instead of working on the same files, and fails after ``lock_wait_s``.
- **A run that fails.** An exception raised by a run (a bad setting, an LLM server that stays down) is not retried:
  the other runs go on and are saved, and :meth:`RayExecutor.run` then raises :class:`RunsFailed`, naming every failed
  run with its error and the worker's traceback. Running the command again runs only the runs without a result.
- **A local Ray** (``address=None``) serves this machine only: it is started with Ray's switch for a node that is no
  cluster (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, set before Ray is imported), so its node address is 127.0.0.1 and
  its servers listen on the loopback interface, and without the dashboard.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sb3_r2po.experiments.runs import ATTEMPT_LOCK, AttemptInProgressError, RunResult, RunSpec, run_one
from sb3_r2po.experiments.store import ResultsStore

LOCK_WAIT_S = 180.0
"""How long a task waits for another attempt of its run to release :data:`ATTEMPT_LOCK` (a lost node's lock on NFSv4
lasts until the server's lease expires, 90 s by default)."""

LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's environment variable that, set to ``0`` before ``ray`` is imported, makes a started node a single machine's:
node address 127.0.0.1, servers on the loopback interface (Ray's default on macOS and Windows)."""


@dataclass(frozen=True)
class RunFailure:
    """
    A run that ended with an error instead of a result.

    :param spec: The run.
    :param error: The error's type and message (for an exception in the run, the run's own exception).
    :param details: Ray's account of it (for an exception in the run, the worker's traceback).
    """

    spec: RunSpec
    error: str
    details: str

    def describe(self) -> str:
        """One line naming the run and its error."""
        return f"{self.spec.run_id}: {self.error}"


class RunsFailed(RuntimeError):
    """
    Raised by :meth:`RayExecutor.run` after every run has ended when some runs failed; the others' results are saved.

    :param failures: The failed runs.
    :param results: The results of the runs that finished (in the order of the specs).
    """

    def __init__(self, failures: Sequence[RunFailure], results: Sequence[RunResult]) -> None:
        self.failures = list(failures)
        self.results = list(results)
        lines = [f"{len(self.failures)} run(s) failed ({len(self.results)} finished and saved):"]
        lines += [f"- {failure.describe()}" for failure in self.failures]
        lines += [f"\n{failure.spec.run_id}:\n{failure.details}" for failure in self.failures]
        super().__init__("\n".join(lines))


def train_in_worker(
    spec_data: Mapping[str, Any], run_dir: str, device: str = "cpu", lock_wait_s: float = LOCK_WAIT_S
) -> dict[str, Any]:
    """
    The body of a run's Ray task: :func:`~sb3_r2po.experiments.runs.run_one` on the run's directory (which resumes an
    interrupted R2PO attempt), its result as data. The attempt holds the directory's :data:`ATTEMPT_LOCK` from before
    it reads the directory until it ends, so two attempts of one run never work on it at once.

    :param spec_data: The run (:meth:`RunSpec.to_dict`).
    :param run_dir: The run's directory (an absolute path on storage the workers share).
    :param device: Torch device of the model.
    :param lock_wait_s: How long to wait for another attempt's lock.
    :raises AttemptInProgressError: when another attempt holds the lock for longer.
    """
    return run_one(RunSpec.from_dict(spec_data), run_dir, device=device, lock_wait_s=lock_wait_s).to_dict()


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
"""A terminal colour code (Ray colours the name of the task in its tracebacks)."""


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


class RayExecutor:
    """
    One Ray task per run (see the module notes): tasks that Ray retries when their worker dies, each resuming its run
    from the run's checkpoint; results saved by this process into the store as they arrive.

    :param address: The Ray cluster to connect to (``"auto"``: the one started on this machine with ``ray start``,
        ``"ray://HOST:10001"``, ...); ``None``: start a local Ray on this machine (loopback only, no dashboard), or use
        the Ray this process has already started or connected to.
    :param max_retries: How many times Ray runs a task again after its worker died (an exception in the run is not
        retried).
    :param num_cpus: CPUs a run's task holds (how many runs share a node: its CPUs divided by this).
    :param num_gpus: GPUs a run's task holds (``0``: R2PO's own work is CPU work; the LLM is the server's).
    :param cluster_cpus: CPUs of the local Ray (``address=None`` only; ``None``: this machine's).
    :param device: Torch device of the models in the workers.
    :param on_result: Called with each result as it is saved.
    :param lock_wait_s: How long a task waits for another attempt of its run to end (:func:`train_in_worker`).
    :param runtime_env: Ray's ``runtime_env`` for the job (e.g. ``{"env_vars": {...}}``, ``{"pip": [...]}``; ``None``:
        the workers' own environment, which must have ``sb3_r2po`` installed).
    """

    def __init__(
        self,
        address: str | None = None,
        max_retries: int = 3,
        num_cpus: float = 1,
        num_gpus: float = 0,
        cluster_cpus: int | None = None,
        device: str = "cpu",
        on_result: Callable[[RunResult], None] | None = None,
        lock_wait_s: float = LOCK_WAIT_S,
        runtime_env: dict[str, Any] | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if num_cpus <= 0:
            raise ValueError(f"num_cpus must be > 0, got {num_cpus}")
        if cluster_cpus is not None and address is not None:
            raise ValueError("cluster_cpus is the size of a local Ray; a cluster at an address has its own")
        self.address, self.max_retries, self.num_cpus, self.num_gpus = address, int(max_retries), float(num_cpus), num_gpus
        self.cluster_cpus, self.device, self.on_result, self.runtime_env = cluster_cpus, device, on_result, runtime_env
        self.lock_wait_s = float(lock_wait_s)
        self.started = False
        """Whether this executor started (or connected) Ray, so that :meth:`shutdown` disconnects it."""

    def start(self) -> None:
        """Start the local Ray, or connect to the cluster at ``address``; nothing when Ray is already initialised.

        :raises RuntimeError: when a local Ray would serve beyond this machine (Ray was imported before this executor
            could set :data:`LOCAL_ONLY`).
        """
        if self.address is None:
            os.environ.setdefault(LOCAL_ONLY, "0")  # read when ray is imported (see start's error otherwise)
        import ray

        if ray.is_initialized():
            return
        if self.address is not None:
            ray.init(address=self.address, runtime_env=self.runtime_env)
            self.started = True
            return
        ray.init(num_cpus=self.cluster_cpus, include_dashboard=False, runtime_env=self.runtime_env)
        self.started = True
        node = ray.util.get_node_ip_address()
        if not _is_loopback(node):
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
        """
        Run the specs the store has no result for, one Ray task each; return every spec's result, in order.

        :raises RunsFailed: after all runs have ended, when some failed (the others are saved).
        """
        pending = store.missing(dict.fromkeys(specs))
        if pending:
            self.start()  # before ray is imported here: a local Ray's switch is read on import
            import ray

            task = ray.remote(max_retries=self.max_retries, num_cpus=self.num_cpus, num_gpus=self.num_gpus)(train_in_worker)
            refs = {
                task.remote(spec.to_dict(), str(run_dir_of(store, spec)), self.device, self.lock_wait_s): spec
                for spec in pending
            }
            failures = self._collect(refs, store)
            if failures:
                done = [r for r in (store.result(spec) for spec in specs) if r is not None]
                raise RunsFailed(failures, done)
        return store.gather(specs)

    def _collect(self, refs: dict[Any, RunSpec], store: ResultsStore) -> list[RunFailure]:
        """Wait for every task; save each result as it arrives; the runs that failed. Cut short (Ctrl-C): the tasks
        still running are cancelled (their runs resume from their checkpoints next time)."""
        import ray

        failures: list[RunFailure] = []
        waiting = list(refs)
        try:
            while waiting:
                done, waiting = ray.wait(waiting, num_returns=1)
                for ref in done:
                    try:
                        data = ray.get(ref)
                    except ray.exceptions.RayError as error:
                        failures.append(_failure(refs[ref], error))
                        continue
                    self._save(RunResult.from_dict(data), store)
        except BaseException:
            for ref in waiting:
                ray.cancel(ref, force=True)
            raise
        return failures

    def _save(self, result: RunResult, store: ResultsStore) -> None:
        store.save(result)
        if self.on_result is not None:
            self.on_result(result)


def run_dir_of(store: ResultsStore, spec: RunSpec) -> Path:
    """The absolute run directory a worker is given for ``spec``."""
    return store.run_dir(spec).resolve()


__all__ = [
    "ATTEMPT_LOCK",
    "LOCAL_ONLY",
    "LOCK_WAIT_S",
    "AttemptInProgressError",
    "RayExecutor",
    "RunFailure",
    "RunsFailed",
    "train_in_worker",
]
