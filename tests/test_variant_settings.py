"""
The paper's baselines and ablations get the reference's own settings per env (``variants:`` of zoo_configs/r2po.yml),
through every path that builds a variant from the file: ``python -m sb3_r2po.zoo train``, ``compare``, ``ablate`` and
a plain ``R2PO(policy, env_id, variant=...)``, which reads the same table (the packaged copy of the file).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from helpers import ScriptedLLM, vector

import sb3_r2po
from sb3_r2po import R2PO
from sb3_r2po.ablate import run_one, run_settings
from sb3_r2po.experiments.runs import episode_cap, r2po_entry
from sb3_r2po.r2po.arguments import VARIANTS as VARIANT_SPECS
from sb3_r2po.r2po.roles import PromptView
from sb3_r2po.zoo import config_dir, config_file
from sb3_r2po.zoo.settings import (
    HISTORY_EXCERPTS_KEY,
    POLICIES_KEY,
    REFERENCE_KEYS,
    SETTINGS_FILE,
    VARIANTS_KEY,
    apply_variant,
    read_entries,
    reference_settings,
)

HAS_ZOO = importlib.util.find_spec("rl_zoo3") is not None  # not importorskip: importing rl_zoo3 patches TimeLimit
needs_zoo = pytest.mark.skipif(not HAS_ZOO, reason="rl_zoo3 is not installed")

VARIANT_NAMES = (
    "props", "props_plus", "pure_search", "actor_second_pass", "critic_only", "rep_traj", "always_critic", "three_traj",
)  # fmt: skip
ONE_CALL = ("props", "props_plus", "critic_only")
"""Variants evaluating one candidate (K episodes) an iteration in the reference; the others evaluate two (2K)."""

# The reference's configs (HWUDLabAIRoboticsResearch/R2PO @ 9449c38, configs/<env>/<env>_<variant>.yaml), per env:
# R2PO's (warm-up, optimum, tau_c, effective episode cap) and what differs per variant. The effective cap is the
# config's max_traj_length combined with gymnasium's TimeLimit (MountainCar: 200 whatever max_traj_length says).
# N: traj_history_last_n of rep_traj, always_critic and critic_only (the other variants do not use it).
REF_R2PO: dict[str, tuple[int, float, float, int]] = {
    "CartPole-v1": (20, 500, 480, 500),
    "InvertedPendulum-v5": (20, 1000, 950, 1000),
    "InvertedDoublePendulum-v5": (20, 500, 450, 1000),
    "MountainCar-v0": (0, -120, -120, 200),
    "MountainCarContinuous-v0": (20, 100, 97, 999),
    "Swimmer-v5": (100, 250, 230, 1000),
    "R2PO/Pong-v0": (20, 3, 2.8, 1000),
    "FrozenLake-v1": (0, 1.0, 0.85, 100),
    "R2PO/Maze3x3-v0": (20, 0.9, 0.9, 20),
    "R2PO/Nim-v0": (0, 1.0, 0.95, 1000),
}
REF_N = {
    "CartPole-v1": 5, "InvertedPendulum-v5": 3, "InvertedDoublePendulum-v5": 5, "MountainCar-v0": 5,
    "MountainCarContinuous-v0": 2, "Swimmer-v5": 3, "R2PO/Pong-v0": 5, "FrozenLake-v1": 100, "R2PO/Maze3x3-v0": 100,
    "R2PO/Nim-v0": 100,
}  # fmt: skip
_SIX = ("props", "pure_search", "actor_second_pass", "critic_only", "rep_traj", "always_critic")
REF_DIFFERENCES: dict[str, dict[str, dict[str, Any]]] = {
    "InvertedDoublePendulum-v5": {
        **{v: {"target": 10000} for v in VARIANT_NAMES if v != "three_traj"},
        "three_traj": {"target": 200},
    },
    "MountainCar-v0": {v: {"warmup": 20} for v in _SIX},
    "MountainCarContinuous-v0": {"props_plus": {"warmup": 0}, "three_traj": {"warmup": 0}},
    "Swimmer-v5": {v: {"warmup": 20} for v in VARIANT_NAMES if v != "props_plus"},
    "FrozenLake-v1": {v: {"warmup": 20} for v in _SIX},
    "R2PO/Maze3x3-v0": {v: {"target": 1.0, "cap": 100} for v in _SIX},
    "R2PO/Nim-v0": {v: {"warmup": 20} for v in _SIX},
}


def reference(env_id: str, variant: str) -> dict[str, Any]:
    """The reference's settings of ``variant`` on ``env_id``: warmup, target, tau_c, cap, N, iterations."""
    warmup, target, tau_c, cap = REF_R2PO[env_id]
    settings: dict[str, Any] = {"warmup": warmup, "target": target, "tau_c": tau_c, "cap": cap, "N": None}
    settings["iterations"] = 100
    if variant != "r2po":
        settings["tau_c"] = None
        settings["iterations"] = 200 if variant in ONE_CALL else 100
        if variant in ("critic_only", "rep_traj", "always_critic"):
            settings["N"] = REF_N[env_id]
        settings.update(REF_DIFFERENCES.get(env_id, {}).get(variant, {}))
    return settings


