"""Salience-bias diagnostics of a run: the summary of its Critic revisions' diagnostics (each computed by
:func:`sb3_r2po.r2po.roles.diagnose_revision`), following the paper's salience table."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


def salience_summary(history: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Aggregate the revision diagnostics of a run's history."""
    diags = [r["diagnostics"] for r in history if r.get("diagnostics")]
    regressions = [d for d in diags if d["regression"]]
    above = [d for d in diags if d["above_tau_c"]]
    fixations = sum(d["worst_fixation"] for d in regressions)
    nan = float("nan")
    return {
        "revisions": len(diags),
        "accepted": sum(d["accepted"] for d in diags),
        "regressions": len(regressions),
        "regression_rate": len(regressions) / len(diags) if diags else nan,
        "regressions_with_fixation": fixations,
        "fixation_share_of_regressions": fixations / len(regressions) if regressions else nan,
        "revisions_above_tau_c": len(above),
        "mean_l1_above_tau_c": float(np.mean([d["l1"] for d in above])) if above else nan,
        "mean_n_changed_above_tau_c": float(np.mean([d["n_changed"] for d in above])) if above else nan,
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
