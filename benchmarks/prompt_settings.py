"""What lean prompts cost in results: R2PO on CartPole with full vs compact prompts, same LLM, same seeds.

- ``full``: the ``full`` preset (``sb3_r2po.prompts``): the whole history in every prompt, whole trajectories (no
  step budget), 3 significant digits, no folding of repeated steps, indexed vectors (the reference's rendering);
- ``lean``: the ``lean`` preset with indexed vectors (``params[0]: v, ...``): the 8 best and 4 most recent history
  entries, 20 trajectory steps (head and tail), 2 digits, repeated steps folded;
- ``lean-list``: the ``lean`` preset (the quickstart's): ``lean`` with vectors written as lists
  (``reply_style="list"``: ``params: [v, v, ...]`` in the history, the candidate and the reply format), the shape the
  embedded backend's grammar enforces;
- ``tight``: the ``tight`` preset, which keeps Swimmer's Critic prompt under 3000 tokens at iteration 100
  (``prompt_tokens.py``): the 5 best and 3 most recent history entries, 12 trajectory steps, 2 digits, folding,
  list-style vectors;
- ``trajectory-only``, ``digits-only``, ``history-only``, ``list-only``: ``full`` with one of ``lean``'s changes
  (20 trajectory steps with folding; 2 digits; the 8 best and 4 most recent history entries; list-style vectors),
  so each sub-setting's effect on results is measured alone.

For each setting the seeds train together (``sb3_r2po.lockstep.learn_in_lockstep``, one loaded model). Printed per
setting, mean +- std over seeds: the best K-episode mean, the mean return of the iterations' kept candidates,
prompt tokens per call, LLM seconds per call and unusable replies. Token counts are the backend's own (the embedded
model's tokenizer).

Usage::

    python benchmarks/prompt_settings.py --llm embedded --seeds 0 1 2 --episodes 45
    python benchmarks/prompt_settings.py --llm example --episodes 200     # the pipeline only: not an LLM
    python benchmarks/prompt_settings.py --settings lean-list --reuse runs.json --json runs.json  # add one setting

``--reuse FILE`` takes the rows of settings already in FILE (an earlier ``--json`` output of this script with the same
LLM, seeds and budget: checked) instead of training them again; the table marks them ``(reused)``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from sb3_r2po import R2PO
from sb3_r2po.lockstep import learn_in_lockstep
from sb3_r2po.prompts import prompt_preset

SETTINGS: dict[str, dict[str, Any]] = {
    "full": prompt_preset("full"),
    "lean": {**prompt_preset("lean"), "reply_style": "indexed"},
    "lean-list": prompt_preset("lean"),
    "tight": prompt_preset("tight"),
}
SETTINGS["trajectory-only"] = {**SETTINGS["full"], "max_trajectory_steps": 20, "fold_repeated_steps": True}
SETTINGS["digits-only"] = {**SETTINGS["full"], "trajectory_digits": 2}
SETTINGS["history-only"] = {**SETTINGS["full"], "history_best_k": 8, "history_recent": 4}
SETTINGS["list-only"] = {**SETTINGS["full"], "reply_style": "list"}


def same_prompts(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two settings give the same R2PO (keys left out take R2PO's defaults)."""
    defaults = {name: p.default for name, p in inspect.signature(R2PO).parameters.items()}
    return {**defaults, **a} == {**defaults, **b}


def mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.mean(values):.1f} +- {statistics.pstdev(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="embedded")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=45, help="episode budget per run, warm-up included")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--reuse", default=None, help="JSON of an earlier run whose rows are shown instead of retrained")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    run_args = {"llm": args.llm, "seeds": args.seeds, "episodes": args.episodes, "k": args.k, "warmup": args.warmup}
    reused = {}
    if args.reuse and Path(args.reuse).exists():
        for row in json.loads(Path(args.reuse).read_text()):
            known = row["setting"] in SETTINGS and same_prompts(row["settings"], SETTINGS[row["setting"]])
            if known and row.get("args") == run_args:
                reused[row["setting"]] = {**row, "args": run_args, "reused": True}

    rows = [reused[name] for name in reused if name not in args.settings]
    for name in args.settings:
        settings = SETTINGS[name]
        models = [
            R2PO(
                "MlpLinear",
                "CartPole-v1",
                llm=args.llm,
                n_eval_episodes=args.k,
                warmup_episodes=args.warmup,
                max_episodes=args.episodes,
                seed=seed,
                **settings,
            )
            for seed in args.seeds
        ]
        start = time.perf_counter()
        learn_in_lockstep(models, 10**9)
        wall = time.perf_counter() - start
        per_seed = []
        for model in models:
            stats = model.llm_stats
            iterations = [r["mean_return"] for r in model.history if r["kind"] != "warmup"]
            per_seed.append(
                {
                    "seed": model.seed,
                    "best": model.best_record()["mean_return"],
                    "mean_iterations": float(np.mean(iterations)) if iterations else float("nan"),
                    "iterations": len(iterations),
                    "calls": stats["calls"],
                    "unusable": stats["parse_failures"],
                    "prompt_tokens_per_call": stats["prompt_tokens"] / max(1, stats["calls"]),
                    "seconds_per_call": stats["seconds"] / max(1, stats["calls"]),
                }
            )
        rows.append({"setting": name, "settings": settings, "args": run_args, "wall_s": wall, "runs": per_seed})

    budget = f"{args.episodes} episodes (K={args.k}, warm-up {args.warmup})"
    print(f"\nR2PO on CartPole-v1, llm={args.llm}, {budget}, seeds {args.seeds}:\n")
    print(
        "| prompts | best K-mean | mean of iterations | iterations | prompt tokens/call | LLM s/call | unusable/calls "
        "| wall s |"
    )
    print("|---|---|---|---|---|---|---|---:|")
    for row in rows:
        runs = row["runs"]

        def col(key: str, runs: list[dict[str, Any]] = runs) -> str:
            return mean_std([r[key] for r in runs])

        unusable = f"{sum(r['unusable'] for r in runs)}/{sum(r['calls'] for r in runs)}"
        print(
            f"| {row['setting']}{' (reused)' if row.get('reused') else ''} "
            f"| {col('best')} | {col('mean_iterations')} | {col('iterations')} "
            f"| {col('prompt_tokens_per_call')} | {col('seconds_per_call')} | {unusable} | {row['wall_s']:.0f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps([{k: v for k, v in r.items() if k != "reused"} for r in rows], indent=1))


if __name__ == "__main__":
    main()
