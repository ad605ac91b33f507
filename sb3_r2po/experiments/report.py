"""Statistics and reports of runs (``compare``'s ``results.md``, ``paper.md`` and figures, ``ablate``'s report; the
comparisons page defines the figures) and the salience summary of a run's Critic revisions, as the paper's table."""

from __future__ import annotations

import functools
import math
import os
import platform
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from importlib import metadata
from itertools import zip_longest
from pathlib import Path
from typing import Any

import numpy as np

from sb3_r2po.experiments.runs import R2PO_METHODS

WINDOW = 20  # default window of the rolling mean
NAMED_POLICIES = ("ProjectedMlp", "ProjectedMlpPolicy", "RandomFeatures", "RandomFeaturesPolicy")  # named in a run's label


def run_label(run: dict[str, Any]) -> str:
    """A run's row in the tables: its method, with a :data:`NAMED_POLICIES` policy (``props_plus (RandomFeatures)``)."""
    policy = (run.get("hyperparams") or {}).get("policy")
    return f"{run['method']} ({policy})" if policy in NAMED_POLICIES else str(run["method"])


def rolling_mean(returns: Sequence[float] | np.ndarray, window: int) -> np.ndarray:
    """The mean of the last ``window`` returns after every episode (fewer at the start: the mean so far)."""
    values = np.asarray(returns, dtype=np.float64)
    sums = np.cumsum(np.insert(values, 0, 0.0))
    ends = np.arange(1, values.size + 1)
    starts = np.maximum(0, ends - window)
    return (sums[ends] - sums[starts]) / (ends - starts)


def summarize(returns: Sequence[float], window: int = WINDOW, threshold: float | None = None) -> dict[str, Any]:
    """``mean``, ``best`` (the best ``window``-episode rolling mean), ``final`` and ``to_threshold``."""
    values = np.asarray(returns, dtype=np.float64)
    if values.size == 0:
        return {"mean": math.nan, "best": math.nan, "final": math.nan, "to_threshold": None}
    rolling = rolling_mean(values, window)
    full = rolling[window - 1 :] if values.size >= window else rolling[-1:]
    reached = np.flatnonzero(rolling[window - 1 :] >= threshold) if threshold is not None else np.empty(0, int)
    to_threshold = int(reached[0]) + window if reached.size else None
    return {
        "mean": float(values.mean()),
        "best": float(full.max()),
        "final": float(values[-window:].mean()),
        "to_threshold": to_threshold,
    }


def iteration_figures(iteration_returns: Sequence[float]) -> dict[str, float]:
    """An R2PO run's ``mean_return`` over its iterations' kept candidates and ``best_return`` (NaN without iterations)."""
    if not iteration_returns:
        return {"mean_return": math.nan, "best_return": math.nan}
    return {"mean_return": float(np.mean(iteration_returns)), "best_return": float(np.max(iteration_returns))}


def mean_std(values: Sequence[float]) -> str:
    """``"mean +- std"`` (population std), two decimals."""
    return f"{np.mean(values):.2f} +- {np.std(values):.2f}"


BOOTSTRAP_REPS = 2000
BOOTSTRAP_SEED = 0  # each interval's bootstrap starts from it: one result, one report
CONFIDENCE = 0.95


def iqm_interval(
    values: Sequence[float] | np.ndarray, reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float, float]:
    """``(iqm, low, high)``: the interquartile mean of one figure over runs and its :data:`CONFIDENCE` stratified
    bootstrap interval (rliable, ``reps`` resamples from ``seed``); NaN without values or with a non-finite one."""
    figures = tuple(float(v) for v in np.asarray(values, dtype=np.float64).ravel())
    if not figures or not all(math.isfinite(v) for v in figures):
        return math.nan, math.nan, math.nan
    return _bootstrap(figures, reps, seed)


@functools.lru_cache(maxsize=4096)  # 0.2-0.5 s a call
def _bootstrap(figures: tuple[float, ...], reps: int, seed: int) -> tuple[float, float, float]:
    try:
        from rliable import library, metrics  # type: ignore[import-untyped]
    except ImportError as error:
        raise ImportError(
            "the reports' confidence intervals need rliable, installed with the zoo extra: pip install 'sb3-r2po[zoo]'"
        ) from error
    # rliable's StratifiedBootstrap draws its resamples from numpy's global generator whatever random_state it gets:
    # seed that for the call and give the caller's state back afterwards
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():  # arch (under rliable) deprecates random_state in favour of a Generator
            warnings.simplefilter("ignore", FutureWarning)
            points, intervals = library.get_interval_estimates(
                {"runs": np.asarray(figures, dtype=np.float64).reshape(-1, 1)},
                lambda x: np.array([metrics.aggregate_iqm(x)]),
                reps=reps,
                confidence_interval_size=CONFIDENCE,
                random_state=np.random.RandomState(seed),
            )
    finally:
        np.random.set_state(state)
    low, high = np.asarray(intervals["runs"], dtype=np.float64).ravel()[:2]
    return float(np.asarray(points["runs"]).ravel()[0]), float(low), float(high)


