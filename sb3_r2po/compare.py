"""Compare R2PO with Stable-Baselines3 baselines over envs and seeds, at a matched budget of TRAINING episodes.

Usage::

    python -m sb3_r2po.compare --llm example --env CartPole-v1 --methods r2po ppo ars --seeds 0 1 2 3 4 \\
        --budget 300 --out comparison
    python -m sb3_r2po.compare --grid paper --llm http://HOST:PORT/v1 --executor ray --out results

Every method is charged only for the episodes it trains on; evaluation episodes are not charged (the paper's
SB3 protocol charged 20 evaluation episodes after every training episode). Writes to ``--out``:

- ``results.md``: per env, the table (mean return over training, best, final, episodes until the rolling mean
  reaches the threshold; mean +- std over seeds, and for each return figure the interquartile mean over seeds with
  its 95 % stratified bootstrap confidence interval: rliable's, from a fixed seed, so the same runs give the same
  report), the definitions, the settings, then the exact command and the package versions;
- ``paper.md``: the paper-format table (per env and method: mean return, best, episodes to threshold, mean +- std
  over seeds, IQM [95 % CI] beside them) side by side with the published numbers
  (:data:`sb3_r2po.experiments.grids.PUBLISHED`);
- ``curves.png`` (one env) or ``curves_<env>.png`` (several): learning curves (x = training episodes, the rolling
  mean, shaded +- std over seeds);
- ``intervals.png`` or ``intervals_<env>.png``: per return figure and method, the IQM with its 95 % CI and the
  mean +- std over seeds;
- ``runs.json``: every run's training-episode returns and lengths, in order, and the hyperparameters used;
- ``runs/<run_id>/``: the results store (:class:`sb3_r2po.experiments.ResultsStore`). The same command again reruns
  nothing that finished, and an R2PO run cut in the middle resumes from its checkpoint.

Seeds: 0-4 by default (five runs per method), ``--grid paper`` 0-9 (the paper's ten runs); the intervals rest on
these runs (with one seed, a cell is that run's figure, no interval). The intervals need rliable (the ``zoo`` extra).

The grid: ``--grid paper`` (the paper's ten envs, ten seeds, R2PO, its variants and the SB3 algorithms of the
paper, at the paper's budgets), narrowed by ``--envs``/``--methods``/``--seeds``/``--budget``; without ``--grid``,
every env (``--envs``, or ``--env``) x method x seed at ``--budget``. The executor: ``--executor serial`` (one run
after another), ``lockstep`` (the seeds of an R2PO method train together, their LLM calls batched; ``--lockstep`` is
the same) or ``ray`` (one Ray task per run on the cluster at ``--ray-address``; default: a local Ray).

How a run is built and counted: :mod:`sb3_r2po.experiments.runs` (RL Zoo's ``ExperimentManager`` and hyperparameter
files, the episode budget, the step horizon). Statistics: :mod:`sb3_r2po.experiments.stats`.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sb3_r2po.common.files import atomic_write
from sb3_r2po.experiments import EXECUTORS, PreparedRun, ResultsStore, RunResult, RunSpec, make_executor
from sb3_r2po.experiments import finish_run as finish_spec
from sb3_r2po.experiments import prepare_run as prepare_spec
from sb3_r2po.experiments.budget import BudgetReached, EpisodeBudget, find_monitors
from sb3_r2po.experiments.configs import (
    BASELINES,
    IGNORE_STOP,
    R2PO_METHODS,
    comparison_env_settings,
    default_threshold,
    episode_cap,
    episodes_used,
    hyperparams_file,
    is_tabular,
    method_algo,
    r2po_entry,
    r2po_overrides,
    zoo_entry,
)
from sb3_r2po.experiments.grids import GRIDS, PUBLISHED, grid, paper_grid
from sb3_r2po.experiments.plots import plot_curves, plot_intervals
from sb3_r2po.experiments.report import (
    VERSIONS,
    compare_report,
    package_version,
    paper_document,
    paper_table,
    table,
    versions,
)
from sb3_r2po.experiments.stats import WINDOW, mean_std, rolling_mean, summarize
from sb3_r2po.prompts import PROMPT_PRESETS, prompt_preset

__all__ = [
    "BASELINES",
    "DEFAULT_SEEDS",
    "IGNORE_STOP",
    "R2PO_METHODS",
    "VERSIONS",
    "WINDOW",
    "BudgetReached",
    "EpisodeBudget",
    "default_threshold",
    "episode_cap",
    "find_monitors",
    "finish_run",
    "hyperparams_file",
    "is_tabular",
    "main",
    "mean_std",
    "method_algo",
    "package_version",
    "plot_curves",
    "prepare_run",
    "r2po_entry",
    "r2po_overrides",
    "report",
    "rolling_mean",
    "run_comparison",
    "summarize",
    "table",
    "versions",
    "write_outputs",
    "zoo_entry",
]


DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
"""Seeds of a comparison without ``--grid`` and ``--seeds``: five runs per method (``--grid paper``:
:data:`sb3_r2po.experiments.grids.PAPER_SEEDS`, ten)."""


def r2po_settings(n_eval_episodes: int | None, warmup_episodes: int | None, prompts: str | None) -> dict[str, Any]:
    """The R2PO settings of the command line: the prompt preset's ten parameters, K and the warm-up (when given)."""
    settings: dict[str, Any] = dict(prompt_preset(prompts)) if prompts is not None else {}
    if n_eval_episodes is not None:
        settings["n_eval_episodes"] = n_eval_episodes
    if warmup_episodes is not None:
        settings["warmup_episodes"] = warmup_episodes
    return settings


