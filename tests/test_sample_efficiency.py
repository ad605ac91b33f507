"""``benchmarks/sample_efficiency.py``: every run written as it ends, a cut command continued from its file."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sb3_r2po.prompts import prompt_preset

if importlib.util.find_spec("rl_zoo3") is None:  # the baselines run through RL Zoo's ExperimentManager
    pytest.skip("rl_zoo3 is not installed", allow_module_level=True)

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "sample_efficiency.py"
ARGS = ["--llm", "example", "--seeds", "0", "--r2po-budget", "30", "--baseline-budget", "30"]
"""Tiny budgets with the stand-in LLM: R2PO runs a 10-episode warm-up and four 5-episode evaluations."""


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, check=check)


@pytest.fixture(scope="module")
def first_command(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The first command's output and the JSON it wrote (run once; each test works on its own copy)."""
    path = tmp_path_factory.mktemp("first") / "se.json"
    return run(*ARGS, "--json", str(path)).stdout, path.read_text()


@pytest.mark.slow
def test_runs_are_kept_and_a_cut_command_continues_where_it_stopped(tmp_path: Path, first_command: tuple[str, str]) -> None:
    path = tmp_path / "se.json"
    stdout, written = first_command
    path.write_text(written)
    data = json.loads(written)
    assert [(r["method"], r["seed"]) for r in data["runs"]] == [("ars", 0), ("ppo", 0), ("r2po", 0)]
    r2po = [r for r in data["runs"] if r["method"] == "r2po"]
    assert all(len(r["returns"]) == 30 and r["history"][-1]["episodes"] == 30 for r in r2po)
    assert "| R2PO (`example`, task description, K=5) | 30 | not within 30 |" in stdout
    assert "rolling mean at episode 30, per seed | IQM [95 % CI] |" in stdout
    assert "(1 run) |" in stdout and "1 run each" in stdout  # one seed: the interval is the run's figure
    assert "a kept candidate's 5-episode mean first reached 475" in stdout
    for row in data["rows"]:  # every method side by side after R2PO's 30 episodes: the mean of episodes 11-30
        mine = sorted((r for r in data["runs"] if r["method"] == row["method"]), key=lambda r: r["seed"])
        assert row["at_r2po_budget"] == pytest.approx([sum(r["returns"][10:30]) / 20 for r in mine])

    cut = {**data, "runs": data["runs"][:1]}  # as if the command had been stopped during PPO's run
    del cut["rows"]
    path.write_text(json.dumps(cut))
    store = tmp_path / "store"  # an empty store: the runs missing from the file run again
    again = command(*ARGS, "--json", str(path), "--store", str(store))  # the later commands run in this process
    assert "1 run(s) already there" in again
    assert [line.split(":")[0] for line in again.splitlines() if " seed " in line and ": to " in line] == [
        "ppo seed 0",
        "r2po seed 0",
    ]
    continued = json.loads(path.read_text())
    assert continued["runs"][0] == data["runs"][0]  # kept as written, not run again
    # the stand-in LLM and the seeds make the runs run again equal the first command's
    assert [r["returns"] for r in continued["runs"]] == [r["returns"] for r in data["runs"]]
    assert continued["rows"][0]["best"] == data["rows"][0]["best"]
    assert len(list((store / "runs").iterdir())) == 2  # the two runs this command ran
    # cut again: the runs the store finished are read back, not run again (their lines say so, as from the file)
    path.write_text(json.dumps(cut))
    third = command(*ARGS, "--json", str(path), "--store", str(store))
    assert json.loads(path.read_text())["runs"] == continued["runs"]
    assert "ppo seed 0: to 475" in third and len(list((store / "runs").iterdir())) == 2


@pytest.mark.slow
def test_a_file_of_other_settings_is_refused_and_left_as_it_is(tmp_path: Path, first_command: tuple[str, str]) -> None:
    path = tmp_path / "se.json"
    path.write_text(first_command[1])
    before = path.read_text()
    assert "written with other settings (budget)" in refusal(*ARGS, "--r2po-budget", "40", "--json", str(path))
    assert path.read_text() == before
    path.write_text(json.dumps({"settings": {}, "rows": []}))  # the format of the script before it kept runs
    assert "holds no per-run data" in refusal(*ARGS, "--json", str(path))
    # a preset counts by its parameters: a file of lean as it was before history_slack is not continued by today's lean
    written = json.loads(first_command[1])
    lean_before = {key: value for key, value in prompt_preset("lean").items() if key != "history_slack"}
    written["settings"].update(prompts="lean", prompt_parameters=lean_before)
    path.write_text(json.dumps(written))
    redefined = refusal(*ARGS, "--prompts", "lean", "--json", str(path))
    assert "written with other settings (prompt_parameters)" in redefined


