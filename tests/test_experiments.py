"""The experiment layer: runs as values, one results store a cut command continues from, executors with equal results."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

if importlib.util.find_spec("rl_zoo3") is None:  # not importorskip: importing rl_zoo3 patches gymnasium's TimeLimit
    pytest.skip("rl_zoo3 is not installed", allow_module_level=True)

from filelock import FileLock

from sb3_r2po.experiments import LockstepExecutor, ResultsStore, RunResult, RunSpec, SerialExecutor, make_executor, run_one
from sb3_r2po.experiments.executors import lockstep_groups
from sb3_r2po.experiments.grids import PAPER_ENVS, PUBLISHED, grid, paper_grid
from sb3_r2po.experiments.report import iteration_figures
from sb3_r2po.experiments.runs import ATTEMPT_LOCK, AttemptInProgressError, EpisodeLog

SETTINGS = {"n_eval_episodes": 3, "warmup_episodes": 4}
BUDGET = 4 + 3 * 6
"""Test-sized R2PO runs on CartPole: a 4-episode warm-up, then six evaluations of K = 3 (three iterations)."""


def spec(method: str = "r2po", seed: int = 0, **settings: object) -> RunSpec:
    return RunSpec("CartPole-v1", method, seed, BUDGET, "example:0", tuple({**SETTINGS, **settings}.items()))


# ---------------------------------------------------------------------------------------------- values


def test_run_spec_round_trip_and_run_id() -> None:
    first = RunSpec("R2PO/Maze3x3-v0", "props", 3, 24, "example:1", (("warmup_episodes", 2), ("param_bounds", (-1, 1))))
    again = RunSpec.from_dict(json.loads(json.dumps(first.to_dict())))
    assert again == first and again.run_id == first.run_id
    assert first.settings == (("param_bounds", [-1, 1]), ("warmup_episodes", 2))  # sorted, as JSON reads it back
    assert "/" not in first.run_id and first.run_id.startswith("R2PO_Maze3x3-v0-props-s3-b24-")
    others = [
        RunSpec("R2PO/Maze3x3-v0", "props", 3, 24, "example:2", first.settings),
        RunSpec("R2PO/Maze3x3-v0", "props", 3, 24, "example:1", (("warmup_episodes", 3),)),
        RunSpec("R2PO/Maze3x3-v0", "props", 4, 24, "example:1", first.settings),
    ]
    assert len({first.run_id, *(o.run_id for o in others)}) == 4
    assert len({first, again, *others}) == 4  # hashable, lists in its settings included
    assert RunSpec("CartPole-v1", "ppo", 0, 10, llm="example").llm is None  # a baseline has no llm
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        RunSpec("CartPole-v1", "nope", 0, 10)
    with pytest.raises(ValueError, match="budget"):
        RunSpec("CartPole-v1", "ppo", 0, 0)


def test_run_result_round_trip_is_exact(tmp_path: Path) -> None:
    result = run_one(spec(), tmp_path / "run")
    again = RunResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    assert len(result.returns) == BUDGET and result.history is not None and result.history[-1]["episodes"] == BUDGET
    assert result.iteration_returns == [r["mean_return"] for r in result.full_history(tmp_path / "run")[4:]]
    assert iteration_figures(result.iteration_returns)["best_return"] == max(result.iteration_returns)
    assert result.hyperparams["max_episodes"] == BUDGET and "checkpoint_dir" not in result.hyperparams


# ---------------------------------------------------------------------------------------------- the store


def test_a_cut_grid_continues_without_rerunning_finished_runs(tmp_path: Path) -> None:
    specs = [spec(seed=0), spec("props", seed=0), spec(seed=1)]
    store = ResultsStore(tmp_path / "store")
    ran: list[RunSpec] = []
    first = SerialExecutor(on_result=lambda r: ran.append(r.spec)).run(specs[:2], store)  # the command cut after two
    transcript = (store.run_dir(specs[0]) / "checkpoint" / "llm_calls.jsonl").read_bytes()
    ran.clear()
    results = SerialExecutor(on_result=lambda r: ran.append(r.spec)).run(specs, store)
    assert ran == [specs[2]]  # only the missing run ran
    assert results[:2] == first and [r.spec for r in results] == specs
    assert (store.run_dir(specs[0]) / "checkpoint" / "llm_calls.jsonl").read_bytes() == transcript
    assert store.results(specs) == results and store.missing(specs) == []
    assert SerialExecutor(on_result=lambda r: ran.append(r.spec)).run(specs, store) == results and ran == [specs[2]]


def test_a_result_of_another_spec_is_refused(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    result = run_one(spec(), store.run_dir(spec()))
    store.save(result)
    other = spec(seed=5)
    (store.run_dir(other) / "result.json").write_text((store.run_dir(spec()) / "result.json").read_text())
    with pytest.raises(ValueError, match="holds the result of another run"):
        store.result(other)


CRASH = textwrap.dedent(
    """
    import os, signal, sys
    from sb3_r2po.experiments import RunSpec, run_one
    from sb3_r2po.experiments.runs import EpisodeBudget

    run_dir, crash_at = sys.argv[1], int(sys.argv[2])
    spec = RunSpec("CartPole-v1", "r2po", 0, {budget}, "example:0", {settings!r})
    step = EpisodeBudget._on_step

    def crashing(self):
        going_on = step(self)
        if crash_at and self.n_episodes >= crash_at:
            os.kill(os.getpid(), signal.SIGKILL)  # a hard crash: no cleanup, no exception handler
        return going_on

    EpisodeBudget._on_step = crashing
    run_one(spec, run_dir)
    """
).format(budget=BUDGET, settings=tuple(SETTINGS.items()))


def _attempt(run_dir: Path, crash_at: int) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run([sys.executable, "-c", CRASH, str(run_dir), str(crash_at)], env=env, timeout=300).returncode


@pytest.mark.slow
def test_a_killed_r2po_run_resumes_to_the_uninterrupted_history(tmp_path: Path) -> None:
    uninterrupted = run_one(spec(), tmp_path / "whole")
    run_dir = tmp_path / "cut"
    for crash_at in (2, 9, 17):  # in the warm-up, in the first iteration's revision, in the third's Search evaluation
        assert _attempt(run_dir, crash_at) == -9
        assert len(EpisodeLog(run_dir / "episodes.jsonl").read()[0]) >= crash_at - 3  # at most the last rollout lost
    resumed = run_one(spec(), run_dir)
    assert resumed.resumed == 1 and resumed.outcome() == uninterrupted.outcome()
    assert resumed.episodes_run == BUDGET and resumed.returns == uninterrupted.returns
    assert resumed.full_history(run_dir) == uninterrupted.full_history(tmp_path / "whole")


@pytest.mark.slow
def test_a_killed_run_resumes_in_a_lockstep_group(tmp_path: Path) -> None:
    """Seed 0 was killed in its third iteration; the lockstep executor resumes it beside a fresh seed 1: both equal
    the serial executor's runs."""
    specs = [spec(seed=0), spec(seed=1)]
    store = ResultsStore(tmp_path / "lockstep")
    assert _attempt(store.run_dir(specs[0]), 17) == -9
    resumed = LockstepExecutor().run(specs, store)
    serial = SerialExecutor().run(specs, ResultsStore(tmp_path / "serial"))
    assert [r.resumed for r in resumed] == [1, 0]
    assert [r.outcome() for r in resumed] == [r.outcome() for r in serial]


