"""Typed records of a run: candidates, revisions, discarded attempts and history entries.

``R2PO.history`` is a list of plain dicts (JSON-serialisable, public and documented on the Usage page of the
documentation); every dict is made by :meth:`HistoryEntry.to_dict`, so its keys and their order are defined here and
nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from sb3_r2po.common import finite
from sb3_r2po.common.rollouts import RolloutResult
from sb3_r2po.llm.asking import Answer

Kind = Literal["warmup", "given", "search", "critic", "fallback"]
"""Where a history entry's vector came from: a random warm-up draw, the user (``set_parameters()`` before ``learn()``,
evaluated for K episodes), a Search or Critic reply, or the fallback."""

Role = Literal["search", "critic"]
"""The LLM role that answered."""

RevisionStatus = Literal["none", "skipped", "failed", "declined", "interrupted", "kept", "rejected"]
"""
What became of an iteration's second candidate (a revision, or a second Search proposal):

- ``none``: the variant makes no second call;
- ``skipped``: the episode budget could not pay for its evaluation, or a callback stopped training;
- ``failed``: no usable reply (``on_unusable_reply="reask"``);
- ``declined``: equal to the first candidate and not evaluated again (``skip_unchanged_revisions``);
- ``interrupted``: a callback stopped training during its evaluation;
- ``kept`` / ``rejected``: the selection's verdict.
"""


def floats(values: Any) -> list[float]:
    """A vector as a list of Python floats (what the history stores)."""
    return [float(v) for v in values]


@dataclass
class Candidate:
    """
    A vector to evaluate, and its evaluation once it has one.

    :param kind: Where it came from.
    :param params: The vector.
    :param failures: Why earlier replies of its LLM call were unusable.
    :param adjusted: What the parser clipped or rounded in the accepted reply.
    :param reply: The accepted reply's text (``None``: not from the LLM).
    :param result: Its K-episode evaluation (``None`` until evaluated, or when a callback cut the evaluation).
    """

    kind: Kind
    params: np.ndarray
    failures: list[str] = field(default_factory=list)
    adjusted: list[str] = field(default_factory=list)
    reply: str | None = None
    result: RolloutResult | None = None

    @classmethod
    def answered(cls, kind: Kind, params: np.ndarray, answer: Answer) -> Candidate:
        """The candidate an LLM answer gave (``params``: its vector, or the fallback's when it gave none)."""
        reply = answer.calls[-1].reply if answer.params is not None and answer.calls else None
        return cls(kind, params, answer.failures, list(answer.notes), reply)

    @property
    def mean_return(self) -> float:
        assert self.result is not None, "a candidate's mean return is known once it is evaluated"
        return finite.mean(self.result.returns)

    def to_dict(self) -> dict[str, Any]:
        """The history's ``search`` field: the iteration's first candidate."""
        return {
            "kind": self.kind,
            "params": floats(self.params),
            "mean_return": self.mean_return,
            "failures": self.failures,
            "adjusted": self.adjusted,
        }


@dataclass
class Revision:
    """
    An iteration's second step: the Critic's revision of the first candidate, or a second Search proposal.

    :param role: The role asked (``None``: the variant makes no second call).
    :param status: What became of it (see :data:`RevisionStatus`).
    :param candidate: Its vector (``None`` when there was no usable reply, or no call).
    :param unchanged: Whether its vector equals the first candidate's (``None``: no vector).
    :param own_episodes: Whether the record lists the episodes of its own evaluation (``n_episodes``, ``returns``):
        true for a challenger of the first candidate, false for critic_only's revision (the entry itself).
    """

    role: Role | None = None
    status: RevisionStatus = "none"
    candidate: Candidate | None = None
    unchanged: bool | None = None
    failures: list[str] = field(default_factory=list)
    own_episodes: bool = True

    def decide(self, incumbent: float, keep_best: bool) -> bool:
        """Set ``status`` from the evaluation: kept when it scores at least ``incumbent`` (or without keep-best)."""
        assert self.candidate is not None
        if self.candidate.result is None:
            self.status = "interrupted"
        elif self.candidate.mean_return >= incumbent or not keep_best:  # ties go to the revision
            self.status = "kept"
        else:
            self.status = "rejected"
        return self.status == "kept"

    def to_dict(self) -> dict[str, Any]:
        """The history's ``revision`` field."""
        candidate = self.candidate
        evaluated = candidate is not None and candidate.result is not None
        record: dict[str, Any] = {
            "role": self.role,
            "status": self.status,
            "params": None if candidate is None else floats(candidate.params),
            "mean_return": candidate.mean_return if candidate is not None and evaluated else None,
            "failures": self.failures if candidate is None else candidate.failures,
            "adjusted": [] if candidate is None else candidate.adjusted,
        }
        if self.unchanged is not None:
            record["unchanged"] = self.unchanged
        if evaluated and self.own_episodes:
            assert candidate is not None and candidate.result is not None
            record["n_episodes"] = len(candidate.result.episodes)
            record["returns"] = floats(candidate.result.returns)
        return record


@dataclass(frozen=True)
class DiscardedAttempt:
    """An attempt of an iteration that an unusable reply discarded (``on_unusable_reply="rerun"``)."""

    role: Role
    reason: str
    episodes: int

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "reason": self.reason, "episodes": self.episodes}


@dataclass
class HistoryEntry:
    """
    One entry of the history: the kept candidate of a warm-up draw or of an iteration.

    :param iteration: The iteration it belongs to (0: the warm-up); a given vector's: the iterations completed before.
    :param kept: The kept candidate, evaluated.
    :param shown: What later prompts show of its episodes (``rollout_excerpt``, ``first_episode``; some variants).
    :param search: The iteration's first candidate (``None`` for the warm-up and critic_only).
    :param revision: The iteration's second step (``None`` for the warm-up).
    :param diagnostics: The Critic revision's diagnostics (:func:`~sb3_r2po.diagnostics.diagnose_revision`).
    :param discarded: The attempts of this iteration an unusable reply discarded.
    :param episodes: Episodes run when it was committed.
    :param timesteps: Environment steps run when it was committed.
    """

    iteration: int
    kept: Candidate
    shown: dict[str, Any] = field(default_factory=dict)
    search: Candidate | None = None
    revision: Revision | None = None
    diagnostics: dict[str, Any] | None = None
    discarded: tuple[DiscardedAttempt, ...] = ()
    episodes: int = 0
    timesteps: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The entry as ``R2PO.history`` stores it (see the Usage page of the documentation)."""
        result = self.kept.result
        assert result is not None, "only evaluated candidates enter the history"
        returns = result.returns
        record: dict[str, Any] = {
            "iteration": self.iteration,
            "kind": self.kept.kind,
            "params": floats(self.kept.params),
            "mean_return": finite.mean(returns),
            "std_return": finite.std(returns),
            "min_return": float(returns.min()),
            "max_return": float(returns.max()),
            "mean_length": float(np.mean([ep.length for ep in result.episodes])),
            "n_episodes": len(result.episodes),
            "returns": floats(returns),
            "non_finite_episodes": sum(ep.end == "non-finite" for ep in result.episodes),
            **self.shown,
        }
        if self.revision is not None:  # an iteration, not the warm-up
            record["search"] = None if self.search is None else self.search.to_dict()
            record["revision"] = self.revision.to_dict()
            if self.diagnostics is not None:
                record["diagnostics"] = self.diagnostics
            if self.discarded:
                record["discarded_attempts"] = [attempt.to_dict() for attempt in self.discarded]
        record["episodes"] = self.episodes
        record["timesteps"] = self.timesteps
        return record