def _script() -> Any:
    """The benchmark script as a module."""
    spec = importlib.util.spec_from_file_location("sample_efficiency", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def command(*args: str) -> str:
    """What the script's ``main()`` prints for the command line ``args``, run in this process (the first command is
    a real ``python benchmarks/sample_efficiency.py``; the later ones skip the interpreter's start and imports)."""
    import torch as th

    script, threads, out = _script(), th.get_num_threads(), io.StringIO()
    try:
        with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
            patch.setattr(sys, "argv", [str(SCRIPT), *args])
            script.main()
    finally:
        th.set_num_threads(threads)  # main() sets 1 thread for its runs
    return out.getvalue()


def refusal(*args: str) -> str:
    """The message of the error the command ``args`` is refused with, before anything runs (an error out of
    ``main()`` is the command's non-zero exit with the message on stderr)."""
    with pytest.raises(ValueError) as refused:
        command(*args)
    return str(refused.value)


def test_the_table_gives_each_figure_its_iqm_and_interval(capsys: pytest.CaptureFixture[str]) -> None:
    """The IQM columns: scipy's 25 %-trimmed mean of the seeds' figures inside its 95 % interval, the same on every
    call; episodes to 475 add their IQM when every seed got there; the note says how many runs the intervals rest on."""
    from scipy.stats import trim_mean

    from sb3_r2po.experiments.report import iqm_interval

    script = _script()
    best, matched = [480.0, 300.0, 500.0, 20.0, 410.0], [100.0, 120.0, 90.0, 400.0, 110.0]
    iqm, low, high = iqm_interval(best)
    assert iqm == pytest.approx(trim_mean(best, 0.25)) and low <= iqm <= high and low < high
    assert script.interval_cell(best) == f"{trim_mean(best, 0.25):.2f} [{low:.2f}, {high:.2f}]"
    assert script.interval_cell([1.0, None]) == "-"  # a seed without the figure: no interval
    episodes = [177, 186, 168, 400, 150]
    e_iqm, e_low, e_high = iqm_interval([float(e) for e in episodes])
    assert script.cell(episodes, 500).endswith(f"; IQM {e_iqm:.0f} [{e_low:.0f}, {e_high:.0f}])")
    assert "IQM" not in script.cell([177, None], 500)
    row = {"method": "ars", "budget": 500, "seeds": [0, 1, 2, 3, 4], "to_threshold": episodes, "best": best,
           "at_r2po_budget": matched, "wall_time_s": [1.0] * 5}  # fmt: skip
    args = SimpleNamespace(prompts=None, llm="example", n_eval_episodes=5, r2po_budget=60, seeds=[0, 1, 2, 3, 4])
    script.print_table(args, [{**row, "method": "r2po"}, row], "run now", 1.0)
    first = capsys.readouterr().out
    script.print_table(args, [{**row, "method": "r2po"}, row], "run now", 1.0)
    assert capsys.readouterr().out == first  # deterministic
    m_iqm, m_low, m_high = iqm_interval(matched)
    assert f"| {iqm:.2f} [{low:.2f}, {high:.2f}] | 100.0, 120.0, 90.0, 400.0, 110.0 | {m_iqm:.2f} [{m_low:.2f}, " in first
    assert m_iqm == pytest.approx(trim_mean(matched, 0.25)) and m_low <= m_iqm <= m_high
    assert "5 runs each" in first


def test_compare_runs_of_a_redefined_preset_are_not_reused(tmp_path: Path) -> None:
    """``--r2po-runs``: a compare output made under ``--prompts lean`` stands in only if its runs used lean's parameters
    as they are now (a parameter a run does not name had R2PO's default)."""
    script = _script()
    settings = {"env": "CartPole-v1", "llm": "example", "prompts": "lean"}
    now = prompt_preset("lean")
    before = {key: value for key, value in now.items() if key != "history_slack"}  # lean before 2026-12-03
    path = tmp_path / "runs.json"
    for hyperparams, reused in ((now, True), (before, False)):
        runs = [{"method": "r2po", "run_id": "r2po-0", "hyperparams": hyperparams}, {"method": "ppo", "hyperparams": {}}]
        path.write_text(json.dumps({"settings": settings, "runs": runs}))
        if reused:
            assert script.r2po_runs_from(path, settings) == runs[:1]
        else:
            with pytest.raises(ValueError, match=r"run r2po-0 has other prompt parameters \(history_slack\)"):
                script.r2po_runs_from(path, settings)
