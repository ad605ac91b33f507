"""Run the paper's ablations: variants x envs x seeds with one ``llm`` string, at a matched episode budget.

    python -m sb3_r2po.ablate --llm example --envs CartPole-v1 --variants r2po props rep_traj --seeds 0 1 2 \\
        --max-episodes 200 --out ablation.md

Every run starts from the env's entry of ``sb3_r2po/zoo/configs/r2po.yml`` for the variant (as ``compare`` builds it);
the options given replace the file's values. Writes a markdown report and ``<out>.runs.json``; the results store
(``--store``, default ``<out>.store/``) lets the same command rerun nothing that finished, and ``--llm replay:FILE`` of
a ``--record FILE`` (from an empty store) reproduces the table exactly (the Variants page of the documentation).
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from sb3_r2po.experiments.executors import EXECUTORS, make_executor
from sb3_r2po.experiments.report import ablation_report, iteration_figures, salience_summary
from sb3_r2po.experiments.runs import ResultsStore, RunResult, RunSpec, r2po_entry, r2po_overrides, r2po_settings
from sb3_r2po.experiments.runs import run_one as run_spec
from sb3_r2po.llm.base import ChatBackend
from sb3_r2po.llm.recording import RecordingBackend
from sb3_r2po.llm.resolve import make_backend
from sb3_r2po.r2po.arguments import VARIANTS

ZOO_STEP_KEYS = ("n_timesteps", "callback")  # read only by the zoo's step-horizon training; a run stops at max_episodes


class _DictCalls(ast.NodeTransformer):
    """Rewrites ``dict(key=value, ...)`` calls as dict displays, so that :func:`ast.literal_eval` reads them."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if not (isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args):
            return node
        if any(kw.arg is None for kw in node.keywords):
            raise ValueError("dict(**...) is not a literal")
        return ast.Dict([ast.Constant(kw.arg) for kw in node.keywords], [self.visit(kw.value) for kw in node.keywords])


def literal_policy_kwargs(text: str) -> Any:
    """A zoo file's ``policy_kwargs`` string (``"dict(bias=False)"``, ``"{'bias': False}"``, nested) as its value;
    not a literal: returned as it is (never evaluated)."""
    try:
        return ast.literal_eval(_DictCalls().visit(ast.parse(text.strip(), mode="eval")))
    except (SyntaxError, ValueError, TypeError):  # TypeError: a dict as a key or in a set
        return text


