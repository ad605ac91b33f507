"""Prompt size, ours / the reference's, for the same situations: characters and tokens of each Search and Critic prompt.

    python benchmarks/reference_prompts.py [--reference PATH] [--size 0.5b] [--chars-only] [--out FILE]

The reference's prompts are rendered from the reference implementation itself (``HWUDLabAIRoboticsResearch/R2PO``):
its Jinja templates and its context-builder functions, read from a checkout (``--reference``) or extracted at run time
from the bare mirror (``git archive`` of ``HEAD`` into a temporary directory), with the values its agents pass them.
Ours come from R2PO's own prompt path (:class:`~sb3_r2po.r2po.roles.PromptView` and
:class:`~sb3_r2po.prompts.builder.PromptBuilder`) at the defaults.

Situations: CartPole-v1, FrozenLake-v1 and MountainCarContinuous-v0 x variants r2po, props, three_traj, rep_traj and
critic_only x iterations 1, 50 and 100 x short and long episodes. Both sides get the same history (20 warm-up entries,
then one entry per iteration: identical vectors and returns, each entry's rollout one of the situation's episodes), the
same K = 20 evaluation episodes (generated with fixed seeds and a fixed controller: short, the episode ends early; long,
it runs to the time limit) and the same planned iteration count (100; the reference counts iterations from 0, ours
from 1). Tokens are counted with the embedded model's tokenizer (llama-cpp-python, ``vocab_only``; chat template
excluded) when its GGUF file is available, characters otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import io
import json
import math
import subprocess
import sys
import tarfile
import tempfile
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import jinja2
import numpy as np

from sb3_r2po import R2PO
from sb3_r2po.common.rollouts import Episode, RolloutResult
from sb3_r2po.prompts.builder import PromptBuilder
from sb3_r2po.r2po.roles import PromptView
from sb3_r2po.r2po.run_state import Clock

MIRROR = Path("/work/.mirror/HWUDLabAIRoboticsResearch+R2PO/repo")
K, WARMUP, ITERATIONS, PLANNED = 20, 20, (1, 50, 100), 100
VARIANTS = ("r2po", "props", "three_traj", "rep_traj", "critic_only")


@dataclasses.dataclass(frozen=True)
class Env:
    """A situation's env: our settings and the reference config's (``configs/<env>/*.yaml``)."""

    policy: str
    target: float
    tau_c: float
    step: float
    cap: int  # the reference's max_traj_length
    excerpts: int  # the reference's traj_history_last_n
    description: str  # the reference's env description template
    tabular: bool = False


ENVS = {
    "CartPole-v1": Env("MlpLinear", 500.0, 480.0, 1.0, 1000, 5, "env_descriptions/cartpole.j2"),
    "FrozenLake-v1": Env("Tabular", 1.0, 0.85, 1.0, 100, 100, "env_descriptions/frozenlake.j2", tabular=True),
    "MountainCarContinuous-v0": Env("MlpLinear", 100.0, 97.0, 1.0, 1000, 2, "env_descriptions/mountaincarcontinuous.j2"),
}


def controller(env_id: str, length: str) -> Callable[[Any], Any]:
    """The fixed controller behind a situation's episodes (``short``: they end early; ``long``: they run long)."""
    if env_id == "CartPole-v1":
        if length == "long":
            return lambda s: int(s[2] + 0.5 * s[3] + 0.01 * s[1] > 0)  # balances for 500 steps
        return lambda s: 0  # falls after about 10 steps
    if env_id == "FrozenLake-v1":
        if length == "long":
            return lambda s: 3  # up: the agent stays in the top row until the time limit
        return lambda s: 1 if s in (0, 4, 8, 9, 13, 14) else 2  # down and right, to the goal or into a hole
    if length == "long":
        return lambda s: np.array([0.3 * np.sin(40 * s[0])])  # jiggles at the bottom until the time limit
    return lambda s: np.array([1.0 if s[1] >= 0 else -1.0])  # swings up to the goal in about 100 steps


def episodes(env_id: str, length: str) -> list[Episode]:
    """K episodes of the situation's controller, seeds 0..K-1."""
    env, act = gym.make(env_id), controller(env_id, length)
    out = []
    for seed in range(K):
        obs, _ = env.reset(seed=seed)
        observations, actions, rewards, end = [obs], [], [], "running"
        while end == "running":
            action = act(obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            observations.append(obs)
            actions.append(action)
            rewards.append(float(reward))
            end = "terminated" if terminated else "truncated" if truncated else "running"
        out.append(Episode(np.asarray(observations, dtype=np.float64), np.asarray(actions, dtype=np.float64), rewards, end))
    return out


def reference_step(env_id: str, episode: Episode, t: int) -> tuple[Any, Any, float]:
    """Step ``t`` as the reference's agents store it in a trajectory buffer (state, action, reward)."""
    obs, action = np.asarray(episode.observations[t]), np.asarray(episode.actions[t])
    if env_id == "FrozenLake-v1":  # q_table agents: int state, int action
        return int(obs), int(action), episode.rewards[t]
    state = obs.astype(np.float32)  # gymnasium's float32 observation, squeezed
    if env_id == "CartPole-v1":
        return state, np.array([int(action)]), episode.rewards[t]  # np.array([argmax])
    return state, action.reshape(1, -1), episode.rewards[t]  # the clipped (1, dim_action) action


def history(env_id: str, iteration: int, rng: np.random.Generator) -> list[tuple[np.ndarray, float, bool]]:
    """The situation's history: vectors, returns, warm-up flags (fixed by the seed)."""
    env, size = ENVS[env_id], {"CartPole-v1": 10, "FrozenLake-v1": 16, "MountainCarContinuous-v0": 3}[env_id]
    out = []
    for i in range(WARMUP + iteration - 1):
        params = rng.integers(0, 4, size).astype(np.float64) if env.tabular else np.round(rng.uniform(-6, 6, size), 1)
        low, high = {"CartPole-v1": (8, 500), "FrozenLake-v1": (0, 1), "MountainCarContinuous-v0": (-300, 95)}[env_id]
        value = float(rng.uniform(low, high))
        value = float(round(value)) if i < WARMUP and env_id != "MountainCarContinuous-v0" else value
        out.append((params, value if i >= WARMUP or env_id != "FrozenLake-v1" else float(value > 0.9), i < WARMUP))
    return out


# ----------------------------------------------------------------------------------------------------------- reference


def reference_checkout(path: str | None) -> Path:
    """The reference's files: ``path``, or ``HEAD`` of the bare mirror extracted into a temporary directory."""
    if path is not None:
        return Path(path)
    target = Path(tempfile.mkdtemp(prefix="r2po_reference_"))
    archive = subprocess.run(
        ["git", "-C", str(MIRROR), "archive", "HEAD", "agent", "ablations"], check=True, capture_output=True
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target


class Reference:
    """The reference's templates and context builders."""

    def __init__(self, root: Path) -> None:
        def load(path: str) -> ModuleType:  # by file: the packages' __init__ import the LLM clients
            spec = importlib.util.spec_from_file_location(path.replace("/", "_")[:-3], root / path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module

        folders = {"r2po": "reflective_prompted_policy_optimization", "rep_traj": "reptraj"}
        self.builders = {v: load(f"ablations/{folders.get(v, v)}/context_builder.py") for v in VARIANTS if v != "props"}
        self.buffers = load("agent/policy/replay_buffer.py")
        loader = jinja2.FileSystemLoader([str(root / "agent/policy/templates"), str(root / "ablations")])
        self.jinja = jinja2.Environment(loader=loader)

    def trajectory(self, env_id: str, episode: Episode) -> Any:
        """An episode as a one-trajectory ``ReplayBuffer``."""
        buf = self.buffers.ReplayBuffer(1, ENVS[env_id].cap)
        buf.start_new_trajectory()
        for t in range(episode.length):
            buf.add_step(*reference_step(env_id, episode, t))
        return buf

    def prompts(self, env_id: str, variant: str, iteration: int, hist: list[Any], eps: list[Episode]) -> dict[str, str]:
        env = ENVS[env_id]
        rank = len(hist[0][0])
        replay = type("Replay", (), {})()
        replay.buffer = deque((params, value) for params, value, _ in hist)
        trajs = type("Trajs", (), {})()
        trajs.buffer = [self.trajectory(env_id, eps[i % K]).buffer[0] for i in range(len(hist))]
        actions = [[0, 1, 2, 3]] if env.tabular else None
        common = dict(rank=rank, optimum=str(env.target), actions=actions)
        step_number, out = iteration - 1, {}
        returns = [ep.total_return for ep in eps]
        candidate = np.round(np.random.default_rng(1).uniform(-6, 6, rank), 1) if not env.tabular else hist[-1][0]
        if variant == "r2po":
            b = self.builders["r2po"]
            search = "search_llm_optimizer_disc.j2" if env.tabular else "search_llm_optimizer_cont.j2"
            out["search"] = self.jinja.get_template(f"reflective_prompted_policy_optimization/templates/{search}").render(
                episode_reward_buffer_string=b.build_search_llm_history_text(replay, warmup_replay_count=WARMUP),
                step_number=str(step_number),
                max_iterations=str(PLANNED),
                step_size=str(env.step),
                **common,
            )
            summary = b.build_median_trajectory_stats_summary(
                returns, [self.trajectory(env_id, ep) for ep in eps], optimum=env.target
            )
            context = b.build_critic_llm_reflection_context(
                candidate, float(np.mean(returns)), summary, replay, step_number, env.description, PLANNED, rank,
                env.target, env.step, actions, warmup_replay_count=WARMUP, conservative_threshold=env.tau_c,
            )  # fmt: skip
            critic = "critic_llm_reflector_disc.j2" if env.tabular else "critic_llm_reflector_cont.j2"
            out["critic"] = self.jinja.get_template(f"reflective_prompted_policy_optimization/templates/{critic}").render(
                context
            )
            return out
        num_optim = "num_optim_candidates.j2" if env.tabular else "num_optim.j2"
        f_history = "".join(
            "".join(f"params[{i}]: {params[i]:.5g}; " for i in range(rank)) + f"f(params): {value:.2f}\n"
            for params, value, _ in hist
        )  # the reference agents' str_nd_examples
        if variant == "three_traj":
            f_history = self.builders["three_traj"].build_search_llm_history_text(replay, warmup_replay_count=WARMUP)
        if variant != "critic_only":
            out["search"] = self.jinja.get_template(num_optim).render(
                episode_reward_buffer_string=f_history, step_number=str(step_number), step_size=str(env.step), **common
            )
        kind = "disc" if env.tabular else "cont"
        mean = int(np.argmin(np.abs(np.asarray(returns) - np.mean(returns))))
        if variant == "three_traj":
            b = self.builders["three_traj"]
            summary = b.build_three_trajectory_summary(returns, [self.trajectory(env_id, ep) for ep in eps])
            context = b.build_critic_llm_reflection_context(
                candidate, float(np.mean(returns)), summary, replay, step_number, env.description, PLANNED, rank,
                env.target, env.step, actions, warmup_replay_count=WARMUP,
            )  # fmt: skip
            out["critic"] = self.jinja.get_template(f"three_traj/templates/critic_llm_reflector_{kind}.j2").render(context)
        elif variant == "rep_traj":
            b = self.builders["rep_traj"]
            summary = b.format_trajectory_summary(self.trajectory(env_id, eps[mean]))
            context = b.build_critic_llm_reflection_context(
                candidate, float(np.mean(returns)), summary, None, replay, step_number, env.description, PLANNED, rank,
                env.target, env.step, actions, traj_buffer=trajs, traj_history_last_n=env.excerpts,
            )  # fmt: skip
            out["critic"] = self.jinja.get_template(f"reptraj/templates/critic_llm_reflector_{kind}.j2").render(context)
        elif variant == "critic_only":
            b = self.builders["critic_only"]
            latest = self.trajectory(env_id, eps[mean])
            context = b.build_critic_only_context(
                replay, step_number, env.description, PLANNED, rank, env.target, env.step, actions,
                traj_buffer=trajs, traj_history_last_n=env.excerpts,
            )  # fmt: skip
            context["trajectory_summary"] = b.format_trajectory_summary(latest)
            out["critic"] = self.jinja.get_template(f"critic_only/templates/critic_only_{kind}.j2").render(context)
        return out


# ----------------------------------------------------------------------------------------------------------------- ours


def ours(env_id: str, variant: str, iteration: int, hist: list[Any], eps: list[Episode]) -> dict[str, str]:
    """Our prompts at the defaults for the same situation, through R2PO's own prompt path."""
    env = ENVS[env_id]
    model = R2PO(
        env.policy,
        env_id,
        llm="example",
        variant=variant,
        warmup_episodes=WARMUP,
        n_eval_episodes=K,
        target_return=env.target,
        tau_c=env.tau_c if variant == "r2po" else None,
        step_size=env.step,
        max_episode_steps=env.cap,
    )
    records: list[dict] = []
    view = PromptView(model.settings, records, model.policy)
    for i, (params, value, warm) in enumerate(hist):
        record = {"params": params.tolist(), "mean_return": value, "n_episodes": 1 if warm else K}
        record.update(kind="warmup" if warm else "search", **view.stored_fields(RolloutResult([eps[i % K]])))
        records.append(record)
    model.history, model.iteration = records, iteration - 1
    clock = Clock(iteration - 1, 0, math.inf)
    builder, spec, out = PromptBuilder(reply_style=model.settings.reply_style), model.settings.variant_spec, {}
    if spec.search != "none":
        context = dataclasses.replace(view.context(clock), total_iterations=PLANNED)
        out["search"] = builder.search(context, spec.search_prompt, spec.search_history)[0]["content"]
    if spec.critic is not None:
        rank = len(hist[0][0])
        candidate = np.round(np.random.default_rng(1).uniform(-6, 6, rank), 1) if not env.tabular else hist[-1][0]
        result = RolloutResult(eps)
        line = view.line(candidate, float(np.mean(result.returns)), K)
        context = dataclasses.replace(view.context(clock, critic=True), total_iterations=PLANNED)
        critic = spec.critic
        out["critic"] = builder.critic(context, line, view.evidence(result), critic.prompt, critic.history)[0]["content"]
    return out


def counter(size: str, chars_only: bool) -> tuple[Callable[[str], int], str]:
    """Token counts with the embedded model's tokenizer, else (or with ``chars_only``) character counts."""
    if not chars_only:
        try:
            from llama_cpp import Llama

            from sb3_r2po.llm.weights import ensure_model_file

            tokenizer = Llama(str(ensure_model_file(size)), vocab_only=True, verbose=False)
            return (lambda text: len(tokenizer.tokenize(text.encode(), add_bos=False))), "tokens"
        except Exception as exc:  # no llama-cpp-python or no model file: characters only
            print(f"(no tokenizer: {exc}; counting characters only)", file=sys.stderr)
    return len, "chars"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", help="a checkout of the reference (default: HEAD of the mirror, extracted)")
    parser.add_argument("--size", default="0.5b", help="the embedded model whose tokenizer counts tokens")
    parser.add_argument("--chars-only", action="store_true", help="count characters only")
    parser.add_argument("--out", help="also write the rows as JSON to this file")
    parser.add_argument("--dump", help="write every rendered prompt pair into this directory")
    args = parser.parse_args()
    reference = Reference(reference_checkout(args.reference))
    count, unit = counter(args.size, args.chars_only)
    rows = []
    print(f"{'env':<25} {'variant':<12} {'it':>3} {'episodes':<8} {'role':<7} {'ours':>7} {'ref':>7} {'ratio':>6}  ({unit})")
    for env_id in ENVS:
        for length in ("short", "long"):
            eps = episodes(env_id, length)
            for variant in VARIANTS:
                for iteration in ITERATIONS:
                    hist = history(env_id, iteration, np.random.default_rng(iteration))
                    a, b = (
                        ours(env_id, variant, iteration, hist, eps),
                        reference.prompts(env_id, variant, iteration, hist, eps),
                    )
                    for role in ("search", "critic"):
                        if role not in a:
                            continue
                        n_ours, n_ref = count(a[role]), count(b[role])
                        row = dict(env=env_id, variant=variant, iteration=iteration, episodes=length, role=role)
                        row.update(ours=n_ours, reference=n_ref, ratio=round(n_ours / n_ref, 3), unit=unit)
                        row.update(ours_chars=len(a[role]), reference_chars=len(b[role]))
                        rows.append(row)
                        print(
                            f"{env_id:<25} {variant:<12} {iteration:>3} {length:<8} {role:<7} {n_ours:>7} {n_ref:>7} "
                            f"{n_ours / n_ref:>6.3f}"
                        )
                        if args.dump:
                            stem = Path(args.dump) / f"{env_id}_{variant}_{iteration}_{length}_{role}"
                            stem.parent.mkdir(parents=True, exist_ok=True)
                            stem.with_suffix(".ours.txt").write_text(a[role])
                            stem.with_suffix(".reference.txt").write_text(b[role])
    ratios = [r["ratio"] for r in rows]
    print(f"ratio ours/reference: min {min(ratios):.3f}, max {max(ratios):.3f} over {len(rows)} prompts")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