def iqm_cell(values: Sequence[float]) -> str:
    """``"iqm [low, high]"`` of :func:`iqm_interval`, two decimals (``(1 run)`` for one run; ``n/a`` without values)."""
    iqm, low, high = iqm_interval(values)
    if math.isnan(iqm):
        return "n/a"
    return f"{iqm:.2f} [{low:.2f}, {high:.2f}]" + (" (1 run)" if len(values) == 1 else "")


def interval_note(runs: int | Sequence[int]) -> str:
    """What a report's intervals are and how many runs each rests on (``runs``: per method, or one count)."""
    counts = sorted({runs} if isinstance(runs, int) else set(runs))
    shown = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    note = (
        f"IQM [95 % CI]: the interquartile mean over the runs (seeds) of a method, {shown} "
        f"{'run' if counts == [1] else 'runs'} each, with its 95 % stratified bootstrap confidence interval (rliable, "
        f"percentile method, {BOOTSTRAP_REPS} resamples, seed {BOOTSTRAP_SEED})."
    )
    if counts[0] == 1:
        note += " With one run a cell is that run's figure and its interval the point itself, marked (1 run): no interval."
    elif counts[0] < 5:
        note += f" With {counts[0]} runs an interval shows their spread, not where further seeds would fall."
    return note


def threshold_cell(values: list[int | None]) -> str:
    reached = [v for v in values if v is not None]
    if not reached:
        return f"not reached (0/{len(values)})"
    return f"{mean_std([float(v) for v in reached])} ({len(reached)}/{len(values)})"


VERSIONS = ("sb3-r2po", "stable-baselines3", "sb3-contrib", "rl_zoo3", "gymnasium", "torch", "numpy")  # in the reports


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> str:
    """Python, the platform and the versions of :data:`VERSIONS` (or ``not installed``), on one line."""
    packages = ", ".join(f"{p} {_version(p)}" for p in VERSIONS)
    return f"Python {platform.python_version()} on {platform.platform()} ({os.cpu_count()} CPUs); {packages}"