def run_settings(env_id: str, variant: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """
    The settings of one ablation run: the env's entry of ``r2po.yml`` for the variant, then ``overrides`` (which win),
    merged as :func:`sb3_r2po.experiments.run_one` merges them, without ``n_timesteps`` and ``callback``.

    :param env_id: The gymnasium id.
    :param variant: The R2PO variant.
    :param overrides: R2PO hyperparameters (and ``policy``, ``env_kwargs``) replacing the file's.
    :return: R2PO's keyword arguments (``llm``, ``seed`` and ``env`` excepted) with the zoo's keys the entry sets.
    :raises ValueError: for an entry without an episode budget.
    """
    overrides = dict(overrides or {})
    entry = {key: value for key, value in r2po_entry(env_id, variant).items() if key not in ZOO_STEP_KEYS}
    budget = overrides.pop("max_episodes", entry.get("max_episodes"))
    if budget is None:
        raise ValueError(f"{env_id}: no episode budget (max_episodes) in sb3_r2po/zoo/configs/r2po.yml: give --max-episodes")
    settings = {**entry, **r2po_overrides(variant, env_id, "", int(budget))}
    settings.pop("llm")  # the run's llm is an argument of run_one (a backend shared by the runs)
    settings.update(overrides)
    if isinstance(settings.get("policy_kwargs"), str):
        settings["policy_kwargs"] = literal_policy_kwargs(settings["policy_kwargs"])
    return settings


def run_spec_of(env_id: str, variant: str, seed: int, llm: str, overrides: dict[str, Any] | None = None) -> RunSpec:
    """One ablation run's spec: the budget is ``overrides``' ``max_episodes``, else the variant's; the rest its settings."""
    settings = dict(overrides or {})
    budget = settings.pop("max_episodes", None)
    budget = run_settings(env_id, variant)["max_episodes"] if budget is None else budget
    return RunSpec(env_id, variant, seed, int(budget), llm, tuple(settings.items()))


def record(result: RunResult, run_dir: Path) -> dict[str, Any]:
    """One run as the report and ``<out>.runs.json`` hold it: its figures and its whole history."""
    spec = result.spec
    history = result.full_history(run_dir)
    return {
        "env": spec.env_id,
        "variant": spec.method,
        "seed": spec.seed,
        **iteration_figures(result.iteration_returns or []),
        "iterations": result.iterations,
        "episodes": result.episodes_run,
        "llm_calls": result.llm_calls,
        "settings": run_settings(spec.env_id, spec.method, {**spec.settings_dict, "max_episodes": spec.budget}),
        "salience": salience_summary(history),
        "history": history,
    }


def run_one(env_id: str, variant: str, seed: int, llm: Any, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """
    Train one run (in a temporary run directory) and return its history and summary figures.

    :param env_id: The gymnasium id.
    :param variant: The R2PO variant.
    :param seed: The run's seed.
    :param llm: An ``llm`` string, or a backend object (shared by the runs of :func:`main`).
    :param settings: Overrides of the env's settings in ``sb3_r2po/zoo/configs/r2po.yml`` (see :func:`run_settings`).
    """
    spec = run_spec_of(env_id, variant, seed, llm if isinstance(llm, str) else f"<{type(llm).__name__} object>", settings)
    with tempfile.TemporaryDirectory(prefix="sb3_r2po_ablate_") as directory:
        return record(run_spec(spec, directory, None if isinstance(llm, str) else llm), Path(directory))


def resolve_llm(llm: str, record: str | None = None) -> ChatBackend:
    """The one backend of ``llm`` that answers every run in turn, recording every call to the JSONL file ``record``
    (when given), so a ``replay:FILE`` of it replays exactly."""
    return RecordingBackend(make_backend(llm), record) if record else make_backend(llm)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sb3_r2po.ablate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llm", required=True, help="llm string (example, replay:FILE, a server URL, ...)")
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1"])
    parser.add_argument("--variants", nargs="+", default=["r2po", "props", "props_plus"], choices=sorted(VARIANTS))
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=[0, 1, 2],
        help="one run per env, variant and seed (default 0 1 2); the IQM's 95 %% interval rests on these runs",
    )  # fmt: skip
    parser.add_argument(
        "--max-episodes", type=int, default=None,
        help="episode budget per run, warm-up included (default: the variant's max_episodes in sb3_r2po/zoo/configs/r2po.yml)",
    )  # fmt: skip
    parser.add_argument("--n-eval-episodes", type=int, default=None, help="K (default: the env's in r2po.yml)")
    parser.add_argument(
        "--warmup-episodes", type=int, default=None,
        help="warm-up (default: the variant's warmup_episodes in sb3_r2po/zoo/configs/r2po.yml)",
    )  # fmt: skip
    parser.add_argument("--record", default=None, help="record every LLM call of the runs to this JSONL file")
    parser.add_argument("--out", default="ablation.md")
    parser.add_argument("--store", default=None, help="the results store (default: <out>.store next to the report)")
    parser.add_argument("--executor", default="serial", choices=EXECUTORS, help="how the runs execute (default serial)")
    parser.add_argument("--ray-address", default=None, help="the Ray cluster of --executor ray (default: a local Ray)")
    return parser


def main(argv: list[str] | None = None) -> None:
    """``python -m sb3_r2po.ablate ...``: run the ablation and write the report (``argv``: default ``sys.argv[1:]``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.executor == "ray" and args.record:
        parser.error("--record records in this process: not with --executor ray")
    overrides = r2po_settings(args.n_eval_episodes, args.warmup_episodes)
    if args.max_episodes is not None:
        overrides["max_episodes"] = args.max_episodes
    product = itertools.product(args.envs, args.variants, args.seeds)
    specs = [run_spec_of(env_id, variant, seed, args.llm, overrides) for env_id, variant, seed in product]
    out = Path(args.out)
    store = ResultsStore(args.store or out.with_name(out.name + ".store"))

    def on_result(result: RunResult) -> None:
        figures, spec = iteration_figures(result.iteration_returns or []), result.spec
        mean, best = figures["mean_return"], figures["best_return"]
        print(f"{spec.env_id} {spec.method} seed {spec.seed}: mean {mean:.2f}, best {best:.2f}", file=sys.stderr)

    backend = None if args.executor == "ray" else resolve_llm(args.llm, args.record)
    executor = make_executor(args.executor, args.ray_address, llm=backend, on_result=on_result)
    runs = [record(result, store.run_dir(result.spec)) for result in executor.run(specs, store)]
    command = "python -m sb3_r2po.ablate " + shlex.join(sys.argv[1:] if argv is None else argv)
    out.write_text(ablation_report(runs, command))
    out.with_suffix(out.suffix + ".runs.json").write_text(json.dumps(runs, indent=1, default=repr))
    print(out.read_text())


if __name__ == "__main__":
    main()
