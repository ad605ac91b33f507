"""
The results store: one directory per run, ``root/runs/<run_id>/``, holding the run's ``result.json`` once it has
finished (written atomically) and, for an R2PO run, its checkpoint and episodes while it trains.

A command cut at any point continues from the store: finished runs are read back instead of run again, and an R2PO
run cut in the middle resumes from its checkpoint (:func:`sb3_r2po.experiments.runs.run_one`). The store lives on
storage every worker sees when runs execute on several machines (:mod:`sb3_r2po.experiments.ray_executor`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from sb3_r2po.common.files import atomic_write
from sb3_r2po.experiments.runs import RunResult, RunSpec

RESULT = "result.json"
"""The file of a run directory holding the finished run's :class:`RunResult`."""


class ResultsStore:
    """
    Results of runs under ``root``.

    :param root: The store's directory (created when needed).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def run_dir(self, spec: RunSpec) -> Path:
        """``root/runs/<run_id>/`` (created)."""
        directory = self.root / "runs" / spec.run_id
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def result(self, spec: RunSpec) -> RunResult | None:
        """The finished result of ``spec``, or ``None``.

        :raises ValueError: when the directory's result belongs to another spec (a damaged or hand-copied store).
        """
        path = self.root / "runs" / spec.run_id / RESULT
        if not path.exists():
            return None
        result = RunResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
        if result.spec != spec:
            raise ValueError(f"{path} holds the result of another run ({result.spec}), not of {spec}")
        return result

    def save(self, result: RunResult) -> None:
        """Write ``result`` to its run directory atomically (a reader sees no result or the whole one)."""
        path = self.run_dir(result.spec) / RESULT
        atomic_write(path, json.dumps(result.to_dict(), indent=1).encode("utf-8"))

    def results(self, specs: Iterable[RunSpec]) -> list[RunResult]:
        """The finished results of ``specs``, in their order (runs without one are left out)."""
        found = (self.result(spec) for spec in specs)
        return [result for result in found if result is not None]

    def missing(self, specs: Iterable[RunSpec]) -> list[RunSpec]:
        """The specs without a finished result, in their order."""
        return [spec for spec in specs if self.result(spec) is None]

    def gather(self, specs: Iterable[RunSpec]) -> list[RunResult]:
        """Every spec's finished result, in their order.

        :raises RuntimeError: when a spec has none (an executor returned without running it).
        """
        results = []
        for spec in specs:
            result = self.result(spec)
            if result is None:
                raise RuntimeError(f"run {spec.run_id} has no result in {self.root}")
            results.append(result)
        return results
