"""
The experiment layer: a run is one value (:class:`RunSpec`), built and trained through one path (:func:`run_one`,
the zoo's hyperparameter files), its result (:class:`RunResult`) kept in one store (:class:`ResultsStore`) that a cut
command continues from, carried out by an executor (:func:`make_executor`: ``serial``, ``lockstep`` or ``ray``), and
summarised by :mod:`~sb3_r2po.experiments.stats`, :mod:`~sb3_r2po.experiments.report` and
:mod:`~sb3_r2po.experiments.plots`. Named grids (the paper's) are in :mod:`~sb3_r2po.experiments.grids`.

``python -m sb3_r2po.compare`` and ``python -m sb3_r2po.ablate`` are command lines over it.
"""

from sb3_r2po.experiments.executors import EXECUTORS, Executor, LockstepExecutor, SerialExecutor, make_executor
from sb3_r2po.experiments.runs import AttemptInProgressError, PreparedRun, RunResult, RunSpec, finish_run, prepare_run, run_one
from sb3_r2po.experiments.store import ResultsStore

__all__ = [
    "EXECUTORS",
    "AttemptInProgressError",
    "Executor",
    "LockstepExecutor",
    "PreparedRun",
    "ResultsStore",
    "RunResult",
    "RunSpec",
    "SerialExecutor",
    "finish_run",
    "make_executor",
    "prepare_run",
    "run_one",
]
