"""
The experiment layer: a run is one value (:class:`RunSpec`), built and trained through one path (:func:`run_one`,
the zoo's hyperparameter files), its result (:class:`RunResult`) kept in one store (:class:`ResultsStore`) that a cut
command continues from (all in :mod:`~sb3_r2po.experiments.runs`), carried out by an executor (:func:`make_executor`:
``serial``, ``lockstep`` or ``ray``), and summarised by :mod:`~sb3_r2po.experiments.stats` and
:mod:`~sb3_r2po.experiments.report`. Named grids (the paper's) are in :mod:`~sb3_r2po.experiments.grids`.

``python -m sb3_r2po.compare`` and ``python -m sb3_r2po.ablate`` are command lines over it.
"""

from sb3_r2po.experiments.executors import LockstepExecutor, SerialExecutor, make_executor
from sb3_r2po.experiments.runs import ResultsStore, RunResult, RunSpec, run_one

__all__ = ["LockstepExecutor", "ResultsStore", "RunResult", "RunSpec", "SerialExecutor", "make_executor", "run_one"]
