"""Run the paper's ablations: variants x envs x seeds with one ``llm`` string, at a matched episode budget.

    python -m sb3_r2po.ablate --llm example --envs CartPole-v1 --variants r2po props rep_traj --seeds 0 1 2 \\
        --max-episodes 200 --out ablation.md

Every run starts from the env's entry of ``zoo_configs/r2po.yml`` (the paper's settings: target, ``tau_c``, step
size, warm-up, K, episode budget, ...) with the settings its ``variants:`` mapping gives the variant (the reference's
own settings for each baseline and ablation: warm-up, target, no ``tau_c``, the Maze's 100-step cap, ...), read as
``python -m sb3_r2po.zoo train --algo r2po --hyperparams variant:...`` and ``python -m sb3_r2po.compare`` read it
(:func:`run_settings`), with the options given on the command line on top: ``--max-episodes``,
``--n-eval-episodes`` and ``--warmup-episodes`` replace the file's values only when given. So every variant of an
env gets the reference's budget, 4000 episodes after its own warm-up (the file's ``max_episodes``), unless
``--max-episodes`` says otherwise.

Writes a markdown report: the paper-format table (mean return over iterations, best iteration; mean +- std
over seeds), the salience summary per variant, the settings of each env, and the exact command and package
versions. Each run's history and settings are saved next to the report (``<out>.runs.json``). The ``llm`` string
is resolved once and the same backend answers every run in turn, so with ``--llm replay:FILE`` (a file recorded
with ``--record FILE``) the same table is reproduced exactly.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sb3_r2po.compare import episode_cap, is_tabular, mean_std, r2po_entry, r2po_overrides, versions
from sb3_r2po.diagnostics import salience_summary, salience_table
from sb3_r2po.llm.base import ChatBackend
from sb3_r2po.llm.resolve import make_backend
from sb3_r2po.variants import VARIANTS

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv


ZOO_STEP_KEYS = ("n_timesteps", "callback")
"""Keys of ``zoo_configs/r2po.yml`` that only the zoo's step-horizon training reads; an ablation run is stopped by its
``max_episodes`` budget, like a ``compare`` run."""

ZOO_ENV_KEYS = ("env_kwargs", "n_envs", "monitor_kwargs")
"""Keys of ``zoo_configs/r2po.yml`` that the zoo uses to build the env (:func:`make_env` does the same)."""

UNSUPPORTED_KEYS = ("normalize", "env_wrapper", "vec_env_wrapper", "frame_stack")
"""Zoo keys that :func:`run_one` does not apply: an entry setting one of them is refused, not silently ignored."""


def run_settings(env_id: str, variant: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """
    The settings of one ablation run: the env's entry of ``zoo_configs/r2po.yml`` (the ``default`` entry for an env
    without one) with the variant's settings from its ``variants:`` mapping, then the variant, then ``overrides``
    (which win), merged as ``python -m sb3_r2po.compare`` merges them
    (:func:`sb3_r2po.compare.r2po_entry`, :func:`sb3_r2po.compare.r2po_overrides`): a ``Tabular`` policy for an env
    with Discrete observations that the file lacks, and an ``n_eval_episodes``/``warmup_episodes``/``max_episodes``
    of ``overrides`` replacing the file's. The zoo's step horizon (``n_timesteps``) and ``callback`` are dropped.
    ``max_episode_steps`` goes to R2PO, as in the zoo (R2PO caps the episodes of an env without a time limit; see
    :func:`make_env`).

    :param env_id: The gymnasium id.
    :param variant: The R2PO variant.
    :param overrides: R2PO hyperparameters (and ``policy``, ``env_kwargs``) replacing the file's.
    :return: R2PO's keyword arguments (``llm``, ``seed`` and ``env`` excepted) with ``policy`` and the env keys of
        :data:`ZOO_ENV_KEYS` the entry sets.
    :raises ValueError: for an entry with a key of :data:`UNSUPPORTED_KEYS`, or without an episode budget.
    """
    overrides = dict(overrides or {})
    entry = r2po_entry(env_id, variant)
    for key in ZOO_STEP_KEYS:
        entry.pop(key, None)
    budget = overrides.pop("max_episodes", entry.get("max_episodes"))
    if budget is None:
        raise ValueError(f"{env_id}: no episode budget (max_episodes) in zoo_configs/r2po.yml: give --max-episodes")
    n_eval, warmup = overrides.pop("n_eval_episodes", None), overrides.pop("warmup_episodes", None)
    settings = {**entry, **r2po_overrides(variant, env_id, "", int(budget), n_eval, warmup)}
    settings.pop("llm")  # the run's llm is an argument of run_one (a backend shared by the runs)
    settings.update(overrides)
    unsupported = [key for key in UNSUPPORTED_KEYS if settings.get(key)]
    if unsupported:
        raise ValueError(f"{env_id}: the ablation runner does not apply the zoo's {unsupported}: use python -m sb3_r2po.zoo")
    for key in UNSUPPORTED_KEYS:
        settings.pop(key, None)
    if isinstance(settings.get("policy_kwargs"), str):  # the zoo evaluates it the same way
        settings["policy_kwargs"] = eval(settings["policy_kwargs"])
    return settings


def make_env(env_id: str, settings: dict[str, Any], seed: int | None = None) -> VecEnv:
    """
    The training env of a run, built as the zoo builds it (``make_vec_env`` with the entry's ``env_kwargs``,
    ``n_envs`` and ``monitor_kwargs``). An env without a time limit of its own gets ``max_episode_steps`` as a
    ``TimeLimit``, as in ``python -m sb3_r2po.compare``.

    :param env_id: The gymnasium id.
    :param settings: The run's settings (:func:`run_settings`).
    :param seed: Seed of the env.
    """
    from stable_baselines3.common.env_util import make_vec_env

    env_kwargs = dict(settings.get("env_kwargs") or {})
    _, add_cap = episode_cap(env_id)
    if add_cap:
        env_kwargs.setdefault("max_episode_steps", int(settings.get("max_episode_steps", 1000)))
    return make_vec_env(
        env_id,
        n_envs=int(settings.get("n_envs", 1)),
        seed=seed,
        env_kwargs=env_kwargs,
        monitor_kwargs=settings.get("monitor_kwargs"),
    )


def run_one(env_id: str, variant: str, seed: int, llm: Any, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """
    Train one run and return its history and summary figures.

    :param env_id: The gymnasium id.
    :param variant: The R2PO variant.
    :param seed: The run's seed.
    :param llm: The LLM: a backend object (shared by the runs of :func:`main`) or an ``llm`` string.
    :param settings: Overrides of the env's settings in ``zoo_configs/r2po.yml`` (see :func:`run_settings`).
    """
    from sb3_r2po import R2PO

    resolved = run_settings(env_id, variant, settings)
    kwargs = {key: value for key, value in resolved.items() if key not in ZOO_ENV_KEYS}
    policy = kwargs.pop("policy", None) or ("Tabular" if is_tabular(env_id) else "MlpLinear")
    env = make_env(env_id, resolved, seed)
    try:
        model = R2PO(policy, env, llm=llm, seed=seed, **kwargs)
        model.learn(total_timesteps=10**12)
    finally:
        env.close()
    iterations = [r["mean_return"] for r in model.history if r["kind"] != "warmup"]
    return {
        "env": env_id,
        "variant": variant,
        "seed": seed,
        "mean_return": float(np.mean(iterations)) if iterations else float("nan"),
        "best_return": float(np.max(iterations)) if iterations else float("nan"),
        "iterations": model.iteration,
        "episodes": int(model.episodes_used),
        "llm_calls": int(model.llm_stats["calls"]),
        "settings": resolved,
        "salience": salience_summary(model.history),
        "history": model.history,
    }


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
            cells = [mean_std([r[key] for r in runs if r["env"] == env and r["variant"] == v]) for v in variants]
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
        "## Settings",
        "",
        f"Seeds {seeds}. Each env's entry of `zoo_configs/r2po.yml` with the variant's own settings (its `variants:`, "
        "the reference's) and the command's options on top; `max_episodes` is the budget of a run, warm-up included:",
        "",
    ]
    for env in envs:
        for variant in variants:
            settings = next((r.get("settings") for r in runs if r["env"] == env and r["variant"] == variant), None)
            if settings:
                shown = {key: value for key, value in settings.items() if key != "variant"}
                lines.append(f"- {env}, {variant}: " + ", ".join(f"{key}={value!r}" for key, value in shown.items()))
    lines += [
        "",
        "## Reproduce",
        "",
        "```bash",
        command,
        "```",
        "",
        versions(),
    ]
    return "\n".join(lines) + "\n"


def resolve_llm(llm: str, record: str | None = None) -> ChatBackend:
    """
    The one backend that answers every run of an ablation, in turn.

    A ``replay:FILE`` backend hands out the replies recorded for a request in the order they were recorded; one
    backend per run would give a request that recurs in a later run (the first Search prompt of two variants on the
    same seed, for example) the first run's reply. Sharing it replays the recording made by a shared
    :class:`~sb3_r2po.llm.recording.RecordingBackend` (``record``) exactly. Building is lazy: nothing is loaded or
    contacted before the first call.

    :param llm: The ``llm`` string.
    :param record: A JSONL file to record every call to, or ``None``.
    """
    backend = make_backend(llm)
    if record:
        from sb3_r2po.llm.recording import RecordingBackend

        backend = RecordingBackend(backend, record)
    return backend


def main(argv: list[str] | None = None) -> None:
    """
    Run the ablation of the command line and write the report (see the module docstring).

    :param argv: The arguments (without the program name); defaults to ``sys.argv[1:]``.
    """
    parser = argparse.ArgumentParser(
        prog="python -m sb3_r2po.ablate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llm", required=True, help="llm string (example, replay:FILE, a server URL, ...)")
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1"])
    parser.add_argument("--variants", nargs="+", default=["r2po", "props", "props_plus"], choices=sorted(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--max-episodes",
        type=int,
        default=None,
        help="episode budget per run, warm-up included (default: the variant's max_episodes in zoo_configs/r2po.yml)",
    )
    parser.add_argument(
        "--n-eval-episodes", type=int, default=None, help="K (default: the env's n_eval_episodes in zoo_configs/r2po.yml)"
    )
    parser.add_argument(
        "--warmup-episodes",
        type=int,
        default=None,
        help="warm-up (default: the variant's warmup_episodes in zoo_configs/r2po.yml)",
    )
    parser.add_argument("--record", default=None, help="record every LLM call of every run to this JSONL file")
    parser.add_argument("--out", default="ablation.md")
    args = parser.parse_args(argv)

    llm = resolve_llm(args.llm, args.record)
    options = {
        "max_episodes": args.max_episodes,
        "n_eval_episodes": args.n_eval_episodes,
        "warmup_episodes": args.warmup_episodes,
    }
    overrides = {key: value for key, value in options.items() if value is not None}

    runs = []
    for env_id in args.envs:
        for variant in args.variants:
            for seed in args.seeds:
                result = run_one(env_id, variant, seed, llm, overrides)
                print(
                    f"{env_id} {variant} seed {seed}: mean {result['mean_return']:.2f}, best {result['best_return']:.2f}",
                    file=sys.stderr,
                )
                runs.append(result)
    command = "python -m sb3_r2po.ablate " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    out = Path(args.out)
    out.write_text(report(runs, command))
    out.with_suffix(out.suffix + ".runs.json").write_text(json.dumps(runs, indent=1, default=repr))
    print(out.read_text())


if __name__ == "__main__":
    main()
