"""R2PO and the paper's baselines and ablations, as data.

A :class:`Variant` says which LLM calls an iteration makes, which prompt each call uses, what evidence the Critic
sees and whether keep-best selection applies. ``R2PO`` runs every variant through one loop, with the LLM steps of the
search pattern (:mod:`sb3_r2po.r2po.patterns`) its ``search`` mode names; adding a variant is one entry in
:data:`VARIANTS`. Each prompt follows the reference implementation's template for that variant (the Jinja comment at
the top of every file in ``sb3_r2po/prompts/templates`` names it):

============================  ============================  ==============================================
variant                       Search prompt                 Critic prompt and evidence
============================  ============================  ==============================================
``r2po``                      ``search_r2po`` (black box)   ``critic_r2po``: statistics, median episode, rule
``props``                     ``search_props``              none
``props_plus``                ``search_props_plus`` (task;  none
                              tabular: each entry's
                              first episode)
``pure_search``               ``search_props`` (twice)      none
``actor_second_pass``         ``search_props`` (twice)      none
``critic_only``               none                          ``critic_only``: draft-critique-revise, latest
                                                            trace, history excerpts
``rep_traj``                  ``search_props``              ``critic_rep_traj``: mean-closest trace with
                                                            rewards, history excerpts
``always_critic``             ``search_props``              as ``rep_traj``
``three_traj``                ``search_props`` (labelled    ``critic_three_traj``: worst, median, best
                              history)                      (25 + 25 steps each)
============================  ============================  ==============================================

Budget per iteration (K = ``n_eval_episodes``); ``max_episodes`` gives every variant the same episode
budget, so a one-call variant runs twice as many iterations:

==============================  =========  ==========================  ===========================
variant                         LLM calls  episodes                    selection
==============================  =========  ==========================  ===========================
``r2po``                        2          2K                          keep-best, ties to revision
``props`` / ``props_plus``      1          K                           none (every proposal kept)
``pure_search``                 2          2K                          best of two proposals
``actor_second_pass``           2          2K                          best of two proposals
``critic_only``                 1          K                           none (every revision kept)
``rep_traj`` / ``three_traj``   2          2K                          keep-best, ties to revision
``always_critic``               2          2K                          none (revision always kept)
==============================  =========  ==========================  ===========================

(With ``skip_unchanged_revisions=True``, ours, an iteration whose revision equals its candidate spends K episodes.)

As in the reference, r2po, props and props_plus clip a linear policy's continuous actions to the action bounds,
the six ablations step the env with the raw output (``Variant.clip_actions``), and each variant reads replies as
the reference's agent of it does, for linear and for tabular policies (``Variant.reading``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sb3_r2po.common.parsing import Reading

SearchMode = Literal["one", "two_independent", "two_sequential", "none"]
SearchPrompt = Literal["r2po", "props", "props_plus"]
"""The Search template: ``search_<name>.j2``."""
CriticPrompt = Literal["r2po", "rep_traj", "three_traj", "critic_only"]
"""The Critic template: ``critic_<name>.j2`` (``critic_only.j2`` for ``critic_only``)."""
HistoryStyle = Literal["r2po", "f", "labelled", "reward"]
"""
How a prompt writes the history, oldest first:

- ``r2po``: each entry's vector with its reward, a warm-up entry marked as one episode's reward (the reference's
  ``rollout_reward`` / ``mean_reward``);
- ``f``: each entry's vector with its value f(params), warm-up entries not told apart (ProPS's format);
- ``labelled``: as ``r2po`` with every entry labelled a warm-up or a training trial (three_traj);
- ``reward``: each entry's vector with its mean reward, warm-up entries not told apart; the latest entries also show
  an excerpt of their representative episode (rep_traj, always_critic, critic_only).
"""

EXCERPT_STEPS = 8
"""Steps of a history entry's rollout excerpt: the first 4 and the last 4 (the reference's ``max_steps=8``)."""


@dataclass(frozen=True)
class CriticEvidence:
    """
    What the Critic is shown, and with which template.

    :param prompt: The Critic template (see :data:`CriticPrompt`).
    :param statistics: Aggregate statistics (return, length, successes).
    :param trajectories: Named trajectories: ``median``, ``mean`` (closest to the mean return), ``worst``, ``best``
        (critic_only: the latest candidate's episode closest to its mean return).
    :param rule: The revision rule (when ``tau_c`` is known).
    :param max_steps: Step budget per trajectory; ``None`` uses the model's ``max_trajectory_steps``.
    :param step_rewards: Whether trajectories show each step's reward (the reference: rep_traj, always_critic and
        critic_only do; r2po and three_traj show states and actions only).
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
    :param search_trajectories: Whether, on tabular tasks, the Search prompt shows each history entry's first
        evaluation episode (ProPS+).
    :param clip_actions: Whether a linear policy's continuous action is clipped to the action bounds before the env
        steps with it (the reference: r2po, props and props_plus clip; its six ablations step the env with the raw
        linear output, so an env that charges a control cost charges it on the raw value).
    :param reading: How a reply is read (see :data:`~sb3_r2po.common.parsing.Reading`) for a linear policy and for a
        tabular one: the reference's ``parse_parameters`` of the variant's linear and tabular agents.
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
    def calls_per_iteration(self) -> int:
        return {"one": 1, "two_independent": 2, "two_sequential": 2, "none": 0}[self.search] + (self.critic is not None)

    @property
    def candidates_per_iteration(self) -> int:
        """Evaluated candidates (K episodes each) in a full iteration."""
        return self.calls_per_iteration

    @property
    def search_shows_task(self) -> bool:
        """Whether the Search prompt shows the task description (ProPS+ only; the others are black boxes)."""
        return self.search_prompt == "props_plus"


_REP_TRAJ = CriticEvidence(
    "rep_traj", statistics=False, trajectories=("mean",), rule=False, step_rewards=True, history="reward"
)

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
        Variant(
            "pure_search",
            "two independent Search proposals from the same history; keep the best",
            "two_independent",
            None,
            search_prompt="props",
            search_history="f",
            clip_actions=False,
            reading=("first", "first"),
        ),
        Variant(
            "actor_second_pass",
            "Search A is evaluated and shown, then Search B; keep the best",
            "two_sequential",
            None,
            search_prompt="props",
            search_history="f",
            clip_actions=False,
            reading=("first", "first"),
        ),
        Variant(
            "critic_only",
            "one draft-critique-revise Critic call per iteration (history excerpts, the latest trace); always kept",
            "none",
            CriticEvidence(
                "critic_only", statistics=False, trajectories=("mean",), rule=False, step_rewards=True, history="reward"
            ),
            keep_best=False,
            clip_actions=False,
            reading=("first", "first"),
        ),
        Variant(
            "rep_traj",
            "Search, then a Critic shown the rollout closest to the mean return only; keep-best",
            critic=_REP_TRAJ,
            search_prompt="props",
            search_history="f",
            clip_actions=False,
        ),
        Variant(
            "always_critic",
            "rep_traj with the revision always committed",
            critic=_REP_TRAJ,
            keep_best=False,
            search_prompt="props",
            search_history="f",
            clip_actions=False,
        ),
        Variant(
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
            search_prompt="props",
            search_history="labelled",
            clip_actions=False,
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
