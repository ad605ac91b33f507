"""Framework overhead per R2PO iteration: time outside environment steps and LLM calls.

    python benchmarks/overhead.py [--llm example] [--env CartPole-v1] [--iterations 30]

Measures one training run: total wall time, time inside the env's ``step``/``reset`` (a timing wrapper), and
time inside the LLM (``model.llm_stats["seconds"]``). The rest is framework overhead: prompt rendering,
parsing, evidence, policy forward passes, bookkeeping, logging, checkpoints. It is printed per iteration,
and as a share of an iteration: measured with the given ``--llm``, and, for ``--llm example`` (which answers
in microseconds), also against a reference LLM latency (``--reference-call-seconds``, default 6 s).

    python benchmarks/overhead.py --versus-plain-loop [--llm example|instant] [--repeats 3] [--baseline-tree DIR]

Compares ``learn()`` (no timing wrapper) with a plain gymnasium loop that steps the same policies for the same
steps: every evaluation of the run is replayed in a ``gym.make`` env, with the same reset seeds, the same
parameter vectors and the same number of episodes, computing each action with a one-line numpy forward pass.
It prints the ratio of the two wall times, and beside it the same loop with the env in SB3's ``Monitor`` (which
``learn()`` steps through: SB3 wraps every env an algorithm is given in one, for the ``infos[i]["episode"]`` that
callbacks read), so the part of the ratio that is the Monitor's shows. Each round runs ``learn()`` and the loops once
in a fresh process, per source tree; the table takes the best time of each over ``--repeats`` alternating rounds (the least
disturbed by other load), and, last, the ratio of the best CPU seconds (``time.process_time``, which leaves out the
time a VM's host takes its cores away). ``--baseline-tree DIR`` adds a second source tree (a ``git worktree`` of
another commit, imported through ``PYTHONPATH``) to the same rounds, side by side. ``--llm instant`` is an LLM that answers
at once with ``ExampleLLM``'s replies: each tree's run is first recorded with ``llm="example"`` (a ``checkpoint_dir``
transcript, not timed), and the rounds replay it (``llm="replay:<transcript>"``), so the history, the prompts and the
steps are the same as with ``example``, without the stand-in's own prompt parsing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.monitor import Monitor

from sb3_r2po import R2PO

ROOT = Path(__file__).resolve().parents[1]


class TimedEnv(gym.Wrapper):
    """Accumulates the wall time spent in ``step`` and ``reset``."""

    seconds = 0.0

    def step(self, action):
        start = time.perf_counter()
        try:
            return self.env.step(action)
        finally:
            TimedEnv.seconds += time.perf_counter() - start

    def reset(self, **kwargs):
        start = time.perf_counter()
        try:
            return self.env.reset(**kwargs)
        finally:
            TimedEnv.seconds += time.perf_counter() - start


Evaluation = tuple[np.ndarray, list[Any]]
"""One evaluation of a run: its parameter vector and the ``seed`` argument of each of its episodes' resets."""


def record_evaluations(model: R2PO, env: gym.Env) -> list[Evaluation]:
    """Make ``model`` record its evaluations: the vector of each ``policy.actor`` call, the seeds of ``env``'s resets
    after it (instance attributes shadowing the methods: nothing is added to the step path)."""
    evaluations: list[Evaluation] = []
    actor, reset = model.policy.actor, env.reset

    def recording_actor(params: np.ndarray, clip: bool = True) -> Any:
        evaluations.append((np.array(params, dtype=np.float64), []))
        return actor(params, clip)

    def recording_reset(**kwargs: Any) -> Any:
        if evaluations:  # learn() also resets the env once before its first evaluation
            evaluations[-1][1].append(kwargs.get("seed"))
        return reset(**kwargs)

    model.policy.actor = recording_actor  # type: ignore[method-assign]
    env.reset = recording_reset  # type: ignore[method-assign]
    return evaluations


