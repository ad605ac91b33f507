"""
The markdown reports: ``python -m sb3_r2po.compare``'s ``results.md`` (:func:`compare_report`), the paper-format table
side by side with the published numbers (:func:`paper_table`), and ``python -m sb3_r2po.ablate``'s report
(:func:`ablation_report`).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from sb3_r2po.experiments.configs import R2PO_METHODS
from sb3_r2po.experiments.stats import (
    episodes_cell,
    interval_note,
    iqm_cell,
    iteration_figures,
    mean_std,
    run_label,
    summarize,
    threshold_cell,
)

VERSIONS = ("sb3-r2po", "stable-baselines3", "sb3-contrib", "rl_zoo3", "gymnasium", "torch", "numpy")
"""Packages whose versions are written next to the tables."""


def package_version(package: str) -> str:
    """The installed version of ``package``, or ``"not installed"``."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> str:
    """Python, the platform and the versions of :data:`VERSIONS`, on one line."""
    packages = ", ".join(f"{p} {package_version(p)}" for p in VERSIONS)
    return f"Python {platform.python_version()} on {platform.platform()} ({os.cpu_count()} CPUs); {packages}"


def table(runs: list[dict[str, Any]], window: int, threshold: float | None) -> str:
    """The markdown table of one env's runs (``runs.json`` records): one row per method, each return figure as
    mean +- std over its seeds and as IQM [95 % CI] (:func:`~sb3_r2po.experiments.stats.iqm_cell`) beside it."""
    methods = list(dict.fromkeys(run_label(r) for r in runs))
    target = "n/a" if threshold is None else f"{threshold:g}"
    lines = [
        f"| method | training episodes | mean return over training | IQM [95 % CI] | best ({window}-ep. rolling mean) "
        f"| IQM [95 % CI] | final (last {window} ep.) | IQM [95 % CI] | episodes to {target} (seeds reaching it) "
        "| wall time per run (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method in methods:
        mine = [r for r in runs if run_label(r) == method]
        stats = [summarize(r["returns"], window, threshold) for r in mine]
        cells = [
            method,
            episodes_cell([len(r["returns"]) for r in mine]),
            mean_std([s["mean"] for s in stats]),
            iqm_cell([s["mean"] for s in stats]),
            mean_std([s["best"] for s in stats]),
            iqm_cell([s["best"] for s in stats]),
            mean_std([s["final"] for s in stats]),
            iqm_cell([s["final"] for s in stats]),
            "n/a" if threshold is None else threshold_cell([s["to_threshold"] for s in stats]),
            mean_std([r["wall_time_s"] for r in mine]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _short(path: str) -> str:
    """A hyperparameter file path as its folder and name, for the report."""
    p = Path(path)
    return f"{p.parent.name}/{p.name}"


def env_section(s: dict[str, Any], runs: list[dict[str, Any]], curves: str, intervals: str | None = None) -> list[str]:
    """The lines of one env's part of ``results.md``: title, table, figures, definitions and settings.

    :param s: The settings of the comparison for this env (``env``, ``methods``, ``threshold``, ``episode_cap``, ...).
    :param runs: The env's runs (``runs.json`` records).
    :param curves: The file name of the env's learning curves.
    :param intervals: The file name of the env's interval figure (:func:`~sb3_r2po.experiments.plots.plot_intervals`;
        ``None``: none).
    """
    window, threshold = s["window"], s["threshold"]
    methods = list(dict.fromkeys(run_label(r) for r in runs))
    lines = [
        f"# {s['env']}: {', '.join(methods)} at {s['budget']} training episodes",
        "",
        table(runs, window, threshold),
        "",
        f"![learning curves]({curves})",
        "",
        *([f"![IQM and 95 % confidence intervals]({intervals})", ""] if intervals else []),
        f"Mean +- std over seeds {s['seeds']} (population std). "
        + interval_note([sum(run_label(r) == m for r in runs) for m in methods])
        + " Every method is charged only for the episodes it "
        "trains on; evaluation episodes are not charged (unlike the paper's SB3 protocol, where 20 evaluation "
        "episodes after every training episode counted towards the budget).",
        "",
        "- **training episodes**: episodes each run trained on (R2PO: every episode it ran, warm-up included; it stops "
        "when another K-episode evaluation no longer fits). Baselines stop at the step in which the budget-th episode "
        "ends; with several envs, episodes ending in that same step beyond the budget are left out.",
        "- **mean return over training**: the mean return of all training episodes (for R2PO this includes the "
        "warm-up and rejected revisions; the paper's figure is the mean over iterations of the kept candidates).",
        f"- **best**: the best {window}-episode rolling mean of the training returns (the paper: the best iteration).",
        f"- **final**: the mean return of the last {window} training episodes.",
        f"- **episodes to {'n/a' if threshold is None else f'{threshold:g}'}**: the number of training episodes after "
        f"which the {window}-episode rolling mean first reaches the threshold ({s['threshold_source']}); mean +- std "
        "over the seeds that reached it, how many did in brackets.",
        f"- **wall time per run**: building the model and training, on this machine ({s['torch_threads']} torch thread(s)).",
        "",
        "## Settings",
        "",
        "| method | algorithm (hyperparameter file) | `learn()` horizon | hyperparameters |",
        "|---|---|---|---|",
    ]
    for method in methods:
        first = next(r for r in runs if run_label(r) == method)
        shown = ", ".join(f"{k}={v}" for k, v in first["hyperparams"].items() if k not in ("callback",))
        file = _short(first["hyperparams_file"])
        lines.append(f"| {method} | {first['algo']} (`{file}`) | {first['horizon']:,} steps | {shown} |")
    own_caps = s.get("variant_episode_caps") or {}
    own = "".join(
        f"; {m} {c} steps (its own cap in the reference, `variants:` of `sb3_r2po/zoo/configs/r2po.yml`)"
        for m, c in own_caps.items()
    )
    lines += [
        "",
        f"Episode cap: {s['episode_cap']} steps ({s['episode_cap_source']}){own}. Step horizon of `learn()`: the file's "
        f"`n_timesteps` or budget x episode cap, whichever is larger (schedules anneal over it; the budget ends every "
        "run). The files' `callback` entries are replaced by the episode budget.",
    ]
    return lines + _llm_lines(s, methods)


def _llm_lines(s: dict[str, Any], methods: Sequence[str]) -> list[str]:
    """What the report says about R2PO's LLM (nothing without an R2PO method)."""
    if not any(m in R2PO_METHODS for m in methods):
        return []
    preset = s.get("prompts")
    prompts = f"the prompt preset `{preset}`" if preset else "the prompt settings of the hyperparameter file"
    lines = ["", f"R2PO's LLM: `{s['llm']}`, with {prompts}."]
    if s.get("lockstep"):
        lines += [
            "",
            "The seeds of each R2PO method trained together (`--lockstep`), their LLM calls sent as batches; each "
            "seed's wall time is the shared one.",
        ]
    if str(s["llm"]).split(":")[0] == "example":
        lines += [
            "",
            "**`example` is not an LLM**: it is `ExampleLLM`, a deterministic seeded local search that speaks "
            "R2PO's prompt and reply format. These R2PO numbers say nothing about what a language model achieves.",
        ]
    return lines


def compare_report(result: dict[str, Any], curves: dict[str, str], intervals: dict[str, str] | None = None) -> str:
    """
    The markdown report (``results.md``) of a comparison: one section per env, then the wall time and the command.

    :param result: ``runs.json``'s data (``settings``, ``runs``, ``command``, ``versions``, ``wall_time_s``).
    :param curves: The learning-curve file of each env.
    :param intervals: The interval figure of each env (``None``: none).
    """
    lines: list[str] = []
    for env_id, settings in env_settings(result["settings"]).items():
        if lines:
            lines.append("")
        runs = [r for r in result["runs"] if r.get("env", env_id) == env_id]
        lines += env_section(settings, runs, curves[env_id], (intervals or {}).get(env_id))
    lines += ["", f"Total wall time: {result['wall_time_s']:.0f} s.", "", "## Reproduce", "", "```bash"]
    lines += [result["command"], "```", "", result["versions"]]
    return "\n".join(lines) + "\n"


def env_settings(settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The settings of each env of a comparison: ``runs.json``'s ``settings`` (one env), or each entry of its
    ``per_env`` merged into the common ones (several)."""
    per_env = settings.get("per_env")
    if not per_env:
        return {settings["env"]: settings}
    common = {key: value for key, value in settings.items() if key != "per_env"}
    return {env_id: {**common, **own, "env": env_id} for env_id, own in per_env.items()}


# --------------------------------------------------------------------------- the paper's table


def _published(value: tuple[float, float] | None, label: str = "") -> str:
    return "-" if value is None else f"{value[0]:.2f} +- {value[1]:.2f}{label}"


def paper_table(
    runs: list[dict[str, Any]], window: int, thresholds: dict[str, float | None], published: dict[str, dict[str, Any]]
) -> str:
    """
    The paper-format table, one row per env and method, side by side with the published numbers.

    - **mean return**: R2PO methods, the mean over iterations of the kept candidates' K-episode means (the paper's
      "mean return across training"); baselines, the mean over training episodes;
    - **best**: R2PO methods, the best iteration; baselines, the best ``window``-episode rolling mean;
    - **episodes to threshold**: training episodes until the ``window``-episode rolling mean of the training returns
      first reaches the env's threshold.

    Ours: mean +- std over seeds, and the IQM [95 % CI] over seeds beside it
    (:func:`~sb3_r2po.experiments.stats.iqm_cell`); published: mean +- std over the paper's 10 runs.

    :param runs: ``runs.json`` records of R2PO methods (with ``iteration_returns``) and baselines.
    :param window: The rolling-mean window.
    :param thresholds: The threshold of each env.
    :param published: The published numbers per env (:data:`sb3_r2po.experiments.grids.PUBLISHED`).
    """
    lines = [
        "| env | method | seeds | mean return | IQM [95 % CI] | published | best | IQM [95 % CI] | published best "
        "| episodes to threshold |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for env_id in dict.fromkeys(r["env"] for r in runs):
        paper = published.get(env_id, {})
        mine = [r for r in runs if r["env"] == env_id]
        for method in dict.fromkeys(run_label(r) for r in mine):  # a nonlinear policy's label has no published row
            seeds = [r for r in mine if run_label(r) == method]
            means, bests = [], []
            for run in seeds:
                if run["method"] in R2PO_METHODS:
                    figures = iteration_figures(run.get("iteration_returns") or [])
                    means.append(figures["mean_return"])
                    bests.append(figures["best_return"])
                else:
                    stats = summarize(run["returns"], window)
                    means.append(stats["mean"])
                    bests.append(stats["best"])
            threshold = thresholds.get(env_id)
            reach = [summarize(r["returns"], window, threshold)["to_threshold"] for r in seeds]
            sb3 = paper.get("sb3")
            mean_published = _published(paper.get(method))
            if sb3 is not None and sb3[0] == method:
                mean_published = _published(sb3[1], " (best SB3)")
            best_published = "-" if method != "r2po" or paper.get("best") is None else f"{paper['best']:g}"
            cells = [env_id, method, str(len(seeds)), mean_std(means), iqm_cell(means), mean_published]
            cells += [mean_std(bests), iqm_cell(bests), best_published]
            cells.append("n/a" if threshold is None else f"{threshold_cell(reach)} to {threshold:g}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paper_document(paper: str, result: dict[str, Any]) -> str:
    """``paper.md``: the :func:`paper_table` ``paper`` of a comparison's ``result`` with its definitions and command."""
    s = result["settings"]
    counts = [len(group) for group in _by_env_and_label(result["runs"]).values()]
    lines = [
        "# The paper's table: ours beside the published numbers",
        "",
        paper,
        "",
        f"Ours: mean +- std over seeds {s['seeds']} (population std). **mean return**: for R2PO and its variants the mean "
        "over iterations of the kept candidates' K-episode means (the paper's \"mean return across training\"); for the "
        "baselines the mean over training episodes. **best**: R2PO methods, the best iteration; baselines, the best "
        f"{s['window']}-episode rolling mean. **episodes to threshold**: training episodes until the {s['window']}-episode "
        "rolling mean of the training returns first reaches the threshold (mean +- std over the seeds that did).",
        "",
        interval_note(counts or [0]),
        "",
        "Published (the R2PO paper, arXiv 2605.08315: its table of mean return across training, mean +- std over 10 "
        "runs each): ProPS, ProPS+, R2PO and the best SB3 algorithm of the paper, whose protocol charged 20 evaluation "
        "episodes after every training episode (about 190 training episodes of 4000); ours charges training episodes "
        "only. Published best: R2PO's best iteration, as the paper reports it.",
    ]
    if str(s["llm"]).split(":")[0] == "example":
        lines += ["", "**`example` is not an LLM**: these R2PO numbers say nothing about what a language model achieves."]
    lines += ["", "```bash", result["command"], "```", "", result["versions"]]
    return "\n".join(lines) + "\n"


def _by_env_and_label(runs: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The runs of each (env, row label) of the paper table."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["env"], run_label(run)), []).append(run)
    return groups


# --------------------------------------------------------------------------- the ablation report


def ablation_report(runs: list[dict[str, Any]], command: str) -> str:
    """The markdown report of an ablation (``python -m sb3_r2po.ablate``'s run records): per figure, a table of
    mean +- std over seeds and one of the IQM [95 % CI] over seeds (:func:`~sb3_r2po.experiments.stats.iqm_cell`)."""
    from sb3_r2po.diagnostics import salience_summary, salience_table

    envs = list(dict.fromkeys(r["env"] for r in runs))
    variants = list(dict.fromkeys(r["variant"] for r in runs))
    lines: list[str] = []
    for title, key in (("Mean return over iterations", "mean_return"), ("Best iteration", "best_return")):
        for over, cell in (("mean +- std over seeds", mean_std), ("IQM [95 % CI] over seeds", iqm_cell)):
            lines += [
                f"## {title} ({over})",
                "",
                "| env | " + " | ".join(variants) + " |",
                "|---|" + "---|" * len(variants),
            ]
            for env in envs:
                cells = [cell([r[key] for r in runs if r["env"] == env and r["variant"] == v]) for v in variants]
                lines.append(f"| {env} | " + " | ".join(cells) + " |")
            lines.append("")
    counts = [sum(r["env"] == env and r["variant"] == v for r in runs) for env in envs for v in variants]
    lines += [interval_note([c for c in counts if c] or [0]), ""]
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
        f"Seeds {seeds}. Each env's entry of `sb3_r2po/zoo/configs/r2po.yml` with the variant's own settings "
        "(its `variants:`, "
        "the reference's) and the command's options on top; `max_episodes` is the budget of a run, warm-up included:",
        "",
    ]
    for env in envs:
        for variant in variants:
            settings = next((r.get("settings") for r in runs if r["env"] == env and r["variant"] == variant), None)
            if settings:
                shown = {key: value for key, value in settings.items() if key != "variant"}
                lines.append(f"- {env}, {variant}: " + ", ".join(f"{key}={value!r}" for key, value in shown.items()))
    lines += ["", "## Reproduce", "", "```bash", command, "```", "", versions()]
    return "\n".join(lines) + "\n"
