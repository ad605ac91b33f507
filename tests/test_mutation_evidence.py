"""The evidence formats that mutation testing of ``sb3_r2po/common/evidence.py`` (docs/mutation.md) found unguarded by
the module's own test files: exact texts of the reference's trajectory, excerpt and table formats (its
``context_builder.py`` files: ``s->a->s'`` joined by ``" | "``, ``[TERMINATED]`` / ``[ROLLOUT_CAP]``, three_traj's 25
head and tail steps ending ``[GOAL]`` / ``[END]``, rep_traj's ``  step t: state=s -> action=a -> reward=r``), of ours,
the end markers, non-finite values and the defaults of :func:`build_evidence`. Each expected text is written out here
from the format, not taken from the code's output."""

from __future__ import annotations

import numpy as np
import pytest

from sb3_r2po.common.rollouts import (
    Episode,
    ReferenceTrace,
    RenderedTrajectory,
    build_evidence,
    digits_apart,
    median,
    reference_excerpt,
    reference_marker,
    reference_number,
    reference_table,
    reference_trajectory,
    reference_value,
    render_excerpt,
    render_trajectory,
    sig,
    success_tolerance,
    summarize,
)

INT = ReferenceTrace("chain", "int", "int", cap=1000)
"""A tabular env's chain: states and actions as integers."""


def _episode(n: int, end: str = "terminated", rewards: list[float] | None = None) -> Episode:
    """``n`` steps: the state at step ``t`` is ``t``, the action ``t % 2``, the reward 1 (or ``rewards``)."""
    return Episode(
        np.arange(n + 1, dtype=np.float64).reshape(-1, 1),
        np.array([[t % 2] for t in range(n)], dtype=np.float64).reshape(n, 1),
        [1.0] * n if rewards is None else rewards,
        end,
    )


def _links(steps: range) -> list[str]:
    """``t->a->t+1`` of each step of :func:`_episode`."""
    return [f"{t}->{t % 2}->{t + 1}" for t in steps]


def test_reference_chain_ends_with_its_marker() -> None:
    """r2po's chain: every step shows where it led, the last ``[TERMINATED]``, or ``[ROLLOUT_CAP]`` at the cap or
    when our step cap stopped it, or ``[NON_FINITE]`` (ours) when the env returned a non-finite value."""
    chain = "0->0->1 | 1->1->2 | 2->0->"
    assert reference_trajectory(_episode(3), INT) == RenderedTrajectory((chain + "[TERMINATED]",), 0, 3)
    capped = ReferenceTrace("chain", "int", "int", cap=3)
    assert reference_trajectory(_episode(3, "truncated"), capped).lines == (chain + "[ROLLOUT_CAP]",)
    assert reference_trajectory(_episode(3, "capped"), INT).lines == (chain + "[ROLLOUT_CAP]",)
    assert reference_trajectory(_episode(3, "non-finite"), capped).lines == (chain + "[NON_FINITE]",)
    assert [reference_marker(_episode(2, end), 3) for end in ("terminated", "truncated", "capped", "non-finite")] == [
        "[TERMINATED]",
        "[TERMINATED]",
        "[ROLLOUT_CAP]",
        "[NON_FINITE]",
    ]
    empty = Episode(np.zeros((1, 1)), np.zeros((0, 1)), [], "terminated")
    assert reference_trajectory(empty, INT) == RenderedTrajectory(("No trajectory available.",), 0, 0)
    assert reference_excerpt(empty, INT) == "No trajectory available."


def test_reference_ends_keeps_25_head_and_25_tail_steps() -> None:
    """three_traj: up to 50 steps whole; longer, the first 25 and the last 25 around ``... n omitted steps ...``,
    each part's last step ending ``[GOAL]`` (positive reward) or ``[END]``."""
    ends = ReferenceTrace("ends", "int", "int", cap=1000)
    rewards = [1.0] * 53
    rewards[24] = 0.0  # the head's last step
    rendered = reference_trajectory(_episode(53, rewards=rewards), ends)
    head = " | ".join([*_links(range(24)), "24->0->[END]"])
    tail = " | ".join([*_links(range(28, 52)), "52->0->[GOAL]"])
    assert rendered == RenderedTrajectory((f"{head} | ... 3 omitted steps ... | {tail}",), 3, 53)
    whole = reference_trajectory(_episode(50, rewards=[0.5] * 50), ends)
    assert whole == RenderedTrajectory((" | ".join([*_links(range(49)), "49->1->[GOAL]"]),), 0, 50)
    one_more = reference_trajectory(_episode(51), ends)
    assert one_more.lines[0].split(" | ")[25] == "... 1 omitted steps ..." and (one_more.omitted, one_more.length) == (1, 51)


