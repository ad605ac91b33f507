"""RL Zoo integration: ``python -m sb3_r2po.zoo`` registers R2PO, picks our hyperparameter files, trains and enjoys."""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

if importlib.util.find_spec("rl_zoo3") is None:  # not importorskip: importing rl_zoo3 patches gymnasium's TimeLimit
    pytest.skip("rl_zoo3 is not installed", allow_module_level=True)

import sb3_r2po
from sb3_r2po import R2PO
from sb3_r2po.r2po.arguments import VARIANTS
from sb3_r2po.zoo import (
    config_dir,
    config_env_ids,
    config_file,
    normalize_plot_env_args,
    register_r2po,
    resolve_train_args,
)
from sb3_r2po.zoo.settings import POLICIES_KEY, VARIANTS_KEY

EXAMPLE_LLM = "llm:'example:0'"
MAZE = dict(llm="example:0", warmup_episodes=2, n_eval_episodes=2, max_episodes=6, seed=0)
"""A tiny R2PO run on the maze: 2 warm-up episodes, then one iteration (a Search candidate and its revision) of K = 2."""
"""The ``--hyperparams`` item for the deterministic stand-in LLM (one argv item; in a shell: llm:"'example:0'")."""

TINY_R2PO = [EXAMPLE_LLM, "n_eval_episodes:2", "warmup_episodes:2", "max_episodes:6"]
"""A tiny R2PO budget: a 2-episode warm-up and one iteration of 2 + 2 episodes."""

ZOO_KEYS = {"n_timesteps", "policy", "n_envs", "env_kwargs", "env_wrapper", "normalize", "callback", "frame_stack"}
"""Hyperparameter keys the zoo consumes itself (the others go to the algorithm's constructor)."""

TABULAR = {"FrozenLake-v1", "R2PO/Maze3x3-v0", "R2PO/Nim-v0"}
"""The envs with Discrete observations."""

# The paper's settings: env -> (policy, target, tau_c, step, warm-up, max episode length).
PAPER_SETTINGS: dict[str, tuple[str, float, float, float | None, int, int]] = {
    "CartPole-v1": ("MlpLinear", 500, 480, 1.0, 20, 1000),
    "InvertedPendulum-v5": ("MlpLinear", 1000, 950, 1.0, 20, 1000),
    "InvertedDoublePendulum-v5": ("MlpLinear", 500, 450, 0.1, 20, 1000),
    "MountainCar-v0": ("MlpLinear", -120, -120, 1.0, 0, 200),
    "MountainCarContinuous-v0": ("MlpLinear", 100, 97, 1.0, 20, 1000),
    "Swimmer-v5": ("MlpLinear", 250, 230, 0.1, 100, 1000),
    "R2PO/Pong-v0": ("MlpLinear", 3, 2.8, 1.0, 20, 1000),
    "FrozenLake-v1": ("Tabular", 1.0, 0.85, None, 0, 100),
    "R2PO/Maze3x3-v0": ("Tabular", 0.9, 0.9, None, 20, 20),
    "R2PO/Nim-v0": ("Tabular", 1.0, 0.95, None, 0, 1000),
}


def _load_yaml(path: Path) -> dict[str, Any]:
    with open(path) as file:
        return yaml.safe_load(file)


def _zoo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m sb3_r2po.zoo ARGS`` and fail with its output when it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, "-m", "sb3_r2po.zoo", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    output = f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"exit {proc.returncode}\n{output}"
    return proc


def _train(log_dir: Path, algo: str, env_id: str, n_timesteps: int, hyperparams: list[str], *extra: str) -> str:
    params = ["--hyperparams", *hyperparams] if hyperparams else []
    proc = _zoo(
        "train", "--algo", algo, "--env", env_id, "-f", str(log_dir), "-n", str(n_timesteps), "--seed", "0",
        "--eval-freq", "-1", "--save-freq", "-1", "--num-threads", "1", *extra, *params, cwd=log_dir,
    )  # fmt: skip
    return proc.stdout


def _enjoy(log_dir: Path, algo: str, env_id: str) -> str:
    proc = _zoo(
        "enjoy", "--algo", algo, "--env", env_id, "--folder", str(log_dir), "--exp-id", "1", "--no-render", "-n", "50",
        "--num-threads", "1", "--device", "cpu", cwd=log_dir,
    )  # fmt: skip
    return proc.stdout


