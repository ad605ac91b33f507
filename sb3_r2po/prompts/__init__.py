"""Prompts: Jinja2 templates (``templates/*.j2``), the task descriptions they show (:mod:`sb3_r2po.prompts.tasks`) and
named prompt settings, each fixing all eleven of R2PO's prompt-rendering parameters (``full``: the reference's; ``lean``
and ``tight``: ours, for small CPU models, a variant of R2PO: see the fidelity page)::

    model = R2PO("MlpLinear", "Swimmer-v5", llm="embedded", **prompt_preset("tight"))
"""

from __future__ import annotations

from typing import Any

from sb3_r2po.prompts.tasks import TASK_DESCRIPTIONS, TaskDescription, describe_task, register_task_description

__all__ = ["PROMPT_PRESETS", "TASK_DESCRIPTIONS", "TaskDescription", "describe_task", "prompt_preset"]
__all__ += ["register_task_description"]

_OURS = {"search_sees_task": True, "critic_selection_hints": True, "extra_statistics": True}  # on in the CPU presets

# For CPU models (the quickstart's); the shown history grows by appending (prefix reuse) before it is cut back.
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
    "full": {  # the reference's rendering (R2PO's defaults)
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
    """The R2PO keyword arguments of a named prompt preset (a copy: change it freely).

    :param name: One of ``PROMPT_PRESETS``: ``"full"``, ``"lean"`` or ``"tight"``.
    :raises ValueError: for an unknown name.
    """
    if name not in PROMPT_PRESETS:
        raise ValueError(f"unknown prompt preset {name!r}; choose one of {sorted(PROMPT_PRESETS)}")
    return dict(PROMPT_PRESETS[name])
