import numpy as np
import pytest

from sb3_r2po.common.rollouts import (
    SELECTORS,
    Episode,
    build_evidence,
    digits_apart,
    median,
    render_trajectory,
    sig,
    summarize,
)


def episode(rewards: list[float], end: str = "terminated", obs_dim: int = 2) -> Episode:
    n = len(rewards)
    return Episode(
        observations=[np.full(obs_dim, t / 1000.0) for t in range(n + 1)],
        actions=[np.array(t % 2) for t in range(n)],
        rewards=list(rewards),
        end=end,
    )


def test_median_selection_and_ties() -> None:
    median_index, mean_closest_index = SELECTORS["median"], SELECTORS["mean"]
    assert median_index([1.0, 5.0, 3.0]) == 2
    # median of [1, 2, 3, 4] is 2.5: returns 2 and 3 are equally close -> the lowest index wins
    assert median_index([4.0, 3.0, 2.0, 1.0]) == 1
    assert median_index([7.0, 7.0, 7.0]) == 0
    assert mean_closest_index([0.0, 0.0, 9.0]) == 0  # mean 3 -> 0 is closest (distance 3 < 6)


def test_median_is_numpys() -> None:
    """``median`` gives ``np.median``'s value exactly (odd and even counts, ties, signed zeros, huge values, NaN) where
    that is not an overflow: the median of two finite values is finite."""
    assert median([1e308, 1e308]) == 1e308 and median([-1e308, -1e308, -1e308, 9.0]) == -1e308  # numpy: inf, -inf
    rng = np.random.default_rng(0)
    cases = [[3.0], [2.0, 1.0], [-0.0, 0.0], [1e308, 1e307], [5.0, np.nan, 1.0], [7.0, 7.0, 1.0, 9.0]]
    cases += [list(rng.normal(size=n) * scale) for n in range(1, 26) for scale in (1.0, 1e-9, 1e9)]
    cases += [list(np.round(rng.normal(size=n) * 3)) for n in range(1, 26)]
    for values in cases:
        with np.errstate(over="ignore"):
            expected, got = float(np.median(values)), median(values)
        assert got == expected or (np.isnan(expected) and np.isnan(got)), values


def test_statistics_with_target() -> None:
    episodes = [episode([1.0] * 500, "truncated"), episode([1.0] * 20), episode([1.0] * 499)]
    stats = summarize(episodes, target=500)
    assert stats.mean_return == pytest.approx((500 + 20 + 499) / 3)
    assert (stats.min_return, stats.max_return) == (20, 500)
    assert (stats.min_length, stats.max_length) == (20, 500)
    assert (stats.successes, stats.failures) == (1, 2)
    assert stats.endings == {"truncated": 1, "terminated": 2}
    assert summarize(episodes).successes is None


def test_trajectory_rendering_truncates_head_and_tail() -> None:
    rendered = render_trajectory(episode([1.0] * 100), max_steps=10)
    assert rendered.omitted == 90
    text = "\n".join(rendered.lines)
    assert "(reward 1 at every step)" in text
    assert "t=4:" in text and "t=5:" not in text and "t=94:" not in text and "t=95:" in text and "t=99:" in text
    assert "... 90 steps omitted ..." in text
    assert rendered.lines[-1].startswith("end after 100 steps (terminated)")


def test_trajectory_rendering_shows_varying_rewards_and_short_episodes_whole() -> None:
    rendered = render_trajectory(episode([0.0, 0.0, 1.0], "truncated"), max_steps=10)
    assert rendered.omitted == 0
    assert rendered.lines[0] == "t=0: s=[0, 0] -> a=0, r=0"
    assert rendered.lines[2].endswith("r=1")
    assert "truncated by the time limit" in rendered.lines[-1]


def test_three_significant_figures() -> None:
    ep = Episode(observations=[np.array([0.0123456, -123456.0]), np.array([1.0, 2.0])], actions=[np.array(1)], rewards=[0.5])
    assert render_trajectory(ep).lines[1] == "t=0: s=[0.0123, -123456] -> a=1"  # large values as integers, no exponent


def test_evidence_package_rule() -> None:
    episodes = [episode([1.0] * n) for n in (490, 500, 500)]
    evidence = build_evidence(episodes, target=500, tau_c=480)
    assert evidence.above_tau_c and evidence.tau_c == 480
    assert evidence.trajectory_returns["median"] == 500
    assert not build_evidence(episodes, target=500, tau_c=None).above_tau_c
    assert not build_evidence([episode([1.0] * 10)], target=500, tau_c=480).above_tau_c