def test_reference_chain_and_steps_with_a_step_budget() -> None:
    """Ours, ``max_trajectory_steps`` in the reference's layout: the first ``max_steps // 2`` (at least one) and the
    rest of the budget from the end; ``steps`` indents its marker as its step lines."""
    assert reference_trajectory(_episode(10), INT, max_steps=4) == RenderedTrajectory(
        ("0->0->1 | 1->1->2 | ... 6 omitted steps ... | 8->0->9 | 9->1->[TERMINATED]",), 6, 10
    )
    assert reference_trajectory(_episode(10), INT, max_steps=5).lines == (
        "0->0->1 | 1->1->2 | ... 5 omitted steps ... | 7->1->8 | 8->0->9 | 9->1->[TERMINATED]",
    )
    assert reference_trajectory(_episode(10), INT, max_steps=1) == RenderedTrajectory(
        ("0->0->1 | ... 9 omitted steps ...",), 9, 10
    )
    assert reference_trajectory(_episode(4), INT, max_steps=4) == RenderedTrajectory(
        (" | ".join([*_links(range(3)), "3->1->[TERMINATED]"]),), 0, 4
    )
    steps = ReferenceTrace("steps", "int", "int", cap=1000)
    assert reference_trajectory(_episode(4, rewards=[0.123456, 1.0, 2.0, -0.5]), steps, max_steps=2, digits=2) == (
        RenderedTrajectory(
            (
                "  step 0: state=0 -> action=0 -> reward=0.12",
                "  ... 2 omitted steps ...",
                "  step 3: state=3 -> action=1 -> reward=-0.5",
            ),
            2,
            4,
        )
    )


def test_reference_steps_fold_counts_each_run() -> None:
    """Ours, ``fold_repeated_steps`` in rep_traj's layout: a run of identical steps once, with its first and last
    index and its count."""
    episode = Episode(np.array([[0.0], [5.0], [5.0], [6.0], [7.0]]), np.array([[1.0], [0.0], [0.0], [1.0]]), [1.0] * 4)
    assert reference_trajectory(episode, ReferenceTrace("steps", "int", "int", 1000), fold=True).lines == (
        "  step 0: state=0 -> action=1 -> reward=1",
        "  steps 1-2 (2 identical steps): state=5 -> action=0 -> reward=1",
        "  step 3: state=6 -> action=1 -> reward=1",
    )


def test_reference_excerpt_keeps_head_and_tail() -> None:
    """rep_traj's history excerpt: up to ``max_steps`` (8) steps whole; longer, the first ``max_steps // 2`` steps
    (each showing its next state) and the last ``max_steps - max_steps // 2``, the last ending with its marker."""
    short = reference_excerpt(_episode(8), INT)
    assert short == " | ".join([*_links(range(7)), "7->1->[TERMINATED]"])
    assert reference_excerpt(_episode(12), INT) == " | ".join(
        [*_links(range(4)), "... 4 omitted steps ...", *_links(range(8, 11)), "11->1->[TERMINATED]"]
    )
    capped = ReferenceTrace("chain", "int", "int", cap=9)
    assert reference_excerpt(_episode(9), capped, max_steps=5) == " | ".join(
        [*_links(range(2)), "... 4 omitted steps ...", *_links(range(6, 8)), "8->0->[ROLLOUT_CAP]"]
    )
    vector = Episode(np.array([[0.123456, 1.0], [2.0, 3.0]]), np.array([[1.0]]), [0.5], "terminated")
    linear = ReferenceTrace("chain", "list", "wrapped", 1000)
    assert reference_excerpt(vector, linear) == "[0.123, 1]->[1]->[TERMINATED]"
    assert reference_excerpt(vector, linear, digits=2) == "[0.12, 1]->[1]->[TERMINATED]"