def _raw_entries() -> dict[str, Any]:
    with open(config_dir() / "r2po.yml") as file:
        return yaml.safe_load(file)


# ---------------------------------------------------------------------------------------------- the data


@pytest.mark.parametrize("env_id", list(REF_R2PO))
def test_every_variant_resolves_to_the_reference_settings(env_id: str) -> None:
    raw = _raw_entries()[env_id]
    assert set(raw[VARIANTS_KEY]) == set(VARIANT_NAMES)  # every paper variant is stated, none unknown
    for variant in ("r2po", *VARIANT_NAMES):
        expected = reference(env_id, variant)
        entry = r2po_entry(env_id, variant)
        assert VARIANTS_KEY not in entry
        got = {"warmup": entry["warmup_episodes"], "target": entry["target_return"], "tau_c": entry["tau_c"]}
        got["cap"] = episode_cap(env_id, variant)[0]
        assert HISTORY_EXCERPTS_KEY not in raw[VARIANTS_KEY].get(variant, {})  # the env's N, one per env
        excerpts = VARIANT_SPECS[variant].critic is not None and VARIANT_SPECS[variant].critic.excerpts
        got["N"] = entry[HISTORY_EXCERPTS_KEY] if excerpts else None
        assert entry[HISTORY_EXCERPTS_KEY] == REF_N[env_id], env_id
        k = entry["n_eval_episodes"]
        per_iteration = k * (1 if variant in ONE_CALL else 2)
        got["iterations"] = entry["max_iterations"]
        assert got == expected, (env_id, variant)
        assert (entry["max_episodes"] - entry["warmup_episodes"]) / per_iteration == entry["max_iterations"]
        assert k == 20 and entry["max_episodes"] == 4000 + entry["warmup_episodes"], (env_id, variant)
        assert entry["n_timesteps"] >= entry["max_episodes"] * got["cap"], f"{env_id} {variant}: n_timesteps stops first"
        assert entry["variant"] == "r2po"  # the variant is the caller's (the zoo's --hyperparams, compare, ablate)


def test_r2po_keeps_its_own_entry() -> None:
    for env_id, raw in _raw_entries().items():
        expected = {key: value for key, value in raw.items() if key not in (VARIANTS_KEY, POLICIES_KEY)}
        assert r2po_entry(env_id) == r2po_entry(env_id, "r2po") == expected, env_id
        assert "r2po" not in (raw.get(VARIANTS_KEY) or {})


