"""Framework overhead per R2PO iteration: time outside environment steps and LLM calls.

    python benchmarks/overhead.py [--llm example] [--env CartPole-v1] [--iterations 30]

Measures one training run: total wall time, time inside the env's ``step``/``reset`` (a timing wrapper), and
time inside the LLM (``model.llm_stats["seconds"]``). The rest is framework overhead: prompt rendering,
parsing, evidence, policy forward passes, bookkeeping, logging, checkpoints. It is printed per iteration,
and as a share of an iteration: measured with the given ``--llm``, and, for ``--llm example`` (which answers
in microseconds), also against a reference LLM latency (``--reference-call-seconds``, default 6 s: the low
end of what the embedded 1.5B model took per R2PO call on this 2-core machine, as quoted in issue 3).
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

from sb3_r2po import R2PO


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="example")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--reference-call-seconds", type=float, default=6.0)
    parser.add_argument("--checkpoint-dir", default=None, help="also write a checkpoint after every iteration")
    args = parser.parse_args()

    env = TimedEnv(gym.make(args.env))
    warmup = 20
    model = R2PO(
        "MlpLinear",
        env,
        llm=args.llm,
        n_eval_episodes=args.k,
        warmup_episodes=warmup,
        seed=0,
        max_episodes=warmup + 2 * args.k * args.iterations,
        checkpoint_dir=args.checkpoint_dir,
    )
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
