import numpy as np
import pytest
from helpers import ScriptedLLM, vector

from sb3_r2po import R2PO
from sb3_r2po.common.racing import race, should_stop, upper_bound

GOOD = vector(0, 0, 0, 0, 0, 1, 0, 1, 0, 0)  # long CartPole episodes
BAD = vector(0, 0, 0, 0, 1, 0, 1, 0, 0, 0)  # pushes the wrong way: about 9 steps


def test_rule() -> None:
    assert upper_bound([1.0], 1.645) == float("inf")  # never stops on one episode
    assert should_stop([10.0, 12.0, 11.0], incumbent=200.0, z=1.645)
    assert not should_stop([150.0, 250.0, 200.0], incumbent=200.0, z=1.645)
    assert race([10.0] * 20, incumbent=100.0, chunk=5, z=1.645) == 5
    assert race([100.0] * 20, incumbent=50.0, chunk=5, z=1.645) == 20


def test_a_bad_revision_is_stopped_early_and_only_its_episodes_are_charged() -> None:
    model = R2PO(
        "MlpLinear",
        "CartPole-v1",
        llm=ScriptedLLM([GOOD, BAD]),
        n_eval_episodes=20,
        warmup_episodes=0,
        seed=0,
        max_episodes=40,
        racing=True,
        racing_chunk=5,
    )
    model.learn(10**7)
    record = model.history[-1]
    assert record["revision"]["status"] == "rejected" and record["revision"]["n_episodes"] == 5
    assert model._episode_num == 20 + 5 and record["n_episodes"] == 20


def test_a_good_revision_runs_all_k_episodes() -> None:
    model = R2PO(
        "MlpLinear",
        "CartPole-v1",
        llm=ScriptedLLM([BAD, GOOD]),
        n_eval_episodes=10,
        warmup_episodes=0,
        seed=0,
        max_episodes=20,
        racing=True,
        racing_chunk=5,
    )
    model.learn(10**7)
    assert model.history[-1]["kind"] == "critic" and model.history[-1]["n_episodes"] == 10
    assert model._episode_num == 20


def test_racing_is_off_by_default_and_never_used_without_keep_best() -> None:
    for kwargs in ({}, {"racing": True, "variant": "always_critic"}):
        model = R2PO(
            "MlpLinear",
            "CartPole-v1",
            llm=ScriptedLLM([GOOD, BAD]),
            n_eval_episodes=10,
            warmup_episodes=0,
            seed=0,
            max_episodes=20,
            **kwargs,
        )
        model.learn(10**7)
        assert model._episode_num == 20


def test_bad_racing_chunk() -> None:
    with pytest.raises(ValueError, match="racing_chunk"):
        R2PO("MlpLinear", "CartPole-v1", llm=ScriptedLLM([GOOD]), racing=True, racing_chunk=1)


def test_records_keep_per_episode_returns() -> None:
    model = R2PO(
        "MlpLinear", "CartPole-v1", llm=ScriptedLLM([GOOD, BAD]), n_eval_episodes=4, warmup_episodes=0, seed=0, max_episodes=8
    )
    model.learn(10**7)
    record = model.history[-1]
    assert len(record["returns"]) == 4 and np.mean(record["returns"]) == pytest.approx(record["mean_return"])
