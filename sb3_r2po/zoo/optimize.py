"""RL Zoo's ``-optimize`` for R2PO: :class:`FinalTrialEvalCallback` evaluates an R2PO run that ended (at its
``max_episodes``) after its last scheduled evaluation (the RL Zoo page of the documentation). Importing this module
imports ``rl_zoo3`` and ``optuna``."""

from __future__ import annotations

from rl_zoo3.callbacks import TrialEvalCallback


class FinalTrialEvalCallback(TrialEvalCallback):
    """The zoo's ``TrialEvalCallback``, plus an evaluation when an R2PO run ends after its last scheduled one."""

    evaluated_at: int | None = None  # n_calls at the last evaluation, scheduled or the final one

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
        eval_freq = self.eval_freq  # the zoo's own evaluation and report, made due at this step
        self.eval_freq = 1
        try:
            self._on_step()
        finally:
            self.eval_freq = eval_freq