def test_the_packaged_copy_is_the_same_file(tmp_path: Path) -> None:
    """In a checkout ``sb3_r2po/zoo/configs`` is a link to ``zoo_configs`` (one file each: nothing to keep in step);
    a wheel built from the checkout's sources ships every config file byte for byte."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "pyproject.toml").is_file():
        pytest.skip("not a source checkout: there is no pyproject.toml to build a wheel from")
    pytest.importorskip("setuptools")  # the build backend pyproject.toml names
    source, packaged = root / "zoo_configs", root / "sb3_r2po" / "zoo" / "configs"
    assert packaged.is_symlink() and packaged.resolve() == source.resolve() == config_dir().resolve()
    copy, out = tmp_path / "checkout", tmp_path / "dist"
    shutil.copytree(root / "sb3_r2po", copy / "sb3_r2po", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(source, copy / "zoo_configs")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, copy / name)
    build = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    subprocess.run([sys.executable, "-c", build, str(out)], cwd=copy, check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = [name for name in archive.namelist() if name.startswith("sb3_r2po/zoo/configs/")]
        shipped = {Path(name).name: archive.read(name) for name in names}
    assert shipped == {path.name: path.read_bytes() for path in source.glob("*.yml")} and "r2po.yml" in shipped
    # the table a plain R2PO reads is the one the package ships
    assert SETTINGS_FILE == Path(sb3_r2po.__file__).resolve().parent / "zoo" / "configs" / "r2po.yml"


def test_apply_variant_merges_env_kwargs_keeps_explicit_keys_and_refuses_unknown_variants() -> None:
    entry = {
        "env_kwargs": {"is_slippery": True},
        "warmup_episodes": 0,
        "tau_c": 0.85,
        VARIANTS_KEY: {"props": {"warmup_episodes": 20, "tau_c": None, "env_kwargs": {"max_episode_steps": 100}}},
    }
    settings, applied = apply_variant(entry, "props")
    assert settings == {"env_kwargs": {"is_slippery": True, "max_episode_steps": 100}, "warmup_episodes": 20, "tau_c": None}
    assert applied == {"warmup_episodes": 20, "tau_c": None, "env_kwargs": {"is_slippery": True, "max_episode_steps": 100}}
    settings, applied = apply_variant(entry, "props", explicit={"warmup_episodes", "env_kwargs"})
    assert settings == {"env_kwargs": {"is_slippery": True}, "warmup_episodes": 0, "tau_c": None} and applied == {
        "tau_c": None
    }
    assert (
        apply_variant(entry, "rep_traj")[0] == apply_variant(entry)[0] == {k: v for k, v in entry.items() if k != VARIANTS_KEY}
    )
    assert apply_variant({**entry, "variant": "props"})[0]["warmup_episodes"] == 20  # the entry's own variant
    assert entry[VARIANTS_KEY]["props"]["env_kwargs"] == {"max_episode_steps": 100}  # not modified
    with pytest.raises(ValueError, match="unknown variants \\['prop'\\]"):
        apply_variant({VARIANTS_KEY: {"prop": {}}}, "props")
    with pytest.raises(ValueError, match="must be a mapping"):
        apply_variant({VARIANTS_KEY: {"props": 3}}, "props")


def test_history_excerpts_reach_r2po() -> None:
    """N is in the data and passed on to R2PO's ``history_excerpts``; a value the user gives wins."""
    entry = {"tau_c": 1.0, VARIANTS_KEY: {"rep_traj": {HISTORY_EXCERPTS_KEY: 5}}}
    assert apply_variant(entry, "rep_traj")[0] == {"tau_c": 1.0, HISTORY_EXCERPTS_KEY: 5}
    assert apply_variant({**entry, HISTORY_EXCERPTS_KEY: 2}, "rep_traj", explicit={HISTORY_EXCERPTS_KEY})[0] == {
        "tau_c": 1.0,
        HISTORY_EXCERPTS_KEY: 2,
    }


# ---------------------------------------------------------------------------------------------- the three paths

CASES = [
    ("R2PO/Maze3x3-v0", "r2po"),
    ("R2PO/Maze3x3-v0", "props"),
    ("R2PO/Maze3x3-v0", "rep_traj"),
    ("R2PO/Maze3x3-v0", "three_traj"),
    ("InvertedDoublePendulum-v5", "r2po"),
    ("InvertedDoublePendulum-v5", "props_plus"),
    ("InvertedDoublePendulum-v5", "three_traj"),
    ("CartPole-v1", "r2po"),
    ("CartPole-v1", "critic_only"),
    ("CartPole-v1", "always_critic"),
]
"""(env, variant) built through each path; the Maze's and IDP's variants differ from R2PO in cap and target."""


