"""Training episodes until CartPole is solved: R2PO (embedded model, task description on) vs ARS vs PPO, 3 seeds.

"Solved" is the 20-episode rolling mean of training returns first reaching 475 (``sb3_r2po.experiments.report``).
Every method is charged only for its training episodes. Every run is built through the experiment layer
(:func:`sb3_r2po.experiments.run_one`: RL Zoo's tuned hyperparameters through the zoo's ``ExperimentManager``, the
same path as ``python -m sb3_r2po.zoo train`` and ``python -m sb3_r2po.compare``). The baselines get their own budget,
large enough to solve the task; R2PO gets the budget its LLM can pay for. A run that does not get there within its
budget says so: the table never extrapolates.

A column gives every method's rolling mean after R2PO's budget (the methods side by side at a matched
budget). R2PO's rows add a figure of its own: the training episodes after which a kept candidate's K-episode mean first
reached 475 (the paper's "best iteration" view: the policy R2PO keeps, not the episodes it spent exploring). The
reference column is :data:`REFERENCE` (docs/performance.md has the measurements with their dates and commands).

Usage (one command)::

    python benchmarks/sample_efficiency.py --llm embedded --r2po-budget 60 --baseline-budget 400

``--prompts lean`` (or ``full``, ``tight``) gives R2PO a prompt preset (:func:`sb3_r2po.prompts.prompt_preset`);
without it R2PO keeps the prompt settings of ``zoo_configs/r2po.yml`` (R2PO's defaults).

``--json PATH`` keeps the measurements: every run is written to it as soon as it ends (atomically). The runs execute
into a results store (``--store``, default ``PATH.store``; :class:`sb3_r2po.experiments.ResultsStore`), so an R2PO run
cut in the middle resumes from its checkpoint. The same command again reads the file, reruns nothing that is there
and continues with the missing (method, seed) runs; a file written with other settings is refused, never
overwritten (a preset counts by its parameters, not only its name: ``lean`` gained ``history_slack=8`` on 2026-12-03).

An existing ``python -m sb3_r2po.compare`` output with the same R2PO settings can stand in for the R2PO runs
(``--r2po-runs comparison/runs.json``): the settings, and each run's prompt parameters against the preset's, are
checked, and the table says where the runs came from.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sb3_r2po.common.files import atomic_write
from sb3_r2po.experiments import ResultsStore, RunResult, RunSpec, SerialExecutor
from sb3_r2po.experiments.report import interval_note, iqm_cell, iqm_interval, rolling_mean, summarize
from sb3_r2po.prompts import prompt_preset

ENV_ID = "CartPole-v1"
THRESHOLD = 475.0
WINDOW = 20
REFERENCE = {"ars": "92, 110, not reached (460 at 5e4 steps)", "ppo": "177, 186, 168"}
"""Episodes to 475 per seed (0-2) with RL Zoo 2.9's tuned hyperparameters, the reference column (docs/performance.md)."""
KEPT = ("method", "seed", "returns", "episodes_run", "wall_time_s", "iterations", "llm_calls", "llm_stats", "history")
"""What the JSON keeps of a run (:meth:`sb3_r2po.experiments.RunResult.record`; its hyperparameters are in ``settings``)."""


