"""Compare R2PO with Stable-Baselines3 baselines over envs and seeds, at a matched budget of TRAINING episodes.

Usage::

    python -m sb3_r2po.compare --llm example --env CartPole-v1 --methods r2po ppo ars --seeds 0 1 2 3 4 \\
        --budget 300 --out comparison
    python -m sb3_r2po.compare --grid paper --llm http://HOST:PORT/v1 --executor ray --out results

Evaluation episodes are not charged. Writes to ``--out``: ``results.md`` (per env: mean +- std and IQM [95 % CI]
over seeds; the settings, the command, the versions), ``paper.md`` (the table beside the published numbers),
``curves[_<env>].png``, ``intervals[_<env>].png``, ``runs.json`` and the results store ``runs/<run_id>/``: the same
command again reruns nothing that finished and resumes a cut R2PO run. The intervals need rliable (the ``zoo`` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch as th
from tqdm.auto import tqdm

from sb3_r2po.common.files import atomic_write
from sb3_r2po.experiments import report as reports
from sb3_r2po.experiments import runs
from sb3_r2po.experiments.executors import EXECUTORS, make_executor
from sb3_r2po.experiments.grids import GRIDS, PUBLISHED, grid, paper_grid
from sb3_r2po.prompts import PROMPT_PRESETS

DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)  # without --grid and --seeds: five runs per method


def _note_unused_episodes(specs: Sequence[runs.RunSpec]) -> None:
    """Say on stderr which R2PO runs cannot use their whole budget: ``warmup + K * floor((budget - warmup) / K)``."""
    for spec in dict.fromkeys(runs.RunSpec(s.env_id, s.method, 0, s.budget, s.llm, s.settings) for s in specs if s.is_r2po):
        settings = {**runs.r2po_entry(spec.env_id, spec.method), **spec.settings_dict}
        k, warmup = int(settings.get("n_eval_episodes", 20)), int(settings.get("warmup_episodes", 20))
        used = min(spec.budget, warmup) + k * (max(0, spec.budget - warmup) // k)
        if used != spec.budget:
            print(
                f"note: {spec.method} will use {used} of the {spec.budget} episodes (warm-up {warmup}, then K={k} per "
                "evaluation); for an exact match choose budget - warm-up as a multiple of K",
                file=sys.stderr,
            )


def run_comparison(
    env_id: str | None,
    methods: Sequence[str],
    seeds: Sequence[int],
    budget: int | None,
    llm: str | None = None,
    window: int = reports.WINDOW,
    threshold: float | None = None,
    n_eval_episodes: int | None = None,
    warmup_episodes: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    command: str = "",
    prompts: str | None = None,
    *,
    envs: Sequence[str] | None = None,
    grid_name: str | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    store: str | Path | None = None,
) -> dict[str, Any]:
    """
    Run the grid; return ``runs.json``'s data: ``settings``, ``runs``
    (:meth:`~sb3_r2po.experiments.runs.RunResult.record`, grid order), ``command``, ``versions`` and ``wall_time_s``.

    :param env_id: The env (``envs`` wins when given).
    :param methods: The methods (with ``grid_name``: those of the grid's; empty: all of them).
    :param seeds: The seeds (with ``grid_name`` and empty: the grid's).
    :param budget: Training episodes per run (with ``grid_name``, ``None``: the grid's own budgets).
    :param envs: Several envs.
    :param grid_name: A named grid (:data:`sb3_r2po.experiments.grids.GRIDS`).
    :param executor: ``serial`` (default), ``lockstep`` or ``ray``.
    :param ray_address: The Ray cluster (``ray`` only; ``None``: a local Ray).
    :param store: The results store's directory (``None``: a temporary one, removed afterwards).
    """
    executor = executor or "serial"
    for method in methods:
        runs.method_algo(method)  # fail on an unknown method before anything runs
    if llm is None and (grid_name is not None or any(m in runs.R2PO_METHODS for m in methods)):
        raise ValueError("R2PO methods need an llm string (--llm)")
    settings = runs.r2po_settings(n_eval_episodes, warmup_episodes, prompts)  # an unknown preset fails here
    env_ids = list(envs or ([] if env_id is None else [env_id]))
    if grid_name == "paper":
        specs = paper_grid(llm, env_ids or None, list(methods) or None, list(seeds) or None, budget, settings)
    elif grid_name is None:
        if budget is None or not env_ids:
            raise ValueError("a comparison without --grid needs envs and a budget")
        specs = grid(env_ids, methods, seeds, budget, llm, settings)
    else:
        raise ValueError(f"unknown grid {grid_name!r}: choose from {', '.join(GRIDS)}")
    if not specs:
        raise ValueError("the grid has no runs")
    _note_unused_episodes(specs)
    env_ids = list(dict.fromkeys(s.env_id for s in specs))
    budgets = sorted({s.budget for s in specs})
    per_env = {e: runs.comparison_env_settings(e, [s.method for s in specs if s.env_id == e], threshold) for e in env_ids}
    common = {
        "env": env_ids[0] if len(env_ids) == 1 else None,
        "methods": list(dict.fromkeys(s.method for s in specs)),
        "seeds": list(dict.fromkeys(s.seed for s in specs)),
        "budget": budgets[0] if len(budgets) == 1 else f"{budgets[0]}-{budgets[-1]}",
        "llm": llm,
        "window": window,
        "n_eval_episodes": n_eval_episodes,
        "warmup_episodes": warmup_episodes,
        "torch_threads": int(th.get_num_threads()),
        "lockstep": executor == "lockstep",
        "prompts": prompts,
        "executor": executor,
        "grid": grid_name,
        "envs": env_ids,
    }
    start = time.perf_counter()
    directory = contextlib.nullcontext(store) if store is not None else tempfile.TemporaryDirectory(prefix="sb3_r2po_compare_")
    with directory as root:  # a temporary store is removed at the end
        results_store = runs.ResultsStore(root)
        done = len(results_store.results(specs))
        with tqdm(total=len(specs), initial=done, desc="runs", unit="run", disable=not progress) as bar:
            if done:
                bar.write(f"{results_store.root}: {done} of {len(specs)} runs already there", file=sys.stderr)

            def on_result(result: runs.RunResult) -> None:
                spec = result.spec
                stats = reports.summarize(result.returns, window, per_env[spec.env_id]["threshold"])
                bar.write(
                    f"{spec.env_id} {spec.method} seed {spec.seed}: {len(result.returns)} episodes, mean "
                    f"{stats['mean']:.2f}, final {stats['final']:.2f}, {result.wall_time_s:.1f} s",
                    file=sys.stderr,
                )
                bar.update(1)

            executor_options = {"device": device, "progress": progress, "on_result": on_result}
            results = make_executor(executor, ray_address, **executor_options).run(specs, results_store)
    return {
        "settings": {**common, **per_env[env_ids[0]]} if len(env_ids) == 1 else {**common, "per_env": per_env},
        "runs": [r.record() for r in results],
        "command": command,
        "versions": reports.versions(),
        "wall_time_s": time.perf_counter() - start,
    }


def _figure_names(envs: Sequence[str], kind: str) -> dict[str, str]:
    return {e: f"{kind}_{e.replace('/', '_')}.png" if len(envs) > 1 else f"{kind}.png" for e in envs}


def report(result: dict[str, Any]) -> str:
    """The markdown report (``results.md``) of :func:`run_comparison`'s result."""
    envs = result["settings"].get("envs") or [result["settings"]["env"]]
    return reports.compare_report(result, _figure_names(envs, "curves"), _figure_names(envs, "intervals"))


def write_outputs(result: dict[str, Any], out: Path) -> None:
    """Write ``results.md``, ``paper.md``, the learning curves, the interval figures and ``runs.json`` to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    per_env = reports.env_settings(result["settings"])
    curves, intervals = _figure_names(list(per_env), "curves"), _figure_names(list(per_env), "intervals")
    for env_id, s in per_env.items():
        mine = [r for r in result["runs"] if r["env"] == env_id]
        budget = max(len(r["returns"]) for r in mine) if isinstance(s["budget"], str) else s["budget"]
        reports.plot_curves(mine, out / curves[env_id], env_id, s["window"], s["threshold"], budget)
        reports.plot_intervals(mine, out / intervals[env_id], env_id, s["window"])
    atomic_write(out / "runs.json", json.dumps(result, indent=1).encode("utf-8"))
    (out / "results.md").write_text(report(result))
    thresholds = {e: s["threshold"] for e, s in per_env.items()}
    paper = reports.paper_table(result["runs"], result["settings"]["window"], thresholds, PUBLISHED)
    (out / "paper.md").write_text(reports.paper_document(paper, result))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sb3_r2po.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--grid", default=None, choices=GRIDS, help="a named grid (paper: ten envs, ten seeds, ...)")
    parser.add_argument("--env", default="CartPole-v1", help="gymnasium env id")
    parser.add_argument("--envs", nargs="+", default=None, help="several env ids (wins over --env)")
    parser.add_argument(
        "--methods", nargs="+", default=None, choices=[*runs.R2PO_METHODS, *runs.BASELINES], metavar="METHOD",
        help=f"R2PO or a variant ({', '.join(runs.R2PO_METHODS)}) and baselines ({', '.join(runs.BASELINES)}); "
        "default r2po ppo ars",
    )  # fmt: skip
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=None,
        help="one run per method and seed; default: 0-4 (the paper grid: 0-9, the paper's ten runs); the IQM's 95 %% "
        "bootstrap interval rests on these runs",
    )  # fmt: skip
    parser.add_argument(
        "--budget", type=int, default=None,
        help="training episodes per run (default 300; the paper grid: 4000, R2PO methods 4000 + their warm-up)",
    )  # fmt: skip
    parser.add_argument("--llm", default=None, help="R2PO's llm string (example[:seed], a server URL, ...)")
    parser.add_argument("--n-eval-episodes", type=int, default=None, help="R2PO's K (default: sb3_r2po/zoo/configs/r2po.yml)")
    parser.add_argument("--warmup-episodes", type=int, help="R2PO's warm-up (default: sb3_r2po/zoo/configs/r2po.yml)")
    parser.add_argument(
        "--prompts", default=None, choices=sorted(PROMPT_PRESETS),
        help="R2PO's prompt preset (sb3_r2po.prompts.PROMPT_PRESETS; default: the settings of sb3_r2po/zoo/configs/r2po.yml)",
    )  # fmt: skip
    parser.add_argument("--window", type=int, default=reports.WINDOW, help="rolling-mean window")
    parser.add_argument("--threshold", type=float, default=None, help="default: reward_threshold, else R2PO's target")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch CPU threads during the runs")
    parser.add_argument("--out", default="comparison", help="output directory (and the results store)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--executor", default=None, choices=EXECUTORS, help="how the runs execute (default serial)")
    parser.add_argument("--ray-address", default=None, help="the Ray cluster of --executor ray (default: a local Ray)")
    parser.add_argument(
        "--lockstep", action="store_true",
        help="the same as --executor lockstep: the seeds of each R2PO method train together, their LLM calls batched",
    )  # fmt: skip
    return parser


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if (args.budget is not None and args.budget < 1) or args.window < 1:
        parser.error("--budget and --window must be >= 1")
    if args.lockstep and args.executor not in (None, "lockstep"):
        parser.error(f"--lockstep contradicts --executor {args.executor}")
    if args.ray_address is not None and args.executor != "ray":
        parser.error("--ray-address needs --executor ray")
    if args.grid is None:
        args.methods = args.methods or ["r2po", "ppo", "ars"]
        args.seeds = args.seeds or list(DEFAULT_SEEDS)
        args.budget = args.budget or 300
    if args.llm is None and (args.grid is not None or any(m in runs.R2PO_METHODS for m in args.methods)):
        parser.error("R2PO methods need --llm")


def main(argv: list[str] | None = None) -> None:
    """``python -m sb3_r2po.compare ...`` (``--help`` for the options)."""
    parser = _parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    threads = th.get_num_threads()
    th.set_num_threads(args.torch_threads)  # tiny networks: one thread is faster, and far faster on a busy machine
    command = "python -m sb3_r2po.compare " + shlex.join(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    try:
        result = run_comparison(
            None if args.envs else args.env,
            args.methods or [],
            args.seeds or [],
            args.budget,
            llm=args.llm,
            window=args.window,
            threshold=args.threshold,
            n_eval_episodes=args.n_eval_episodes,
            warmup_episodes=args.warmup_episodes,
            device=args.device,
            progress=not args.no_progress,
            command=command,
            prompts=args.prompts,
            envs=args.envs,
            grid_name=args.grid,
            executor=args.executor or ("lockstep" if args.lockstep else None),
            ray_address=args.ray_address,
            store=out,
        )
    finally:
        th.set_num_threads(threads)
    write_outputs(result, out)
    print((out / "results.md").read_text())


if __name__ == "__main__":
    main()
