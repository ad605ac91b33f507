"""``python -m sb3_r2po.compare``: R2PO vs baselines at a matched budget of training episodes."""

from __future__ import annotations

import importlib.util
import json
import re
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

if importlib.util.find_spec("rl_zoo3") is None:  # not importorskip: importing rl_zoo3 patches gymnasium's TimeLimit
    pytest.skip("rl_zoo3 is not installed", allow_module_level=True)
if importlib.util.find_spec("matplotlib") is None:
    pytest.skip("matplotlib is not installed (pip install 'rl_zoo3[plots]')", allow_module_level=True)

import gymnasium as gym
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_r2po.compare import main, run_comparison
from sb3_r2po.experiments.report import rolling_mean, summarize, table
from sb3_r2po.experiments.runs import BudgetReached, EpisodeBudget, hyperparams_file
from sb3_r2po.prompts import prompt_preset
from sb3_r2po.zoo import config_dir

BUDGET = 30
SEEDS = ["0", "1"]
TINY = ["--env", "CartPole-v1", "--seeds", *SEEDS, "--budget", str(BUDGET)]
TINY += ["--n-eval-episodes", "5", "--warmup-episodes", "10"]
"""A tiny comparison: R2PO runs a 10-episode warm-up, then 4 evaluations of K = 5 episodes (exactly 30)."""


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("comparison")
    main(["--llm", "example:0", "--methods", "r2po", "ppo", "ars", *TINY, "--out", str(out), "--no-progress"])
    return out


def _runs(out: Path) -> dict[str, Any]:
    return json.loads((out / "runs.json").read_text())


