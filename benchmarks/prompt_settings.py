"""What lean prompts cost in results: R2PO on CartPole with full vs compact prompts, same LLM, same seeds.

- ``full``: the ``full`` preset (``sb3_r2po.prompts``): the whole history in every prompt, whole trajectories (no
  step budget), 3 significant digits, no folding of repeated steps, indexed vectors (the reference's rendering);
- ``lean``: the ``lean`` preset with indexed vectors (``params[0]: v, ...``): the 8 best and 4 most recent history
  entries, 20 trajectory steps (head and tail), 2 digits, repeated steps folded;
- ``lean-list``: the ``lean`` preset (the quickstart's): ``lean`` with vectors written as lists
  (``reply_style="list"``: ``params: [v, v, ...]`` in the history, the candidate and the reply format), the shape the
  embedded backend's grammar enforces;
- ``tight``: the ``tight`` preset, which keeps Swimmer's Critic prompt under 3000 tokens at iteration 100
  (measured by the since-removed ``prompt_tokens.py``): the 5 best and 3 most recent history entries, 12 trajectory
  steps, 2 digits, folding,
  list-style vectors;
- ``trajectory-only``, ``digits-only``, ``history-only``, ``list-only``: ``full`` with one of ``lean``'s changes
  (20 trajectory steps with folding; 2 digits; the 8 best and 4 most recent history entries; list-style vectors),
  so each sub-setting's effect on results is measured alone.

Every run is built through the experiment layer (:func:`sb3_r2po.experiments.run_one`: ``zoo_configs/r2po.yml``'s
CartPole entry through RL Zoo's ``ExperimentManager``, with ``target_return`` and ``tau_c`` left to R2PO's defaults,
the env's 475 and the rule's 451.25, as these measurements were defined) and, for each setting, the seeds train
together (:class:`sb3_r2po.experiments.LockstepExecutor`, one loaded model). Printed per
setting, mean +- std over seeds: the best K-episode mean, the mean return of the iterations' kept candidates,
prompt tokens per call, LLM seconds per call and unusable replies. Token counts are the backend's own (the embedded
model's tokenizer).

Usage::

    python benchmarks/prompt_settings.py --llm embedded --seeds 0 1 2 --episodes 45
    python benchmarks/prompt_settings.py --llm example --episodes 200     # the pipeline only: not an LLM
    python benchmarks/prompt_settings.py --settings lean-list --reuse runs.json --json runs.json  # add one setting

The runs execute into a results store (``--store``, default ``<json>.store``): the same command again reruns nothing
that finished, and a run cut in the middle resumes from its checkpoint. ``--reuse FILE`` takes the rows of settings
already in FILE (an earlier ``--json`` output of this script with the same
LLM, seeds and budget: checked) instead of training them again; the table marks them ``(reused)``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from sb3_r2po import R2PO
from sb3_r2po.experiments import LockstepExecutor, ResultsStore, RunResult, RunSpec
from sb3_r2po.prompts import prompt_preset
from sb3_r2po.r2po.run_state import best_record

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

DEFINED_BY_R2PO = {"target_return": None, "tau_c": None}
"""Settings of the CartPole entry of ``zoo_configs/r2po.yml`` that these runs leave to R2PO's defaults."""


def same_prompts(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two settings give the same R2PO (keys left out take R2PO's defaults)."""
    defaults = {name: p.default for name, p in inspect.signature(R2PO).parameters.items()}
    return {**defaults, **a} == {**defaults, **b}


def mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.mean(values):.1f} +- {statistics.pstdev(values):.1f}"


def per_seed(result: RunResult) -> dict[str, Any]:
    """One seed's figures of a setting's row."""
    stats = result.llm_stats or {}
    iterations = result.iteration_returns or []
    best = best_record(result.history or [])
    calls = int(stats.get("calls", 0))
    return {
        "seed": result.spec.seed,
        "best": float("nan") if best is None else best["mean_return"],
        "mean_iterations": float(np.mean(iterations)) if iterations else float("nan"),
        "iterations": len(iterations),
        "calls": calls,
        "unusable": int(stats.get("parse_failures", 0)),
        "prompt_tokens_per_call": int(stats.get("prompt_tokens", 0)) / max(1, calls),
        "seconds_per_call": stats.get("seconds", 0.0) / max(1, calls),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="embedded")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=45, help="episode budget per run, warm-up included")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--reuse", default=None, help="JSON of an earlier run whose rows are shown instead of retrained")
    parser.add_argument("--json", default=None)
    parser.add_argument("--store", default=None, help="the results store of the runs (default: the --json path + .store)")
    return parser.parse_args()


def reused_rows(path: str | None, run_args: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The rows of ``path`` (an earlier ``--json``) whose setting and run arguments are this command's."""
    reused = {}
    if path and Path(path).exists():
        for row in json.loads(Path(path).read_text()):
            known = row["setting"] in SETTINGS and same_prompts(row["settings"], SETTINGS[row["setting"]])
            if known and row.get("args") == run_args:
                reused[row["setting"]] = {**row, "args": run_args, "reused": True}
    return reused


def run_setting(name: str, args: argparse.Namespace, store: ResultsStore) -> dict[str, Any]:
    """The row of one setting: its seeds trained together into ``store``."""
    settings = {**DEFINED_BY_R2PO, "n_eval_episodes": args.k, "warmup_episodes": args.warmup, **SETTINGS[name]}
    specs = [RunSpec("CartPole-v1", "r2po", seed, args.episodes, args.llm, tuple(settings.items())) for seed in args.seeds]
    start = time.perf_counter()
    results = LockstepExecutor().run(specs, store)
    wall = time.perf_counter() - start
    run_args = {"llm": args.llm, "seeds": args.seeds, "episodes": args.episodes, "k": args.k, "warmup": args.warmup}
    runs = [per_seed(result) for result in results]
    return {"setting": name, "settings": SETTINGS[name], "args": run_args, "wall_s": wall, "runs": runs}


def print_table(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
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


def main() -> None:
    args = parse_args()
    run_args = {"llm": args.llm, "seeds": args.seeds, "episodes": args.episodes, "k": args.k, "warmup": args.warmup}
    reused = reused_rows(args.reuse, run_args)
    rows = [reused[name] for name in reused if name not in args.settings]
    with tempfile.TemporaryDirectory(prefix="prompt_settings_") as temporary:
        default = Path(temporary) if args.json is None else Path(args.json + ".store")
        store = ResultsStore(args.store or default)
        rows += [run_setting(name, args, store) for name in args.settings]
    print_table(args, rows)
    if args.json:
        Path(args.json).write_text(json.dumps([{k: v for k, v in r.items() if k != "reused"} for r in rows], indent=1))


if __name__ == "__main__":
    main()
