"""Salience-bias diagnostics: how each Critic revision relates to the candidate it revised.

Per revision (kept in ``record["diagnostics"]`` and logged as ``diagnostics/...``):

- ``accepted``: the revision was committed (kept by keep-best, declined-unchanged, or always-commit);
- ``regression``: the revision's mean return is below the candidate's (only for evaluated revisions);
- ``n_changed``, ``max_change``, ``l1``: the size of the edit;
- ``worst_fixation``: the Critic's reply refers to the worst (lowest-return) rollout (a keyword heuristic
  over the reply text, see :data:`FIXATION_PATTERN`; a proxy, not a judgement of intent);
- ``above_tau_c``: the candidate already met the revision threshold.

The run summary follows the paper's salience table: regression rate, share of regressions with
worst-rollout fixation, and the mean edit size when the candidate was above ``tau_c``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

FIXATION_PATTERN = re.compile(
    r"\bworst\b"
    r"|\blowest[- ](?:return(?:s|ing)?|scor(?:e|ing))\b"
    r"|\b(?:episode|rollout|trajectory|run)s? with the (?:lowest|smallest|minimum|worst) (?:return|score)\b",
    re.I,
)
"""
References to the worst (lowest-return) episode in a Critic reply: ``worst``, ``lowest-return``,
``lowest-scoring``, ``the episode with the lowest return``. Generic words for failure (``failure``,
``failed``, ``fell``, ``falls``) are not matched: R2PO's own prompt asks the Critic to tell systematic from
occasional failures, so they say nothing about fixating on one bad rollout.
"""


def points_at_worst(text: str) -> bool:
    """Whether a Critic reply refers to the worst (lowest-return) episode (keyword heuristic, see :data:`FIXATION_PATTERN`)."""
    return bool(FIXATION_PATTERN.search(text or ""))


def edit_size(before: Sequence[float] | np.ndarray, after: Sequence[float] | np.ndarray) -> dict[str, float]:
    """Number of changed parameters, largest absolute change and L1 norm of the change."""
    delta = np.abs(np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64))
    changed = delta > 1e-12
    return {"n_changed": int(changed.sum()), "max_change": float(delta.max(initial=0.0)), "l1": float(delta.sum())}


def diagnose_revision(
    before: Sequence[float] | np.ndarray,
    after: Sequence[float] | np.ndarray,
    before_return: float,
    after_return: float | None,
    reply: str,
    accepted: bool,
    above_tau_c: bool,
) -> dict[str, Any]:
    """The diagnostics of one revision (see the module docstring)."""
    return {
        "accepted": bool(accepted),
        "regression": bool(after_return is not None and after_return < before_return),
        **edit_size(before, after),
        "worst_fixation": points_at_worst(reply),
        "above_tau_c": bool(above_tau_c),
    }


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