def prepare_run(
    method: str,
    env_id: str,
    seed: int,
    budget: int,
    llm: str | None = None,
    n_eval_episodes: int | None = None,
    warmup_episodes: int | None = None,
    device: str = "cpu",
    progress: bool = False,
    prompts: str | None = None,
) -> PreparedRun:
    """One method's model on one seed, built by RL Zoo's ``ExperimentManager`` (:func:`sb3_r2po.experiments.prepare_run`
    of the run's :class:`~sb3_r2po.experiments.RunSpec`; no run directory)."""
    settings = r2po_settings(n_eval_episodes, warmup_episodes, prompts) if method in R2PO_METHODS else {}
    if method in R2PO_METHODS and llm is None:
        raise ValueError(f"method {method!r} needs an llm string")
    spec = RunSpec(env_id, method, seed, budget, llm, tuple(settings.items()))
    return prepare_spec(spec, None, None, device, progress)


def finish_run(run: PreparedRun) -> dict[str, Any]:
    """Close a run's env and log folder and return its measurements as ``runs.json`` holds them."""
    return finish_spec(run).record()


def _note_unused_episodes(specs: Sequence[RunSpec]) -> None:
    """Say on stderr which R2PO runs cannot use their whole budget (K does not divide budget - warm-up)."""
    for spec in dict.fromkeys(RunSpec(s.env_id, s.method, 0, s.budget, s.llm, s.settings) for s in specs if s.is_r2po):
        used = episodes_used(spec.env_id, spec.method, spec.budget, spec.settings_dict)
        if used != spec.budget:
            settings = {**r2po_entry(spec.env_id, spec.method), **spec.settings_dict}
            k, warmup = settings.get("n_eval_episodes", 20), settings.get("warmup_episodes", 20)
            print(
                f"note: {spec.method} will use {used} of the {spec.budget} episodes (warm-up {warmup}, then K={k} per "
                "evaluation); for an exact match choose budget - warm-up as a multiple of K",
                file=sys.stderr,
            )


def _budget_of(specs: Sequence[RunSpec]) -> int | str:
    """The budget of ``specs``: one number, or the range when they differ (the paper's grid)."""
    budgets = sorted({s.budget for s in specs})
    return budgets[0] if len(budgets) == 1 else f"{budgets[0]}-{budgets[-1]}"