def test_each_trajectory_is_the_one_its_name_says_and_the_rule_reads_the_mean() -> None:
    """Returns that tell median, mean-closest, worst and best apart; the rule compares the *mean* with tau_c."""

    def episodes(*lengths: int) -> list[Episode]:
        return [episode([1.0] * n) for n in lengths]

    evidence = build_evidence(episodes(10, 0, 100, 20), 500, 480, trajectories=("median", "mean", "worst", "best"))
    assert evidence.trajectory_returns == {"median": 10, "mean": 20, "worst": 0, "best": 100}  # mean 32.5: closest 20
    assert not build_evidence(episodes(10, 500, 500), 500, 480).above_tau_c  # mean 337 < 480 <= max
    assert build_evidence(episodes(470, 500, 500), 500, 480).above_tau_c  # mean 490 >= 480 > min


@pytest.mark.parametrize(
    "x, digits, text",
    [
        (305.0, 2, "305"),
        (300.0, 2, "300"),
        (-123456.0, 3, "-123456"),
        (99.96, 2, "100"),  # rounds up to 10**digits: an integer, not 1e+02
        (1234.5, 4, "1234"),  # round half to even, like the g format
        (12345.6, 4, "12346"),
        (95.3, 2, "95"),
        (4.5, 2, "4.5"),
        (0.0123456, 3, "0.0123"),
        (-0.0, 3, "0"),
        (1e20, 3, "1e+20"),  # beyond 1e15 the exponent form stays: an integer would have 21 digits
        (float("nan"), 3, "nan"),
    ],
)
def test_sig_prints_large_values_as_integers(x: float, digits: int, text: str) -> None:
    assert sig(x, digits) == text


def pong_like_episode(observations: list[list[float]], actions: list[int], rewards: list[float]) -> Episode:
    return Episode(
        observations=[np.array(o, dtype=np.float32) for o in observations],
        actions=[np.int64(a) for a in actions],
        rewards=rewards,
        end="capped",
    )


def test_folding_merges_only_exactly_equal_steps() -> None:
    # pixel coordinates that differ by less than the rendering precision at 2 significant figures
    obs = [[300.0, 400.0], [304.0, 404.0], [304.0, 404.0], [304.0, 404.0], [309.0, 409.0], [309.0, 409.0]]
    ep = pong_like_episode(obs, [1, 1, 1, 1, 1], [0.0] * 5)
    lines = render_trajectory(ep, None, digits=2, fold=True).lines
    assert lines[1] == "t=0: s=[300, 400] -> a=1"
    assert lines[2] == "t=1..3 (3 identical steps): s=[304, 404] -> a=1"
    assert lines[3] == "t=4: s=[309, 409] -> a=1"
    assert "e+" not in "\n".join(lines)


def test_folding_never_merges_steps_that_only_print_the_same() -> None:
    obs = [[0.1231, 7.0], [0.1234, 7.0], [0.1236, 7.0], [0.1236, 7.0]]
    lines = render_trajectory(pong_like_episode(obs, [0, 0, 0], [1.0] * 3), None, digits=2).lines
    assert [line.split(":")[0] for line in lines[1:-1]] == ["t=0", "t=1", "t=2"]
    assert "identical" not in "\n".join(lines)
    # the same observations and actions but different rewards are different steps too
    obs = [[1.0, 1.0]] * 4
    lines = render_trajectory(pong_like_episode(obs, [0, 0, 0], [0.0, 0.0, 0.001]), None, digits=2).lines
    assert lines[0] == "t=0..1 (2 identical steps): s=[1, 1] -> a=0, r=0"
    assert lines[1] == "t=2: s=[1, 1] -> a=0, r=0.001"


@pytest.mark.parametrize(
    "a, b, digits, expected",
    [(96.9996, 97.0, 4, 6), (451.24, 451.25, 4, 5), (451.0, 452.0, 4, 4), (97.0, 97.0, 4, 4), (99999.6, 100000.0, 4, 6)],
)
def test_digits_apart(a: float, b: float, digits: int, expected: int) -> None:
    assert digits_apart(a, b, digits) == expected
    if a != b:
        assert sig(a, expected) != sig(b, expected)
    assert digits_apart(a, None, digits) == digits


@pytest.mark.parametrize(
    "target, returns, successes",
    [
        # np.isclose(r, 500, atol=0.5) (rtol 1e-5): from 499.495 on; 499.497 is inside only by the relative term
        (500.0, [499.5, 499.497, 499.494, 499.4, 500.0, 501.0], 4),
        (250.0, [249.75, 249.74, 250.2], 2),  # Swimmer: atol 0.25 + rtol 0.0025
        (-120.0, [-120.1, -120.2, -110.0], 2),  # MountainCar: atol 0.12 + rtol 0.0012
        (0.9, [0.9, 0.899, 0.8988], 2),  # atol 1e-3 below |target| 1
    ],
)
def test_success_is_the_references_isclose_or_above(target: float, returns: list[float], successes: int) -> None:
    stats = summarize([episode([r]) for r in returns], target=target)
    assert stats.successes == successes and stats.failures == len(returns) - successes
    reference = sum(bool(np.isclose(r, target, atol=max(1e-6, 1e-3 * max(1, abs(target))))) or r > target for r in returns)
    assert stats.successes == reference