def test_table_has_every_method_and_column(comparison: Path) -> None:
    text = (comparison / "results.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| method | training episodes |"))
    for column in ("mean return over training", "best (20-ep. rolling mean)", "final (last 20 ep.)", "episodes to 475"):
        assert column in header
    for method in ("r2po", "ppo", "ars"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {method} | "))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == header.count("|") - 1
        assert cells[1] == str(BUDGET)  # every seed trained on exactly the budget
        assert all(" +- " in c for c in (cells[2], cells[4], cells[6]))  # mean +- std, each with its IQM [95 % CI]
        assert all(re.fullmatch(r"-?[\d.]+ \[-?[\d.]+, -?[\d.]+\]", c) for c in (cells[3], cells[5], cells[7]))
    assert header.count("IQM [95 % CI]") == 3
    assert "interquartile mean over the runs (seeds) of a method, 2 runs each" in text  # what the interval rests on
    assert "python -m sb3_r2po.compare --llm example:0 --methods r2po ppo ars" in text
    assert "stable-baselines3 2." in text and "rl_zoo3 " in text and "gymnasium " in text
    assert "`example` is not an LLM" in text
    assert "R2PO's LLM: `example:0`, with the prompt settings of the hyperparameter file." in text
    assert "![learning curves](curves.png)" in text
    assert "![IQM and 95 % confidence intervals](intervals.png)" in text


def test_budgets_and_per_episode_returns(comparison: Path) -> None:
    result = _runs(comparison)
    runs = result["runs"]
    assert {(r["method"], r["seed"]) for r in runs} == {(m, s) for m in ("r2po", "ppo", "ars") for s in (0, 1)}
    for run in runs:
        assert len(run["returns"]) == len(run["lengths"]) == BUDGET
        assert all(isinstance(x, float) for x in run["returns"])
        # CartPole pays 1 per step: the return is the length
        assert run["returns"] == [float(n) for n in run["lengths"]]
        if run["method"] == "ppo":  # 8 envs: the final step may end more than one episode; those are left out
            assert BUDGET <= run["episodes_run"] < BUDGET + 8
        else:
            assert run["episodes_run"] == BUDGET
        assert run["timesteps"] >= sum(run["lengths"])
    r2po = [r for r in runs if r["method"] == "r2po"]
    assert all(r["hyperparams"]["max_episodes"] == BUDGET and r["hyperparams"]["n_eval_episodes"] == 5 for r in r2po)
    assert all(r["iterations"] >= 2 and r["llm_calls"] >= 2 for r in r2po)
    for run in r2po:  # the history as R2PO wrote it: the warm-up's single episodes are the first returns
        history = run["history"]
        assert [h["kind"] for h in history[:10]] == ["warmup"] * 10 and history[10]["kind"] != "warmup"
        assert [h["mean_return"] for h in history[:10]] == run["returns"][:10]
        assert [h["episodes"] for h in history[:10]] == list(range(1, 11))
        assert history[-1]["episodes"] == BUDGET and len(history) == 10 + run["iterations"]
        assert run["llm_stats"]["calls"] == run["llm_calls"]
    ppo = next(r for r in runs if r["method"] == "ppo")
    assert ppo["hyperparams"]["n_envs"] == 8 and ppo["hyperparams"]["learning_rate"] == "lin_0.001"  # the zoo's tuned entry


@pytest.mark.parametrize(("name", "least"), [("curves.png", (800, 400)), ("intervals.png", (1200, 300))])
def test_figures_png(comparison: Path, name: str, least: tuple[int, int]) -> None:
    data = (comparison / name).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= least[0] and height >= least[1]
    assert len(data) > 20_000  # lines, bars and shading, not an empty canvas


@pytest.mark.parametrize("flags", [[], ["--lockstep"], ["--executor", "lockstep"]])
def test_r2po_numbers_are_deterministic(comparison: Path, tmp_path: Path, flags: list[str]) -> None:
    """The same command's R2PO runs again give the same episodes (the example stand-in is deterministic), also
    when the seeds train together with their LLM calls batched (``--lockstep``, the same as ``--executor lockstep``)."""
    main(["--llm", "example:0", "--methods", "r2po", *TINY, "--out", str(tmp_path), "--no-progress", *flags])
    result = _runs(tmp_path)
    assert result["settings"]["lockstep"] is bool(flags)
    assert result["settings"]["executor"] == ("lockstep" if flags else "serial")
    again = {r["seed"]: r["returns"] for r in result["runs"]}
    first = {r["seed"]: r["returns"] for r in _runs(comparison)["runs"] if r["method"] == "r2po"}
    assert again == first


def test_statistics_definitions() -> None:
    returns = [0.0] * 20 + [10.0] * 20 + [4.0] * 20
    assert np.allclose(rolling_mean([1.0, 3.0, 5.0], 2), [1.0, 2.0, 4.0])
    stats = summarize(returns, window=20, threshold=5.0)
    assert stats["mean"] == pytest.approx(14 / 3)
    assert stats["best"] == 10.0  # the best full 20-episode window
    assert stats["final"] == 4.0
    assert stats["to_threshold"] == 30  # episodes 11..30: ten 0s and ten 10s, mean 5
    assert summarize(returns, window=20, threshold=11.0)["to_threshold"] is None
    short = summarize([1.0, 2.0], window=20, threshold=0.0)
    assert short["best"] == short["final"] == 1.5 and short["to_threshold"] is None
    # fewer episodes than the window: "best" is the mean of all of them, not the best partial mean
    assert summarize([2.0, 1.0], window=20)["best"] == 1.5


def test_partial_windows_at_the_start_count_for_neither_best_nor_threshold() -> None:
    # the first two episodes alone average 10 (a partial window); the full 20-episode windows never exceed 8
    returns = [10.0] * 2 + [0.0] * 18 + [8.0] * 20
    stats = summarize(returns, window=20, threshold=5.0)
    assert stats["best"] == 8.0
    assert stats["to_threshold"] == 33  # episodes 14..33: seven 0s and thirteen 8s, mean 5.2 (episode 32: 4.8)


class _FixedLength(gym.Env):
    """Reward 1 per step, episodes of exactly ``length`` steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int) -> None:
        self.length, self.t = length, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.zeros(1, dtype=np.float32), 1.0, self.t >= self.length, False, {}


def test_episode_budget_counts_all_sub_environments_together() -> None:
    """Sub-environments with episodes of 2 and 3 steps: the 5th episode overall ends at step 6 (two end there);
    episodes the Monitors saw before training are not counted."""
    venv = DummyVecEnv([lambda: Monitor(_FixedLength(2)), lambda: Monitor(_FixedLength(3))])
    venv.reset()
    venv.step(np.zeros(2, dtype=np.int64))
    venv.step(np.zeros(2, dtype=np.int64))  # env 0 ends an episode before the callback starts
    venv.reset()
    callback = EpisodeBudget(budget=5)
    callback.init_callback(SimpleNamespace(get_env=lambda: venv, logger=None, num_timesteps=0))
    go_on = []
    for _ in range(6):
        venv.step(np.zeros(2, dtype=np.int64))
        go_on.append(callback.on_step())
    assert go_on == [True] * 5 + [False]
    assert callback.returns == [2.0, 3.0, 2.0, 2.0, 3.0] and callback.lengths == [2, 3, 2, 2, 3]
    hard = EpisodeBudget(budget=1, hard_stop=True)
    hard.init_callback(SimpleNamespace(get_env=lambda: venv, logger=None, num_timesteps=0))
    venv.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(BudgetReached):
        venv.step(np.zeros(2, dtype=np.int64))
        hard.on_step()


def test_hyperparameter_files() -> None:
    assert hyperparams_file("ppo", "CartPole-v1").parent.name == "hyperparams"  # the zoo's tuned file
    assert hyperparams_file("ppo", "R2PO/Nim-v0").parent == config_dir()  # ours, for env ids the zoo lacks
    assert hyperparams_file("r2po", "CartPole-v1") == config_dir() / "r2po.yml"


def test_cli_errors() -> None:
    with pytest.raises(SystemExit):
        main(["--methods", "r2po", "--budget", "5"])  # R2PO without --llm
    with pytest.raises(SystemExit):
        main(["--methods", "nope", "--budget", "5"])
    with pytest.raises(SystemExit):
        main(["--llm", "example", "--methods", "r2po", "--budget", "5", "--prompts", "terse"])


def test_prompt_preset_reaches_r2po(tmp_path: Path) -> None:
    """``--prompts tight`` sets the preset's ten prompt parameters on R2PO; the settings and the report name it."""
    one_seed = [*TINY[: TINY.index("--seeds") + 1], "0", *TINY[TINY.index("--budget") :]]
    main(["--llm", "example:0", "--methods", "r2po", *one_seed, "--prompts", "tight", "--out", str(tmp_path), "--no-progress"])
    result = _runs(tmp_path)
    assert result["settings"]["prompts"] == "tight"
    (run,) = result["runs"]
    assert len(run["returns"]) == BUDGET and run["iterations"] >= 2
    assert {key: run["hyperparams"][key] for key in prompt_preset("tight")} == prompt_preset("tight")
    assert "with the prompt preset `tight`" in (tmp_path / "results.md").read_text()
    with pytest.raises(ValueError, match="unknown prompt preset 'terse'"):
        run_comparison("CartPole-v1", ["r2po"], [0], BUDGET, llm="example:0", prompts="terse")


def test_a_baseline_run_that_ends_short_of_its_budget_is_reported() -> None:
    """A run whose learn() horizon ran out before the budget (here: one that never trained) warns with the counts."""
    from sb3_r2po.experiments.runs import RunSpec, finish_run, prepare_run

    run = prepare_run(RunSpec("CartPole-v1", "ars", seed=0, budget=3))
    with pytest.warns(RuntimeWarning, match="ars seed 0 ended after 0 of 3 training episodes"):
        result = finish_run(run)
    assert result.returns == []


# ---------------------------------------------------------------------------------------------- grids, store, executors

SMALL_R2PO = ["--n-eval-episodes", "3", "--warmup-episodes", "4", "--no-progress"]
"""R2PO runs of 4 warm-up episodes, then evaluations of K = 3."""


def test_several_envs_write_a_section_and_curves_each(tmp_path: Path) -> None:
    main(["--llm", "example:0", "--envs", "CartPole-v1", "R2PO/Maze3x3-v0", "--methods", "r2po", "props", "--seeds", "0",
          "--budget", "10", *SMALL_R2PO, "--out", str(tmp_path)])  # fmt: skip
    result = _runs(tmp_path)
    assert result["settings"]["envs"] == ["CartPole-v1", "R2PO/Maze3x3-v0"] and result["settings"]["env"] is None
    assert result["settings"]["per_env"]["R2PO/Maze3x3-v0"]["variant_episode_caps"] == {"props": 100}
    assert [(r["env"], r["method"]) for r in result["runs"]] == [
        ("CartPole-v1", "r2po"), ("CartPole-v1", "props"), ("R2PO/Maze3x3-v0", "r2po"), ("R2PO/Maze3x3-v0", "props"),
    ]  # fmt: skip
    text = (tmp_path / "results.md").read_text()
    assert "# CartPole-v1: r2po, props at 10" in text and "# R2PO/Maze3x3-v0: r2po, props at 10" in text
    assert "![learning curves](curves_R2PO_Maze3x3-v0.png)" in text and text.count("## Reproduce") == 1
    assert (tmp_path / "curves_CartPole-v1.png").read_bytes()[:4] == b"\x89PNG"
    paper = (tmp_path / "paper.md").read_text()
    assert "| R2PO/Maze3x3-v0 | props | 1 |" in paper and "| -1.03 +- 0.18 |" in paper  # ProPS' published mean


def test_a_cut_command_continues_from_its_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--llm", "example:0", "--methods", "r2po", "props", "--seeds", "0", "1", "--budget", "10", *SMALL_R2PO]
    main([*args, "--out", str(tmp_path)])
    first = _runs(tmp_path)
    cut = next(p for p in sorted((tmp_path / "runs").iterdir()) if "-props-s1-" in p.name)
    (cut / "result.json").unlink()  # as if the command had been stopped during this run
    capsys.readouterr()
    main([*args, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert "3 of 4 runs already there" in err and err.count(" seed ") == 1 and "props seed 1" in err
    again = _runs(tmp_path)
    assert again["runs"][:3] == first["runs"][:3]  # read back as written (wall times included): not run again
    assert again["runs"][3]["returns"] == first["runs"][3]["returns"]


def test_the_paper_grid_narrowed(tmp_path: Path) -> None:
    main(["--grid", "paper", "--llm", "example:0", "--envs", "CartPole-v1", "--methods", "r2po", "trpo", "sac",
          "--seeds", "0", "--budget", "10", *SMALL_R2PO, "--out", str(tmp_path)])  # fmt: skip
    result = _runs(tmp_path)
    assert result["settings"]["grid"] == "paper"
    assert [(r["method"], r["seed"], len(r["returns"])) for r in result["runs"]] == [("r2po", 0, 10), ("trpo", 0, 10)]
    paper = (tmp_path / "paper.md").read_text()
    r2po = next(line for line in paper.splitlines() if line.startswith("| CartPole-v1 | r2po |"))
    assert "| 474.67 +- 16.90 |" in r2po and "| 500 |" in r2po
    trpo = next(line for line in paper.splitlines() if line.startswith("| CartPole-v1 | trpo |"))
    assert "216.92 +- 63.34 (best SB3)" in trpo
    figures = result["runs"][0]["iteration_returns"]
    mean = f"{np.mean(figures):.2f}"  # R2PO's mean: over its iterations, as the paper's; one run, so no interval
    assert f"| {mean} +- 0.00 | {mean} [{mean}, {mean}] (1 run) | 474.67" in r2po
    assert "1 run each" in paper and "With one run a cell is that run's figure" in paper
    assert "arXiv 2605.08315" in paper and "R2PO_METHOD" not in paper


def test_executor_options() -> None:
    with pytest.raises(SystemExit):
        main(["--llm", "example", "--methods", "r2po", "--lockstep", "--executor", "serial"])
    with pytest.raises(SystemExit):
        main(["--llm", "example", "--methods", "r2po", "--ray-address", "127.0.0.1:6379"])
    with pytest.raises(SystemExit):
        main(["--llm", "example", "--methods", "r2po", "--executor", "threads"])
    with pytest.raises(SystemExit):
        main(["--grid", "paper", "--envs", "CartPole-v1"])  # R2PO methods without --llm


# ---------------------------------------------------------------------------------------------- intervals


def _runs_of(figures: dict[str, list[float]]) -> list[dict[str, Any]]:
    """``runs.json`` records whose every training return is the run's figure (so mean = best = final = the figure)."""
    return [
        {"method": method, "seed": seed, "returns": [value] * 25, "wall_time_s": 1.0, "hyperparams": {}}
        for method, values in figures.items()
        for seed, value in enumerate(values)
    ]


def _cells(text: str, method: str) -> list[str]:
    row = next(line for line in text.splitlines() if line.startswith(f"| {method} | "))
    return [c.strip() for c in row.strip("|").split("|")]


def test_iqm_cells_are_the_interquartile_mean_with_a_deterministic_interval() -> None:
    """Each IQM cell is scipy's 25 %-trimmed mean of the seeds' figures (not their mean), inside its interval, and the
    same result gives the same report."""
    from scipy.stats import trim_mean

    from sb3_r2po.experiments.report import iqm_interval

    values = {"a": [1.0, 2.0, 3.0, 4.0, 100.0, 5.0, 6.0, 7.0], "b": [-3.0, 10.0, -1.0, 0.5, 2.0]}
    text = table(_runs_of(values), window=20, threshold=None)
    assert text == table(_runs_of(values), window=20, threshold=None)  # deterministic: a fixed random state
    for method, figures in values.items():
        iqm, low, high = iqm_interval(figures)
        assert iqm == pytest.approx(trim_mean(figures, 0.25)) and iqm != pytest.approx(np.mean(figures))
        assert min(figures) <= low <= iqm <= high <= max(figures) and low < high
        cells = _cells(text, method)
        assert cells[3] == cells[5] == cells[7] == f"{trim_mean(figures, 0.25):.2f} [{low:.2f}, {high:.2f}]"
        assert cells[2] == f"{np.mean(figures):.2f} +- {np.std(figures):.2f}"
    # the same figures give the same interval in another process too (not only from this process's cache) ...
    code = f"from sb3_r2po.experiments.report import iqm_interval; print(repr(iqm_interval({values['a']!r})))"
    other = subprocess.run([sys.executable, "-c", code], check=True, timeout=120, capture_output=True, text=True).stdout
    assert other.strip() == repr(iqm_interval(values["a"]))
    # ... and a bootstrap gives numpy's global generator (which rliable draws from) back as it was
    np.random.seed(5)
    drawn = np.random.rand()
    np.random.seed(5)
    assert iqm_interval(values["a"], seed=7) != iqm_interval(values["a"])  # seed 7: not computed before
    assert np.random.rand() == drawn


def test_a_single_seed_renders_with_a_degenerate_interval(tmp_path: Path) -> None:
    """One run: the cell is the run's figure, its interval the point itself, marked as resting on one run."""
    from sb3_r2po.compare import write_outputs

    runs = [{**run, "env": "CartPole-v1", "algo": "ppo", "hyperparams_file": "x/ppo.yml", "horizon": 10}
            for run in _runs_of({"ppo": [42.0]})]  # fmt: skip
    settings = {"env": "CartPole-v1", "envs": ["CartPole-v1"], "methods": ["ppo"], "seeds": [0], "budget": 25,
                "llm": None, "window": 20, "threshold": 475.0, "threshold_source": "reward_threshold",
                "episode_cap": 500, "episode_cap_source": "TimeLimit", "torch_threads": 1}  # fmt: skip
    result = {"settings": settings, "runs": runs, "command": "cmd", "versions": "v", "wall_time_s": 1.0}
    write_outputs(result, tmp_path)
    text = (tmp_path / "results.md").read_text()
    assert _cells(text, "ppo")[3] == "42.00 [42.00, 42.00] (1 run)"
    assert "1 run each" in text and "With one run a cell is that run's figure" in text
    assert (tmp_path / "intervals.png").read_bytes()[:4] == b"\x89PNG"
    paper = (tmp_path / "paper.md").read_text()
    assert "| 42.00 +- 0.00 | 42.00 [42.00, 42.00] (1 run) |" in paper


def test_default_seeds_are_five_and_the_paper_grid_ten() -> None:
    from sb3_r2po.compare import DEFAULT_SEEDS, _check, _parser
    from sb3_r2po.experiments.grids import PAPER_SEEDS

    parser = _parser()
    args = parser.parse_args(["--llm", "example"])
    _check(parser, args)
    assert args.seeds == list(DEFAULT_SEEDS) == [0, 1, 2, 3, 4]
    paper = parser.parse_args(["--grid", "paper", "--llm", "example"])
    _check(parser, paper)
    assert paper.seeds is None and PAPER_SEEDS == tuple(range(10))  # None: the grid's own seeds
    assert "0-4" in parser.format_help() and "0-9" in parser.format_help()


def test_rliable_is_optional_and_named_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core package imports without rliable; an interval without it names the extra that installs it."""
    code = "import sys, sb3_r2po, sb3_r2po.compare, sb3_r2po.experiments.report; assert 'rliable' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    from sb3_r2po.experiments.report import iqm_cell

    monkeypatch.setitem(sys.modules, "rliable", None)
    with pytest.raises(ImportError, match=r"pip install 'sb3-r2po\[zoo\]'"):
        iqm_cell([1.25, 2.5, 3.75, 11.0])  # figures no other test computes (the intervals are cached)
