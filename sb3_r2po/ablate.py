"""Run the paper's ablations: variants x envs x seeds with one ``llm`` string, at a matched episode budget.

    python -m sb3_r2po.ablate --llm example --envs CartPole-v1 --variants r2po props rep_traj --seeds 0 1 2 \\
        --max-episodes 200 --out ablation.md

Writes a markdown report: the paper-format table (mean return over iterations, best iteration; mean +- std
over seeds), the salience summary per variant, and the exact command and package versions. Each run's
history is saved next to the report (``<out>.runs.json``). With ``--llm replay:FILE`` (a file recorded with
``--record FILE``) the same table is reproduced exactly.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from sb3_r2po.diagnostics import salience_summary, salience_table
from sb3_r2po.variants import VARIANTS


def run_one(env_id: str, variant: str, seed: int, llm: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """Train one run and return its history and summary figures."""
    from sb3_r2po import R2PO

    policy = settings.pop("policy", None) or ("Tabular" if _is_tabular(env_id) else "MlpLinear")
    model = R2PO(policy, env_id, llm=llm, variant=variant, seed=seed, **settings)
    model.learn(total_timesteps=10**12)
    iterations = [r["mean_return"] for r in model.history if r["kind"] != "warmup"]
    return {
        "env": env_id,
        "variant": variant,
        "seed": seed,
        "mean_return": float(np.mean(iterations)) if iterations else float("nan"),
        "best_return": float(np.max(iterations)) if iterations else float("nan"),
        "iterations": model.iteration,
        "episodes": int(model._episode_num),
        "llm_calls": int(model.llm_stats["calls"]),
        "salience": salience_summary(model.history),
        "history": model.history,
    }


def _is_tabular(env_id: str) -> bool:
    import gymnasium as gym
    from gymnasium import spaces

    env = gym.make(env_id)
    try:
        return isinstance(env.observation_space, spaces.Discrete)
    finally:
        env.close()


def _mean_std(values: list[float]) -> str:
    arr = np.asarray(values, dtype=np.float64)
    return f"{arr.mean():.2f} +- {arr.std():.2f}"


def report(runs: list[dict[str, Any]], command: str) -> str:
    """The markdown report of a set of runs."""
    envs = list(dict.fromkeys(r["env"] for r in runs))
    variants = list(dict.fromkeys(r["variant"] for r in runs))
    lines: list[str] = []
    for title, key in (("Mean return over iterations", "mean_return"), ("Best iteration", "best_return")):
        lines += [
            f"## {title} (mean +- std over seeds)",
            "",
            "| env | " + " | ".join(variants) + " |",
            "|---|" + "---|" * len(variants),
        ]
        for env in envs:
            cells = [_mean_std([r[key] for r in runs if r["env"] == env and r["variant"] == v]) for v in variants]
            lines.append(f"| {env} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Salience diagnostics (all envs and seeds pooled)", ""]
    pooled = {}
    for v in variants:
        history = [rec for r in runs if r["variant"] == v for rec in r["history"]]
        pooled[v] = salience_summary(history)
    lines.append(salience_table(pooled))
    seeds = sorted({r["seed"] for r in runs})
    lines += [
        "",
        f"Budget per run: {runs[0]['episodes']} episodes (warm-up included); seeds {seeds}.",
        "",
        "## Reproduce",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Python {platform.python_version()}; "
        + ", ".join(f"{p} {_version(p)}" for p in ("sb3-r2po", "stable-baselines3", "gymnasium")),
    ]
    return "\n".join(lines) + "\n"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m sb3_r2po.ablate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llm", required=True, help="llm string (example, replay:FILE, a server URL, ...)")
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1"])
    parser.add_argument("--variants", nargs="+", default=["r2po", "props", "props_plus"], choices=sorted(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--max-episodes", type=int, default=4020, help="episode budget per run, warm-up included")
    parser.add_argument("--n-eval-episodes", type=int, default=20)
    parser.add_argument("--warmup-episodes", type=int, default=20)
    parser.add_argument("--record", default=None, help="record every LLM call of every run to this JSONL file")
    parser.add_argument("--out", default="ablation.md")
    args = parser.parse_args(argv)

    llm: Any = args.llm
    if args.record:
        from sb3_r2po.llm.recording import RecordingBackend
        from sb3_r2po.llm.resolve import make_backend

        llm = RecordingBackend(make_backend(args.llm), args.record)

    runs = []
    for env_id in args.envs:
        for variant in args.variants:
            for seed in args.seeds:
                settings = dict(
                    max_episodes=args.max_episodes, n_eval_episodes=args.n_eval_episodes, warmup_episodes=args.warmup_episodes
                )
                result = run_one(env_id, variant, seed, llm, settings)
                print(
                    f"{env_id} {variant} seed {seed}: mean {result['mean_return']:.2f}, best {result['best_return']:.2f}",
                    file=sys.stderr,
                )
                runs.append(result)
    command = "python -m sb3_r2po.ablate " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    out = Path(args.out)
    out.write_text(report(runs, command))
    out.with_suffix(out.suffix + ".runs.json").write_text(json.dumps(runs, indent=1))
    print(out.read_text())


if __name__ == "__main__":
    main()
