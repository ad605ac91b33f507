"""R2PO and the paper's baselines and ablations, as data.

A :class:`Variant` says which LLM calls an iteration makes, what evidence the Critic sees, whether
keep-best selection applies and whether the task description is shown. :meth:`R2PO._iterate` reads it;
adding a variant is one entry in :data:`VARIANTS`.

Budget per iteration (K = ``n_eval_episodes``); ``max_episodes`` gives every variant the same episode
budget, so a one-call variant runs twice as many iterations:

============================  =========  ==========================  ===========================
variant                       LLM calls  episodes                    selection
============================  =========  ==========================  ===========================
``r2po``                      2          2K (K if revision declined) keep-best, ties to revision
``props`` / ``props_plus``    1          K                           none (every proposal kept)
``pure_search``               2          2K                          best of two proposals
``actor_second_pass``         2          2K                          best of two proposals
``critic_only``               1          K                           none (every revision kept)
``rep_traj`` / ``three_traj`` 2          2K (K if declined)          keep-best, ties to revision
``always_critic``             2          2K (K if declined)          none (revision always kept)
============================  =========  ==========================  ===========================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SearchMode = Literal["one", "two_independent", "two_sequential", "none"]


@dataclass(frozen=True)
class CriticEvidence:
    """
    What the Critic is shown of the candidate's K episodes.

    :param statistics: Aggregate statistics (return, length, successes).
    :param trajectories: Named trajectories: ``median``, ``mean`` (closest to the mean return), ``worst``, ``best``.
    :param rule: The revision rule (when ``tau_c`` is known).
    :param max_steps: Step budget per trajectory; ``None`` uses the model's ``max_trajectory_steps``.
    """

    statistics: bool = True
    trajectories: tuple[str, ...] = ("median",)
    rule: bool = True
    max_steps: int | None = None


@dataclass(frozen=True)
class Variant:
    """
    One method of the paper's comparison.

    :param name: The ``variant=`` value.
    :param summary: One line for docs and tables.
    :param search: ``one`` Search proposal, ``two_independent`` proposals from the same history,
        ``two_sequential`` (the second sees the first's return), or ``none``.
    :param critic: The Critic's evidence, or ``None`` for no Critic call.
    :param keep_best: Whether the second candidate must match the first's mean return to be kept.
    :param task_description: Whether prompts show the task description.
    """

    name: str
    summary: str
    search: SearchMode = "one"
    critic: CriticEvidence | None = CriticEvidence()
    keep_best: bool = True
    task_description: bool = True

    @property
    def calls_per_iteration(self) -> int:
        return {"one": 1, "two_independent": 2, "two_sequential": 2, "none": 0}[self.search] + (self.critic is not None)

    @property
    def candidates_per_iteration(self) -> int:
        """Evaluated candidates (K episodes each) in a full iteration."""
        return self.calls_per_iteration


_BARE = CriticEvidence(statistics=False, trajectories=("mean",), rule=False)

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("r2po", "Search, then a Critic shown statistics, the median rollout and the revision rule; keep-best"),
        Variant("props", "ProPS: one Search proposal per iteration, no task description", critic=None, task_description=False),
        Variant("props_plus", "ProPS+: ProPS with the task description", critic=None),
        Variant(
            "pure_search", "two independent Search proposals from the same history; keep the best", "two_independent", None
        ),
        Variant("actor_second_pass", "Search A is evaluated and shown, then Search B; keep the best", "two_sequential", None),
        Variant(
            "critic_only",
            "one Critic call revising the last candidate from its representative rollout; always kept",
            "none",
            _BARE,
            keep_best=False,
        ),
        Variant(
            "rep_traj", "Search, then a Critic shown the rollout closest to the mean return only; keep-best", critic=_BARE
        ),
        Variant("always_critic", "rep_traj with the revision always committed", critic=_BARE, keep_best=False),
        Variant(
            "three_traj",
            "Search, then a Critic shown the worst, median and best rollouts (25 head + 25 tail steps); keep-best",
            critic=CriticEvidence(statistics=False, trajectories=("worst", "median", "best"), rule=False, max_steps=50),
        ),
    ]
}
"""Every variant by name."""


def get_variant(name: str) -> Variant:
    """The variant called ``name``; a clear ``ValueError`` listing the names otherwise."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"Unknown variant {name!r}; choose one of {sorted(VARIANTS)}") from None
