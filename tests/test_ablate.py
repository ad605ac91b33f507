import importlib.util
import itertools
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

if importlib.util.find_spec("rl_zoo3") is None:  # ablate builds its runs through RL Zoo's ExperimentManager
    pytest.skip("rl_zoo3 is not installed", allow_module_level=True)

import sb3_r2po
from sb3_r2po import R2PO
from sb3_r2po.ablate import literal_policy_kwargs, main, resolve_llm, run_one, run_settings
from sb3_r2po.experiments.report import ablation_report, salience_summary
from sb3_r2po.experiments.runs import r2po_entry
from sb3_r2po.llm.example import ExampleLLM
from sb3_r2po.llm.recording import RecordingBackend, read_records
from sb3_r2po.r2po.policies import LinearPolicy, TabularPolicy
from sb3_r2po.r2po.roles import points_at_worst


def test_ablation_report(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ablation.md"
    args = [
        "--llm",
        "example:0",
        "--envs",
        "CartPole-v1",
        "--variants",
        "r2po",
        "props",
        "--seeds",
        "0",
        "1",
        "--max-episodes",
        "25",
        "--n-eval-episodes",
        "2",
        "--warmup-episodes",
        "3",
        "--out",
        str(out),
    ]
    main(args)
    text = out.read_text()
    assert "| env | r2po | props |" in text and "| CartPole-v1 |" in text
    assert "## Salience diagnostics" in text and "| r2po |" in text
    assert "python -m sb3_r2po.ablate --llm example:0" in text
    runs = json.loads((tmp_path / "ablation.md.runs.json").read_text())
    assert len(runs) == 4 and all(r["episodes"] == 25 for r in runs)
    assert capsys.readouterr().err.count(" seed ") == 4
    # the same command gives the same table, from the results store: nothing runs again
    main(args)
    assert out.read_text() == text and capsys.readouterr().err.count(" seed ") == 0
    assert len(list((tmp_path / "ablation.md.store" / "runs").iterdir())) == 4
    # from an empty store too (the example LLM is deterministic given the seed)
    main([*args, "--store", str(tmp_path / "other")])
    table = lambda text: text.split("## Reproduce")[0]  # noqa: E731  (the command differs)
    assert table(out.read_text()) == table(text) and capsys.readouterr().err.count(" seed ") == 4


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("The worst rollout failed, so I lower the bias.", True),
        ("In the worst episode the cart drifts right; raise W[0].", True),
        ("The lowest-return episode ends at step 12.", True),
        ("The episode with the lowest return falls over early.", True),
        ("The statistics show no systematic failures; the median episode keeps the pole up. Small edit to W[2].", False),
        ("It fell short of the target in 3 of 20 episodes: an occasional failure, so I keep the parameters.", False),
        ("The pole falls to the right when s[3] is large; failing episodes are rare.", False),
        ("Looks fine.", False),
        ("", False),
    ],
)
def test_fixation_heuristic_matches_only_the_worst_episode(reply: str, expected: bool) -> None:
    assert points_at_worst(reply) is expected


# ---------------------------------------------------------------------------------------------- settings


