"""Racing: episodes saved, and how often the racing decision differs from the full-K keep-best decision.

    python benchmarks/racing.py [--llm example] [--seeds 0 1 2] [--chunk 5] [--z 1.645]

For each env, one run per seed WITHOUT racing records every evaluated challenger's K returns. The racing rule
(:func:`sb3_r2po.common.rollouts.race`) is replayed on those returns against the incumbent's mean: the episodes
it would have saved, and the iterations where it would have stopped a challenger that the full K episodes
kept (a changed decision). Then one run per seed WITH racing at the same episode budget reports how many
iterations the saved episodes bought.
"""

from __future__ import annotations

import argparse
import sys
import time

from sb3_r2po import R2PO
from sb3_r2po.common.rollouts import race

SETTINGS = {
    "CartPole-v1": dict(policy="MlpLinear", target_return=500, tau_c=480),
    "FrozenLake-v1": dict(policy="Tabular", target_return=1.0, tau_c=0.85),
}


def train(env_id: str, llm: str, seed: int, racing: bool, chunk: int, z: float, budget: int, k: int) -> R2PO:
    settings = dict(SETTINGS[env_id])
    policy = settings.pop("policy")
    model = R2PO(
        policy,
        env_id,
        llm=llm,
        seed=seed,
        n_eval_episodes=k,
        warmup_episodes=20,
        max_episodes=budget,
        racing=racing,
        racing_chunk=chunk,
        racing_z=z,
        **settings,
    )
    return model.learn(total_timesteps=10**12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="example")
    parser.add_argument("--envs", nargs="+", default=list(SETTINGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--z", type=float, default=1.645)
    parser.add_argument("--budget", type=int, default=820)
    parser.add_argument("--k", type=int, default=20)
    args = parser.parse_args()

    print(f"llm={args.llm}, K={args.k}, chunk={args.chunk}, z={args.z}, budget {args.budget} episodes, seeds {args.seeds}")
    print(
        "| env | challengers | challenger episodes (full K) | saved by racing | decisions changed | "
        "iterations without / with racing |"
    )
    print("|---|---|---|---|---|---|", flush=True)
    for env_id in args.envs:
        challengers = full = saved = changed = 0
        iterations_full = iterations_raced = 0
        for seed in args.seeds:
            start = time.perf_counter()
            model = train(env_id, args.llm, seed, False, args.chunk, args.z, args.budget, args.k)
            iterations_full += model.iteration
            print(
                f"# {env_id} seed {seed} without racing: {model.iteration} iterations, {time.perf_counter() - start:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            for record in model.history:
                second = record.get("revision") or {}
                returns = second.get("returns")
                if not returns or record.get("search") is None:
                    continue
                incumbent = record["search"]["mean_return"]
                ran = race(returns, incumbent, args.chunk, args.z)
                challengers += 1
                full += len(returns)
                saved += len(returns) - ran
                changed += int(ran < len(returns) and second["mean_return"] >= incumbent)
            start = time.perf_counter()
            raced = train(env_id, args.llm, seed, True, args.chunk, args.z, args.budget, args.k)
            iterations_raced += raced.iteration
            print(
                f"# {env_id} seed {seed} with racing: {raced.iteration} iterations, "
                f"{time.perf_counter() - start:.0f} s; so far {challengers} challengers, {saved}/{full} episodes saved, "
                f"{changed} decisions changed",
                file=sys.stderr,
                flush=True,
            )
        print(
            f"| {env_id} | {challengers} | {full} | {saved} ({100 * saved / max(1, full):.0f} %) | {changed} | "
            f"{iterations_full} / {iterations_raced} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
