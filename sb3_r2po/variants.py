"""R2PO and the paper's baselines and ablations, as data (the table on the Variants page of the documentation).

A :class:`Variant` says which LLM calls an iteration makes (its search pattern, :mod:`sb3_r2po.r2po.roles`), which
template each call uses (the Jinja comment at the top of each file in ``sb3_r2po/prompts/templates`` names the
reference's), what the Critic sees, whether keep-best applies, whether actions are clipped and how replies are read,
as the reference's agent of the variant does. Adding a variant is one entry in :data:`VARIANTS`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from sb3_r2po.common.parsing import Reading

SearchMode = Literal["one", "two_independent", "two_sequential", "none"]
SearchPrompt = Literal["r2po", "props", "props_plus"]  # the Search template search_<name>.j2
CriticPrompt = Literal["r2po", "rep_traj", "three_traj", "critic_only"]  # the Critic template critic_<name>.j2
HistoryStyle = Literal["r2po", "f", "labelled", "reward"]
"""How a prompt writes the history: ``r2po`` (rewards, warm-up entries marked), ``f`` (ProPS's f(params)),
``labelled`` (each entry a warm-up or a training trial) or ``reward`` (mean rewards, the latest with an excerpt)."""

EXCERPT_STEPS = 8  # steps of a history entry's rollout excerpt: the first 4 and the last 4 (the reference's max_steps)


@dataclass(frozen=True)
class CriticEvidence:
    """
    What the Critic is shown, and with which template.

    :param prompt: The Critic template (see :data:`CriticPrompt`).
    :param statistics: Aggregate statistics (return, length, successes).
    :param trajectories: Named trajectories: ``median``, ``mean`` (closest to the mean return), ``worst``, ``best``.
    :param rule: The revision rule (when ``tau_c`` is known).
    :param max_steps: Step budget per trajectory; ``None`` uses the model's ``max_trajectory_steps``.
    :param step_rewards: Whether trajectories show each step's reward.
    :param history: How the history is written (see :data:`HistoryStyle`); ``reward`` adds the rollout excerpts.
    """

    prompt: CriticPrompt = "r2po"
    statistics: bool = True
    trajectories: tuple[str, ...] = ("median",)
    rule: bool = True
    max_steps: int | None = None
    step_rewards: bool = False
    history: HistoryStyle = "r2po"

    @property
    def excerpts(self) -> bool:
        """Whether the history shows rollout excerpts of its latest entries."""
        return self.history == "reward"


@dataclass(frozen=True)
class Variant:
    """
    One method of the paper's comparison.

    :param name: The ``variant=`` value.
    :param summary: One line for docs and tables.
    :param search: ``one`` Search proposal, ``two_independent`` proposals from the same history,
        ``two_sequential`` (the second sees the first's return), or ``none``.
    :param critic: The Critic's template and evidence, or ``None`` for no Critic call.
    :param keep_best: Whether the second candidate must match the first's mean return to be kept.
    :param search_prompt: The Search template (see :data:`SearchPrompt`).
    :param search_history: How the Search prompt writes the history (see :data:`HistoryStyle`).
    :param search_trajectories: Whether, on tabular tasks, the Search prompt shows each entry's first episode (ProPS+).
    :param clip_actions: Whether a linear policy's continuous action is clipped to the action bounds (the reference's
        r2po, props and props_plus clip; its six ablations step the env with the raw output).
    :param reading: How a reply is read (:data:`~sb3_r2po.common.parsing.Reading`) for a linear and a tabular policy.
    """

    name: str
    summary: str
    search: SearchMode = "one"
    critic: CriticEvidence | None = CriticEvidence()
    keep_best: bool = True
    search_prompt: SearchPrompt = "r2po"
    search_history: HistoryStyle = "r2po"
    search_trajectories: bool = False
    clip_actions: bool = True
    reading: tuple[Reading, Reading] = ("first", "last")

    @property
    def candidates_per_iteration(self) -> int:
        """Evaluated candidates (K episodes each), and LLM calls, of a full iteration."""
        return {"one": 1, "two_independent": 2, "two_sequential": 2, "none": 0}[self.search] + (self.critic is not None)


_REP_TRAJ = CriticEvidence(
    "rep_traj", statistics=False, trajectories=("mean",), rule=False, step_rewards=True, history="reward"
)


def _ablation(name: str, summary: str, **changes: Any) -> Variant:
    """One of the reference's six ablation agents: the ProPS Search prompt and history, the raw (unclipped) actions."""
    return Variant(name, summary, **{"search_prompt": "props", "search_history": "f", "clip_actions": False, **changes})


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("r2po", "Search, then a Critic shown statistics, the median rollout and the revision rule; keep-best"),
        Variant(
            "props",
            "ProPS: one Search proposal per iteration, a black box (no task description)",
            critic=None,
            search_prompt="props",
            search_history="f",
            reading=("first_line", "last"),
        ),
        Variant(
            "props_plus",
            "ProPS+: ProPS with the task description (tabular tasks: each history entry's first episode)",
            critic=None,
            search_prompt="props_plus",
            search_history="f",
            search_trajectories=True,
            reading=("first_line", "last"),
        ),
        _ablation(
            "pure_search",
            "two independent Search proposals from the same history; keep the best",
            search="two_independent",
            critic=None,
            reading=("first", "first"),
        ),
        _ablation(
            "actor_second_pass",
            "Search A is evaluated and shown, then Search B; keep the best",
            search="two_sequential",
            critic=None,
            reading=("first", "first"),
        ),
        Variant(
            "critic_only",
            "one draft-critique-revise Critic call per iteration (history excerpts, the latest trace); always kept",
            "none",
            dataclasses.replace(_REP_TRAJ, prompt="critic_only"),
            keep_best=False,
            clip_actions=False,
            reading=("first", "first"),
        ),
        _ablation(
            "rep_traj", "Search, then a Critic shown the rollout closest to the mean return only; keep-best", critic=_REP_TRAJ
        ),
        _ablation("always_critic", "rep_traj with the revision always committed", critic=_REP_TRAJ, keep_best=False),
        _ablation(
            "three_traj",
            "Search, then a Critic shown the worst, median and best rollouts (25 head + 25 tail steps); keep-best",
            critic=CriticEvidence(
                "three_traj",
                statistics=False,
                trajectories=("worst", "median", "best"),
                rule=False,
                max_steps=50,
                history="labelled",
            ),
            search_history="labelled",
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
