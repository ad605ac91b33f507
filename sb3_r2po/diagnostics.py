"""Salience-bias diagnostics of a run: the summary of its Critic revisions' diagnostics (each computed by
:func:`sb3_r2po.r2po.roles.diagnose_revision`), following the paper's salience table."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np


def salience_summary(history: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Aggregate the revision diagnostics of a run's history."""
    diags = [r["diagnostics"] for r in history if r.get("diagnostics")]
    regressions = [d for d in diags if d["regression"]]
    above = [d for d in diags if d["above_tau_c"]]
    return {
        "revisions": len(diags),
        "accepted": sum(d["accepted"] for d in diags),
        "regressions": len(regressions),
        "regression_rate": len(regressions) / len(diags) if diags else float("nan"),
        "regressions_with_fixation": sum(d["worst_fixation"] for d in regressions),
        "fixation_share_of_regressions": (sum(d["worst_fixation"] for d in regressions) / len(regressions))
        if regressions
        else float("nan"),
        "revisions_above_tau_c": len(above),
        "mean_l1_above_tau_c": float(np.mean([d["l1"] for d in above])) if above else float("nan"),
        "mean_n_changed_above_tau_c": float(np.mean([d["n_changed"] for d in above])) if above else float("nan"),
    }


def salience_table(rows: dict[str, dict[str, float]]) -> str:
    """A markdown table of :func:`salience_summary` results, one row per label (e.g. per variant)."""

    def fmt(x: float, pct: bool = False) -> str:
        if x != x:  # NaN
            return "-"
        return f"{100 * x:.1f} %" if pct else f"{x:.2f}"

    lines = [
        "| method | revisions | regressions | regression rate | regressions with worst-rollout fixation | "
        "revisions above tau_c | mean L1 edit above tau_c | mean params changed above tau_c |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, s in rows.items():
        lines.append(
            f"| {label} | {s['revisions']} | {s['regressions']} | {fmt(s['regression_rate'], True)} | "
            f"{s['regressions_with_fixation']} ({fmt(s['fixation_share_of_regressions'], True)}) | "
            f"{s['revisions_above_tau_c']} | {fmt(s['mean_l1_above_tau_c'])} | {fmt(s['mean_n_changed_above_tau_c'])} |"
        )
    return "\n".join(lines)
