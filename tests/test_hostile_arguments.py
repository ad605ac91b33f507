"""Every bad constructor argument gets a ValueError that names the argument, shows the value and says what is
accepted; a budget that cannot pay for one iteration gets a warning."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sb3_r2po import R2PO

NOT_A_NUMBER: list[Any] = ["0.5", "1", None, [1.0], True, float("nan"), float("inf"), -float("inf"), 1 + 1j]
NOT_AN_INTEGER: list[Any] = ["3", 2.5, None, True, [3], float("nan"), -1]
NOT_A_FLAG: list[Any] = ["yes", "False", 1, 0, None, 1.0, [True]]

CORPUS: list[tuple[str, Any, str]] = [
    *[("temperature", v, "temperature") for v in [*NOT_A_NUMBER, -0.1] if v is not None],  # None: 0.0, or the variant's
    *[("step_size", v, "step_size") for v in [*NOT_A_NUMBER, 0.0, -1.0] if v is not None],  # None: the table's, else 1.0
    *[("racing_z", v, "racing_z") for v in [*NOT_A_NUMBER, -1.0]],
    *[("target_return", v, "target_return") for v in ["500", [500], True, float("nan"), float("inf")]],
    *[("tau_c", v, "tau_c") for v in ["480", float("nan"), -float("inf"), b"1"]],
    *[
        ("param_bounds", v, "param_bounds")
        for v in [
            "ab",
            "-6,6",
            (1.0,),
            (1.0, 2.0, 3.0),
            ("a", "b"),
            (6.0, -6.0),
            (0.0, 0.0),
            (float("nan"), 1.0),
            (-float("inf"), 1.0),
            5,
        ]
    ],
    *[
        (name, v, name)
        for name in ("n_eval_episodes", "max_iteration_attempts", "trajectory_digits")
        for v in [*NOT_AN_INTEGER, 0]
        if v is not None or name != "n_eval_episodes"  # None: 20, or the variant's own
    ],
    *[("warmup_episodes", v, "warmup_episodes") for v in NOT_AN_INTEGER if v is not None],  # None: the table's, else 20
    *[("max_iterations", v, "max_iterations") for v in ["100", 2.5, True, 0, -5]],
    *[("max_episodes", v, "max_episodes") for v in ["10", 2.5, True, 0, -5]],
    *[("max_episode_steps", v, "max_episode_steps") for v in ["1000", 0, 1e3]],
    *[("param_decimals", v, "param_decimals") for v in ["1", 1.5, -1]],
    *[("racing_chunk", v, "racing_chunk") for v in [1, "5", 2.0]],
    *[("history_best_k", v, "history_best_k") for v in ["2", -1, 1.5]],
    *[("history_excerpts", v, "history_excerpts") for v in ["5", -1]],
    *[("max_llm_retries", v, "max_llm_retries") for v in ["1", -1, None]],
    *[("seed", v, "seed") for v in ["0", 1.5, -1, True, [0]]],
    *[(name, v, name) for name in ("racing", "stop_at_target", "reject_duplicates", "search_sees_task") for v in NOT_A_FLAG],
    *[("on_unusable_reply", v, "on_unusable_reply") for v in ["retry", "RERUN", None, 1]],
    *[("reply_reading", v, "reply_reading") for v in ["first", "Reference", None, 1]],
    *[(name, v, name) for name in ("reject_cut_off_replies", "clip_actions") for v in ["yes", 1, 0.0]],
    *[("reply_style", v, "reply_style") for v in ["json", None, "Indexed"]],
    *[("prompt_layout", v, "prompt_layout") for v in ["full", None, "Reference", ["compact"]]],
    *[("variant", v, "variant") for v in ["R2PO", "propss", "", None]],
    *[("checkpoint_dir", v, "checkpoint_dir") for v in [1, ["runs"], b"runs"]],
    *[("prompt_template_dir", v, "prompt_template_dir") for v in [1, 2.5]],
    *[("llm", v, "llm") for v in ["", "   ", "nonsense words", 42]],
]
"""(argument, bad value, what the message must name); docs/reliability.md cites its length."""


@pytest.mark.parametrize("name, value, named", CORPUS, ids=[f"{n}={v!r}"[:60] for n, v, _ in CORPUS])
def test_a_bad_argument_is_named_with_its_value(name: str, value: Any, named: str) -> None:
    settings = {"llm": "example", name: value}
    with pytest.raises((ValueError, TypeError)) as info:  # TypeError: an llm that is neither a string nor callable
        R2PO("MlpLinear", "CartPole-v1", **settings)
    message = str(info.value)
    assert named in message, message
    shown = repr(value) if not (isinstance(value, float) and math.isnan(value)) else "nan"
    assert shown in message or str(value) in message, message


@pytest.mark.parametrize("policy", ["Mlp", "MlpPolicy", "mlplinear", "Tabluar", ""])
def test_a_policy_name_typo_lists_the_accepted_names(policy: str) -> None:
    with pytest.raises(ValueError, match="MlpLinear") as info:
        R2PO(policy, "CartPole-v1", llm="example")
    assert repr(policy) in str(info.value) and "Tabular" in str(info.value)


@pytest.mark.parametrize("max_episodes, warns", [(5, True), (24, True), (25, False), (None, False)])
def test_a_budget_that_cannot_pay_for_one_iteration_warns(max_episodes: int | None, warns: bool) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        R2PO("MlpLinear", "CartPole-v1", llm="example", warmup_episodes=5, n_eval_episodes=20, max_episodes=max_episodes)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any("runs the warm-up only" in m for m in messages) == warns, messages


@pytest.mark.parametrize("value", [np.float32(0.5), np.int64(1), 1, 0.25])
def test_numpy_and_python_numbers_are_accepted(value: Any) -> None:
    assert R2PO("MlpLinear", "CartPole-v1", llm="example", temperature=value).settings.temperature == value


def test_paths_are_accepted_as_str_or_pathlike(tmp_path: Path) -> None:
    assert R2PO("MlpLinear", "CartPole-v1", llm="example", checkpoint_dir=tmp_path).settings.checkpoint_dir == tmp_path