def plain_loop(env_id: str, model: R2PO, evaluations: list[Evaluation], monitor: bool = False) -> int:
    """Replay ``evaluations`` in a plain ``gym.make`` loop (in SB3's ``Monitor`` with ``monitor``), the linear policy as
    one numpy line; the steps taken."""
    env = Monitor(gym.make(env_id)) if monitor else gym.make(env_id)
    space, cap = env.action_space, model.settings.episode_cap
    obs_dim = int(np.prod(env.observation_space.shape))
    act_dim = int(space.n) if isinstance(space, gym.spaces.Discrete) else int(np.prod(space.shape))
    steps = 0
    for params, seeds in evaluations:
        w, b = params[: obs_dim * act_dim].reshape(obs_dim, act_dim), params[obs_dim * act_dim :]
        for seed in seeds[:-1]:  # the last reset is the auto-reset after the evaluation's last episode
            obs, _ = env.reset(seed=seed)
            for _ in range(cap):
                y = np.asarray(obs, dtype=np.float64).reshape(1, -1) @ w + b
                if isinstance(space, gym.spaces.Discrete):
                    action: Any = int(np.argmax(y)) + int(space.start)
                else:
                    action = (
                        np.clip(y[0], space.low.reshape(-1), space.high.reshape(-1)).astype(space.dtype).reshape(space.shape)
                    )
                obs, _, terminated, truncated, _ = env.step(action)
                steps += 1
                if terminated or truncated:
                    break
    env.close()
    return steps


def make_model(args: argparse.Namespace, env: gym.Env) -> R2PO:
    """The measured configuration: ``--k`` episodes per candidate, 20 warm-up episodes, a budget of ``--iterations``
    iterations of two candidates (a proposal and its revision), seed 0."""
    warmup = 20
    return R2PO(
        "MlpLinear",
        env,
        llm=args.llm,
        n_eval_episodes=args.k,
        warmup_episodes=warmup,
        seed=0,
        max_episodes=warmup + 2 * args.k * args.iterations,
        checkpoint_dir=args.checkpoint_dir,
    )


def one_round(args: argparse.Namespace) -> dict[str, Any]:
    """``learn()`` once, then its evaluations in the plain loop; both wall times."""
    import sb3_r2po

    env = gym.make(args.env)
    model = make_model(args, env)
    evaluations = record_evaluations(model, env)
    times: dict[str, float] = {}

    def timed(name: str, run: Callable[[], Any]) -> Any:  # wall and CPU seconds (CPU time leaves out a VM's steal)
        start, cpu = time.perf_counter(), time.process_time()
        result = run()
        times[name], times[f"{name}_cpu"] = time.perf_counter() - start, time.process_time() - cpu
        return result

    timed("learn", lambda: model.learn(total_timesteps=10**12))
    plain_steps = timed("plain", lambda: plain_loop(args.env, model, evaluations))
    timed("monitor", lambda: plain_loop(args.env, model, evaluations, monitor=True))
    return {
        "module": str(Path(sb3_r2po.__file__).parent),
        **times,
        "steps": int(model.num_timesteps),
        "plain_steps": plain_steps,
        "iterations": int(model.iteration),
        "episodes": int(model.episodes_used),
    }


def source_label(tree: Path) -> str:
    """The commit of the source tree ``tree``, and whether its ``sb3_r2po`` has uncommitted changes."""
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "sb3_r2po"], capture_output=True, text=True)
    return commit.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


