"""How an iteration produces its candidates: one search pattern per :data:`~sb3_r2po.variants.SearchMode`.

``R2PO`` runs every variant through the same loop (propose, evaluate, challenge, evaluate, select, commit); a
pattern supplies the LLM steps of that loop:

=====================  ================================  ============================================================
pattern                proposal (step 1)                 challenger (step 4)
=====================  ================================  ============================================================
``one``                a Search proposal                 the Critic's revision of it (none for props, props_plus)
``two_independent``    two Search proposals, one batch   the second of the pair
``two_sequential``     a Search proposal                 a second Search proposal that sees the first's return
``none``               the Critic's revision of the      none (the revision is always kept)
                       last history entry
=====================  ================================  ============================================================

Adding a variant is one entry in :data:`~sb3_r2po.variants.VARIANTS`; a new way of producing candidates is one
pattern here and its entry in :data:`PATTERNS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sb3_r2po.common import finite
from sb3_r2po.common.rollouts import RolloutResult
from sb3_r2po.diagnostics import diagnose_revision
from sb3_r2po.llm.asking import Answer
from sb3_r2po.r2po.records import Candidate, Revision, Role
from sb3_r2po.variants import SearchMode, Variant

if TYPE_CHECKING:
    from sb3_r2po.r2po.roles import LLMRoles


@dataclass(frozen=True)
class Start:
    """
    What an iteration starts from.

    :param episodes_left: Episodes the budget still pays for (``inf``: no budget).
    :param n_eval_episodes: K.
    :param last_result: The episodes of the last history entry, when still in memory (critic_only's evidence).
    :param revision_threshold: The revision rule's threshold (``tau_c``), for the diagnostics.
    """

    episodes_left: float
    n_eval_episodes: int
    last_result: RolloutResult | None
    revision_threshold: float | None


class SearchPattern:
    """
    One proposal from the Search, then, when the variant has a Critic, its revision (r2po, rep_traj, always_critic,
    three_traj); a single proposal otherwise (props, props_plus).

    :param variant: The variant.
    """

    first_role: Role = "search"
    """The role whose reply is the iteration's first candidate."""

    def __init__(self, variant: Variant) -> None:
        self.variant = variant

    @property
    def challenger(self) -> Role | None:
        """The role asked for a second candidate (``None``: one candidate per iteration)."""
        return None if self.variant.critic is None else "critic"

    def propose(self, roles: LLMRoles, start: Start) -> Answer:
        """Step 1: the first candidate's answer."""
        return roles.search()

    def challenge(self, roles: LLMRoles, first: Candidate) -> Answer:
        """Steps 3-4: the evidence package of the evaluated first candidate, and the Critic's revision of it."""
        assert first.result is not None
        evidence = roles.view.evidence(first.result)
        return roles.revise(first.params, first.mean_return, len(first.result.episodes), evidence, roles.seen)

    def entry(self, first: Candidate, revision: Revision) -> tuple[Candidate | None, Revision]:
        """The history entry's ``search`` and ``revision`` fields."""
        return first, revision

    def diagnose(self, first: Candidate, revision: Revision, start: Start, history: list[dict[str, Any]]) -> dict | None:
        """The diagnostics of a Critic revision (see :mod:`sb3_r2po.diagnostics`); ``None`` without one."""
        revised = revision.candidate
        if revision.role != "critic" or revised is None or revised.reply is None:
            return None
        after = revised.mean_return if revised.result is not None else None
        accepted = revision.status in ("kept", "declined")
        return _diagnose(first.params, first.mean_return, revised.params, after, revised.reply, accepted, start)


class PairedSearch(SearchPattern):
    """pure_search: two independent Search proposals from the same history, asked as one batch before any rollout (as
    the reference asks both before it evaluates either, so that an unusable second proposal discards the iteration
    before its first K episodes run, with ``on_unusable_reply="rerun"``); keep the best."""

    def __init__(self, variant: Variant) -> None:
        super().__init__(variant)
        self._spare: Answer | None = None

    @property
    def challenger(self) -> Role | None:
        return "search"

    def propose(self, roles: LLMRoles, start: Start) -> Answer:
        self._spare = None
        if start.episodes_left < 2 * start.n_eval_episodes:  # the budget pays for one evaluation only
            return roles.search()
        first, self._spare = roles.search_pair()
        if first.params is not None:  # an unusable first proposal is the iteration's first unusable reply
            roles.check_usable("search", self._spare)  # "rerun": discarded before any rollout
        return first

    def challenge(self, roles: LLMRoles, first: Candidate) -> Answer:
        """The pair's second proposal; asked again (never the first vector) when it repeats the first with
        ``reject_duplicates``, or when the first candidate came from the fallback of a single proposal."""
        spare, self._spare = self._spare, None
        repeated = spare is not None and spare.params is not None and np.array_equal(spare.params, first.params)
        if spare is not None and not (repeated and roles.model.reject_duplicates):
            return spare
        return roles.search(also=(first.params,))


class SecondPass(SearchPattern):
    """actor_second_pass: a second Search proposal that sees the first one evaluated; keep the best."""

    @property
    def challenger(self) -> Role | None:
        return "search"

    def challenge(self, roles: LLMRoles, first: Candidate) -> Answer:
        assert first.result is not None
        return roles.search(shown=((first.params, first.result),), also=(first.params,))


class CriticOnly(SearchPattern):
    """critic_only: the Critic revises the last history entry from its representative episode; always kept."""

    first_role: Role = "critic"

    @property
    def challenger(self) -> Role | None:
        return None

    def propose(self, roles: LLMRoles, start: Start) -> Answer:
        history = roles.model.history
        if not history:  # no warm-up: the reference asks with an empty history and no trace
            size = roles.model.policy.parameter_space.size
            return roles.revise(np.zeros(size), 0.0, 0, roles.view.evidence(None), roles.not_new())
        last = history[-1]
        result = start.last_result if _holds(start.last_result, last) else None  # not saved: lost after a load
        params, evidence = np.asarray(last["params"]), roles.view.evidence(result)
        return roles.revise(params, last["mean_return"], last["n_episodes"], evidence, roles.not_new())

    def entry(self, first: Candidate, revision: Revision) -> tuple[Candidate | None, Revision]:
        return None, Revision("critic", "kept", first, own_episodes=False)

    def diagnose(self, first: Candidate, revision: Revision, start: Start, history: list[dict[str, Any]]) -> dict | None:
        if not history or first.reply is None:
            return None
        last = history[-1]
        return _diagnose(last["params"], last["mean_return"], first.params, first.mean_return, first.reply, True, start)


PATTERNS: dict[SearchMode, type[SearchPattern]] = {
    "one": SearchPattern,
    "two_independent": PairedSearch,
    "two_sequential": SecondPass,
    "none": CriticOnly,
}
"""The pattern of each :data:`~sb3_r2po.variants.SearchMode`."""


def pattern_for(variant: Variant) -> SearchPattern:
    """The search pattern of ``variant``."""
    return PATTERNS[variant.search](variant)


def _holds(result: RolloutResult | None, record: dict[str, Any]) -> bool:
    """Whether ``result`` holds the episodes of history ``record``."""
    if result is None or len(result.episodes) != record["n_episodes"]:
        return False
    return bool(np.isclose(finite.mean(result.returns), record["mean_return"]))


def _diagnose(
    before: Any, before_return: float, after: Any, after_return: float | None, reply: str, accepted: bool, start: Start
) -> dict[str, Any]:
    threshold = start.revision_threshold
    above = threshold is not None and before_return >= threshold
    return diagnose_revision(before, after, before_return, after_return, reply, accepted=accepted, above_tau_c=above)