def r2po_runs_from(path: Path, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The R2PO runs of a compare ``runs.json`` whose settings match ``settings`` and whose runs used the prompt preset's
    parameters as it is defined now (a ``ValueError`` otherwise; a parameter a run does not name had R2PO's default, the
    ``full`` preset's value)."""
    data = json.loads(path.read_text())
    theirs = data["settings"]
    for key, value in settings.items():
        if theirs.get(key) != value:
            raise ValueError(f"{path}: setting {key} is {theirs.get(key)!r}, this benchmark needs {value!r}")
    runs = [run for run in data["runs"] if run["method"] == "r2po"]
    preset = prompt_preset(settings["prompts"]) if settings.get("prompts") else {}
    defaults = prompt_preset("full")  # R2PO's defaults of the prompt parameters
    for run in runs:
        used = run.get("hyperparams") or {}
        differ = sorted(key for key, value in preset.items() if used.get(key, defaults[key]) != value)
        if differ:
            raise ValueError(
                f"{path}: run {run.get('run_id')} has other prompt parameters ({', '.join(differ)}) than the preset "
                f"{settings['prompts']!r} has now"
            )
    return runs


def load_progress(path: Path | None, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs an earlier call of the same command wrote to ``path`` (none when there is no file)."""
    if path is None or not path.exists():
        return []
    data = json.loads(path.read_text())
    if "runs" not in data:
        raise ValueError(f"{path} holds no per-run data (an older version of this script wrote it); give another --json")
    if data["settings"] != settings:
        differ = sorted(key for key in {*settings, *data["settings"]} if settings.get(key) != data["settings"].get(key))
        raise ValueError(f"{path} was written with other settings ({', '.join(differ)}); give another --json")
    return data["runs"]


def write_progress(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` so that a cut leaves the old file or the new one, never a torn one."""
    atomic_write(path, json.dumps(document, indent=1).encode("utf-8"))


def first_kept_at(run: dict[str, Any], k: int, threshold: float) -> int | None:
    """Training episodes after which an R2PO history entry of K episodes first had a mean >= ``threshold``."""
    for entry in run.get("history", []):
        if entry["kind"] != "warmup" and entry["n_episodes"] >= k and entry["mean_return"] >= threshold:
            return int(entry["episodes"])
    return None


def at_episode(returns: list[float], episode: int) -> float | None:
    """The ``WINDOW``-episode rolling mean of ``returns`` after ``episode`` training episodes (``None``: fewer ran)."""
    return None if len(returns) < episode else float(rolling_mean(returns, WINDOW)[episode - 1])


def cell(values: list[int | None], budget: int) -> str:
    """Episodes to the threshold per seed; when every seed got there (two or more), their mean +- std and their IQM
    with its 95 % bootstrap interval (:func:`sb3_r2po.experiments.report.iqm_interval`)."""
    shown = ", ".join(str(v) if v is not None else f"not within {budget}" for v in values)
    reached = [v for v in values if v is not None]
    if len(reached) == len(values) and len(values) > 1:
        iqm, low, high = iqm_interval([float(v) for v in reached])
        shown += (
            f" (mean {statistics.mean(reached):.0f} +- {statistics.pstdev(reached):.0f}; "
            f"IQM {iqm:.0f} [{low:.0f}, {high:.0f}])"
        )
    return shown


def interval_cell(values: list[float | None]) -> str:
    """IQM [95 % CI] over seeds of a figure every seed has (:func:`sb3_r2po.experiments.report.iqm_cell`), ``-`` else."""
    return "-" if not values or any(v is None for v in values) else iqm_cell([float(v) for v in values if v is not None])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="embedded")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--r2po-budget", type=int, default=60)
    parser.add_argument("--n-eval-episodes", type=int, default=5)
    parser.add_argument("--warmup-episodes", type=int, default=10)
    parser.add_argument("--prompts", default=None, help="R2PO's prompt preset (full, lean, tight); default: R2PO's own")
    parser.add_argument("--baseline-budget", type=int, default=400)
    parser.add_argument("--r2po-runs", default=None, help="reuse the R2PO runs of this compare runs.json")
    parser.add_argument("--json", default=None, help="write every run here as it ends; rerun to continue a cut command")
    parser.add_argument("--store", default=None, help="the results store of the runs (default: the --json path + .store)")
    return parser.parse_args()


def plan_runs(
    args: argparse.Namespace, runs: list[dict[str, Any]], json_path: Path | None, r2po_settings: dict[str, Any]
) -> tuple[list[RunSpec], list[dict[str, Any]] | None, str]:
    """
    The runs to run, the R2PO runs reused from ``--r2po-runs`` (``None``: R2PO is in the plan) and where the R2PO runs
    come from, in words. ``--r2po-runs`` is read and checked here, before anything runs.
    """
    plan = [RunSpec(ENV_ID, method, seed, args.baseline_budget) for method in ("ars", "ppo") for seed in args.seeds]
    if args.r2po_runs:
        return plan, r2po_runs_from(Path(args.r2po_runs), r2po_settings), f"reused from {args.r2po_runs}"
    source = "run now" if not runs else f"run by this command, continued from {json_path}"
    settings: dict[str, Any] = dict(prompt_preset(args.prompts)) if args.prompts else {}
    settings.update(n_eval_episodes=args.n_eval_episodes, warmup_episodes=args.warmup_episodes)
    plan += [RunSpec(ENV_ID, "r2po", seed, args.r2po_budget, args.llm, tuple(settings.items())) for seed in args.seeds]
    return plan, None, source


def run_missing(
    plan: list[RunSpec],
    runs: list[dict[str, Any]],
    json_path: Path | None,
    settings: dict[str, Any],
    source: str,
    store: ResultsStore,
) -> None:
    """Run every (method, seed) of ``plan`` not in ``runs`` yet, adding each to ``runs`` (and to ``json_path``) as it ends."""

    def kept(spec: RunSpec) -> bool:
        return any(r["method"] == spec.method and r["seed"] == spec.seed for r in runs)

    def keep(result: RunResult) -> None:
        record = result.record()
        runs.append({key: record[key] for key in KEPT if key in record})
        summary = summarize(result.returns, WINDOW, THRESHOLD)
        print(
            f"{result.spec.method} seed {result.spec.seed}: to {THRESHOLD:g} {summary['to_threshold']}, "
            f"best {summary['best']:.1f}, {result.wall_time_s:.0f} s",
            flush=True,
        )
        runs.sort(key=lambda r: [(s.method, s.seed) for s in plan].index((r["method"], r["seed"])))
        if json_path is not None:
            write_progress(json_path, {"settings": settings, "runs": runs, "r2po_source": source})

    missing = [spec for spec in plan if not kept(spec)]
    for result in SerialExecutor(on_result=keep).run(missing, store):
        if not kept(result.spec):  # finished in the store by an earlier command
            keep(result)


def method_row(method: str, method_runs: list[dict[str, Any]], budget: int, args: argparse.Namespace) -> dict[str, Any]:
    """The table's figures for one method, per seed (R2PO's own figures too when its runs kept their history)."""
    method_runs = sorted(method_runs, key=lambda r: r["seed"])
    stats = [summarize(r["returns"], WINDOW, THRESHOLD) for r in method_runs]
    row = {
        "method": method,
        "budget": budget,
        "seeds": [r["seed"] for r in method_runs],
        "to_threshold": [s["to_threshold"] for s in stats],
        "best": [s["best"] for s in stats],
        "at_r2po_budget": [at_episode(r["returns"], args.r2po_budget) for r in method_runs],
        "wall_time_s": [r["wall_time_s"] for r in method_runs],
    }
    if method == "r2po" and all("history" in r for r in method_runs):
        row["kept_candidate_at"] = [first_kept_at(r, args.n_eval_episodes, THRESHOLD) for r in method_runs]
        row["fallbacks"] = [int(r["llm_stats"]["fallbacks"]) for r in method_runs]
        row["iterations"] = [r["iterations"] for r in method_runs]
    return row


def print_table(args: argparse.Namespace, rows: list[dict[str, Any]], source: str, wall: float) -> None:
    """The Markdown table of ``rows`` (R2PO's first), R2PO's kept-candidate figures and where its runs came from."""
    prompts = f", `{args.prompts}` prompts" if args.prompts else ""
    label = {"r2po": f"R2PO (`{args.llm}`, task description, K={args.n_eval_episodes}{prompts})", "ars": "ARS", "ppo": "PPO"}
    goal = f"the {WINDOW}-episode rolling mean reaches {THRESHOLD:g}"
    print(f"\n{ENV_ID}, training episodes until {goal}, seeds {args.seeds}:\n")
    print(
        "| method | budget (episodes) | episodes to 475, per seed | best rolling mean, per seed | IQM [95 % CI] "
        f"| rolling mean at episode {args.r2po_budget}, per seed | IQM [95 % CI] | reference (issue) |"
    )
    print("|---|---:|---|---|---|---|---|---|")
    for row in rows:
        best = ", ".join(f"{b:.1f}" for b in row["best"])
        matched = ", ".join("-" if v is None else f"{v:.1f}" for v in row["at_r2po_budget"])
        print(
            f"| {label[row['method']]} | {row['budget']} | {cell(row['to_threshold'], row['budget'])} | {best} "
            f"| {interval_cell(row['best'])} | {matched} | {interval_cell(row['at_r2po_budget'])} "
            f"| {REFERENCE.get(row['method'], '-')} |"
        )
    print(f"\n{interval_note([len(row['seeds']) for row in rows if row['seeds']] or [0])}")
    r2po_row = rows[0]
    if "kept_candidate_at" in r2po_row:
        print(
            f"\nR2PO, training episodes until a kept candidate's {args.n_eval_episodes}-episode mean first reached "
            f"{THRESHOLD:g}, per seed: {cell(r2po_row['kept_candidate_at'], args.r2po_budget)}; iterations "
            f"{r2po_row['iterations']}, Search fallbacks (unusable or repeated proposals) {r2po_row['fallbacks']}."
        )
    print(f"\nR2PO runs: {source}. Wall time of this command: {wall:.0f} s.")


def main() -> None:
    args = parse_args()

    import torch as th

    th.set_num_threads(1)
    start = time.perf_counter()
    r2po_settings = {
        "env": ENV_ID,
        "llm": args.llm,
        "budget": args.r2po_budget,
        "n_eval_episodes": args.n_eval_episodes,
        "warmup_episodes": args.warmup_episodes,
        "seeds": args.seeds,
        "prompts": args.prompts,
    }
    # the preset's parameters as well as its name: a file written under another definition of the preset is refused
    preset = prompt_preset(args.prompts) if args.prompts else None
    settings = {
        **r2po_settings,
        "prompt_parameters": preset,
        "baseline_budget": args.baseline_budget,
        "r2po_runs": args.r2po_runs,
    }
    json_path = Path(args.json) if args.json else None
    runs = load_progress(json_path, settings)
    if runs:
        print(f"{json_path}: {len(runs)} run(s) already there, continuing with the missing ones")

    plan, reused, source = plan_runs(args, runs, json_path, r2po_settings)  # checked before anything runs
    with tempfile.TemporaryDirectory(prefix="sample_efficiency_") as temporary:
        default = Path(temporary) if json_path is None else json_path.with_name(json_path.name + ".store")
        run_missing(plan, runs, json_path, settings, source, ResultsStore(args.store or default))
    r2po = reused if reused is not None else [r for r in runs if r["method"] == "r2po"]
    wall = time.perf_counter() - start

    rows = [
        method_row("r2po", r2po, args.r2po_budget, args),
        method_row("ars", [r for r in runs if r["method"] == "ars"], args.baseline_budget, args),
        method_row("ppo", [r for r in runs if r["method"] == "ppo"], args.baseline_budget, args),
    ]
    print_table(args, rows, source, wall)
    if json_path is not None:
        write_progress(json_path, {"settings": settings, "runs": runs, "r2po_source": source, "rows": rows})


if __name__ == "__main__":
    main()