def _check_model(model: R2PO, env_id: str, variant: str) -> None:
    expected = reference(env_id, variant)
    assert model.settings.variant == variant
    assert model.settings.warmup_episodes == expected["warmup"] and model.settings.target == expected["target"], (
        env_id,
        variant,
    )
    assert model.settings.tau_c == expected["tau_c"] and model.settings.episode_cap == expected["cap"], (env_id, variant)
    if expected["N"] is not None:
        assert PromptView(model.settings, model.history, model.policy).excerpted_entries() == expected["N"]


def _skip_without_mujoco(env_id: str) -> None:
    if env_id.endswith("-v5"):
        pytest.importorskip("mujoco")


def _zoo_model(tmp_path: Path, env_id: str, hyperparams: dict[str, Any], env_kwargs: dict[str, Any] | None = None) -> Any:
    """The model ``python -m sb3_r2po.zoo train`` builds (not trains) from zoo_configs/r2po.yml, and its printout."""
    from rl_zoo3.exp_manager import ExperimentManager

    from sb3_r2po.zoo import register_r2po

    register_r2po()
    manager = ExperimentManager(
        argparse.Namespace(), "r2po", env_id, str(tmp_path), eval_freq=-1, hyperparams=hyperparams, env_kwargs=env_kwargs,
        seed=0, verbose=0, device="cpu", config=str(config_file("r2po")),
    )  # fmt: skip
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        model, saved = manager.setup_experiment()  # type: ignore[misc]
    model.env.close()
    assert VARIANTS_KEY not in saved  # the saved config (enjoy reads it) holds the resolved settings
    return model, saved, out.getvalue()


@needs_zoo
@pytest.mark.parametrize("env_id, variant", CASES)
def test_zoo_train_builds_each_variant_with_its_settings(tmp_path: Path, env_id: str, variant: str) -> None:
    _skip_without_mujoco(env_id)
    hyperparams = {"llm": "example:0"} if variant == "r2po" else {"llm": "example:0", "variant": variant}
    model, saved, out = _zoo_model(tmp_path, env_id, hyperparams)
    _check_model(model, env_id, variant)
    assert model.settings.max_episodes == 4000 + reference(env_id, variant)["warmup"]
    assert saved["n_timesteps"] >= model.settings.max_episodes * model.settings.episode_cap
    assert (f"Settings of variant {variant!r}" in out) is (variant != "r2po")


@needs_zoo
def test_zoo_hyperparams_and_env_kwargs_of_the_user_win(tmp_path: Path) -> None:
    explicit = {"llm": "example:0", "variant": "props", "warmup_episodes": 3, "target_return": 0.5, "tau_c": 0.4}
    model, saved, out = _zoo_model(tmp_path / "a", "R2PO/Maze3x3-v0", explicit)
    assert (model.settings.warmup_episodes, model.settings.target, model.settings.tau_c) == (3, 0.5, 0.4)
    assert model.settings.episode_cap == 100 and saved["env_kwargs"] == {"max_episode_steps": 100}  # the rest is the variant's
    assert "yours kept: target_return, tau_c)" in out  # the keys of the variant that you set
    # --env-kwargs replace the file's, as the zoo does for every entry
    model, _, _ = _zoo_model(
        tmp_path / "b", "R2PO/Maze3x3-v0", {"llm": "example:0", "variant": "props"}, {"max_episode_steps": 30}
    )
    assert model.settings.episode_cap == 30 and model.settings.target == 1.0


