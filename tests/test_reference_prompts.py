"""The prompts' data written as the reference writes it (HWUDLabAIRoboticsResearch/R2PO @ 9449c38), at R2PO's defaults.

Fixed situations of ``benchmarks/reference_prompts.py`` (20 warm-up entries, then one entry per iteration, K = 20
evaluation episodes of a fixed controller): CartPole-v1, FrozenLake-v1 and MountainCarContinuous-v0 x r2po, props,
three_traj, rep_traj and critic_only x iterations 1 and 50. The formats checked are those of the reference's
``context_builder.py`` files (r2po, three_traj, reptraj, critic_only) and of its agents' ``str_nd_examples``.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from sb3_r2po.common.rollouts import Episode, ReferenceTrace, reference_excerpt, reference_trajectory

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "reference_prompts.py"
ENVS = ("CartPole-v1", "FrozenLake-v1", "MountainCarContinuous-v0")
VARIANTS = ("r2po", "props", "three_traj", "rep_traj", "critic_only")
WARMUP = 20

NUMBER = r"-?(?:\d+(?:\.\d+)?(?:e[-+]\d+)?)"  # Python's .3g
INLINE = rf"\[(?:{NUMBER},)*{NUMBER}\]"  # r2po and three_traj: no space after the commas
SPACED = rf"\[(?:{NUMBER}, )*{NUMBER}\]"  # rep_traj, always_critic, critic_only
REWARD = r"-?\d+\.\d\d"  # .2f


@cache
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference_prompts_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@cache
def situation(env_id: str, variant: str, iteration: int, length: str = "short") -> tuple[dict[str, str], list[Episode]]:
    """Our prompts (``search``, ``critic``) of the benchmark's situation, and its K episodes."""
    b = bench()
    eps = b.episodes(env_id, length)
    hist = b.history(env_id, iteration, np.random.default_rng(iteration))
    return b.ours(env_id, variant, iteration, hist, eps), eps


@pytest.mark.parametrize("iteration", [1, 50])
@pytest.mark.parametrize("env_id", ENVS)
def test_r2po_history_lines_are_the_references(env_id: str, iteration: int) -> None:
    prompts, _ = situation(env_id, "r2po", iteration)
    n = WARMUP + iteration - 1
    for role, joiner in (("search", "\n"), ("critic", "\n\n")):  # build_search_llm_history_text / build_history_text
        lines = re.findall(rf"^Trial (\d+): params=({INLINE}) (rollout_reward|mean_reward)=({REWARD})$", prompts[role], re.M)
        assert [int(i) for i, *_ in lines] == list(range(n))  # indexed from 0, every entry
        assert [key for _, _, key, _ in lines] == ["rollout_reward"] * WARMUP + ["mean_reward"] * (n - WARMUP)
        first, second = (f"Trial {i}: params={p} {k}={r}" for i, p, k, r in lines[:2])
        assert first + joiner + second in prompts[role]


@pytest.mark.parametrize("iteration", [1, 50])
@pytest.mark.parametrize("env_id", ENVS)
def test_props_history_is_its_numeric_optimizer_form(env_id: str, iteration: int) -> None:
    prompts, _ = situation(env_id, "props", iteration)
    lines = re.findall(rf"^((?:params\[\d+\]: {NUMBER}; )+)f\(params\): ({REWARD})$", prompts["search"], re.M)
    assert len(lines) == WARMUP + iteration - 1 and "Trial " not in prompts["search"] and "critic" not in prompts
    size = {"CartPole-v1": 10, "FrozenLake-v1": 16, "MountainCarContinuous-v0": 3}[env_id]
    assert all(vector.count("params[") == size for vector, _ in lines)


@pytest.mark.parametrize("iteration", [1, 50])
@pytest.mark.parametrize("env_id", ENVS)
def test_three_traj_labels_warm_up_and_training_trials(env_id: str, iteration: int) -> None:
    prompts, _ = situation(env_id, "three_traj", iteration)
    n = WARMUP + iteration - 1
    for role in ("search", "critic"):
        lines = re.findall(
            rf"^(Warmup|Training) trial (\d+): params={INLINE} (rollout|mean)_reward={REWARD}$", prompts[role], re.M
        )
        assert [int(i) for _, i, _ in lines] == list(range(n))
        assert [(tag, key) for tag, _, key in lines] == [("Warmup", "rollout")] * WARMUP + [("Training", "mean")] * (
            n - WARMUP
        )