def table(runs: list[dict[str, Any]], window: int, threshold: float | None) -> str:
    """One env's table (``runs.json`` records): a row per method, each figure as mean +- std and IQM [95 % CI]."""
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
        counts = [len(r["returns"]) for r in mine]
        cells = [method, str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"]
        for key in ("mean", "best", "final"):
            cells += [mean_std([s[key] for s in stats]), iqm_cell([s[key] for s in stats])]
        cells.append("n/a" if threshold is None else threshold_cell([s["to_threshold"] for s in stats]))
        cells.append(mean_std([r["wall_time_s"] for r in mine]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def env_section(s: dict[str, Any], runs: list[dict[str, Any]], curves: str, intervals: str | None = None) -> list[str]:
    """One env's part of ``results.md`` (``s``: its settings; ``curves``, ``intervals``: its figures' file names)."""
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
        file = "/".join(Path(first["hyperparams_file"]).parts[-2:])
        lines.append(f"| {method} | {first['algo']} (`{file}`) | {first['horizon']:,} steps | {shown} |")
    own = "".join(
        f"; {m} {c} steps (its own cap in the reference, `variants:` of `sb3_r2po/zoo/configs/r2po.yml`)"
        for m, c in (s.get("variant_episode_caps") or {}).items()
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
    """``results.md`` of ``runs.json``'s data: a section per env (``curves``, ``intervals``: its figures), the command."""
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
    """Each env's settings: ``runs.json``'s ``settings`` (one env), or each ``per_env`` entry over the common ones."""
    per_env = settings.get("per_env")
    if not per_env:
        return {settings["env"]: settings}
    common = {key: value for key, value in settings.items() if key != "per_env"}
    return {env_id: {**common, **own, "env": env_id} for env_id, own in per_env.items()}


def _published(value: tuple[float, float] | None, label: str = "") -> str:
    return "-" if value is None else f"{value[0]:.2f} +- {value[1]:.2f}{label}"


def paper_table(
    runs: list[dict[str, Any]], window: int, thresholds: dict[str, float | None], published: dict[str, dict[str, Any]]
) -> str:
    """
    The paper-format table, a row per env and method, beside the published numbers (``paper.md`` defines the figures).

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
            if seeds[0]["method"] in R2PO_METHODS:  # one label, one method
                figures = [iteration_figures(run.get("iteration_returns") or []) for run in seeds]
                means, bests = [f["mean_return"] for f in figures], [f["best_return"] for f in figures]
            else:
                stats = [summarize(run["returns"], window) for run in seeds]
                means, bests = [f["mean"] for f in stats], [f["best"] for f in stats]
            threshold = thresholds.get(env_id)
            reach = [summarize(r["returns"], window, threshold)["to_threshold"] for r in seeds]
            sb3 = paper.get("sb3") or (None, None)
            mean_published = _published(sb3[1], " (best SB3)") if sb3[0] == method else _published(paper.get(method))
            best_published = "-" if method != "r2po" or paper.get("best") is None else f"{paper['best']:g}"
            cells = [env_id, method, str(len(seeds)), mean_std(means), iqm_cell(means), mean_published]
            cells += [mean_std(bests), iqm_cell(bests), best_published]
            cells.append("n/a" if threshold is None else f"{threshold_cell(reach)} to {threshold:g}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paper_document(paper: str, result: dict[str, Any]) -> str:
    """``paper.md``: the :func:`paper_table` ``paper`` of a comparison's ``result`` with its definitions and command."""
    s = result["settings"]
    counts = list(Counter((run["env"], run_label(run)) for run in result["runs"]).values())
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


def ablation_report(runs: list[dict[str, Any]], command: str) -> str:
    """``ablate``'s report of its run records: per figure, a table of mean +- std and one of IQM [95 % CI] over seeds."""
    envs = list(dict.fromkeys(r["env"] for r in runs))
    variants = list(dict.fromkeys(r["variant"] for r in runs))
    lines: list[str] = []
    for title, key in (("Mean return over iterations", "mean_return"), ("Best iteration", "best_return")):
        for over, cell in (("mean +- std over seeds", mean_std), ("IQM [95 % CI] over seeds", iqm_cell)):
            lines += [f"## {title} ({over})", "", "| env | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants)]
            for env in envs:
                cells = [cell([r[key] for r in runs if r["env"] == env and r["variant"] == v]) for v in variants]
                lines.append(f"| {env} | " + " | ".join(cells) + " |")
            lines.append("")
    counts = [sum(r["env"] == env and r["variant"] == v for r in runs) for env in envs for v in variants]
    lines += [interval_note([c for c in counts if c] or [0]), "", "## Salience diagnostics (all envs and seeds pooled)", ""]
    pooled = {v: salience_summary([rec for r in runs if r["variant"] == v for rec in r["history"]]) for v in variants}
    lines.append(salience_table(pooled))
    seeds = sorted({r["seed"] for r in runs})
    lines += [
        "",
        "## Settings",
        "",
        f"Seeds {seeds}. Each env's entry of `sb3_r2po/zoo/configs/r2po.yml` with the variant's own settings (its `variants:`,"
        " the reference's) and the command's options on top; `max_episodes` is the budget of a run, warm-up included:",
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


def plot_curves(
    runs: Sequence[dict[str, Any]], path: Path, env_id: str, window: int, threshold: float | None, budget: int
) -> None:
    """Write the learning curves of ``runs`` (one env's ``runs.json`` records) to ``path``: per method the ``window``-episode
    rolling mean, mean (line) +- std (shaded) over seeds, against training episodes up to ``budget``; ``threshold`` dashed."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    methods = list(dict.fromkeys(run_label(r) for r in runs))
    for index, method in enumerate(methods):
        curves = [rolling_mean(r["returns"], window) for r in runs if run_label(r) == method]
        length = max((c.size for c in curves), default=0)
        if length == 0:
            continue
        stacked = np.array(list(zip_longest(*curves, fillvalue=np.nan)))  # (episode, seed), NaN past a run's end
        mean, std = np.nanmean(stacked, axis=1), np.nanstd(stacked, axis=1)
        x = np.arange(1, length + 1)
        color = f"C{index % 10}"
        ax.plot(x, mean, color=color, linewidth=2, label=f"{method} ({len(curves)} seeds)")
        ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)
    if threshold is not None:
        ax.axhline(threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {threshold:g}")
    ax.set_xlim(1, max(budget, 2))
    ax.set_xlabel("training episodes (evaluation episodes are not charged)")
    ax.set_ylabel(f"return, {window}-episode rolling mean")
    ax.set_title(f"{env_id}: mean +- std over seeds, budget {budget} training episodes")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.savefig(path)


def plot_intervals(runs: Sequence[dict[str, Any]], path: Path, env_id: str, window: int) -> None:
    """Write the interval figure of ``runs`` (one env's records) to ``path``: a panel per figure of ``results.md``, a row
    per method, the IQM over seeds with its 95 % interval (dot, thick bar), the mean +- std (diamond, thin bar) below."""
    from matplotlib.figure import Figure

    methods = list(dict.fromkeys(run_label(r) for r in runs))
    stats = {m: [summarize(r["returns"], window) for r in runs if run_label(r) == m] for m in methods}
    panels = (
        ("mean", "mean return over training"),
        ("best", f"best {window}-ep. rolling mean"),
        ("final", f"final (last {window} ep.)"),
    )
    fig = Figure(figsize=(12, 1.2 + 0.6 * len(methods)), dpi=120, layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    labels = [f"{m} ({len(stats[m])} run{'s' if len(stats[m]) != 1 else ''})" for m in methods]
    mean_style: dict[str, Any] = {"fmt": "D", "markerfacecolor": "white", "capsize": 3, "linewidth": 1}
    for ax, (key, title) in zip(axes, panels, strict=True):
        for row, method in enumerate(methods):
            values = np.asarray([s[key] for s in stats[method]], dtype=np.float64)
            color = f"C{row % 10}"
            iqm, low, high = iqm_interval(values)
            if not np.isnan(iqm):
                ax.plot([low, high], [row, row], color=color, linewidth=6, alpha=0.5, solid_capstyle="butt")
                ax.plot([iqm], [row], "o", color=color, label="IQM [95 % CI]" if row == 0 else None)
            finite = values[np.isfinite(values)]
            if finite.size:
                label = "mean +- std" if row == 0 else None
                ax.errorbar([finite.mean()], [row + 0.25], xerr=[finite.std()], color=color, label=label, **mean_style)
        ax.set_title(title)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(methods)), labels)
    axes[0].set_ylim(len(methods) - 0.5, -0.5)
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small")
    fig.suptitle(f"{env_id}: IQM with 95 % stratified bootstrap CI (rliable) and mean +- std over seeds")
    fig.savefig(path)


def salience_summary(history: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Aggregate the revision diagnostics of a run's history."""
    diags = [r["diagnostics"] for r in history if r.get("diagnostics")]
    regressions = [d for d in diags if d["regression"]]
    above = [d for d in diags if d["above_tau_c"]]
    fixations = sum(d["worst_fixation"] for d in regressions)
    return {
        "revisions": len(diags),
        "accepted": sum(d["accepted"] for d in diags),
        "regressions": len(regressions),
        "regression_rate": len(regressions) / len(diags) if diags else math.nan,
        "regressions_with_fixation": fixations,
        "fixation_share_of_regressions": fixations / len(regressions) if regressions else math.nan,
        "revisions_above_tau_c": len(above),
        "mean_l1_above_tau_c": float(np.mean([d["l1"] for d in above])) if above else math.nan,
        "mean_n_changed_above_tau_c": float(np.mean([d["n_changed"] for d in above])) if above else math.nan,
    }


def _fmt(x: float, pct: bool = False) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f} %" if pct else f"{x:.2f}"


def salience_table(rows: dict[str, dict[str, float]]) -> str:
    """A markdown table of :func:`salience_summary` results, one row per label (e.g. per variant)."""
    lines = [
        "| method | revisions | regressions | regression rate | regressions with worst-rollout fixation | "
        "revisions above tau_c | mean L1 edit above tau_c | mean params changed above tau_c |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, s in rows.items():
        lines.append(
            f"| {label} | {s['revisions']} | {s['regressions']} | {_fmt(s['regression_rate'], True)} | "
            f"{s['regressions_with_fixation']} ({_fmt(s['fixation_share_of_regressions'], True)}) | "
            f"{s['revisions_above_tau_c']} | {_fmt(s['mean_l1_above_tau_c'])} | {_fmt(s['mean_n_changed_above_tau_c'])} |"
        )
    return "\n".join(lines)