class _Spy(R2PO):
    """R2PO remembering every instance (the model :func:`run_one` builds and drops)."""

    built: ClassVar[list[R2PO]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _Spy.built.append(self)


def _model(monkeypatch: pytest.MonkeyPatch, env_id: str, variant: str = "r2po", **settings: Any) -> R2PO:
    """The model of a tiny :func:`run_one` with ``settings`` on top of the env's ``zoo_configs/r2po.yml`` entry."""
    monkeypatch.setattr(sb3_r2po, "R2PO", _Spy)
    _Spy.built.clear()
    run_one(env_id, variant, 0, "example:0", settings)
    (model,) = _Spy.built
    return model


@pytest.mark.parametrize(
    "env_id, target, tau_c, step, warmup, policy",
    [
        ("CartPole-v1", 500, 480, 1.0, 20, LinearPolicy),
        ("InvertedDoublePendulum-v5", 500, 450, 0.1, 20, LinearPolicy),
        ("MountainCar-v0", -120, -120, 1.0, 0, LinearPolicy),
        ("Swimmer-v5", 250, 230, 0.1, 100, LinearPolicy),
        ("FrozenLake-v1", 1.0, 0.85, 1.0, 0, TabularPolicy),
        ("R2PO/Maze3x3-v0", 0.9, 0.9, 1.0, 20, TabularPolicy),
    ],
)
def test_runs_start_from_the_zoo_config(
    monkeypatch: pytest.MonkeyPatch, env_id: str, target: float, tau_c: float, step: float, warmup: int, policy: type
) -> None:
    """Each run gets the env's paper settings from zoo_configs/r2po.yml (as the zoo and compare do), not R2PO's defaults."""
    if env_id.endswith("-v5"):
        pytest.importorskip("mujoco")
    model = _model(monkeypatch, env_id, max_episodes=1)  # one warm-up episode (or none): no LLM call
    assert (model.settings.target, model.settings.revision_threshold, model.settings.step_size) == (target, tau_c, step)
    assert (
        model.settings.warmup_episodes == warmup and model.settings.n_eval_episodes == 20 and model.settings.max_episodes == 1
    )
    assert (
        isinstance(model.policy, policy) and model.settings.param_bounds is None
    )  # the policy's own: -6..6 or the action set
    entry = r2po_entry(env_id)
    assert (
        model.settings.max_episode_steps == entry["max_episode_steps"]
        and model.settings.max_trajectory_steps == entry["max_trajectory_steps"]
    )
    # the file's budget when none is given: 4000 episodes after the warm-up, the variant's own (the reference's)
    assert run_settings(env_id, "r2po")["max_episodes"] == entry["max_episodes"] == 4000 + warmup
    props = r2po_entry(env_id, "props")
    assert run_settings(env_id, "props")["max_episodes"] == props["max_episodes"] == 4000 + props["warmup_episodes"]


def test_command_line_options_override_only_when_given(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(monkeypatch, "MountainCar-v0", "props", max_episodes=2, n_eval_episodes=2)
    assert (
        model.settings.warmup_episodes == 20 and model.settings.n_eval_episodes == 2 and model.settings.max_episodes == 2
    )  # the file's (props')
    assert model.settings.variant == "props" and model.settings.target == -120 and model.settings.tau_c is None
    model = _model(monkeypatch, "MountainCar-v0", max_episodes=1, warmup_episodes=1, target_return=-150.0)
    assert (
        model.settings.warmup_episodes == 1 and model.settings.target == -150.0 and model.settings.revision_threshold == -120
    )
    # the zoo's env_kwargs build the env (the paper's slippery lake), and can be overridden like the rest
    model = _model(monkeypatch, "FrozenLake-v1", max_episodes=1)
    assert model.env.get_attr("spec")[0].kwargs["is_slippery"] is True
    model = _model(monkeypatch, "FrozenLake-v1", max_episodes=1, env_kwargs={"is_slippery": False})
    assert model.env.get_attr("spec")[0].kwargs["is_slippery"] is False
    # keys of the zoo's step-horizon training are dropped; the zoo applies its env wrappers, and R2PO refuses those
    # that change observations or rewards (not silently ignored)
    assert "n_timesteps" not in run_settings("CartPole-v1", "r2po")
    with pytest.raises(ValueError, match="R2PO cannot train through VecNormalize"):
        run_one("CartPole-v1", "r2po", 0, "example:0", {"normalize": True, "max_episodes": 1})


def test_the_report_holds_each_envs_settings(tmp_path: Path) -> None:
    out = tmp_path / "ablation.md"
    args = ["--llm", "example:0", "--envs", "MountainCar-v0", "--variants", "r2po", "--seeds", "0", "--max-episodes", "2"]
    main([*args, "--n-eval-episodes", "2", "--out", str(out)])
    (run,) = json.loads((tmp_path / "ablation.md.runs.json").read_text())
    assert run["settings"]["warmup_episodes"] == 0 and run["settings"]["target_return"] == -120  # zoo_configs/r2po.yml
    assert run["settings"]["n_eval_episodes"] == 2 and run["settings"]["max_episodes"] == 2  # the command line
    line = "- MountainCar-v0, r2po: policy='MlpLinear', n_eval_episodes=2, warmup_episodes=0, max_episodes=2"
    assert line in out.read_text()


# ---------------------------------------------------------------------------------------------- replay


def test_replay_reproduces_a_recording_whose_replies_vary(tmp_path: Path) -> None:
    """
    A real LLM may answer the same prompt differently in two runs: the replay of the recording must hand each run the
    reply it got, so one replay backend answers all runs in turn (not one backend per run).
    """
    calls = itertools.count()

    def varying(messages: list[dict[str, str]]) -> str:  # a different seed for every call
        return ExampleLLM(seed=next(calls)).chat(messages).text

    record = tmp_path / "calls.jsonl"
    recorder = RecordingBackend(varying, record)
    settings = {"max_episodes": 21, "n_eval_episodes": 3, "warmup_episodes": 3}
    variants = ("rep_traj", "always_critic")  # the same Search prompt (the reference's ProPS template) in both
    recorded = [run_one("CartPole-v1", variant, 0, recorder, settings) for variant in variants]
    replies: dict[str, set[str]] = {}
    for call in read_records(record):
        replies.setdefault(call["hash"], set()).add(call["reply"]["text"])
    assert any(len(texts) > 1 for texts in replies.values())  # a prompt of both runs, answered differently

    args = ["--envs", "CartPole-v1", "--variants", *variants, "--seeds", "0", "--max-episodes", "21"]
    args += ["--n-eval-episodes", "3", "--warmup-episodes", "3", "--out", str(tmp_path / "replay.md")]
    main(["--llm", f"replay:{record}", *args])
    replayed = json.loads((tmp_path / "replay.md.runs.json").read_text())
    for before, after in zip(recorded, replayed, strict=True):
        assert [r["params"] for r in before["history"]] == [r["params"] for r in after["history"]]
        assert before["mean_return"] == after["mean_return"] and before["llm_calls"] == after["llm_calls"]


# ---------------------------------------------------------------------------------------------- figures and report


def test_run_one_figures_come_from_the_iterations_of_its_history() -> None:
    llm = RecordingCalls()
    # seed 3: its two iterations differ, and differ from the warm-up's best (seed 0's two iterations are equal)
    run = run_one("CartPole-v1", "r2po", 3, llm, {"max_episodes": 3 + 4 * 2, "n_eval_episodes": 2, "warmup_episodes": 3})
    iterations = [r["mean_return"] for r in run["history"] if r["kind"] != "warmup"]
    warmup = [r["mean_return"] for r in run["history"] if r["kind"] == "warmup"]
    assert len(iterations) == 2 and max(warmup) != max(iterations)  # the warm-up episodes would change the figures
    assert run["mean_return"] == pytest.approx(sum(iterations) / 2) and run["best_return"] == max(iterations)
    assert run["mean_return"] != run["best_return"]
    assert run["llm_calls"] == llm.calls == 4 and run["iterations"] == 2 and run["episodes"] == 11
    expected = salience_summary(run["history"])
    assert run["salience"]["revisions"] == 2 and run["salience"]["accepted"] == expected["accepted"]


class RecordingCalls:
    """The example LLM, counting its calls."""

    def __init__(self) -> None:
        self.inner, self.calls = ExampleLLM(seed=0), 0

    def chat(self, messages, *, temperature: float = 0.0):
        self.calls += 1
        return self.inner.chat(messages, temperature=temperature)


def _run(env: str, variant: str, seed: int, mean: float, best: float, diagnostics: list[dict]) -> dict[str, Any]:
    history = [{"kind": "search", "diagnostics": d} for d in diagnostics]
    return {"env": env, "variant": variant, "seed": seed, "mean_return": mean, "best_return": best, "history": history}


def _d(regression: bool) -> dict[str, Any]:
    return {"accepted": not regression, "regression": regression, "n_changed": 1, "l1": 1.0, "worst_fixation": False,
            "above_tau_c": False}  # fmt: skip


def test_report_tables_group_runs_by_env_and_variant() -> None:
    runs = [
        _run("A-v0", "r2po", 0, 1.0, 10.0, [_d(True)]),
        _run("A-v0", "r2po", 1, 3.0, 20.0, [_d(False)]),
        _run("A-v0", "props", 0, 5.0, 50.0, []),
        _run("B-v0", "r2po", 0, 7.0, 70.0, [_d(False)]),
        _run("B-v0", "props", 0, 9.0, 90.0, []),
    ]
    text = ablation_report(runs, "cmd")
    mean_table, best_table = (part.split("## ")[0] for part in text.split("(mean +- std over seeds)")[1:3])
    assert "| A-v0 | 2.00 +- 1.00 | 5.00 +- 0.00 |" in mean_table and "| B-v0 | 7.00 +- 0.00 | 9.00 +- 0.00 |" in mean_table
    assert (
        "| A-v0 | 15.00 +- 5.00 | 50.00 +- 0.00 |" in best_table and "| B-v0 | 70.00 +- 0.00 | 90.00 +- 0.00 |" in best_table
    )
    assert "| r2po | 3 | 1 | 33.3 % |" in text and "| props | 0 | 0 | - |" in text  # pooled per variant


def test_report_gives_each_figure_its_iqm_and_interval() -> None:
    """The IQM tables: scipy's 25 %-trimmed mean over the seeds inside its 95 % interval, the same on every call; one
    seed renders as the point itself, marked as one run, and the note says how many runs the intervals rest on."""
    from scipy.stats import trim_mean

    from sb3_r2po.experiments.report import iqm_interval

    means, bests = [1.0, 2.0, 3.0, 4.0, 50.0], [10.0, 30.0, 20.0, 40.0, 0.0]
    runs = [_run("A-v0", "r2po", seed, m, b, []) for seed, (m, b) in enumerate(zip(means, bests, strict=True))]
    runs.append(_run("A-v0", "props", 0, 5.0, 6.0, []))
    text = ablation_report(runs, "cmd")
    assert text == ablation_report(runs, "cmd")
    for title, figures, single in (("Mean return over iterations", means, "5.00"), ("Best iteration", bests, "6.00")):
        part = text.split(f"## {title} (IQM [95 % CI] over seeds)")[1].split("## ")[0]
        iqm, low, high = iqm_interval(figures)
        assert iqm == pytest.approx(trim_mean(figures, 0.25)) and low <= iqm <= high and low < high
        one_run = f"{single} [{single}, {single}] (1 run)"
        assert f"| A-v0 | {trim_mean(figures, 0.25):.2f} [{low:.2f}, {high:.2f}] | {one_run} |" in part
    assert "1-5 runs each" in text and "With one run a cell is that run's figure" in text


def test_an_env_without_a_time_limit_is_capped() -> None:
    import gymnasium as gym
    from helpers import EndlessEnv

    gym.register("R2POTest/Endless-v0", entry_point=EndlessEnv)
    try:
        settings = {"max_episode_steps": 7, "max_episodes": 2, "warmup_episodes": 2}
        run = run_one("R2POTest/Endless-v0", "r2po", 0, "example:0", settings)
        assert [r["mean_length"] for r in run["history"]] == [7.0, 7.0] and run["episodes"] == 2
    finally:
        del gym.registry["R2POTest/Endless-v0"]


def test_policy_kwargs_string_and_record_option(tmp_path: Path) -> None:
    settings = run_settings("CartPole-v1", "r2po", {"policy_kwargs": "dict(bias=False)"})
    assert settings["policy_kwargs"] == {"bias": False}
    assert literal_policy_kwargs("{'net': dict(sizes=[1, 2], on=True)}") == {"net": {"sizes": [1, 2], "on": True}}
    hostile = "dict(bias=__import__('os').remove('x'))"
    assert literal_policy_kwargs(hostile) == hostile  # never executed: a non-literal is the zoo's to read
    backend = resolve_llm("example:0", record=str(tmp_path / "calls.jsonl"))
    assert isinstance(backend, RecordingBackend)
    assert not isinstance(resolve_llm("example:0"), RecordingBackend)


def test_no_runner_evaluates_text() -> None:
    """compare, ablate and the experiment layer parse what they read; none calls eval() or exec()."""
    import ast

    root = Path(sb3_r2po.__file__).parent
    paths = [root / "compare.py", root / "ablate.py", *sorted((root / "experiments").glob("*.py"))]
    calls = [
        f"{path.name}:{node.lineno}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec")
    ]
    assert not calls