@pytest.mark.parametrize("iteration", [1, 50])
@pytest.mark.parametrize("variant", ["rep_traj", "critic_only"])
@pytest.mark.parametrize("env_id", ENVS)
def test_excerpt_histories_and_step_traces(env_id: str, variant: str, iteration: int) -> None:
    prompts, eps = situation(env_id, variant, iteration)
    critic, n = prompts["critic"], WARMUP + iteration - 1
    lines = re.findall(rf"^Trial (\d+): params={SPACED} mean_reward={REWARD}$", critic, re.M)
    assert [int(i) for i in lines] == list(range(n))  # warm-up entries not told apart
    excerpts = re.findall(r"^  rollout_excerpt=(.*)$", critic, re.M)
    assert len(excerpts) == min(n, {"CartPole-v1": 5, "FrozenLake-v1": 100, "MountainCarContinuous-v0": 2}[env_id])
    assert all(e.endswith(("->[TERMINATED]", "->[ROLLOUT_CAP]")) for e in excerpts)
    # the reference's format_trajectory_summary: a header, then every step with its reward
    header = re.search(r"^Trajectory 0 \(length=(\d+)(, step_reward_sum=(-?\d+\.\d\d))?\):$", critic, re.M)
    assert header is not None and (header.group(2) is None) == (variant == "critic_only")
    steps = re.findall(r"^  step (\d+): state=(\S.*) -> action=(\S+) -> reward=(\S+)$", critic, re.M)
    assert [int(t) for t, *_ in steps] == list(range(int(header.group(1))))
    episode = next(ep for ep in eps if ep.length == int(header.group(1)))
    assert [float(r) for *_, r in steps] == pytest.approx(list(episode.rewards), rel=5e-3, abs=1e-9)  # each step's reward
    action = steps[0][2]
    assert {
        "CartPole-v1": re.fullmatch(r"\[[01]\]", action),
        "FrozenLake-v1": re.fullmatch(r"[0-3]", action),
        "MountainCarContinuous-v0": re.fullmatch(r"\[\[-?\d\.\d+(e-\d+)?\]\]", action),
    }[env_id]


@pytest.mark.parametrize("length", ["short", "long"])
@pytest.mark.parametrize("env_id", ENVS)
def test_r2po_critic_statistics_and_median_rollout(env_id: str, length: str) -> None:
    prompts, eps = situation(env_id, "r2po", 1, length)
    critic = prompts["critic"]
    k, target = len(eps), {"CartPole-v1": 500, "FrozenLake-v1": 1, "MountainCarContinuous-v0": 100}[env_id]
    assert re.search(
        rf"^Reward: mean={REWARD}, min={REWARD}, max={REWARD}\nEpisode length: mean=\d+\.\d, min=\d+, max=\d+$", critic, re.M
    )
    assert re.search(rf"^Success rate: \d+/{k} rollouts reached reward>={target:.2f}\n", critic, re.M)
    assert re.search(rf"^Failure rate: \d+/{k} rollouts finished below reward={target:.2f}$", critic, re.M)
    median = re.search(r"^Median rollout \(rollout (\d+), reward=(-?\d+\.\d{4}), length=(\d+)\):\n(.*)$", critic, re.M)
    assert median is not None
    episode = eps[int(median.group(1))]
    steps = median.group(4).split(" | ")
    assert len(steps) == int(median.group(3)) == episode.length  # the whole episode, states and actions only
    cap = episode.length >= {"FrozenLake-v1": 100}.get(env_id, 1000)
    assert steps[-1].endswith("->[ROLLOUT_CAP]" if cap else "->[TERMINATED]")
    # the proposal: the reference's "params[i]: v" joined by "; "
    assert re.search(rf"^params\[0\]: {NUMBER}(; params\[\d+\]: {NUMBER})+$", critic, re.M)


@pytest.mark.parametrize("env_id", ENVS)
def test_three_traj_rollouts_keep_25_head_and_25_tail_steps(env_id: str) -> None:
    prompts, _ = situation(env_id, "three_traj", 1, "long")
    for title in ("Worst", "Median", "Best"):
        rollout = re.search(rf"^{title} rollout \(rollout \d+, reward=-?\d+\.\d{{4}}\):\n(.*)$", prompts["critic"], re.M)
        assert rollout is not None
        parts = rollout.group(1).split(" | ")
        if len(parts) > 50:  # head, marker, tail; each part's last step is marked [GOAL] or [END]
            assert len(parts) == 51 and re.fullmatch(r"\.\.\. \d+ omitted steps \.\.\.", parts[25])
            assert parts[24].endswith(("->[GOAL]", "->[END]"))
        assert parts[-1].endswith(("->[GOAL]", "->[END]"))


