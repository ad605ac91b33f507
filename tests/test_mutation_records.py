"""The records of a run (``sb3_r2po/r2po/records.py``), stated exactly: a history entry's fields (the Usage page's
``R2PO.history``), the revision's verdict, the best record, the duplicate reason and the success rule. Each test kills
mutants that survived the module's own test files (docs/mutation.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from sb3_r2po.common.rollouts import Episode, RolloutResult, success_tolerance
from sb3_r2po.r2po.roles import Answer, LLMCall
from sb3_r2po.r2po.run_state import (
    Candidate,
    DiscardedAttempt,
    HistoryEntry,
    Revision,
    best_record,
    duplicate_error,
    find,
    reached,
)


def _result(*episodes: tuple[list[float], str]) -> RolloutResult:
    return RolloutResult([Episode(rewards=rewards, end=end, index=i) for i, (rewards, end) in enumerate(episodes)])  # type: ignore[arg-type]


def _candidate(kind: Any, params: list[float], *returns: float) -> Candidate:
    candidate = Candidate(kind, np.array(params), ["bad reply"], ["clipped"])
    candidate.result = _result(*(([r], "terminated") for r in returns))
    return candidate


def _call(reply: str, error: str | None) -> LLMCall:
    return LLMCall("search", [], reply, error, 0.1, None, None)


def test_an_answered_candidate_keeps_the_accepted_reply_the_failures_and_the_notes() -> None:
    answer = Answer(np.array([1.0, 2.0]), [_call("junk", "no vector"), _call("params: [1, 2]", None)], ("p[0] clipped",))
    candidate = Candidate.answered("search", answer.params, answer)  # type: ignore[arg-type]
    assert (candidate.kind, candidate.reply, candidate.failures, candidate.adjusted) == (
        "search",
        "params: [1, 2]",
        ["no vector"],
        ["p[0] clipped"],
    )
    assert candidate.result is None
    fallback = Candidate.answered("fallback", np.zeros(2), Answer(None, [_call("junk", "no vector")]))
    assert fallback.reply is None and fallback.failures == ["no vector"] and fallback.adjusted == []
    assert Candidate.answered("critic", np.zeros(2), Answer(np.zeros(2))).reply is None  # no call: no reply


def test_a_history_entry_has_the_documented_fields_in_order() -> None:
    """An iteration's entry: the kept candidate's statistics over its episodes, its first candidate and revision,
    diagnostics, discarded attempts, episodes and steps run."""
    kept = Candidate("critic", np.array([1.0, 2.0]))
    kept.result = _result(([1.0, 2.0], "terminated"), ([4.0], "truncated"), ([1.0, 1.0, 3.0], "non-finite"))
    search = _candidate("search", [0.5, 0.0], 2.0, 4.0)
    revision = Revision("critic", "kept", kept, unchanged=False)
    discarded = (DiscardedAttempt("search", "no vector", 2),)
    entry = HistoryEntry(3, kept, {"shown": 1}, search, revision, {"salience": 0.5}, discarded, episodes=20, timesteps=99)
    record = entry.to_dict()
    assert list(record) == [
        "iteration",
        "kind",
        "params",
        "mean_return",
        "std_return",
        "min_return",
        "max_return",
        "mean_length",
        "n_episodes",
        "returns",
        "non_finite_episodes",
        "shown",
        "search",
        "revision",
        "diagnostics",
        "discarded_attempts",
        "episodes",
        "timesteps",
    ]
    assert record["iteration"] == 3 and record["kind"] == "critic" and record["params"] == [1.0, 2.0]
    assert record["mean_return"] == 4.0 and record["std_return"] == np.std([3.0, 4.0, 5.0])
    assert (record["min_return"], record["max_return"], record["mean_length"]) == (3.0, 5.0, 2.0)
    assert record["n_episodes"] == 3 and record["returns"] == [3.0, 4.0, 5.0] and record["non_finite_episodes"] == 1
    assert record["search"] == {
        "kind": "search",
        "params": [0.5, 0.0],
        "mean_return": 3.0,
        "failures": ["bad reply"],
        "adjusted": ["clipped"],
    }
    assert record["revision"] == {
        "role": "critic",
        "status": "kept",
        "params": [1.0, 2.0],
        "mean_return": 4.0,
        "failures": [],
        "adjusted": [],
        "unchanged": False,
        "n_episodes": 3,
        "returns": [3.0, 4.0, 5.0],
    }
    assert record["diagnostics"] == {"salience": 0.5}
    assert record["discarded_attempts"] == [{"role": "search", "reason": "no vector", "episodes": 2}]
    assert (record["episodes"], record["timesteps"]) == (20, 99)
    assert all(type(v) is float for v in record["params"] + record["returns"]) and type(record["min_return"]) is float


def test_warm_up_entries_and_revisions_without_a_candidate_leave_their_fields_out() -> None:
    warm = HistoryEntry(0, _candidate("warmup", [0.0, 1.0], 5.0), episodes=1, timesteps=7).to_dict()
    assert list(warm)[-3:] == ["non_finite_episodes", "episodes", "timesteps"] and "search" not in warm
    failed = Revision("critic", "failed", failures=["no vector"])
    entry = HistoryEntry(1, _candidate("search", [0.0, 1.0], 5.0), search=None, revision=failed).to_dict()
    assert entry["search"] is None and "diagnostics" not in entry and "discarded_attempts" not in entry
    assert entry["revision"] == {
        "role": "critic",
        "status": "failed",
        "params": None,
        "mean_return": None,
        "failures": ["no vector"],
        "adjusted": [],
    }
    cut = Candidate("critic", np.array([1.0, 1.0]), ["no vector"], ["p[1] rounded"])
    interrupted = Revision("critic", "interrupted", cut, failures=["the revision's"]).to_dict()
    assert interrupted["mean_return"] is None and "returns" not in interrupted and "n_episodes" not in interrupted
    assert interrupted["failures"] == ["no vector"] and interrupted["adjusted"] == ["p[1] rounded"]  # the candidate's
    own = Revision("critic", "kept", _candidate("critic", [1.0, 1.0], 2.0), own_episodes=False).to_dict()
    assert own["mean_return"] == 2.0 and "n_episodes" not in own and "returns" not in own and "unchanged" not in own


def test_a_revision_is_kept_at_ties_rejected_below_and_always_kept_without_keep_best() -> None:
    def status(mean: float | None, incumbent: float, keep_best: bool = True) -> tuple[bool, str]:
        candidate = Candidate("critic", np.zeros(2)) if mean is None else _candidate("critic", [0.0, 0.0], mean)
        revision = Revision("critic", candidate=candidate)
        return revision.decide(incumbent, keep_best), revision.status

    assert status(2.0, 2.0) == (True, "kept")
    assert status(np.nextafter(2.0, 0.0), 2.0) == (False, "rejected")
    assert status(1.0, 2.0, keep_best=False) == (True, "kept")
    assert status(None, 2.0) == (False, "interrupted")


def test_best_record_prefers_iterations_over_the_warm_up_and_the_first_of_ties() -> None:
    def record(kind: str, mean: float, i: int) -> dict[str, Any]:
        return {"kind": kind, "mean_return": mean, "iteration": i, "params": [float(i)]}

    assert best_record([]) is None
    warm = [record("warmup", 9.0, 0), record("warmup", 7.0, 0)]
    assert best_record(warm) is warm[0]
    history = [*warm, record("search", 1.0, 1), record("given", 3.0, 0), record("critic", 3.0, 2), record("fallback", 2.0, 3)]
    assert best_record(history) is history[3]
    assert find(history, np.array([2.0])) is history[4] and find(history, np.array([5.0])) is None


def test_a_duplicate_names_the_iteration_and_mean_of_the_record_it_repeats() -> None:
    history = [{"iteration": 4, "mean_return": 12.345678, "params": [1.0, 2.0]}]
    assert duplicate_error(history, np.array([1.0, 2.5])) is None
    assert duplicate_error(history, np.array([1.0, 2.0])) == (
        "this vector was already evaluated (iteration 4, mean return 12.35); propose a vector that is not in the history"
    )


def test_reached_needs_k_episodes_and_the_minimum_at_the_target_with_its_relative_tolerance() -> None:
    """``reached``: a record of at least ``n_episodes`` whose every episode (its minimum) is at the target, to the
    success tolerance (``evidence.success_tolerance``, with its relative term: 499.497 reaches 500)."""
    for target in (500.0, -500.0):
        floor = target - success_tolerance(target)
        record = {"n_episodes": 4, "min_return": floor, "mean_return": target + 10}
        assert reached([record], target, 4) and reached([record], target, 3)
        assert not reached([record], target, 5)
        assert not reached([{**record, "min_return": np.nextafter(floor, -np.inf)}], target, 4)
    assert reached([{"n_episodes": 4, "min_return": 499.497, "mean_return": 499.497}], 500.0, 4)
    assert not reached([{"n_episodes": 4, "min_return": 499.494, "mean_return": 499.6}], 500.0, 4)
    assert not reached([{"n_episodes": 4, "min_return": 499.0, "mean_return": 600.0}], 500.0, 4)
    assert not reached([], 500.0, 4)
