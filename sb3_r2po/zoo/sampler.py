"""An Optuna hyperparameter sampler for ``--algo r2po`` in RL Zoo's ``-optimize`` mode.

Registered by :func:`sb3_r2po.zoo.register_r2po` in ``rl_zoo3.hyperparams_opt.HYPERPARAMS_SAMPLER``, so that

    python -m sb3_r2po.zoo train --algo r2po --env CartPole-v1 -optimize --n-trials 20 \\
        --storage sqlite:///r2po.db --study-name r2po-cartpole --hyperparams llm:"'http://host:8000/v1#model'"

tunes R2PO, and several such processes started with the same ``--storage`` and ``--study-name`` share the trials
(the Scaling page of the documentation). Everything not sampled here comes from R2PO's zoo hyperparameter file
(``sb3_r2po/zoo/configs/r2po.yml``) and ``--hyperparams``.
Each trial is scored by the zoo's evaluation of the trained policy when the run ends (:mod:`sb3_r2po.zoo.optimize`).
"""

from __future__ import annotations

from typing import Any

SEARCH_SPACE: dict[str, list[Any]] = {
    "step_size": [0.1, 0.25, 0.5, 1.0, 2.0],
    "n_eval_episodes": [5, 10, 20],
    "temperature": [0.0, 0.3, 0.7, 1.0],
    "max_trajectory_steps": [20, 40, 80, None],
    "reply_style": ["indexed", "list"],
}
"""
The sampled R2PO hyperparameters and their choices (categorical). The paper's values are among them: step size 1.0,
or 0.1 for InvertedDoublePendulum and Swimmer; K = 20; temperature 0.0 and the whole episode (``None``) of
``sb3_r2po/zoo/configs/r2po.yml``; R2PO's default reply style, ``"indexed"``.
"""


def sample_r2po_params(trial: Any, n_actions: int, n_envs: int, additional_args: dict[str, Any]) -> dict[str, Any]:
    """
    Sample R2PO hyperparameters for one Optuna trial (the signature of RL Zoo's samplers).

    :param trial: The Optuna trial.
    :param n_actions: Unused (RL Zoo passes it to every sampler).
    :param n_envs: Unused.
    :param additional_args: Unused.
    :return: Constructor arguments of :class:`sb3_r2po.R2PO`.
    """
    return {name: trial.suggest_categorical(name, choices) for name, choices in SEARCH_SPACE.items()}
