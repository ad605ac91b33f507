"""Named prompt settings: how much history and trajectory R2PO's prompts show, how vectors are written, and which of
our prompt additions are on.

Each preset fixes all eleven of R2PO's prompt-rendering parameters, so it reads the same whatever the defaults::

    from sb3_r2po import R2PO
    from sb3_r2po.prompts import prompt_preset

    model = R2PO("MlpLinear", "Swimmer-v5", llm="embedded", **prompt_preset("tight"))

``full`` is the reference implementation's rendering (R2PO's defaults). ``lean`` and ``tight`` are ours, for small
models on a CPU: besides shorter prompts (our compact data layout, ``prompt_layout="compact"``) they turn on our
additions, which the reference's prompts do not have:
``search_sees_task`` (the Search sees the task and the policy layout), ``critic_selection_hints`` (the Critic is told
what the selection does with its revision) and ``extra_statistics`` (episode counts, the best value so far, the
standard deviation and the episode endings). A run with them is a variant of R2PO, not the paper's method. With any
of them (or a compressed history) the Critic's sections are ordered for prefix reuse: what stays the same during a
run first (the reply layout among it), the history next, the proposal and its test last
(:class:`~sb3_r2po.prompts.builder.PromptContext`'s ``reuse_order``).

Measured sizes and results of each preset: the Performance page of the documentation.
"""

from __future__ import annotations

from typing import Any

_OURS = {"search_sees_task": True, "critic_selection_hints": True, "extra_statistics": True}
"""Our prompt additions, on in the CPU presets."""

PROMPT_PRESETS: dict[str, dict[str, Any]] = {
    # The reference implementation's rendering: the whole history, whole trajectories, 3 figures, indexed vectors, and
    # none of our additions. These are R2PO's defaults.
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
    # For CPU models (the quickstart's): the 8 best and 4 latest history entries, grown by appending up to 8 more before
    # the window is cut back (prefix reuse), 20 trajectory steps (head and tail), 2 figures, repeated steps folded,
    # vectors written as lists (params: [v, ...]), our additions on.
    "lean": {
        "history_best_k": 8,
        "history_recent": 4,
        "history_slack": 8,
        "max_trajectory_steps": 20,
        "trajectory_digits": 2,
        "fold_repeated_steps": True,
        "reply_style": "list",
        "prompt_layout": "compact",
        **_OURS,
    },
    # Long episodes: keeps Swimmer's Critic prompt under 3000 tokens at iteration 100 (5 best + 3 latest, 12 steps).
    "tight": {
        "history_best_k": 5,
        "history_recent": 3,
        "history_slack": 0,
        "max_trajectory_steps": 12,
        "trajectory_digits": 2,
        "fold_repeated_steps": True,
        "reply_style": "list",
        "prompt_layout": "compact",
        **_OURS,
    },
}
"""The presets by name: each maps R2PO's prompt parameters to their values."""


def prompt_preset(name: str) -> dict[str, Any]:
    """
    The R2PO keyword arguments of a named prompt preset (a copy: change it freely).

    :param name: One of ``PROMPT_PRESETS``: ``"full"``, ``"lean"`` or ``"tight"``.
    :return: ``history_best_k``, ``history_recent``, ``history_slack``, ``max_trajectory_steps``, ``trajectory_digits``,
        ``fold_repeated_steps``, ``reply_style``, ``prompt_layout``, ``search_sees_task``, ``critic_selection_hints``
        and ``extra_statistics``.
    :raises ValueError: for an unknown name.
    """
    if name not in PROMPT_PRESETS:
        raise ValueError(f"unknown prompt preset {name!r}; choose one of {sorted(PROMPT_PRESETS)}")
    return dict(PROMPT_PRESETS[name])
