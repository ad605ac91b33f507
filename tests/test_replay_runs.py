"""Record an R2PO run, replay it: the same history, returns and saved policy, exactly (issues 3, 5 and 6)."""

import json
import zipfile

import gymnasium as gym
import numpy as np
import pytest
from helpers import UNTIL_BUDGET

from sb3_r2po import R2PO, ExampleLLM
from sb3_r2po.ablate import main as ablate
from sb3_r2po.llm import RecordingBackend, ReplayMissError

RUN = dict(n_eval_episodes=3, warmup_episodes=3, max_episodes=3 + 6 * 4)
"""The runs recorded and replayed here, on CartPole: 3 warm-up episodes, then four iterations of K = 3."""


def policy_bytes(path) -> bytes:
    with zipfile.ZipFile(path) as archive:
        return archive.read("policy.pth")


def test_a_recorded_run_replays_exactly(tmp_path, make_r2po) -> None:
    transcript = tmp_path / "calls.jsonl"
    recorded = make_r2po(llm=RecordingBackend(ExampleLLM(seed=2), transcript), seed=5, **RUN).learn(UNTIL_BUDGET)
    replayed = make_r2po(llm=f"replay:{transcript}", seed=5, **RUN).learn(UNTIL_BUDGET)
    assert replayed.history == recorded.history
    assert [r["returns"] for r in replayed.history] == [r["returns"] for r in recorded.history]
    recorded.save(tmp_path / "recorded.zip")
    replayed.save(tmp_path / "replayed.zip")
    np.testing.assert_array_equal(replayed.policy.get_flat(), recorded.policy.get_flat())
    assert policy_bytes(tmp_path / "recorded.zip") == policy_bytes(tmp_path / "replayed.zip")
    # a different seed asks different questions: the replay says so instead of inventing answers
    with pytest.raises(ReplayMissError):
        make_r2po(llm=f"replay:{transcript}", seed=6, **RUN).learn(UNTIL_BUDGET)


def test_checkpoint_dir_keeps_a_replayable_transcript(tmp_path, make_r2po) -> None:
    run_dir = tmp_path / "run"
    original = make_r2po(llm=ExampleLLM(seed=4), seed=5, checkpoint_dir=str(run_dir), **RUN).learn(UNTIL_BUDGET)
    lines = (run_dir / "llm_calls.jsonl").read_text().splitlines()
    assert len(lines) == original.llm_stats["calls"] and all(json.loads(line)["reply"] for line in lines)
    replayed = make_r2po(llm=f"replay:{run_dir / 'llm_calls.jsonl'}", seed=5, **RUN).learn(UNTIL_BUDGET)
    assert replayed.history == original.history
    loaded = R2PO.load(run_dir / "model.zip", env=gym.make("CartPole-v1"))
    assert loaded.history == original.history


def test_ablation_table_reproduced_from_a_replay_file(tmp_path) -> None:
    args = [
        "--envs",
        "CartPole-v1",
        "--variants",
        "r2po",
        "rep_traj",
        "--seeds",
        "0",
        "1",
        "--max-episodes",
        "21",
        "--n-eval-episodes",
        "3",
        "--warmup-episodes",
        "3",
    ]
    ablate(["--llm", "example:7", "--record", str(tmp_path / "calls.jsonl"), "--out", str(tmp_path / "a.md"), *args])
    ablate(["--llm", f"replay:{tmp_path / 'calls.jsonl'}", "--out", str(tmp_path / "b.md"), *args])
    table = lambda path: path.read_text().split("## Reproduce")[0]  # noqa: E731  (the command differs)
    assert table(tmp_path / "a.md") == table(tmp_path / "b.md")