def test_reference_table_is_props_plus_tabular_history() -> None:
    """ProPS+'s table: a header, then ``s | a | r`` per step, the reward as Python prints a float."""
    episode = Episode(np.array([[0.123456], [4.0], [5.0]]), np.array([[1.0], [2.0]]), [1.0, 0.0], "terminated")
    assert reference_table(episode, ReferenceTrace("chain", "list", "int", 1000)) == (
        "State | Action | Reward",
        "[0.123] | 1 | 1.0",
        "[4] | 2 | 0.0",
    )


def test_reference_values_and_numbers() -> None:
    """``_format_value`` / ``_format_number``: 3 significant figures; a wrapped discrete action as an integer in
    brackets; ours: a non-finite entry written ``non-finite``, ``digits`` up to Python's 17 and beyond."""
    assert reference_value(np.array([0.123456, -1234.5]), "list") == "[0.123, -1.23e+03]"
    assert reference_value(np.array([1234.0, 0.0]), "wrapped") == "[1234, 0]"
    assert reference_value(np.array([np.nan]), "int") == "non-finite"
    assert reference_value(np.array([0.123456, np.inf]), "list", 2) == "[0.12, non-finite]"
    assert reference_number(0.123456) == "0.123"
    assert reference_number(0.1, 18) == "0.100000000000000006" and reference_number(0.1, 20) == "0.10000000000000000555"


def test_sig_non_finite_defaults_and_the_exponent_bound() -> None:
    """:func:`sig`: ``nan``, ``inf``, ``-inf``; 3 figures by default; the exponent form from
    ``LARGEST_INTEGER_PRINTED`` (1e15) on; any number of figures."""
    assert [sig(v) for v in (np.nan, np.inf, -np.inf)] == ["nan", "inf", "-inf"]
    assert sig(0.123456) == "0.123"
    assert (sig(999999999999999.0), sig(1e15)) == ("999999999999999", "1e+15")
    assert sig(0.1, 18) == "0.100000000000000006"
    assert digits_apart(1.0, 2.0) == 4 and digits_apart(1.0, np.nan, 5) == 5  # at least 4 figures by default


def test_render_trajectory_budget_end_lines_and_digits() -> None:
    """Ours: 40 steps by default; half the budget (at least one step) from the start, the rest from the end; the
    end line says how the episode ended; ``digits`` applies to observations, actions and rewards."""
    assert render_trajectory(_episode(41)).omitted == 1
    assert render_trajectory(_episode(40)).lines[40] == "t=39: s=39 -> a=1"  # 40 steps: the whole episode, no marker
    cut = render_trajectory(_episode(10), max_steps=1)
    assert cut == RenderedTrajectory(
        (
            "(reward 1 at every step)",
            "t=0: s=0 -> a=0",
            "... 9 steps omitted ...",
            "end after 10 steps (terminated): final s=10",
        ),
        9,
        10,
    )
    endings = {
        "terminated": "terminated",
        "truncated": "truncated by the time limit",
        "capped": "stopped at the step cap",
        "non-finite": "stopped: the environment returned a non-finite value",
    }
    for end, text in endings.items():
        assert render_trajectory(_episode(2, end)).lines[-1] == f"end after 2 steps ({text}): final s=2"
    observations = np.array([[np.nan, 0.123456], [1.0, 2.0], [3.0, 4.0]])
    varying = Episode(observations, np.array([[0.123456], [1.0]]), [0.123456, 1.0], "non-finite")
    assert render_trajectory(varying, digits=2).lines == (
        "t=0: s=[non-finite, 0.12] -> a=0.12, r=0.12",
        "t=1: s=[1, 2] -> a=1, r=1",
        "end after 2 steps (stopped: the environment returned a non-finite value): final s=[3, 4]",
    )
    constant = Episode(observations[1:], np.array([[1.0]]), [0.123456], "terminated")
    assert render_trajectory(constant, digits=2).lines[0] == "(reward 0.12 at every step)"


def test_render_excerpt_is_one_line_without_folding_or_rewards() -> None:
    """A history entry's excerpt (ours): the first and last 4 steps without rewards, never folded, and the end line,
    joined by ``" | "``."""
    head, tail = [f"t={t}: s={t} -> a={t % 2}" for t in (0, 1, 2, 3)], [f"t={t}: s={t} -> a={t % 2}" for t in (6, 7, 8, 9)]
    end = "end after 10 steps (terminated): final s=10"
    assert render_excerpt(_episode(10)) == " | ".join([*head, "... 2 steps omitted ...", *tail, end])
    same = Episode(np.full((4, 1), 0.123456), np.zeros((3, 1)), [1.0, 1.0, 1.0], "truncated")
    steps = "t=0: s=0.123 -> a=0 | t=1: s=0.123 -> a=0 | t=2: s=0.123 -> a=0"
    assert render_excerpt(same) == steps + " | end after 3 steps (truncated by the time limit): final s=0.123"
    assert render_excerpt(same, digits=2).startswith("t=0: s=0.12 -> a=0 | t=1: s=0.12 -> a=0 | t=2: s=0.12 -> a=0 | end")


