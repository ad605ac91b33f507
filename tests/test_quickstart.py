"""``examples/quickstart.py``, the README's first command (here with the deterministic stand-in LLM)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym

from sb3_r2po import R2PO

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"


def run(*args: str) -> dict[str, str]:
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, check=True)
    rows = [line.strip("|").split("|") for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    return {name.strip(): value.strip() for name, value in rows}


def test_quickstart_prints_its_table_reproducibly_and_saves_the_model(tmp_path: Path) -> None:
    args = ["--llm", "example", "--episodes", "25", "--k", "5", "--warmup", "5"]
    first = run(*args, "--save", str(tmp_path / "model.zip"))
    second = run(*args)
    assert first["episodes used"] == "25 (budget 25)" and first["iterations"] == "2"
    timing = "LLM seconds / wall seconds"
    assert {k: v for k, v in first.items() if k != timing} == {k: v for k, v in second.items() if k != timing}
    model = R2PO.load(tmp_path / "model.zip", env=gym.make("CartPole-v1"))
    assert first["best candidate (mean of K)"].startswith(f"{model.best_record()['mean_return']:.1f}")
