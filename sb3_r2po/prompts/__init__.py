"""Prompts: Jinja2 templates (``templates/*.j2``), the task descriptions they show (:mod:`sb3_r2po.prompts.tasks`) and
named prompt settings, each fixing all eleven of R2PO's prompt-rendering parameters::

    model = R2PO("MlpLinear", "Swimmer-v5", llm="embedded", **prompt_preset("tight"))

``full`` is the reference's rendering (R2PO's defaults). ``lean`` and ``tight`` are ours, for small models on a CPU:
shorter prompts (``prompt_layout="compact"``) with our additions on (``search_sees_task``, ``critic_selection_hints``,
``extra_statistics``), which makes a run a variant of R2PO, not the paper's method.
"""

from __future__ import annotations

from typing import Any

from sb3_r2po.prompts.tasks import TASK_DESCRIPTIONS, TaskDescription, describe_task, register_task_description

__all__ = [
    "PROMPT_PRESETS",
    "TASK_DESCRIPTIONS",
    "TaskDescription",
    "describe_task",
    "prompt_preset",
    "register_task_description",
]

_OURS = {"search_sees_task": True, "critic_selection_hints": True, "extra_statistics": True}  # on in the CPU presets

# For CPU models (the quickstart's): the 8 best and 4 latest history entries, grown by appending up to 8 more before the
# window is cut back (prefix reuse), 20 trajectory steps (head and tail), 2 figures, repeated steps folded, vectors
# written as lists (params: [v, ...]), our additions on.
_LEAN = {
    "history_best_k": 8,
    "history_recent": 4,
    "history_slack": 8,
    "max_trajectory_steps": 20,
    "trajectory_digits": 2,
    "fold_repeated_steps": True,
    "reply_style": "list",
    "prompt_layout": "compact",
    **_OURS,
}

PROMPT_PRESETS: dict[str, dict[str, Any]] = {
    # The reference's rendering (R2PO's defaults): the whole history and trajectories, 3 figures, indexed vectors.
    "full": {
        "history_best_k": None,
        "history_recent": None,
        "history_slack": 0,
        "max_trajectory_steps": None,
        "trajectory_digits": 3,
        "fold_repeated_steps": False,
        "reply_style": "indexed",
        "prompt_layout": "reference",
        "search_sees_task": False,
        "critic_selection_hints": False,
        "extra_statistics": False,
    },
    "lean": _LEAN,
    # Long episodes: keeps Swimmer's Critic prompt under 3000 tokens at iteration 100 (5 best + 3 latest, 12 steps).
    "tight": {**_LEAN, "history_best_k": 5, "history_recent": 3, "history_slack": 0, "max_trajectory_steps": 12},
}
"""The presets by name: each maps R2PO's prompt parameters to their values."""


def prompt_preset(name: str) -> dict[str, Any]:
    """
    The R2PO keyword arguments of a named prompt preset (a copy: change it freely).

    :param name: One of ``PROMPT_PRESETS``: ``"full"``, ``"lean"`` or ``"tight"``.
    :raises ValueError: for an unknown name.
    """
    if name not in PROMPT_PRESETS:
        raise ValueError(f"unknown prompt preset {name!r}; choose one of {sorted(PROMPT_PRESETS)}")
    return dict(PROMPT_PRESETS[name])
