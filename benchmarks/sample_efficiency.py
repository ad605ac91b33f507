"""Training episodes until CartPole is solved: R2PO (embedded model, task description on) vs ARS vs PPO, 3 seeds.

"Solved" is the 20-episode rolling mean of training returns first reaching 475 (``sb3_r2po.compare.summarize``).
Every method is charged only for its training episodes. The baselines use RL Zoo's tuned hyperparameters through
``sb3_r2po.compare`` (the same ``ExperimentManager`` path as ``python -m sb3_r2po.zoo train``) and get their own
budget, large enough to solve the task; R2PO gets the budget an LLM on this CPU can pay for (about 20 s per call
with the 0.5B model). A run that does not get there within its budget says so: the table never extrapolates.

The reference column is the issue's measurement (RL Zoo 2.9 tuned hyperparameters, seeds 0-2): ARS 92, 110 and
not within its 5e4-step budget (460 at the end); PPO 177, 186, 168.

Usage (one command)::

    python benchmarks/sample_efficiency.py --llm embedded --r2po-budget 60 --baseline-budget 400

``--prompts lean`` (or ``full``, ``tight``) gives R2PO a prompt preset (:func:`sb3_r2po.prompts.prompt_preset`);
without it R2PO keeps the prompt settings of ``zoo_configs/r2po.yml`` (R2PO's defaults).

An existing ``python -m sb3_r2po.compare`` output with the same R2PO settings can stand in for the R2PO runs
(``--r2po-runs comparison/runs.json``): the settings are checked and the table says where the runs came from.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from sb3_r2po.compare import run_comparison, summarize

THRESHOLD = 475.0
WINDOW = 20
REFERENCE = {"ars": "92, 110, not reached (460 at 5e4 steps)", "ppo": "177, 186, 168"}


def r2po_runs_from(path: Path, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The R2PO runs of a compare ``runs.json`` whose settings match ``settings`` (a ``ValueError`` otherwise)."""
    data = json.loads(path.read_text())
    theirs = data["settings"]
    for key, value in settings.items():
        if theirs.get(key) != value:
            raise ValueError(f"{path}: setting {key} is {theirs.get(key)!r}, this benchmark needs {value!r}")
    return [run for run in data["runs"] if run["method"] == "r2po"]


def cell(values: list[int | None], budget: int) -> str:
    shown = ", ".join(str(v) if v is not None else f"not within {budget}" for v in values)
    reached = [v for v in values if v is not None]
    if len(reached) == len(values) and len(values) > 1:
        shown += f" (mean {statistics.mean(reached):.0f} +- {statistics.pstdev(reached):.0f})"
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="embedded")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--r2po-budget", type=int, default=60)
    parser.add_argument("--n-eval-episodes", type=int, default=5)
    parser.add_argument("--warmup-episodes", type=int, default=10)
    parser.add_argument("--prompts", default=None, help="R2PO's prompt preset (full, lean, tight); default: R2PO's own")
    parser.add_argument("--baseline-budget", type=int, default=400)
    parser.add_argument("--r2po-runs", default=None, help="reuse the R2PO runs of this compare runs.json")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch as th

    th.set_num_threads(1)
    start = time.perf_counter()
    baselines = run_comparison(
        "CartPole-v1", ["ars", "ppo"], args.seeds, args.baseline_budget, window=WINDOW, threshold=THRESHOLD, progress=False
    )
    r2po_settings = {
        "env": "CartPole-v1",
        "llm": args.llm,
        "budget": args.r2po_budget,
        "n_eval_episodes": args.n_eval_episodes,
        "warmup_episodes": args.warmup_episodes,
        "seeds": args.seeds,
        "prompts": args.prompts,
    }
    if args.r2po_runs:
        r2po = r2po_runs_from(Path(args.r2po_runs), r2po_settings)
        source = f"reused from {args.r2po_runs}"
    else:
        result = run_comparison(
            "CartPole-v1",
            ["r2po"],
            args.seeds,
            args.r2po_budget,
            llm=args.llm,
            window=WINDOW,
            threshold=THRESHOLD,
            n_eval_episodes=args.n_eval_episodes,
            warmup_episodes=args.warmup_episodes,
            progress=False,
            prompts=args.prompts,
        )
        r2po = result["runs"]
        source = "run now"
    wall = time.perf_counter() - start

    rows = []
    for method, runs, budget in (
        ("r2po", r2po, args.r2po_budget),
        ("ars", [r for r in baselines["runs"] if r["method"] == "ars"], args.baseline_budget),
        ("ppo", [r for r in baselines["runs"] if r["method"] == "ppo"], args.baseline_budget),
    ):
        runs = sorted(runs, key=lambda r: r["seed"])
        stats = [summarize(r["returns"], WINDOW, THRESHOLD) for r in runs]
        rows.append(
            {
                "method": method,
                "budget": budget,
                "seeds": [r["seed"] for r in runs],
                "to_threshold": [s["to_threshold"] for s in stats],
                "best": [s["best"] for s in stats],
                "wall_time_s": [r["wall_time_s"] for r in runs],
            }
        )

    prompts = f", `{args.prompts}` prompts" if args.prompts else ""
    label = {"r2po": f"R2PO (`{args.llm}`, task description, K={args.n_eval_episodes}{prompts})", "ars": "ARS", "ppo": "PPO"}
    goal = f"the {WINDOW}-episode rolling mean reaches {THRESHOLD:g}"
    print(f"\nCartPole-v1, training episodes until {goal}, seeds {args.seeds}:\n")
    print("| method | budget (episodes) | episodes to 475, per seed | best rolling mean, per seed | reference (issue) |")
    print("|---|---:|---|---|---|")
    for row in rows:
        best = ", ".join(f"{b:.1f}" for b in row["best"])
        print(
            f"| {label[row['method']]} | {row['budget']} | {cell(row['to_threshold'], row['budget'])} | {best} "
            f"| {REFERENCE.get(row['method'], '-')} |"
        )
    print(f"\nR2PO runs: {source}. Wall time of this command: {wall:.0f} s.")
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": r2po_settings, "rows": rows, "r2po_source": source}, indent=1))


if __name__ == "__main__":
    main()