def versus_plain_loop(args: argparse.Namespace) -> None:
    """Alternate rounds over the source trees in fresh processes; print the best times and their ratio per tree."""
    trees = [ROOT] + ([Path(args.baseline_tree).resolve()] if args.baseline_tree else [])
    child = [sys.executable, __file__, "--round", "--env", args.env, "--k", str(args.k), "--iterations", str(args.iterations)]
    envs = {tree: {**os.environ, "PYTHONPATH": str(tree)} for tree in trees}
    llms = {tree: args.llm for tree in trees}
    rounds: dict[Path, list[dict[str, Any]]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory(prefix="overhead_") as recordings:
        if args.llm == "instant":  # each tree's ExampleLLM run, recorded once (not timed), then replayed in every round
            for i, tree in enumerate(trees):
                directory = Path(recordings) / str(i)
                recording = [*child, "--llm", "example", "--checkpoint-dir", str(directory)]
                subprocess.run(recording, env=envs[tree], check=True, capture_output=True)
                llms[tree] = f"replay:{directory / 'llm_calls.jsonl'}"
        for _ in range(args.repeats):
            for tree in trees:
                command = [*child, "--llm", llms[tree]]
                out = subprocess.run(command, env=envs[tree], check=True, capture_output=True, text=True)
                rounds[tree].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"{args.env}, llm={args.llm}, K={args.k}, {args.iterations} iterations; learn() against a plain gymnasium loop "
        f"stepping the same policies for the same steps; best of {args.repeats} alternating rounds"
    )
    print(
        "| source tree | commit | steps (learn / loop) | learn() s | plain loop s | ratio | loop in a Monitor s | ratio "
        "| ratio of CPU seconds (learn / loop) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for tree, results in rounds.items():
        label = source_label(tree)
        learn, plain = min(r["learn"] for r in results), min(r["plain"] for r in results)
        monitor = min(r["monitor"] for r in results)
        cpu = min(r["learn_cpu"] for r in results) / min(r["plain_cpu"] for r in results)
        steps = f"{results[0]['steps']} / {results[0]['plain_steps']}"
        assert all(r["module"].startswith(str(tree)) for r in results), f"{tree}: imported {results[0]['module']}"
        print(
            f"| {tree} | {label} | {steps} | {learn:.3f} | {plain:.3f} | {learn / plain:.2f} | {monitor:.3f} | "
            f"{learn / monitor:.2f} | {cpu:.2f} |"
        )


"""The parts ``--instructions`` counts; each has a set-up-only twin (``<part>-setup``) whose count is subtracted."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="example", help="an llm string; with --versus-plain-loop also 'instant'")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--reference-call-seconds", type=float, default=6.0)
    parser.add_argument("--checkpoint-dir", default=None, help="also write a checkpoint after every iteration")
    parser.add_argument("--versus-plain-loop", action="store_true", help="learn() against a plain gymnasium loop")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of --versus-plain-loop")
    parser.add_argument("--baseline-tree", default=None, help="a second source tree for --versus-plain-loop")
    parser.add_argument("--round", action="store_true", help=argparse.SUPPRESS)  # one round, as JSON (internal)
    args = parser.parse_args()
    if args.round:
        print(json.dumps(one_round(args)))
        return
    if args.versus_plain_loop:
        versus_plain_loop(args)
        return

    env = TimedEnv(gym.make(args.env))
    model = make_model(args, env)
    start = time.perf_counter()
    model.learn(total_timesteps=10**12)
    total = time.perf_counter() - start
    llm = float(model.llm_stats["seconds"])
    env_seconds = TimedEnv.seconds
    overhead = total - llm - env_seconds
    n = max(1, model.iteration)
    calls_per_iteration = model.llm_stats["calls"] / n
    reference_iteration = total / n - llm / n + calls_per_iteration * args.reference_call_seconds

    print(
        f"{args.env}, llm={args.llm}, K={args.k}, {model.iteration} iterations, {model.episodes_used} episodes, "
        f"{model.num_timesteps} steps, {int(model.llm_stats['calls'])} LLM calls"
    )
    print("| part | seconds | per iteration (ms) | share of the run |")
    print("|---|---|---|---|")
    for name, seconds in [("env step/reset", env_seconds), ("LLM", llm), ("framework overhead", overhead), ("total", total)]:
        print(f"| {name} | {seconds:.3f} | {1000 * seconds / n:.2f} | {100 * seconds / total:.2f} % |")
    share = 100 * (overhead / n) / reference_iteration
    print(
        f"\nOverhead as a share of an iteration whose {calls_per_iteration:.1f} LLM calls take "
        f"{args.reference_call_seconds:g} s each (reference): {share:.3f} % (goal < 1 %)"
    )


if __name__ == "__main__":
    main()
