"""Per-step cost of a code policy: the CartPole controller an LLM might write, called in this process (trusted mode)
and through the strict sandbox (one round trip to a hardened worker per call), pinned and unpinned.

    python benchmarks/code_policy_step.py [--calls 2000] [--repeats 30] [--cpu 0]

"pinned": this process and the worker run on one CPU (``os.sched_setaffinity`` before the worker starts; the worker
inherits it); "unpinned": on every CPU this process may use. Each cell is the best of ``--repeats`` runs of
``--calls`` calls (a batch of 64 observations: ``--calls`` / 8 calls), in microseconds per call and per observation;
the environment's own step is not included (the observations are CartPole-shaped random numbers).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from sb3_r2po.common.sandbox import CodeSandbox

CARTPOLE = """
class CartPolePolicy:
    def act(self, obs):
        return int(3 * obs[2] + obs[3] + 0.1 * obs[0] + 0.5 * obs[1] > 0)
"""


def seconds_per_call(mode: str, batch: int, calls: int, repeats: int) -> float:
    observations = np.random.default_rng(0).normal(size=(batch, 4)).astype(np.float32)
    with CodeSandbox(CARTPOLE, mode=mode) as box:
        box.act(observations)  # warm up
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                box.act(observations)
            best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="calls per run with a batch of 1")
    parser.add_argument(
        "--repeats", type=int, default=30, help="runs per cell; the best counts (short runs: the best one escapes other load)"
    )
    parser.add_argument("--cpu", type=int, default=min(os.sched_getaffinity(0)), help="the CPU of the pinned runs")
    args = parser.parse_args()
    print(f"python benchmarks/code_policy_step.py {' '.join(sys.argv[1:])}".rstrip())
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average {load}; python {sys.version.split()[0]}; numpy {np.__version__}\n")
    cpus = os.sched_getaffinity(0)
    rows = {}
    for placement, allowed in (("pinned", {args.cpu}), ("unpinned", cpus)):
        os.sched_setaffinity(0, allowed)
        for batch in (1, 64):
            for mode in ("trusted", "strict"):
                calls = args.calls if batch == 1 else max(1, args.calls // 8)
                rows[placement, batch, mode] = seconds_per_call(mode, batch, calls, args.repeats) * 1e6
    os.sched_setaffinity(0, cpus)
    print(f"{'placement':<10} {'batch':>5} {'trusted us/call':>16} {'strict us/call':>15} {'strict us/obs':>14} {'ratio':>6}")
    for (placement, batch, mode), micros in rows.items():
        if mode == "strict":
            trusted = rows[placement, batch, "trusted"]
            print(
                f"{placement:<10} {batch:>5} {trusted:>16.2f} {micros:>15.2f} {micros / batch:>14.2f} {micros / trusted:>6.1f}"
            )


if __name__ == "__main__":
    main()