def run_comparison(
    env_id: str | None,
    methods: Sequence[str],
    seeds: Sequence[int],
    budget: int | None,
    llm: str | None = None,
    window: int = WINDOW,
    threshold: float | None = None,
    n_eval_episodes: int | None = None,
    warmup_episodes: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    command: str = "",
    lockstep: bool = False,
    prompts: str | None = None,
    *,
    envs: Sequence[str] | None = None,
    grid_name: str | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    store: str | Path | None = None,
) -> dict[str, Any]:
    """
    Run the grid and return ``runs.json``'s data: ``settings``, ``runs`` (:meth:`RunResult.record` of every run, in grid
    order), ``command``, ``versions`` and ``wall_time_s``.

    :param env_id: The env (``envs`` wins when given).
    :param methods: The methods (with ``grid_name``: those of the grid's; empty: all of them).
    :param seeds: The seeds (with ``grid_name`` and empty: the grid's).
    :param budget: Training episodes per run (with ``grid_name``, ``None``: the grid's own budgets).
    :param lockstep: The same as ``executor="lockstep"``.
    :param envs: Several envs.
    :param grid_name: A named grid (:data:`sb3_r2po.experiments.grids.GRIDS`).
    :param executor: ``serial`` (default), ``lockstep`` or ``ray``.
    :param ray_address: The Ray cluster (``ray`` only; ``None``: a local Ray).
    :param store: The results store's directory (``None``: a temporary one, removed afterwards).
    """
    import sb3_r2po  # noqa: F401  (registers the custom envs)

    executor = executor or ("lockstep" if lockstep else "serial")
    for method in methods:
        method_algo(method)  # fail on an unknown method before anything runs
    if llm is None and (grid_name is not None or any(m in R2PO_METHODS for m in methods)):
        raise ValueError("R2PO methods need an llm string (--llm)")
    settings = r2po_settings(n_eval_episodes, warmup_episodes, prompts)  # an unknown preset fails here
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
    per_env = {e: comparison_env_settings(e, [s.method for s in specs if s.env_id == e], threshold) for e in env_ids}
    common = {
        "env": env_ids[0] if len(env_ids) == 1 else None,
        "methods": list(dict.fromkeys(s.method for s in specs)),
        "seeds": list(dict.fromkeys(s.seed for s in specs)),
        "budget": _budget_of(specs),
        "llm": llm,
        "window": window,
        "n_eval_episodes": n_eval_episodes,
        "warmup_episodes": warmup_episodes,
        "torch_threads": _torch_threads(),
        "lockstep": executor == "lockstep",
        "prompts": prompts,
        "executor": executor,
        "grid": grid_name,
        "envs": env_ids,
    }
    start = time.perf_counter()
    results = _execute(specs, executor, ray_address, store, device, progress, window, per_env)
    result_settings = {**common, **per_env[env_ids[0]]} if len(env_ids) == 1 else {**common, "per_env": per_env}
    return {
        "settings": result_settings,
        "runs": [r.record() for r in results],
        "command": command,
        "versions": versions(),
        "wall_time_s": time.perf_counter() - start,
    }


def _execute(
    specs: list[RunSpec],
    executor: str,
    ray_address: str | None,
    store: str | Path | None,
    device: str,
    progress: bool,
    window: int,
    per_env: dict[str, dict[str, Any]],
) -> list[RunResult]:
    """Run ``specs`` with the named executor into the store, printing a line per finished run."""
    from tqdm.auto import tqdm

    with _store_dir(store) as root:
        results_store = ResultsStore(root)
        done = len(results_store.results(specs))
        with tqdm(total=len(specs), initial=done, desc="runs", unit="run", disable=not progress) as bar:
            if done:
                bar.write(f"{results_store.root}: {done} of {len(specs)} runs already there", file=sys.stderr)

            def on_result(result: RunResult) -> None:
                spec = result.spec
                stats = summarize(result.returns, window, per_env[spec.env_id]["threshold"])
                bar.write(
                    f"{spec.env_id} {spec.method} seed {spec.seed}: {len(result.returns)} episodes, mean "
                    f"{stats['mean']:.2f}, final {stats['final']:.2f}, {result.wall_time_s:.1f} s",
                    file=sys.stderr,
                )
                bar.update(1)

            options = {"device": device, "progress": progress, "on_result": on_result}
            return make_executor(executor, ray_address, **options).run(specs, results_store)


