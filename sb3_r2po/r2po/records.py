"""The records of a run: candidates, revisions, discarded attempts, history entries, and questions asked of the
history (``R2PO.history``: plain JSON-serialisable dicts, documented on the Usage page, each made by
:meth:`HistoryEntry.to_dict`, so its keys and their order are defined here and nowhere else)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np

from sb3_r2po.common.evidence import success_tolerance
from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.common.rollouts import RolloutResult, finite_mean, finite_std
from sb3_r2po.llm.asking import Answer

Kind = Literal["warmup", "given", "search", "critic", "fallback"]
"""Where a history entry's vector came from: a random warm-up draw, the user (``set_parameters()`` before ``learn()``,
evaluated for K episodes), a Search or Critic reply, or the fallback."""

Role = Literal["search", "critic"]  # the LLM role that answered

RevisionStatus = Literal["none", "skipped", "failed", "declined", "interrupted", "kept", "rejected"]
"""What became of an iteration's second candidate: ``none`` (no second call), ``skipped`` (no budget left, or a callback
stopped training), ``failed`` (no usable reply), ``declined`` (unchanged, with ``skip_unchanged_revisions``),
``interrupted`` (a callback stopped its evaluation), ``kept`` / ``rejected`` (the selection's verdict)."""


Record = dict[str, Any]


class Clock(NamedTuple):
    """Where a run is: completed iterations, episodes run, and episodes its budget still pays for (``inf``: none)."""

    iteration: int
    episodes_used: int
    episodes_left: float


def floats(values: Any) -> list[float]:
    """A vector as a list of Python floats (what the history stores)."""
    return [float(v) for v in values]


@dataclass
class Candidate:
    """A vector to evaluate (its kind, why earlier replies were unusable, what the parser adjusted, the accepted reply)
    and its evaluation once it has one (``None``: not yet, or a callback cut it)."""

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
        return finite_mean(self.result.returns)

    def to_dict(self) -> dict[str, Any]:
        """The history's ``search`` field: the iteration's first candidate."""
        params, mean = floats(self.params), self.mean_return
        return {"kind": self.kind, "params": params, "mean_return": mean, "failures": self.failures, "adjusted": self.adjusted}


@dataclass
class Revision:
    """An iteration's second step (a Critic revision or a second Search proposal): the role asked (``None``: none),
    its status, its candidate (``None``: no usable reply), whether it equals the first, and whether its record lists
    its own episodes (not for critic_only's revision, which is the entry itself)."""

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


@dataclass
class HistoryEntry:
    """One history entry: the kept candidate of a warm-up draw (iteration 0), a given vector or an iteration, with
    what later prompts show of its episodes, the iteration's first candidate and second step (``None`` for the
    warm-up), the diagnostics, the discarded attempts, and the episodes and steps run when it was committed."""

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
            "mean_return": finite_mean(returns),
            "std_return": finite_std(returns),
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
                record["discarded_attempts"] = [dataclasses.asdict(attempt) for attempt in self.discarded]
        record["episodes"] = self.episodes
        record["timesteps"] = self.timesteps
        return record


def best_record(history: list[Record]) -> Record | None:
    """The record of the highest mean among non-warm-up records (before any: among the warm-up's); ``None`` if empty."""
    evaluated = [r for r in history if r["kind"] != "warmup"] or history
    return max(evaluated, key=lambda r: r["mean_return"]) if evaluated else None


def find(history: list[Record], params: np.ndarray) -> Record | None:
    """The record holding ``params``, if any."""
    return next((r for r in history if np.array_equal(np.asarray(r["params"]), params)), None)


def shown_history(history: list[Record], best_k: int | None, recent: int | None, slack: int = 0) -> list[Record]:
    """
    The history as prompts show it: all of it, or the best ``best_k`` plus the ``recent`` latest (in history order).
    With ``slack`` > 0 the shown entries grow by appending (a prefix cache reuses them) until there would be more than
    ``best_k + recent + slack``; then they are cut back to the best ``best_k`` plus the ``recent`` latest.
    """
    if best_k is None and recent is None:
        return history
    n, best_k, recent = len(history), best_k or 0, recent or 0
    ranked = sorted(range(n), key=lambda i: (-history[i]["mean_return"], i))

    def window(end: int) -> list[int]:  # the best best_k and the recent latest of history[:end], in history order
        best = [i for i in ranked if i < end][:best_k]
        return sorted(set(range(max(0, end - recent), end)).union(best))

    if slack == 0:
        return [history[i] for i in window(n)]
    limit, cut = best_k + recent + slack, 0
    kept: list[int] = []
    while len(kept) + n - cut > limit:  # the window is cut back at the entry that would exceed the limit
        cut += limit - len(kept) + 1
        kept = window(cut)
    return [history[i] for i in kept] + history[cut:]


def duplicate_error(history: list[Record], params: np.ndarray) -> str | None:
    """Why a reply repeating a history vector is unusable (with ``reject_duplicates``); ``None`` for a new vector."""
    if (record := find(history, params)) is None:
        return None
    return (
        f"this vector was already evaluated (iteration {record['iteration']}, mean return "
        f"{record['mean_return']:.4g}); propose a vector that is not in the history"
    )


def perturb_best(history: list[Record], space: ParameterSpace, step_size: float, rng: np.random.Generator) -> np.ndarray:
    """A Gaussian perturbation of the best candidate at ``step_size`` that is not in the history (the fallback)."""
    best = best_record(history)
    for _ in range(100):
        params = space.sample(rng) if best is None else space.perturb(np.asarray(best["params"]), step_size, rng)
        if find(history, params) is None:
            return params
    return space.sample(rng)


def reached(history: list[Record], target: float, n_episodes: int) -> bool:
    """Whether a record of at least ``n_episodes`` episodes reached ``target`` in each (to the success tolerance)."""
    floor = target - success_tolerance(target)
    return any(r["n_episodes"] >= n_episodes and r["min_return"] >= floor for r in history)