# ---------------------------------------------------------------------------------------------- executors


def test_serial_and_lockstep_give_equal_results(tmp_path: Path) -> None:
    specs = [spec(seed=0), spec(seed=1), spec("props", seed=0), RunSpec("CartPole-v1", "ars", 0, 12)]
    assert lockstep_groups(specs) == [specs[:2], [specs[2]], [specs[3]]]
    bounds = [spec(seed=seed, param_bounds=[-5.0, 5.0]) for seed in (0, 1)]
    assert lockstep_groups([*bounds, specs[0]]) == [bounds, [specs[0]]]  # settings holding lists group too
    serial = make_executor("serial").run(specs, ResultsStore(tmp_path / "serial"))
    lockstep = make_executor("lockstep").run(specs, ResultsStore(tmp_path / "lockstep"))
    assert isinstance(make_executor("lockstep"), LockstepExecutor)
    assert [r.outcome() for r in lockstep] == [r.outcome() for r in serial]
    assert all(not math.isnan(r.returns[0]) for r in serial)
    with pytest.raises(ValueError, match="unknown executor 'threads'"):
        make_executor("threads")
    with pytest.raises(ValueError, match="ray_address"):
        make_executor("serial", ray_address="127.0.0.1:6379")
    from sb3_r2po.llm.example import ExampleLLM

    with pytest.raises(ValueError, match="cannot take a built llm backend"):  # not dropped: the workers would not use it
        make_executor("ray", llm=ExampleLLM(0))