@needs_zoo
@pytest.mark.slow
def test_zoo_train_entry_point_runs_a_variant_with_its_cap(tmp_path: Path) -> None:
    """``python -m sb3_r2po.zoo train ... --hyperparams variant:'props'`` on the Maze: the 100-step episodes of the
    reference's ProPS config (a random warm-up policy that never reaches the goal runs to the cap; the budget is the
    20 warm-up episodes, so no LLM is called)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    hyperparams = ["llm:'example:0'", "variant:'props'", "n_eval_episodes:2", "max_episodes:20"]
    cmd = [sys.executable, "-m", "sb3_r2po.zoo", "train", "--algo", "r2po", "--env", "R2PO/Maze3x3-v0", "-f", str(tmp_path)]
    cmd += ["--seed", "0", "--eval-freq", "-1", "--num-threads", "1", "--hyperparams", *hyperparams]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Settings of variant 'props'" in proc.stdout
    run_dir = tmp_path / "r2po" / "R2PO-Maze3x3-v0_1"
    config = yaml.load((run_dir / "R2PO-Maze3x3-v0" / "config.yml").read_text(), Loader=yaml.UnsafeLoader)
    config = dict(config)
    assert config["target_return"] == 1.0 and config["tau_c"] is None and config["env_kwargs"] == {"max_episode_steps": 100}
    assert config["warmup_episodes"] == 20 and config["max_episodes"] == 20 and VARIANTS_KEY not in config
    lengths = [int(line.split(",")[1]) for line in (run_dir / "0.monitor.csv").read_text().splitlines()[2:]]
    assert len(lengths) == 20 and max(lengths) == 100  # the reference's cap for ProPS, not R2PO's 20


@needs_zoo
@pytest.mark.parametrize("env_id, variant", CASES)
def test_compare_builds_each_variant_with_its_settings(env_id: str, variant: str) -> None:
    from sb3_r2po.experiments.runs import RunSpec, finish_run, prepare_run

    _skip_without_mujoco(env_id)
    run = prepare_run(RunSpec(env_id, variant, 0, 1, "example:0"))
    try:
        _check_model(run.model, env_id, variant)
        assert run.model.settings.max_episodes == 1  # compare's budget is the user's
        assert run.horizon >= run.model.settings.episode_cap  # a variant's own cap sets the step horizon
    finally:
        run.model.env.close()
        run.log_folder.cleanup()
        run.callback.progress.close()
    if variant == "props" and env_id == "R2PO/Maze3x3-v0":  # the user's warm-up wins
        run = prepare_run(RunSpec(env_id, variant, 0, 1, "example:0", {"warmup_episodes": 3}))
        assert (
            run.model.settings.warmup_episodes == 3
            and run.model.settings.target == 1.0
            and run.model.settings.episode_cap == 100
        )
        finish_run(run)


@needs_zoo
def test_compare_reports_a_variants_own_cap(tmp_path: Path) -> None:
    from sb3_r2po.compare import report, run_comparison

    result = run_comparison("R2PO/Maze3x3-v0", ["r2po", "props"], [0], 2, llm="example:0", n_eval_episodes=1, progress=False)
    settings = result["settings"]
    assert settings["episode_cap"] == 20 and settings["variant_episode_caps"] == {"props": 100}
    assert "props 100 steps (its own cap in the reference" in report(result)
    props = next(r for r in result["runs"] if r["method"] == "props")
    assert props["hyperparams"]["target_return"] == 1.0 and props["hyperparams"]["warmup_episodes"] == 20


class _Spy(R2PO):
    """R2PO remembering every instance (the model :func:`run_one` builds and drops)."""

    built: ClassVar[list[R2PO]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _Spy.built.append(self)


@pytest.mark.parametrize("env_id, variant", CASES)
def test_ablate_builds_each_variant_with_its_settings(monkeypatch: pytest.MonkeyPatch, env_id: str, variant: str) -> None:
    _skip_without_mujoco(env_id)
    settings = run_settings(env_id, variant)
    assert settings["max_episodes"] == 4000 + reference(env_id, variant)["warmup"]
    monkeypatch.setattr(sb3_r2po, "R2PO", _Spy)
    _Spy.built.clear()
    run_one(env_id, variant, 0, "example:0", {"max_episodes": 1})  # one warm-up episode: no LLM call
    (model,) = _Spy.built
    _check_model(model, env_id, variant)


def test_ablate_options_of_the_user_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sb3_r2po, "R2PO", _Spy)
    _Spy.built.clear()
    run_one("R2PO/Maze3x3-v0", "props", 0, "example:0", {"max_episodes": 1, "warmup_episodes": 3, "target_return": 0.5})
    (model,) = _Spy.built
    assert (model.settings.warmup_episodes, model.settings.target, model.settings.tau_c, model.settings.episode_cap) == (
        3,
        0.5,
        None,
        100,
    )
    settings = run_settings("R2PO/Maze3x3-v0", "props", {"env_kwargs": {"max_episode_steps": 30}, "tau_c": 0.7})
    assert settings["env_kwargs"] == {"max_episode_steps": 30} and settings["tau_c"] == 0.7


# ---------------------------------------------------------------------------------------------- a plain R2PO(...)


@pytest.mark.parametrize("env_id", list(REF_R2PO))
def test_a_plain_r2po_resolves_every_variant_as_the_zoo_file_does(env_id: str) -> None:
    """``R2PO(policy, env_id, variant=...)`` without settings gets the reference's for every (env, variant) pair: the
    values the zoo, compare and ablate read from the file, and the reference's as this module states them."""
    _skip_without_mujoco(env_id)
    assert env_id in read_entries(SETTINGS_FILE)
    policy = "Tabular" if _raw_entries()[env_id]["policy"] == "Tabular" else "MlpLinear"
    for variant in ("r2po", *VARIANT_NAMES):
        model = R2PO(policy, env_id, llm="example:0", variant=variant)
        try:
            _check_model(model, env_id, variant)
            entry = r2po_entry(env_id, variant)  # the zoo path's resolution of the same table
            assert {key: getattr(model.settings, key) for key in REFERENCE_KEYS} == {key: entry[key] for key in REFERENCE_KEYS}
            assert model.settings.max_iterations == reference(env_id, variant)["iterations"], (env_id, variant)
            assert model.settings.max_episodes is None  # the plan is the iteration count; no cap on episodes
            table = reference_settings(env_id, variant)
            assert table is not None
            expected = {key: "derived" if table[key] is None else "reference" for key in REFERENCE_KEYS}
            assert model.settings.sources == expected, (env_id, variant)
        finally:
            model.env.close()


