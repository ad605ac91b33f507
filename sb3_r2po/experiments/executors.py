"""
Executors: how a grid of runs (:class:`~sb3_r2po.experiments.runs.RunSpec`) is carried out.

- :class:`SerialExecutor`: one run after another, in this process;
- :class:`LockstepExecutor`: the runs of an R2PO method that differ only in their seed train together in threads,
  their LLM calls sent as batches (:func:`sb3_r2po.lockstep.learn_in_lockstep`); baselines one after another;
- ``ray``: one Ray task per run (:class:`sb3_r2po.experiments.ray_executor.RayExecutor`, imported only when asked for).

Every executor skips the runs its store already holds, saves each result as its run ends, and returns the results in
the order of the specs. The results do not depend on the executor (with a deterministic LLM).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from sb3_r2po.experiments.runs import PreparedRun, Report, RunResult, RunSpec, finish_run, prepare_run, run_one
from sb3_r2po.experiments.store import ResultsStore

EXECUTORS = ("serial", "lockstep", "ray")
"""The names :func:`make_executor` accepts."""

__all__ = ["EXECUTORS", "Executor", "LockstepExecutor", "Report", "SerialExecutor", "lockstep_groups", "make_executor"]


class Executor(Protocol):
    """Runs a grid into a store."""

    def run(self, specs: Sequence[RunSpec], store: ResultsStore) -> list[RunResult]:
        """Run the specs the store has no result for; return every spec's result, in the order of ``specs``."""
        ...


class SerialExecutor:
    """
    One run after another, in this process.

    :param llm: An already-built backend answering every R2PO run, in turn (``None``: each run's llm string).
    :param device: Torch device of the models.
    :param progress: Per-episode progress bars.
    :param on_result: Called with each result as it is saved.
    """

    def __init__(
        self, llm: Any | None = None, device: str = "cpu", progress: bool = False, on_result: Report | None = None
    ) -> None:
        self.llm, self.device, self.progress, self.on_result = llm, device, progress, on_result

    def run(self, specs: Sequence[RunSpec], store: ResultsStore) -> list[RunResult]:
        """Run the specs the store has no result for, one after another; return all results in order."""
        for spec in store.missing(dict.fromkeys(specs)):
            self._save(run_one(spec, store.run_dir(spec), self.llm, self.device, self.progress), store)
        return store.gather(specs)

    def _save(self, result: RunResult, store: ResultsStore) -> None:
        store.save(result)
        if self.on_result is not None:
            self.on_result(result)


def lockstep_groups(specs: Sequence[RunSpec]) -> list[list[RunSpec]]:
    """
    The groups that train together: R2PO runs equal but for their seed (in order of first appearance), and every
    other run alone.
    """
    groups: dict[Any, list[RunSpec]] = {}
    for index, spec in enumerate(specs):
        settings = json.dumps(spec.settings_dict, sort_keys=True)  # its values may be lists or dicts
        key = (spec.env_id, spec.method, spec.budget, spec.llm, settings) if spec.is_r2po else index
        groups.setdefault(key, []).append(spec)
    return list(groups.values())


class LockstepExecutor(SerialExecutor):
    """
    The R2PO runs that differ only in their seed train together, each in its own thread, their LLM calls sent as
    batches by one backend (:func:`sb3_r2po.lockstep.learn_in_lockstep`; a GPU model or a server answers a batch in
    about the time of one call); every other run alone. A resumed run continues from its checkpoint in the group.
    Each run's ``wall_time_s`` is the group's.

    :param max_batch: The largest batch sent to the LLM at once (``None``: all waiting calls).
    """

    def __init__(
        self,
        llm: Any | None = None,
        device: str = "cpu",
        progress: bool = False,
        on_result: Report | None = None,
        max_batch: int | None = None,
    ) -> None:
        super().__init__(llm, device, progress, on_result)
        self.max_batch = max_batch

    def run(self, specs: Sequence[RunSpec], store: ResultsStore) -> list[RunResult]:
        """Run the specs the store has no result for, seeds of one R2PO method together; return all results in order."""
        for group in lockstep_groups(store.missing(dict.fromkeys(specs))):
            if len(group) == 1:
                SerialExecutor.run(self, group, store)
                continue
            self._together(group, store)
        return store.gather(specs)

    def _together(self, group: list[RunSpec], store: ResultsStore) -> None:
        from sb3_r2po.lockstep import learn_in_lockstep

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
            self._save(result, store)


def _ray_executor(address: str | None, options: dict[str, Any]) -> Executor:
    """A :class:`~sb3_r2po.experiments.ray_executor.RayExecutor` given the options its signature accepts (the local
    executors' display options, ``progress`` and ``max_batch``, have no use there); a built ``llm`` backend is refused."""
    import inspect

    from sb3_r2po.experiments.ray_executor import RayExecutor

    if options.get("llm") is not None:
        raise ValueError(
            "the ray executor cannot take a built llm backend: each run is answered by the llm its spec names, a string "
            "every worker builds its own backend from (e.g. 'http://HOST:8000/v1#openai/gpt-oss-20b'); pass llm=None"
        )
    accepted = inspect.signature(RayExecutor).parameters
    given = {key: value for key, value in options.items() if key in accepted}
    name = next((n for n in ("address", "ray_address") if n in accepted), None)
    if name is not None:
        given[name] = address
    elif address is not None:
        raise ValueError("this RayExecutor takes no address")
    executor: Executor = RayExecutor(**given)
    return executor


def make_executor(name: str, ray_address: str | None = None, **options: Any) -> Executor:
    """
    The executor called ``name`` (:data:`EXECUTORS`).

    :param name: ``serial``, ``lockstep`` or ``ray``.
    :param ray_address: The Ray cluster to connect to (``ray`` only; ``None``: start a local Ray).
    :param options: Keyword arguments of the executor (``llm``, ``device``, ``progress``, ``on_result``; ``max_batch``
        for ``lockstep``).
    :raises ValueError: for another name, a ``ray_address`` given to a local executor, or a built ``llm`` given to
        ``ray``.
    """
    if name == "ray":
        return _ray_executor(ray_address, options)
    if ray_address is not None:
        raise ValueError(f"ray_address is for the ray executor, not {name!r}")
    if name == "serial":
        return SerialExecutor(**options)
    if name == "lockstep":
        return LockstepExecutor(**options)
    raise ValueError(f"unknown executor {name!r}: choose from {', '.join(EXECUTORS)}")
