"""docs/scaling.md, the part that runs here: two worker processes share one OpenAI-compatible server on loopback.

Each worker is the documented command, ``python -m sb3_r2po.zoo train --algo r2po ... --hyperparams llm:'URL#MODEL'``;
the server is ``transformers serve`` of the tiny gpt-oss model (or its ``http.server`` stand-in when the server
extras are missing), which answers every prompt with the 10-value CartPole vector it was trained on.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("rl_zoo3") is None:  # not importorskip: importing rl_zoo3 patches gymnasium's TimeLimit
    pytest.skip("rl_zoo3 is not installed", allow_module_level=True)
pytest.importorskip("openai")

from servers import real_tiny_server
from tiny_gptoss import CARTPOLE_FINAL, tiny_model

from sb3_r2po.common.parameters import ParameterSpace, parse_params

SEEDS = (1, 2)


def worker(log_dir: Path, run_dir: Path, url: str, seed: int) -> subprocess.Popen[str]:
    hyperparams = [
        f"llm:'{url}'",
        "n_eval_episodes:3",
        "warmup_episodes:4",
        "max_episodes:10",
        f"checkpoint_dir:'{run_dir}'",
    ]
    args = [
        "train", "--algo", "r2po", "--env", "CartPole-v1", "-f", str(log_dir), "-n", "100000", "--seed", str(seed),
        "--eval-freq", "-1", "--save-freq", "-1", "--num-threads", "1", "--hyperparams", *hyperparams,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "sb3_r2po.zoo", *args],
        cwd=log_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
def test_two_workers_share_one_loopback_server(tmp_path: Path) -> None:
    expected = parse_params(CARTPOLE_FINAL, ParameterSpace(size=10, low=-6.0, high=6.0, decimals=1)).params
    with real_tiny_server(tiny_model("cartpole")) as server:
        url = f"{server.url}#{server.model_id}"
        procs = {seed: worker(tmp_path, tmp_path / f"run{seed}", url, seed) for seed in SEEDS}
        outputs = {seed: proc.communicate(timeout=420)[0] for seed, proc in procs.items()}
    for seed, proc in procs.items():
        assert proc.returncode == 0, f"worker {seed} exited {proc.returncode}:\n{outputs[seed][-4000:]}"

    for seed in SEEDS:
        run_dir = tmp_path / f"run{seed}"
        calls = [json.loads(line) for line in (run_dir / "llm_calls.jsonl").read_text().splitlines()]
        assert calls and all(c["backend"]["base_url"] == server.url for c in calls)
        history = json.loads((run_dir / "history.json").read_text())
        assert [r["kind"] for r in history[:4]] == ["warmup"] * 4 and len(history) >= 5
        search = history[4]["search"]
        assert search["kind"] == "search"  # the server's answer was used, not a fallback
        np.testing.assert_array_equal(search["params"], expected)
    # the two workers had their own seeds: different warm-ups, the same server answers
    warmups = [json.loads((tmp_path / f"run{s}" / "history.json").read_text())[0]["params"] for s in SEEDS]
    assert warmups[0] != warmups[1]


@pytest.mark.slow
def test_optuna_trials_shared_through_one_storage(tmp_path: Path) -> None:
    """RL Zoo's ``-optimize`` tunes R2PO (our sampler), and two processes with one ``--storage`` share the study."""
    optuna = pytest.importorskip("optuna")
    from sb3_r2po.zoo import SEARCH_SPACE

    storage = f"sqlite:///{tmp_path / 'r2po.db'}"
    # created once before the workers start, as docs/scaling.md says (two processes initialising an empty database
    # at the same moment can collide on its schema table); the zoo then loads it
    optuna.create_study(storage=storage, study_name="shared", direction="maximize")
    args = [
        "train", "--algo", "r2po", "--env", "CartPole-v1", "-optimize", "--n-trials", "1", "--n-jobs", "1",
        "--n-startup-trials", "1", "--n-evaluations", "1", "--storage", storage, "--study-name", "shared",
        "-n", "1000", "-f", str(tmp_path / "logs"), "--num-threads", "1",
        "--hyperparams", "llm:'example:0'", "warmup_episodes:4",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "sb3_r2po.zoo", *args, "--seed", str(seed)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for seed in SEEDS
    ]
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    for proc, output in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, output[-4000:]
    trials = optuna.load_study(study_name="shared", storage=storage).trials
    assert len(trials) == 2
    assert all(set(t.params) == set(SEARCH_SPACE) for t in trials)
    assert any(t.value is not None and t.value > 0 for t in trials)  # an evaluation of a trained R2PO policy
