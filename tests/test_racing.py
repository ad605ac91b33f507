import numpy as np
import pytest
from helpers import UNTIL_BUDGET, ScriptedLLM, vector

from sb3_r2po import R2PO
from sb3_r2po.common.rollouts import Episode, RolloutResult, race, run_race, should_stop

GOOD = vector(0, 0, 0, 0, 0, 1, 0, 1, 0, 0)  # long CartPole episodes
BAD = vector(0, 0, 0, 0, 1, 0, 1, 0, 0, 0)  # pushes the wrong way: about 9 steps


def test_rule() -> None:
    assert not should_stop([1.0], incumbent=1e300, z=1.645)  # never stops on one episode
    assert should_stop([10.0, 12.0, 11.0], incumbent=200.0, z=1.645)
    assert not should_stop([150.0, 250.0, 200.0], incumbent=200.0, z=1.645)
    assert race([10.0] * 20, incumbent=100.0, chunk=5, z=1.645) == 5
    assert race([100.0] * 20, incumbent=50.0, chunk=5, z=1.645) == 20


def test_the_bound_is_mean_plus_z_sample_std_over_sqrt_m() -> None:
    # mean 1, sample std (ddof=1) sqrt(2), m = 2: 1 + z * sqrt(2) / sqrt(2) = 1 + z
    bound = 2.0 + 1.645 / np.sqrt(3)
    assert should_stop([1.0, 2.0, 3.0], bound + 1e-9, 1.645) and not should_stop([1.0, 2.0, 3.0], bound - 1e-9, 1.645)
    assert should_stop([0.0, 2.0], incumbent=2.01, z=1.0) and not should_stop([0.0, 2.0], incumbent=1.99, z=1.0)


def test_a_challenger_that_can_still_tie_is_not_stopped() -> None:
    # keep-best gives ties to the challenger: a bound equal to the incumbent must not stop the race
    assert not should_stop([5.0] * 5, incumbent=5.0, z=1.645)
    assert race([5.0] * 20, incumbent=5.0, chunk=5, z=1.645) == 20


def test_race_checks_after_every_chunk_and_charges_a_multiple_of_it() -> None:
    assert race([100.0] * 6 + [0.0] * 14, incumbent=95.0, chunk=3, z=1.645) == 9  # bounds 100, 100, 94.1
    assert race([100.0] * 3 + [0.0] * 17, incumbent=95.0, chunk=3, z=1.645) == 6  # bounds 100, 86.8
    assert race([0.0, 0.0, 0.0, 0.0], incumbent=1.0, chunk=3, z=1.645) == 3


def test_a_bad_revision_is_stopped_early_and_only_its_episodes_are_charged(make_r2po) -> None:
    model = make_r2po(
        llm=ScriptedLLM([GOOD, BAD]),
        n_eval_episodes=20,
        warmup_episodes=0,
        seed=0,
        max_episodes=40,
        racing=True,
        racing_chunk=5,
    )
    model.learn(UNTIL_BUDGET)
    record = model.history[-1]
    assert record["revision"]["status"] == "rejected" and record["revision"]["n_episodes"] == 5
    assert model.episodes_used == 20 + 5 and record["n_episodes"] == 20


def test_a_good_revision_runs_all_k_episodes(make_r2po) -> None:
    model = make_r2po(
        llm=ScriptedLLM([BAD, GOOD]),
        n_eval_episodes=12,
        warmup_episodes=0,
        seed=0,
        max_episodes=24,
        racing=True,
        racing_chunk=5,
    )
    model.learn(UNTIL_BUDGET)
    # K = 12 with chunks of 5: 5 + 5 + 2 episodes, no more
    assert model.history[-1]["kind"] == "critic" and model.history[-1]["n_episodes"] == 12
    assert model.episodes_used == 24


def test_a_race_numbers_its_episodes_across_chunks() -> None:
    """Each chunk's episodes are numbered from 0 by the rollout; the race renumbers them in the order they started."""
    chunks = []

    def run(m: int) -> RolloutResult:
        chunks.append(m)
        return RolloutResult([Episode(observations=[np.zeros(1)], rewards=[1.0], index=i) for i in range(m)])

    result = run_race(run, n_episodes=12, chunk=5, incumbent=0.0, z=1.645, stop_requested=lambda: False)
    assert result is not None and chunks == [5, 5, 2]
    assert [ep.index for ep in result.episodes] == list(range(12))


def test_racing_is_off_by_default_and_never_used_without_keep_best(make_r2po) -> None:
    for kwargs in ({}, {"racing": True, "variant": "always_critic"}):
        model = make_r2po(
            llm=ScriptedLLM([GOOD, BAD]),
            n_eval_episodes=10,
            warmup_episodes=0,
            seed=0,
            max_episodes=20,
            **kwargs,
        )
        model.learn(UNTIL_BUDGET)
        assert model.episodes_used == 20


def test_bad_racing_chunk() -> None:
    with pytest.raises(ValueError, match="racing_chunk"):
        R2PO("MlpLinear", "CartPole-v1", llm=ScriptedLLM([GOOD]), racing=True, racing_chunk=1)


def test_records_keep_per_episode_returns(make_r2po) -> None:
    model = make_r2po(llm=ScriptedLLM([GOOD, BAD]), n_eval_episodes=4, warmup_episodes=0, seed=0, max_episodes=8)
    model.learn(UNTIL_BUDGET)
    record = model.history[-1]
    assert len(record["returns"]) == 4 and np.mean(record["returns"]) == pytest.approx(record["mean_return"])