@pytest.mark.parametrize("name", ["serial", "lockstep"])
def test_a_run_another_attempt_holds_is_refused_untouched(tmp_path: Path, name: str) -> None:
    """A second command on the same results store finds a run's directory held by the first: a clear error before
    anything in the directory is read or changed, the runs it had taken are released, and once the first command has
    ended the same command completes."""
    specs = [spec(seed=0), spec(seed=1)]
    store = ResultsStore(tmp_path)
    held = store.run_dir(specs[1])
    other_attempt = FileLock(str(held / ATTEMPT_LOCK), thread_local=False)
    other_attempt.acquire()
    try:
        with pytest.raises(AttemptInProgressError, match=f"run {specs[1].run_id}: another attempt held"):
            make_executor(name).run(specs, store)
        assert [p.name for p in held.iterdir()] == [ATTEMPT_LOCK]
        FileLock(str(store.run_dir(specs[0]) / ATTEMPT_LOCK), timeout=0).acquire().lock.release()  # seed 0 released
    finally:
        other_attempt.release()
    results = make_executor(name).run(specs, store)
    assert [r.outcome() for r in results] == [r.outcome() for r in SerialExecutor().run(specs, ResultsStore(tmp_path / "b"))]


def test_a_shared_backend_answers_every_run(tmp_path: Path) -> None:
    """``llm=`` passes one built backend to the runs (a replay answers them in turn): same results as strings."""
    from sb3_r2po.llm.example import ExampleLLM

    calls = []

    class Counting(ExampleLLM):
        def chat(self, messages, *, temperature: float = 0.0):  # type: ignore[no-untyped-def]
            calls.append(1)
            return super().chat(messages, temperature=temperature)

    specs = [spec(seed=0), spec(seed=1)]
    shared = SerialExecutor(llm=Counting(0)).run(specs, ResultsStore(tmp_path / "shared"))
    own = SerialExecutor().run(specs, ResultsStore(tmp_path / "own"))
    assert [r.outcome() for r in shared] == [r.outcome() for r in own]
    assert len(calls) == sum(r.llm_calls or 0 for r in shared) > 0


# ---------------------------------------------------------------------------------------------- grids


def test_grids() -> None:
    small = grid(["CartPole-v1"], ["r2po", "ppo"], [0, 1], 30, "example", SETTINGS)
    assert [(s.method, s.seed) for s in small] == [("r2po", 0), ("r2po", 1), ("ppo", 0), ("ppo", 1)]
    assert small[0].settings_dict == SETTINGS and small[2].settings == () and small[2].llm is None
    paper = paper_grid("http://host:8000/v1")
    assert {s.env_id for s in paper} == set(PAPER_ENVS) == set(PUBLISHED) and len(PAPER_ENVS) == 10
    assert {s.seed for s in paper} == set(range(10))  # the paper's ten runs per method
    assert len([s for s in paper if (s.env_id, s.method) == ("CartPole-v1", "r2po")]) == 10
    cartpole = {s.method for s in paper if s.env_id == "CartPole-v1"}
    assert {"r2po", "props", "props_plus", "rep_traj", "ppo", "a2c", "dqn", "trpo"} <= cartpole and "sac" not in cartpole
    swimmer = {s.method for s in paper if s.env_id == "Swimmer-v5"}
    assert "sac" in swimmer and "dqn" not in swimmer
    r2po = next(s for s in paper if s.env_id == "Swimmer-v5" and s.method == "r2po")
    assert r2po.budget == 4100 and next(s for s in paper if s.method == "ppo").budget == 4000  # 4000 + Swimmer's warm-up
    chosen = paper_grid("example", envs=["CartPole-v1"], methods=["r2po", "sac"], seeds=[0], budget=30)
    assert [(s.method, s.budget) for s in chosen] == [("r2po", 30)]  # SAC does not act in CartPole
    assert len(paper) == len(set(paper))


def test_every_paper_run_has_hyperparameters() -> None:
    """Every (env, algorithm) of the paper grid has an entry in the file the zoo reads (the zoo's or ours)."""
    import yaml

    from sb3_r2po.experiments.runs import hyperparams_file, method_algo

    files: dict[Path, dict] = {}
    for env_id, algo in {(s.env_id, method_algo(s.method)) for s in paper_grid("example")}:
        path = hyperparams_file(algo, env_id)
        entries = files.setdefault(path, yaml.safe_load(path.read_text()))
        assert env_id in entries, f"{algo} has no hyperparameters for {env_id}"
