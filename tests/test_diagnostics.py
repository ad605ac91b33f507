"""The salience diagnostics as functions: edit sizes, one revision's flags, the run summary and its table."""

import math

import pytest

from sb3_r2po.experiments.report import salience_summary, salience_table
from sb3_r2po.r2po.roles import diagnose_revision, edit_size, points_at_worst


def test_edit_size_counts_small_changes_and_separates_max_from_l1() -> None:
    assert edit_size([0.0, 1.0, 2.0, 3.0], [0.05, 1.0, 1.0, 3.5]) == {"n_changed": 3, "max_change": 1.0, "l1": 1.55}
    assert edit_size([1.0, 2.0], [1.0, 2.0]) == {"n_changed": 0, "max_change": 0.0, "l1": 0.0}


def test_a_tie_is_no_regression_and_an_unevaluated_revision_none() -> None:
    tie = diagnose_revision([0.0], [1.0], 5.0, 5.0, "", accepted=True, above_tau_c=False)
    assert tie["regression"] is False
    assert diagnose_revision([0.0], [1.0], 5.0, 4.9, "", accepted=False, above_tau_c=False)["regression"] is True
    assert diagnose_revision([0.0], [0.0], 5.0, None, "", accepted=True, above_tau_c=True)["regression"] is False


@pytest.mark.parametrize(
    "reply",
    ["The lowest-scoring episode drifts.", "The run with the minimum return falls.", "Rollouts with the minimum score"],
)
def test_fixation_phrasings(reply: str) -> None:
    assert points_at_worst(reply)


def _diag(accepted: bool, regression: bool, fixation: bool, above: bool, l1: float, n_changed: int) -> dict:
    return {
        "diagnostics": {
            "accepted": accepted,
            "regression": regression,
            "n_changed": n_changed,
            "max_change": l1,
            "l1": l1,
            "worst_fixation": fixation,
            "above_tau_c": above,
        }
    }


def test_salience_summary_and_table_of_a_hand_made_history() -> None:
    history = [
        {"kind": "warmup"},  # no diagnostics: not a revision
        _diag(accepted=True, regression=False, fixation=True, above=True, l1=1.0, n_changed=1),
        _diag(accepted=False, regression=True, fixation=True, above=False, l1=2.0, n_changed=2),
        _diag(accepted=False, regression=True, fixation=False, above=True, l1=3.0, n_changed=4),
        _diag(accepted=True, regression=False, fixation=False, above=False, l1=0.5, n_changed=1),
    ]
    summary = salience_summary(history)
    assert summary == {
        "revisions": 4,
        "accepted": 2,
        "regressions": 2,
        "regression_rate": 0.5,
        "regressions_with_fixation": 1,
        "fixation_share_of_regressions": 0.5,
        "revisions_above_tau_c": 2,
        "mean_l1_above_tau_c": 2.0,
        "mean_n_changed_above_tau_c": 2.5,
    }
    empty = salience_summary([{"kind": "warmup"}])
    assert empty["revisions"] == 0 and math.isnan(empty["regression_rate"]) and math.isnan(empty["mean_l1_above_tau_c"])
    table = salience_table({"r2po": summary, "none": empty})
    assert "| r2po | 4 | 2 | 50.0 % | 1 (50.0 %) | 2 | 2.00 | 2.50 |" in table
    assert "| none | 0 | 0 | - | 0 (-) | 0 | - | - |" in table
