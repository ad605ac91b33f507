"""
RL Zoo's ``-optimize`` for R2PO: a trial is scored when the R2PO run ends.

The zoo's ``TrialEvalCallback`` evaluates every ``n_timesteps // n_evaluations`` steps; R2PO stops at its
``max_episodes`` budget, usually before the first of them, so every trial scored ``-inf``. :class:`FinalTrialEvalCallback`
adds one evaluation (of the policy, which holds the run's best candidate) when an R2PO run ends after its last
scheduled one, reported to the trial like the others. Importing this module imports ``rl_zoo3`` and ``optuna``.
"""

from __future__ import annotations

from typing import Any

from rl_zoo3.callbacks import TrialEvalCallback


class FinalTrialEvalCallback(TrialEvalCallback):
    """The zoo's ``TrialEvalCallback``, plus an evaluation when an R2PO run ends after its last scheduled one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.evaluated_at: int | None = None  # n_calls at the last evaluation

    def _on_step(self) -> bool:
        due = self.eval_freq > 0 and self.n_calls % self.eval_freq == 0
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