def test_numbers_and_trace_endings_never_show_the_terminal_observation() -> None:
    observations = np.array([[0.5, -0.25], [1234.5, 0.0], [7.0, 8.0]])  # the last: where the last action led
    episode = Episode(observations, np.array([[1.0], [0.0]]), [1.0, 0.5], "terminated")
    chain = reference_trajectory(episode, ReferenceTrace("chain", "list", "wrapped", 1000)).lines
    assert chain == ("[0.5, -0.25]->[1]->[1.23e+03, 0] | [1.23e+03, 0]->[0]->[TERMINATED]",)
    steps = reference_trajectory(episode, ReferenceTrace("steps", "list", "nested", 2)).lines
    assert steps == (
        "  step 0: state=[0.5, -0.25] -> action=[[1.0]] -> reward=1",
        "  step 1: state=[1.23e+03, 0] -> action=[[0.0]] -> reward=0.5",
    )
    capped = reference_excerpt(episode, ReferenceTrace("steps", "list", "list", 2))  # 2 steps reach the cap of 2
    assert capped.endswith("->[ROLLOUT_CAP]") and "[7, 8]" not in capped and "8" not in capped
    tabular = Episode(np.array([[0], [4], [5]]), np.array([[1], [2]]), [0.0, 0.0], "terminated")
    assert reference_trajectory(tabular, ReferenceTrace("chain", "int", "int", 100)).lines == ("0->1->4 | 4->2->[TERMINATED]",)
    assert reference_trajectory(tabular, ReferenceTrace("ends", "int", "int", 100)).lines == ("0->1->4 | 4->2->[END]",)


def test_prompt_size_is_the_references() -> None:
    """The r2po Critic of CartPole-v1 at iteration 50 (short episodes). The reference's prompt for this situation,
    rendered from its own templates and context builders, has 9993 characters (5246 tokens): measured with
    ``python benchmarks/reference_prompts.py --out results.json`` (row CartPole-v1, r2po, 50, short, critic), the
    reference at HEAD 9449c38 of HWUDLabAIRoboticsResearch/R2PO."""
    prompts, _ = situation("CartPole-v1", "r2po", 50)
    assert 0.95 <= len(prompts["critic"]) / 9993 <= 1.05


def test_our_trajectory_options_apply_to_the_reference_layout() -> None:
    """``max_trajectory_steps``, ``trajectory_digits`` and ``fold_repeated_steps`` (ours) keep their meaning."""
    observations = np.array([[0.123456, 0.0]] * 6 + [[1.0, 2.0]] * 4)  # steps 0-4 identical; steps 6-8 identical
    episode = Episode(observations, np.array([[0.0]] * 5 + [[1.0]] * 4), [1.0] * 9, "truncated")
    chain = ReferenceTrace("chain", "list", "wrapped", 1000)
    cut = reference_trajectory(episode, chain, max_steps=4).lines[0].split(" | ")
    assert len(cut) == 5 and cut[2] == "... 5 omitted steps ..." and cut[-1] == "[1, 2]->[1]->[TERMINATED]"
    assert reference_trajectory(episode, chain, digits=2).lines[0].startswith("[0.12, 0]->[0]->[0.12, 0]")
    folded = reference_trajectory(episode, chain, fold=True).lines[0].split(" | ")
    assert folded[:2] == ["[0.123, 0]->[0]->[0.123, 0] (4 identical steps)", "[0.123, 0]->[0]->[0.123, 0]"]
    assert len(folded) == 5 and folded[3] == "[1, 2]->[1]->[1, 2] (2 identical steps)"  # 0-3, 4, 5, 6-7, 8
    steps = reference_trajectory(episode, ReferenceTrace("steps", "list", "nested", 1000), fold=True).lines
    assert steps[0] == "  steps 0-4 (5 identical steps): state=[0.123, 0] -> action=[[0.0]] -> reward=1"
    assert (
        reference_trajectory(episode, ReferenceTrace("steps", "list", "nested", 9), digits=2)
        .lines[5]
        .endswith("action=[[1]] -> reward=1")
    )