def test_build_evidence_defaults_and_options_reach_the_renderers() -> None:
    """R2PO's defaults: 3 figures, no folding, the rewards shown; ``fold``, ``step_rewards``, ``digits``, ``max_steps``
    reach the renderer of either format; ``statistics=False`` and ``rule=False`` remove those parts."""
    observations = np.array([[0.123456]] * 3 + [[2.0]])
    episode = Episode(observations, np.zeros((3, 1)), [0.0, 0.0, 0.0], "truncated")
    other = Episode(observations, np.zeros((3, 1)), [1.0, 0.0, 1.0], "truncated")
    default = build_evidence([episode, other, episode], target=None, tau_c=None)
    assert default.trajectories["median"].lines == (
        "(reward 0 at every step)",
        "t=0: s=0.123 -> a=0",
        "t=1: s=0.123 -> a=0",
        "t=2: s=0.123 -> a=0",
        "end after 3 steps (truncated by the time limit): final s=2",
    )
    assert default.step_rewards is True and default.statistics is not None
    options = build_evidence([other], None, None, digits=2, fold=True, step_rewards=False, statistics=False)
    assert options.trajectories["median"].lines == (
        "t=0: s=0.12 -> a=0",
        "t=1: s=0.12 -> a=0",
        "t=2: s=0.12 -> a=0",
        "end after 3 steps (truncated by the time limit): final s=2",
    )  # rewards differ, so no step is folded with its neighbour; no rewards shown
    folded = build_evidence([episode], None, None, fold=True, step_rewards=False)
    assert folded.trajectories["median"].lines[0] == "t=0..2 (3 identical steps): s=0.123 -> a=0"
    assert options.step_rewards is False and options.statistics is None
    steps = ReferenceTrace("steps", "list", "int", 1000)
    reference = build_evidence([episode], None, None, max_steps=2, digits=2, fold=True, reference=steps)
    assert reference.trajectories["median"].lines == (
        "  step 0: state=[0.12] -> action=0 -> reward=0",
        "  ... 1 omitted steps ...",
        "  step 2: state=[0.12] -> action=0 -> reward=0",
    )
    assert reference.reference and not default.reference
    whole = build_evidence([episode], None, None, digits=2, fold=True, reference=steps)
    assert whole.trajectories["median"].lines == ("  steps 0-2 (3 identical steps): state=[0.12] -> action=0 -> reward=0",)


def test_the_revision_rule_reads_tau_c_inclusively_and_only_with_the_rule() -> None:
    """``above_tau_c``: the mean return reaches ``tau_c`` (``>=``); ``rule=False`` shows no threshold."""
    episodes = [_episode(2), _episode(4)]  # mean return 3
    assert build_evidence(episodes, None, tau_c=3.0).above_tau_c
    assert not build_evidence(episodes, None, tau_c=3.0 + 1e-9).above_tau_c
    ruleless = build_evidence(episodes, None, tau_c=1.0, rule=False)
    assert ruleless.tau_c is None and not ruleless.above_tau_c


def test_success_counts_the_tolerance_boundary_and_median_keeps_subnormals() -> None:
    """A return exactly ``success_tolerance`` below the target is a success (the reference's ``np.isclose`` is
    inclusive); :func:`median` is ``np.median`` for the smallest subnormal too."""
    boundary = Episode(np.zeros((2, 1)), np.zeros((1, 1)), [500.0 - success_tolerance(500.0)], "terminated")
    below = Episode(np.zeros((2, 1)), np.zeros((1, 1)), [np.nextafter(500.0 - success_tolerance(500.0), 0)], "terminated")
    assert summarize([boundary, below], target=500.0).successes == 1
    assert median([5e-324]) == np.median([5e-324]) == 5e-324
    with pytest.raises(ValueError):
        summarize([])