def _first_iteration_prompts(model: R2PO, llm: ScriptedLLM) -> tuple[str, str]:
    while model.iteration == 0:  # learn(1): one warm-up episode (it warns: no iteration yet), then one iteration
        model.learn(1, reset_num_timesteps=False)
    search, critic = llm.prompts()[:2]
    return search, critic


def test_a_plain_cartpole_prompts_with_the_references_500_480_and_100() -> None:
    llm = ScriptedLLM([vector(*[0.1] * 10)])
    model = R2PO("MlpLinear", "CartPole-v1", llm=llm, seed=0, n_eval_episodes=1, warmup_episodes=2)
    assert (model.settings.target, model.settings.revision_threshold, model.settings.max_iterations) == (500, 480, 100)
    search, critic = _first_iteration_prompts(model, llm)
    assert "(100)" in search and "iteration 1 of 100" in search and "about 500" in search
    assert "480 or more" in critic and "500" in critic
    assert "475" not in search + critic and "451" not in critic  # not the reward_threshold derivation


def test_explicit_settings_win_over_the_table() -> None:
    given = dict(target_return=300, tau_c=250, warmup_episodes=3, step_size=0.5, max_episode_steps=50)
    given |= dict(history_excerpts=2, max_iterations=7)
    model = R2PO("MlpLinear", "CartPole-v1", llm="example:0", **given)
    assert {key: getattr(model.settings, key) for key in REFERENCE_KEYS} == given
    assert model.settings.sources == dict.fromkeys(REFERENCE_KEYS, "given")
    model = R2PO("MlpLinear", "CartPole-v1", llm="example:0", tau_c=400)
    assert model.settings.sources["tau_c"] == "given" and model.settings.sources["target_return"] == "reference"
    assert (model.settings.target, model.settings.revision_threshold) == (500, 400)


def test_an_env_the_table_lacks_keeps_the_documented_derivation() -> None:
    model = R2PO("MlpLinear", "Acrobot-v1", llm="example:0")
    assert "Acrobot-v1" not in read_entries(SETTINGS_FILE) and reference_settings("Acrobot-v1", "r2po") is None
    assert model.settings.target == -100 and model.settings.revision_threshold == pytest.approx(-105)  # reward_threshold - 5 %
    assert (
        model.settings.warmup_episodes,
        model.settings.step_size,
        model.settings.max_episode_steps,
        model.settings.max_iterations,
    ) == (20, 1.0, 1000, None)
    assert (
        model.settings.history_excerpts is None
        and PromptView(model.settings, model.history, model.policy).excerpted_entries() == 5
    )
    assert model.settings.sources == dict.fromkeys(REFERENCE_KEYS, "derived")