@contextlib.contextmanager
def _store_dir(path: str | Path | None) -> Iterator[Path]:
    """The store directory: ``path``, or a temporary directory removed at the end (``path`` ``None``)."""
    if path is not None:
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="sb3_r2po_compare_") as temporary:
        yield Path(temporary)


def _torch_threads() -> int:
    import torch as th

    return int(th.get_num_threads())


def _curves_name(env_id: str, several: bool, kind: str = "curves") -> str:
    return f"{kind}_{env_id.replace('/', '_')}.png" if several else f"{kind}.png"


def report(result: dict[str, Any]) -> str:
    """The markdown report (``results.md``) of :func:`run_comparison`'s result."""
    envs = result["settings"].get("envs") or [result["settings"]["env"]]
    several = len(envs) > 1
    curves = {e: _curves_name(e, several) for e in envs}
    return compare_report(result, curves, {e: _curves_name(e, several, "intervals") for e in envs})


def write_outputs(result: dict[str, Any], out: Path) -> None:
    """Write ``results.md``, ``paper.md``, the learning curves, the interval figures and ``runs.json`` to ``out``."""
    import json

    from sb3_r2po.experiments.report import env_settings

    out.mkdir(parents=True, exist_ok=True)
    per_env = env_settings(result["settings"])
    for env_id, s in per_env.items():
        runs = [r for r in result["runs"] if r["env"] == env_id]
        budget = max(len(r["returns"]) for r in runs) if isinstance(s["budget"], str) else s["budget"]
        plot_curves(runs, out / _curves_name(env_id, len(per_env) > 1), env_id, s["window"], s["threshold"], budget)
        plot_intervals(runs, out / _curves_name(env_id, len(per_env) > 1, "intervals"), env_id, s["window"])
    atomic_write(out / "runs.json", json.dumps(result, indent=1).encode("utf-8"))
    (out / "results.md").write_text(report(result))
    thresholds = {e: s["threshold"] for e, s in per_env.items()}
    paper = paper_table(result["runs"], result["settings"]["window"], thresholds, PUBLISHED)
    (out / "paper.md").write_text(paper_document(paper, result))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sb3_r2po.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    methods = [*R2PO_METHODS, *BASELINES]
    parser.add_argument("--grid", default=None, choices=GRIDS, help="a named grid (paper: ten envs, ten seeds, ...)")
    parser.add_argument("--env", default="CartPole-v1", help="gymnasium env id")
    parser.add_argument("--envs", nargs="+", default=None, help="several env ids (wins over --env)")
    parser.add_argument(
        "--methods", nargs="+", default=None, choices=methods, metavar="METHOD",
        help=f"R2PO or a variant ({', '.join(R2PO_METHODS)}) and baselines ({', '.join(BASELINES)}); default r2po ppo ars",
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
    parser.add_argument(
        "--warmup-episodes", type=int, default=None, help="R2PO's warm-up (default: sb3_r2po/zoo/configs/r2po.yml)"
    )
    parser.add_argument(
        "--prompts", default=None, choices=sorted(PROMPT_PRESETS),
        help="R2PO's prompt preset (sb3_r2po.prompts.PROMPT_PRESETS; default: the settings of sb3_r2po/zoo/configs/r2po.yml)",
    )  # fmt: skip
    parser.add_argument("--window", type=int, default=WINDOW, help="rolling-mean window")
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
    if args.llm is None and (args.grid is not None or any(m in R2PO_METHODS for m in args.methods)):
        parser.error("R2PO methods need --llm")


def main(argv: list[str] | None = None) -> None:
    """``python -m sb3_r2po.compare ...`` (``--help`` for the options)."""
    parser = _parser()
    args = parser.parse_args(argv)
    _check(parser, args)

    import torch as th

    threads = th.get_num_threads()
    th.set_num_threads(args.torch_threads)  # tiny networks: one thread is faster, and far faster on a busy machine
    command = "python -m sb3_r2po.compare " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
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
            lockstep=args.lockstep,
            prompts=args.prompts,
            envs=args.envs,
            grid_name=args.grid,
            executor=args.executor,
            ray_address=args.ray_address,
            store=out,
        )
    finally:
        th.set_num_threads(threads)
    write_outputs(result, out)
    print((out / "results.md").read_text())


if __name__ == "__main__":
    main()
