import numpy as np
import pytest

from sb3_r2po.common.evidence import build_evidence, mean_closest_index, median_index, render_trajectory, summarize
from sb3_r2po.common.rollouts import Episode


def episode(rewards: list[float], end: str = "terminated", obs_dim: int = 2) -> Episode:
    n = len(rewards)
    return Episode(
        observations=[np.full(obs_dim, t / 1000.0) for t in range(n + 1)],
        actions=[np.array(t % 2) for t in range(n)],
        rewards=list(rewards),
        end=end,
    )


def test_median_selection_and_ties() -> None:
    assert median_index([1.0, 5.0, 3.0]) == 2
    # median of [1, 2, 3, 4] is 2.5: returns 2 and 3 are equally close -> the lowest index wins
    assert median_index([4.0, 3.0, 2.0, 1.0]) == 1
    assert median_index([7.0, 7.0, 7.0]) == 0
    assert mean_closest_index([0.0, 0.0, 9.0]) == 0  # mean 3 -> 0 is closest (distance 3 < 6)


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
    assert render_trajectory(ep).lines[1] == "t=0: s=[0.0123, -1.23e+05] -> a=1"


def test_evidence_package_rule() -> None:
    episodes = [episode([1.0] * n) for n in (490, 500, 500)]
    evidence = build_evidence(episodes, target=500, tau_c=480)
    assert evidence.above_tau_c and evidence.tau_c == 480
    assert evidence.trajectory_returns["median"] == 500
    assert not build_evidence(episodes, target=500, tau_c=None).above_tau_c
    assert not build_evidence([episode([1.0] * 10)], target=500, tau_c=480).above_tau_c