def _run_dir(log_dir: Path, algo: str, env_id: str) -> Path:
    name = env_id.replace("/", "-")
    return log_dir / algo / f"{name}_1"


def _monitor_episodes(run_dir: Path) -> int:
    lines = sum(len(path.read_text().splitlines()) - 2 for path in run_dir.glob("*.monitor.csv"))
    return lines


@pytest.fixture(scope="module")
def r2po_loads(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``R2PO.load`` rebuilds a saved model outside the zoo: when it cannot (a core issue, a damaged or mismatched
    file included), the test errors here, with the core's message, rather than inside the zoo's subprocess."""
    path = tmp_path_factory.mktemp("load") / "m.zip"
    R2PO("Tabular", "R2PO/Maze3x3-v0", llm="example:0", warmup_episodes=1, n_eval_episodes=1, max_episodes=1).save(path)
    assert isinstance(R2PO.load(path, device="cpu"), R2PO)


# ---------------------------------------------------------------------------------------------- registration


def test_register_r2po_in_every_zoo_module() -> None:
    import rl_zoo3
    import rl_zoo3.enjoy
    import rl_zoo3.exp_manager
    import rl_zoo3.record_training
    import rl_zoo3.record_video
    import rl_zoo3.train
    import rl_zoo3.utils

    patched = register_r2po()
    modules = [rl_zoo3, rl_zoo3.utils, rl_zoo3.train, rl_zoo3.enjoy, rl_zoo3.exp_manager, rl_zoo3.record_video]
    modules.append(rl_zoo3.record_training)
    for module in modules:
        assert module.ALGOS["r2po"] is R2PO, module.__name__
        assert module.__name__ in patched
    assert rl_zoo3.utils.ALGOS["ppo"].__name__ == "PPO"  # the zoo's own algorithms are untouched
    assert register_r2po() == patched  # idempotent


# ---------------------------------------------------------------------------------------------- argument rewriting


def test_conf_file_for_r2po_and_custom_env_baselines() -> None:
    r2po_yml, ppo_yml = str(config_file("r2po")), str(config_file("ppo"))
    assert resolve_train_args(["--algo", "r2po", "--env", "CartPole-v1"])[:2] == ["--conf-file", r2po_yml]
    assert resolve_train_args(["--algo=r2po"])[:2] == ["--conf-file", r2po_yml]  # any env: r2po.yml has a default
    assert resolve_train_args(["--algo", "ppo", "--env", "R2PO/Nim-v0", "-n", "5"]) == [
        "--conf-file", ppo_yml, "--algo", "ppo", "--env", "R2PO/Nim-v0", "-n", "5",
    ]  # fmt: skip
    assert resolve_train_args(["--algo", "dqn", "--env=FrozenLake-v1"])[:2] == ["--conf-file", str(config_file("dqn"))]
    # Env ids the zoo covers keep the zoo's own files; algorithms we ship nothing for too.
    for argv in (["--algo", "ppo", "--env", "CartPole-v1"], ["--env", "R2PO/Nim-v0", "--algo", "qrdqn"], []):
        assert resolve_train_args(argv) == argv
    assert resolve_train_args(["--algo", "dqn", "--env", "Swimmer-v5"]) == ["--algo", "dqn", "--env", "Swimmer-v5"]
    # An explicit config file always wins, in every spelling argparse accepts.
    for conf in (["-conf", "x.yml"], ["--conf-file", "x.yml"], ["--conf-file=x.yml"], ["--conf", "x.yml"], ["-co", "x.yml"]):
        argv = ["--algo", "r2po", *conf]
        assert resolve_train_args(argv) == argv


def test_conf_file_with_abbreviated_options() -> None:
    """The zoo's parser accepts ``--alg r2po`` (argparse prefixes): so does the choice of the config file."""
    r2po_yml, dqn_yml = str(config_file("r2po")), str(config_file("dqn"))
    for argv in (["--alg", "r2po"], ["--al=r2po", "--env", "CartPole-v1"], ["--a", "r2po", "-f", "logs"]):
        assert resolve_train_args(argv) == ["--conf-file", r2po_yml, *argv], argv
    assert resolve_train_args(["--alg", "dqn", "--env", "FrozenLake-v1"])[:2] == ["--conf-file", dqn_yml]
    assert resolve_train_args(["--algo", "ppo", "--alg", "r2po"])[:2] == ["--conf-file", r2po_yml]  # the last one wins
    # options that merely start like --algo/--env are other options
    argv = ["--algo", "ppo", "--env-kwargs", "is_slippery:False", "--eval-env-kwargs", "x:1", "--env", "CartPole-v1"]
    assert resolve_train_args(argv) == argv
    argv = ["--algo", "dqn", "--env-kwargs", "FrozenLake-v1"]  # a value of --env-kwargs, not an --env
    assert resolve_train_args(argv) == argv


def test_plot_env_ids_become_folder_names() -> None:
    argv = ["-a", "r2po", "-e", "R2PO/Nim-v0", "CartPole-v1", "-f", "logs/a/b", "--env=R2PO/Pong-v0"]
    expected = ["-a", "r2po", "-e", "R2PO-Nim-v0", "CartPole-v1", "-f", "logs/a/b", "--env=R2PO-Pong-v0"]
    assert normalize_plot_env_args(argv) == expected


# ---------------------------------------------------------------------------------------------- the YAML files


def test_config_dir_is_the_repo_zoo_configs() -> None:
    assert config_dir() == Path(sb3_r2po.__file__).resolve().parent.parent / "zoo_configs"
    assert config_file("ars") is None


def test_r2po_yml_has_the_paper_settings() -> None:
    entries = _load_yaml(config_dir() / "r2po.yml")
    assert set(entries) == {"default", *PAPER_SETTINGS}
    constructor = set(inspect.signature(R2PO.__init__).parameters) - {"self", "env", "policy"}
    for env_id, entry in entries.items():
        unknown = set(entry) - ZOO_KEYS - constructor - {VARIANTS_KEY, POLICIES_KEY}
        assert not unknown, f"{env_id}: not R2PO hyperparameters: {unknown}"
        for variant, overrides in (entry.get(VARIANTS_KEY) or {}).items():  # tests/test_variant_settings.py: the values
            unknown = set(overrides) - ZOO_KEYS - constructor
            assert variant in VARIANTS and not unknown, f"{env_id} {variant}: not R2PO hyperparameters: {unknown}"
        assert "llm" not in entry  # left at R2PO's default
        assert entry["n_eval_episodes"] == 20 and entry["param_bounds"] is None and entry["param_decimals"] == 1
        if env_id == "default":
            continue
        gym.spec(env_id)  # registered (the custom ids by `import sb3_r2po`)
        policy, target, tau_c, step, warmup, max_len = PAPER_SETTINGS[env_id]
        assert entry["policy"] == policy and entry["target_return"] == target and entry["tau_c"] == tau_c, env_id
        assert entry["warmup_episodes"] == warmup and entry["max_episode_steps"] == max_len, env_id
        if step is not None:
            assert entry["step_size"] == step, env_id
        assert entry["max_episodes"] == 4000 + warmup, env_id
        cap = gym.spec(env_id).max_episode_steps or max_len
        assert entry["n_timesteps"] >= entry["max_episodes"] * cap, f"{env_id}: n_timesteps would stop the run first"


def test_baseline_configs_cover_the_custom_envs() -> None:
    from rl_zoo3.utils import ALGOS

    for algo in ("ppo", "a2c", "dqn", "trpo"):
        assert {"R2PO/Nim-v0", "R2PO/Pong-v0", *TABULAR} <= config_env_ids(algo), algo
    for path in config_dir().glob("*.yml"):
        algo = path.stem
        assert algo == "r2po" or algo in ALGOS, path
        for env_id, entry in _load_yaml(path).items():
            if algo != "r2po" and env_id in TABULAR:  # one-hot observations, declared the zoo way
                assert entry["env_wrapper"] == "gymnasium.wrappers.FlattenObservation", (algo, env_id)


def _build_with_zoo(tmp_path: Path, algo: str, env_id: str, hyperparams: dict[str, Any] | None = None) -> Any:
    """Build (not train) a model the way ``train`` does, from our config file."""
    from rl_zoo3.exp_manager import ExperimentManager

    register_r2po()
    manager = ExperimentManager(
        argparse.Namespace(), algo, env_id, str(tmp_path), eval_freq=-1, hyperparams=hyperparams, seed=0, verbose=0,
        device="cpu", config=str(config_file(algo)),
    )  # fmt: skip
    model, _ = manager.setup_experiment()  # type: ignore[misc]
    model.env.close()
    return model


@pytest.mark.parametrize(
    "algo, env_id",
    [(path.stem, env_id) for path in sorted(config_dir().glob("*.yml")) for env_id in _load_yaml(path) if env_id != "default"],
)
def test_every_config_entry_builds(tmp_path: Path, algo: str, env_id: str) -> None:
    if env_id.endswith("-v5"):
        pytest.importorskip("mujoco")
    model = _build_with_zoo(tmp_path, algo, env_id, {"llm": "example:0"} if algo == "r2po" else None)
    if algo == "r2po":
        assert (
            isinstance(model, R2PO) and model.settings.param_bounds is None and model.llm == "example:0"
        )  # None: the policy's own
        assert (
            model.settings.n_eval_episodes == 20
            and model.settings.max_episodes is not None
            and model.settings.target == PAPER_SETTINGS[env_id][1]
        )
    elif env_id in TABULAR:
        assert model.observation_space.shape == (gym.make(env_id).observation_space.n,)  # one-hot


def test_hyperparams_values_are_python(tmp_path: Path) -> None:
    """``--hyperparams key:value`` evaluates ``value`` as Python: a quoted string for llm, a tuple or list for bounds."""
    from rl_zoo3.utils import StoreDict

    parser = argparse.ArgumentParser()
    parser.add_argument("--hyperparams", nargs="+", action=StoreDict)
    parsed = parser.parse_args(["--hyperparams", EXAMPLE_LLM, "param_bounds:(-3,3)", "target_return:None"]).hyperparams
    assert parsed == {"llm": "example:0", "param_bounds": (-3, 3), "target_return": None}
    model = _build_with_zoo(tmp_path, "r2po", "CartPole-v1", parsed)
    assert (
        model.settings.param_bounds == (-3.0, 3.0) and model.settings.target_return == 500
    )  # None: the table's (the reference's)


# ---------------------------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module", params=["CartPole-v1", "R2PO/Maze3x3-v0"])
def r2po_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """Train R2PO through the entry point with a tiny budget: (log folder, env id, train stdout)."""
    env_id = request.param
    log_dir = tmp_path_factory.mktemp("zoo_logs")
    extra = ["--eval-freq", "20", "--eval-episodes", "2"] if env_id.startswith("R2PO/") else []
    stdout = _train(log_dir, "r2po", env_id, 100_000, TINY_R2PO, *extra)
    return log_dir, env_id, stdout


@pytest.mark.slow
def test_train_r2po(r2po_run: tuple[Path, str, str]) -> None:
    log_dir, env_id, stdout = r2po_run
    assert f"Loading hyperparameters from: {config_dir() / 'r2po.yml'}" in stdout
    run_dir = _run_dir(log_dir, "r2po", env_id)
    name = env_id.replace("/", "-")
    assert (run_dir / f"{name}.zip").is_file()
    config = yaml.load((run_dir / name / "config.yml").read_text(), Loader=yaml.UnsafeLoader)
    assert config["llm"] == "example:0" and config["max_episodes"] == 6
    assert config["policy"] == ("Tabular" if env_id in TABULAR else "MlpLinear")
    assert _monitor_episodes(run_dir) == 6  # max_episodes, not -n, ended the run
    if env_id.startswith("R2PO/"):
        assert (run_dir / "evaluations.npz").is_file()  # what all_plots reads


@pytest.mark.slow
def test_enjoy_r2po(r2po_run: tuple[Path, str, str], r2po_loads: None) -> None:
    log_dir, env_id, _ = r2po_run
    assert "Mean reward" in _enjoy(log_dir, "r2po", env_id)


@pytest.mark.slow
def test_ppo_on_cartpole_through_the_entry_point(tmp_path: Path) -> None:
    import rl_zoo3

    stdout = _train(tmp_path, "ppo", "CartPole-v1", 256, [])
    assert f"Loading hyperparameters from: {Path(rl_zoo3.__file__).parent / 'hyperparams' / 'ppo.yml'}" in stdout
    assert (_run_dir(tmp_path, "ppo", "CartPole-v1") / "CartPole-v1.zip").is_file()


@pytest.mark.slow
def test_baseline_on_a_tabular_env_with_one_hot_observations(tmp_path: Path) -> None:
    from stable_baselines3 import PPO

    env_id = "R2PO/Maze3x3-v0"
    stdout = _train(tmp_path, "ppo", env_id, 512, [])
    assert f"Loading hyperparameters from: {config_dir() / 'ppo.yml'}" in stdout
    run_dir = _run_dir(tmp_path, "ppo", env_id)
    model = PPO.load(run_dir / "R2PO-Maze3x3-v0.zip", device="cpu")
    assert model.observation_space.shape == (9,)  # one-hot, from the FlattenObservation wrapper
    obs = np.eye(9, dtype=np.int64)[[0]]
    assert model.predict(obs, deterministic=True)[0].shape == (1,)

    stdout = _enjoy(tmp_path, "ppo", env_id)  # the saved config re-applies the wrapper
    assert "Mean reward" in stdout


@pytest.mark.slow
def test_plot_train_finds_custom_env_runs(r2po_run: tuple[Path, str, str]) -> None:
    pytest.importorskip("seaborn")
    log_dir, env_id, _ = r2po_run
    proc = _zoo("plot_train", "-a", "r2po", "-e", env_id, "-f", str(log_dir), "-x", "episodes", "-w", "2", cwd=log_dir)
    assert "No data" not in proc.stdout


@pytest.mark.slow
def test_train_r2po_with_an_abbreviated_algo_option(tmp_path: Path) -> None:
    """``--alg r2po`` gets zoo_configs/r2po.yml (it used to look for the zoo's own hyperparams/r2po.yml and crash)."""
    proc = _zoo(
        "train", "--alg", "r2po", "--env", "R2PO/Maze3x3-v0", "-f", str(tmp_path), "--seed", "0", "--eval-freq", "-1",
        "--num-threads", "1", "--hyperparams", *TINY_R2PO, cwd=tmp_path,
    )  # fmt: skip
    assert f"Loading hyperparameters from: {config_dir() / 'r2po.yml'}" in proc.stdout
    assert (_run_dir(tmp_path, "r2po", "R2PO/Maze3x3-v0") / "R2PO-Maze3x3-v0.zip").is_file()


# ---------------------------------------------------------------------------------------------- -optimize


def test_sampler_offers_the_paper_values() -> None:
    from sb3_r2po.zoo import SEARCH_SPACE

    entries = _load_yaml(config_dir() / "r2po.yml")
    steps = {PAPER_SETTINGS[env_id][3] for env_id in PAPER_SETTINGS} - {None}
    assert steps == {0.1, 1.0} and steps <= set(SEARCH_SPACE["step_size"])
    for key in ("n_eval_episodes", "temperature", "max_trajectory_steps"):
        assert {entry[key] for entry in entries.values()} <= set(SEARCH_SPACE[key]), key
    assert inspect.signature(R2PO.__init__).parameters["reply_style"].default in SEARCH_SPACE["reply_style"]


def test_trial_scored_when_r2po_stops_before_the_scheduled_evaluations(make_r2po) -> None:
    """
    R2PO stops at max_episodes, long before the zoo's first trial evaluation (every n_timesteps // n_evaluations
    steps): the trial is scored by an evaluation when the run ends, reported to the trial like the others.
    """
    optuna = pytest.importorskip("optuna")
    import rl_zoo3.exp_manager
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_r2po.zoo.optimize import FinalTrialEvalCallback

    register_r2po()
    assert rl_zoo3.exp_manager.TrialEvalCallback is FinalTrialEvalCallback  # what the zoo's objective() builds

    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    eval_env = make_vec_env("R2PO/Maze3x3-v0")
    callback = FinalTrialEvalCallback(eval_env, trial, n_eval_episodes=2, eval_freq=100_000)
    model = make_r2po("R2PO/Maze3x3-v0", policy="Tabular", **MAZE)
    model.learn(4_000_000, callback=callback)
    assert model.num_timesteps < 100_000 and callback.eval_idx == 1 and np.isfinite(callback.last_mean_reward)
    assert trial.storage.get_trial(trial._trial_id).intermediate_values == {1: callback.last_mean_reward}
    model.learn(4_000_000, callback=callback)  # no second evaluation of the same step
    eval_env.close()


@pytest.mark.slow
def test_optimize_r2po_scores_every_trial(tmp_path: Path) -> None:
    """``-optimize`` with the zoo's defaults (one evaluation per 100k steps): two tiny trials get finite values."""
    optuna = pytest.importorskip("optuna")
    storage = f"sqlite:///{tmp_path / 'r2po.db'}"
    _zoo(
        "train", "--algo", "r2po", "--env", "R2PO/Nim-v0", "-optimize", "--n-trials", "2", "--n-jobs", "1",
        "--sampler", "random", "--storage", storage, "--study-name", "r2po", "-f", str(tmp_path / "logs"),
        "--seed", "0", "--num-threads", "1", "--hyperparams", EXAMPLE_LLM, "max_episodes:40", cwd=tmp_path,
    )  # fmt: skip
    trials = optuna.load_study(study_name="r2po", storage=storage).trials
    assert len(trials) == 2 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert all(t.value is not None and -1.0 <= t.value <= 1.0 for t in trials), [t.value for t in trials]  # not -inf


def test_final_trial_evaluation_only_when_due_and_only_for_r2po(make_r2po) -> None:
    optuna = pytest.importorskip("optuna")
    from rl_zoo3.hyperparams_opt import HYPERPARAMS_SAMPLER
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_r2po.zoo import sample_r2po_params
    from sb3_r2po.zoo.optimize import FinalTrialEvalCallback

    register_r2po()
    assert HYPERPARAMS_SAMPLER["r2po"] is sample_r2po_params
    eval_env = make_vec_env("R2PO/Maze3x3-v0")

    def callback(eval_freq: int) -> FinalTrialEvalCallback:
        trial = optuna.create_study(direction="maximize").ask()
        return FinalTrialEvalCallback(eval_env, trial, n_eval_episodes=2, eval_freq=eval_freq)

    first = callback(100_000)
    model = make_r2po("R2PO/Maze3x3-v0", policy="Tabular", **MAZE).learn(4_000_000, callback=first)
    assert first.eval_idx == 1
    n_calls = first.n_calls
    model.learn(4_000_000, callback=first, reset_num_timesteps=False)  # the budget is spent: no step, no evaluation
    assert first.n_calls == n_calls and first.eval_idx == 1
    # the last scheduled evaluation fell on the last step: not evaluated twice
    last = callback(first.n_calls)
    make_r2po("R2PO/Maze3x3-v0", policy="Tabular", **MAZE).learn(4_000_000, callback=last)
    assert last.n_calls == first.n_calls and last.eval_idx == 1
    # no scheduled evaluations at all (eval_freq 0): one at the end
    none = callback(0)
    make_r2po("R2PO/Maze3x3-v0", policy="Tabular", **MAZE).learn(4_000_000, callback=none)
    assert none.eval_idx == 1
    # other algorithms run to their horizon, where the zoo's evaluations are: no extra one
    ppo = callback(100_000)
    PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=1, seed=0).learn(32, callback=ppo)
    assert ppo.eval_idx == 0
    eval_env.close()


def test_config_dir_override_and_option_parsing_edges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "r2po.yml").write_text("default:\n  n_eval_episodes: 20\n")
    monkeypatch.setenv("SB3_R2PO_ZOO_CONFIGS", str(tmp_path))
    assert config_dir() == tmp_path and config_file("r2po") == tmp_path / "r2po.yml"
    monkeypatch.delenv("SB3_R2PO_ZOO_CONFIGS")
    assert "default" not in config_env_ids("r2po") and "CartPole-v1" in config_env_ids("r2po")
    # after "--" nothing is an option: no --conf-file given, and the --algo before it counts
    r2po_yml = str(config_file("r2po"))
    assert resolve_train_args(["--algo", "r2po", "--", "--conf-file=x.yml"])[:2] == ["--conf-file", r2po_yml]
    assert resolve_train_args(["--algo", "r2po", "--", "--algo", "ppo"])[:2] == ["--conf-file", r2po_yml]


def test_entry_point_usage_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    from sb3_r2po.zoo import main

    for argv, code in (([], 2), (["-h"], 0), (["--help"], 0), (["nope"], 2)):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == code, argv
    assert "unknown script 'nope'" in capsys.readouterr().err