def test_verbose_says_which_settings_applied(capsys: pytest.CaptureFixture[str]) -> None:
    R2PO("MlpLinear", "CartPole-v1", llm="example:0", warmup_episodes=3, verbose=1)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("R2PO settings")]
    assert lines == [
        "R2PO settings for CartPole-v1, variant r2po: the reference's (settings table): target_return=500, tau_c=480, "
        "step_size=1.0, max_episode_steps=1000, history_excerpts=5, max_iterations=100; given: warmup_episodes=3"
    ]


def test_a_model_saved_before_the_table_loads_with_its_own_settings() -> None:
    """A model saved without ``max_iterations`` and with ``target_return=None`` keeps the derivation it was saved
    with after load (load() never reads the table)."""
    import io

    import gymnasium as gym

    model = R2PO("MlpLinear", "CartPole-v1", llm="example:0", warmup_episodes=1)
    old = dict(target_return=None, tau_c=None, history_excerpts=None, max_iterations=None, sources={})
    model.settings = dataclasses.replace(model.settings, **old)  # what a model saved before the table holds
    buffer = io.BytesIO()
    model.save(buffer)
    buffer.seek(0)
    loaded = R2PO.load(buffer, env=gym.make("CartPole-v1"), llm="example:0")
    assert (loaded.settings.target, loaded.settings.revision_threshold, loaded.settings.max_iterations) == (
        475,
        pytest.approx(451.25),
        None,
    )
    assert loaded.settings.warmup_episodes == 1 and loaded.settings.sources == {}
    assert (
        PromptView(loaded.settings, loaded.history, loaded.policy).excerpted_entries() == 5
    )  # None: the table's N for the env, as before
    buffer = io.BytesIO()
    R2PO("MlpLinear", "CartPole-v1", llm="example:0", warmup_episodes=3).save(buffer)
    buffer.seek(0)
    loaded = R2PO.load(buffer, env=gym.make("CartPole-v1"), llm="example:0")  # a new save keeps its settings and sources
    assert (
        loaded.settings.target,
        loaded.settings.revision_threshold,
        loaded.settings.max_iterations,
        loaded.settings.warmup_episodes,
    ) == (500, 480, 100, 3)
    assert loaded.settings.sources["warmup_episodes"] == "given" and loaded.settings.sources["tau_c"] == "reference"


@pytest.mark.parametrize(
    "policy, variant, warmup, bounds",
    [
        ("ProjectedMlp", "props", 20, (-6.0, 6.0)),  # swimmer_props_random_projection_qr.yaml
        ("ProjectedMlp", "props_plus", 20, (-6.0, 6.0)),  # swimmer_propsp_random_projection_qr.yaml: not ProPS+'s 100
        ("RandomFeatures", "props_plus", 100, (-2.0, 2.0)),  # swimmer_propsp_random_features_tanh_same_dim.yaml
        ("MlpLinear", "props_plus", 100, (-6.0, 6.0)),  # swimmer_propsp.yaml
    ],
)
def test_the_reference_nonlinear_policy_configs_through_the_table(policy: str, variant: str, warmup: int, bounds) -> None:
    """The reference's three Swimmer configs of its nonlinear policies, on a plain R2PO(...) and through the zoo's
    resolution of the table (its ``policies:`` layer), which agree; a class given instead of its alias resolves the same."""
    from sb3_r2po.r2po.policies import POLICY_ALIASES

    for given in (policy, POLICY_ALIASES[policy]):
        model = R2PO(given, "Swimmer-v5", llm="example", variant=variant)
        assert (
            model.settings.warmup_episodes,
            model.settings.max_iterations,
            model.settings.step_size,
            model.settings.target_return,
        ) == (warmup, 200, 0.1, 250)
        space = model.policy.parameter_space
        assert (space.low, space.high) == bounds
    settings, _ = apply_variant(_raw_entries()["Swimmer-v5"], variant, policy=policy)
    assert settings["warmup_episodes"] == warmup and settings["max_episodes"] == 4000 + warmup
    assert POLICIES_KEY not in settings and settings["param_bounds"] is None  # None: the policy's own bounds
