"""``examples/quickstart.py``, the README's first command (here with the deterministic stand-in LLM)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym

from sb3_r2po import R2PO

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"


def run(*args: str) -> tuple[dict[str, str], list[str]]:
    """The quickstart's results table (row name -> value) and every line it printed."""
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, check=True)
    lines = out.stdout.splitlines()
    rows = [line.strip("|").split("|") for line in lines if line.startswith("| ") and "---" not in line]
    return {name.strip(): value.strip() for name, value in rows}, lines


def test_quickstart_prints_its_table_reproducibly_and_saves_the_model(tmp_path: Path) -> None:
    args = ["--llm", "example", "--episodes", "25", "--k", "5", "--warmup", "5"]
    first, out = run(*args, "--save", str(tmp_path / "model.zip"))
    second, _ = run(*args)
    assert first["episodes used"] == "25 (budget 25)" and first["iterations"] == "2"
    timing = "LLM seconds / wall seconds"
    assert {k: v for k, v in first.items() if k != timing} == {k: v for k, v in second.items() if k != timing}
    model = R2PO.load(tmp_path / "model.zip", env=gym.make("CartPole-v1"))
    assert first["best candidate (mean of K)"].startswith(f"{model.best_record()['mean_return']:.1f}")

    # a person watching sees a line before the heavy imports, the warm-up, then one line per iteration
    assert out[0].startswith("quickstart: loading the libraries")  # printed before torch and SB3 are imported
    assert any(line.startswith("R2PO: preparing the LLM example") for line in out)
    assert any(line.startswith("R2PO warm-up: 5 random candidates, 1 episode each | episodes 5/25") for line in out)
    iterations = [line for line in out if line.startswith("R2PO iteration ")]
    assert [line.split(" | ")[:2] for line in iterations] == [
        ["R2PO iteration 1/2", "episodes 15/25"],
        ["R2PO iteration 2/2", "episodes 25/25"],
    ]
    for line in iterations:
        assert " | search " in line and " | critic " in line and " | best " in line and "LLM 2 calls" in line
    assert out.index(iterations[-1]) < out.index(next(line for line in out if line.startswith("| R2PO on CartPole-v1")))
