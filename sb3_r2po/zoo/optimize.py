"""
RL Zoo's ``-optimize`` for R2PO: a trial is scored when the R2PO run ends.

The zoo scores an Optuna trial with ``TrialEvalCallback``: it evaluates the model every
``n_timesteps // n_evaluations`` environment steps (``--n-evaluations``; by default one evaluation per 100k steps)
and returns the last evaluation's mean reward. R2PO stops at its ``max_episodes`` budget instead, usually long before
the first scheduled evaluation (the steps an episode takes depend on the policy: a Nim game lasts at most 10 steps,
a CartPole episode 8 to 500), so every trial used to score ``-inf``. No step horizon set in advance fixes that.

:class:`FinalTrialEvalCallback` is the zoo's callback plus one more evaluation when an R2PO run ends after its last
scheduled one, reported to the trial (and to its pruner) like the others. It evaluates R2PO's policy, which holds the
best candidate of the run, on the zoo's evaluation env for ``--eval-episodes`` episodes, exactly as the scheduled
evaluations do. :func:`sb3_r2po.zoo.register_r2po` installs it in ``rl_zoo3.exp_manager``; other algorithms keep the
zoo's behaviour (they run to ``n_timesteps``, where the scheduled evaluations are).

Importing this module imports ``rl_zoo3`` and ``optuna``.
"""

from __future__ import annotations

from typing import Any

from rl_zoo3.callbacks import TrialEvalCallback


class FinalTrialEvalCallback(TrialEvalCallback):
    """
    The zoo's ``TrialEvalCallback`` (same arguments), plus an evaluation at the end of an R2PO run when the last
    scheduled evaluation was not at its last step and the trial was not pruned.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.evaluated_at: int | None = None
        """``n_calls`` at the last evaluation (``None``: none yet)."""

    def _due(self) -> bool:
        return self.eval_freq > 0 and self.n_calls % self.eval_freq == 0

    def _on_step(self) -> bool:
        due = self._due()
        continue_training = super()._on_step()
        if due:
            self.evaluated_at = self.n_calls
        return continue_training

    def _on_training_end(self) -> None:
        super()._on_training_end()
        from sb3_r2po import R2PO

        if not isinstance(self.model, R2PO) or self.is_pruned or self.n_calls == 0 or self.evaluated_at == self.n_calls:
            return
        # the zoo's own evaluation and report (TrialEvalCallback._on_step), made due at this step
        eval_freq = self.eval_freq
        self.eval_freq = 1
        try:
            self._on_step()
        finally:
            self.eval_freq = eval_freq
