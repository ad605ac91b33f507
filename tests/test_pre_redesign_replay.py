"""Recorded runs replay to the same history, byte for byte: first recorded before the redesign of R2PO's loop (commit
5fd4755), re-recorded once when the prompts took the reference's formats and a plain R2PO(...) the reference's settings
(issue 35, commit d99dbe6), with the same command.

``tests/data/pre_redesign/<variant>-<env>/`` holds each run's transcript (``llm_calls.jsonl``, gzipped) and its
``history.json``, written by ``R2PO(policy, env, llm="example", variant=..., seed=0, n_eval_episodes=2,
warmup_episodes=3, max_episodes=15, checkpoint_dir=...)``. A replay answers a request only when its messages and
settings hash to a recorded one, so a replay that completes also proves every prompt is the one sent before.
"""

import gzip
import shutil
from pathlib import Path

import pytest
from helpers import UNTIL_BUDGET

from sb3_r2po import R2PO

DATA = Path(__file__).parent / "data" / "pre_redesign"
RUNS = sorted(path.name for path in DATA.iterdir())


@pytest.mark.parametrize("run", RUNS)
def test_a_run_recorded_before_the_redesign_replays_identically(tmp_path: Path, run: str, make_r2po) -> None:
    variant, env_id = run.split("-", 1)
    transcript = tmp_path / "llm_calls.jsonl"
    with gzip.open(DATA / run / "llm_calls.jsonl.gz", "rb") as packed, open(transcript, "wb") as plain:
        shutil.copyfileobj(packed, plain)
    policy = "Tabular" if env_id == "FrozenLake-v1" else "MlpLinear"
    model = make_r2po(
        env_id,
        policy=policy,
        llm=f"replay:{transcript}",
        variant=variant,
        seed=0,
        n_eval_episodes=2,
        warmup_episodes=3,
        max_episodes=15,
        checkpoint_dir=str(tmp_path / "run"),
    )
    model.learn(UNTIL_BUDGET)
    assert (tmp_path / "run" / "history.json").read_bytes() == (DATA / run / "history.json").read_bytes()
    assert isinstance(model, R2PO) and model.iteration > 0
