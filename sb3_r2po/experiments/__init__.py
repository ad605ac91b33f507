"""
The experiment layer: a run is one value (:class:`RunSpec`), built and trained by :func:`run_one`, its result
(:class:`RunResult`) kept in a :class:`ResultsStore` (:mod:`~sb3_r2po.experiments.runs`); an executor
(:func:`make_executor`) carries out a grid (:mod:`~sb3_r2po.experiments.grids`); :mod:`~sb3_r2po.experiments.report`
summarises. ``python -m sb3_r2po.compare`` and ``python -m sb3_r2po.ablate`` are command lines over it.
"""

from sb3_r2po.experiments.executors import LockstepExecutor, SerialExecutor, make_executor
from sb3_r2po.experiments.runs import ResultsStore, RunResult, RunSpec, run_one

__all__ = ["LockstepExecutor", "ResultsStore", "RunResult", "RunSpec", "SerialExecutor", "make_executor", "run_one"]
