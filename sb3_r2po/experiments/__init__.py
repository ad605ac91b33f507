"""The experiment layer under ``compare`` and ``ablate``: a run is one value (:class:`RunSpec`), built and trained by
:func:`run_one`, its :class:`RunResult` kept in a :class:`ResultsStore`; an executor (:func:`make_executor`) carries out a
grid (:mod:`~sb3_r2po.experiments.grids`); :mod:`~sb3_r2po.experiments.report` summarises."""

from sb3_r2po.experiments.executors import LockstepExecutor, SerialExecutor, make_executor
from sb3_r2po.experiments.runs import ResultsStore, RunResult, RunSpec, run_one

__all__ = ["LockstepExecutor", "ResultsStore", "RunResult", "RunSpec", "SerialExecutor", "make_executor", "run_one"]
