"""Checks of R2PO's constructor arguments, one function per parameter group; each bad value gets a ``ValueError``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from sb3_r2po.common.parameters import REPLY_STYLES
from sb3_r2po.common.rollouts import check_vec_env
from sb3_r2po.llm.resolve import check_llm_spec
from sb3_r2po.variants import get_variant

if TYPE_CHECKING:
    from sb3_r2po.r2po.r2po import R2PO

ON_UNUSABLE_REPLY = ("rerun", "reask")
"""What an unusable reply leads to: the reference's rerun of the iteration, or our re-ask and fallback."""


def check_int(name: str, value: Any, low: int, optional: bool = False) -> None:
    """Raise a ``ValueError`` unless ``value`` is an integer >= ``low`` (or ``None`` when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        allowed = f"an integer >= {low}" + (" or None" if optional else "")
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


def check_number(name: str, value: float | None, low: float, strict: bool = False, optional: bool = False) -> None:
    """Raise a ``ValueError`` unless ``value`` is a finite number >= ``low`` (> with ``strict``; or ``None``)."""
    if value is None and optional:
        return
    if value is None or not math.isfinite(value) or value < low or (strict and value == low):
        allowed = f"a finite number {'>' if strict else '>='} {low:g}" if low > -math.inf else "a finite number"
        raise ValueError(f"{name} must be {allowed}{' or None' if optional else ''}, got {value}")


def check_budget(n_eval_episodes: int, warmup_episodes: int, max_episodes: int | None, max_episode_steps: int) -> None:
    """The episode budget: K, the warm-up, the whole run's budget and the episode length cap."""
    check_int("n_eval_episodes", n_eval_episodes, 1)
    check_int("warmup_episodes", warmup_episodes, 0)
    check_int("max_episodes", max_episodes, 1, optional=True)
    check_int("max_episode_steps", max_episode_steps, 1)


def check_search_space(param_bounds: tuple[float, float], param_decimals: int, step_size: float) -> None:
    """The parameter space of a linear policy, and the step the prompts suggest."""
    check_int("param_decimals", param_decimals, 0)
    if len(param_bounds) != 2 or not all(math.isfinite(float(b)) for b in param_bounds):
        raise ValueError(f"param_bounds must be two finite numbers (low, high), got {param_bounds!r}")
    if not float(param_bounds[0]) < float(param_bounds[1]):
        raise ValueError(f"param_bounds are empty or reversed: {param_bounds}")
    check_number("step_size", step_size, 0.0, strict=True)


def check_prompts(
    reply_style: str,
    max_trajectory_steps: int | None,
    trajectory_digits: int,
    history_best_k: int | None,
    history_recent: int | None,
    history_excerpts: int | None,
    target_return: float | None,
    tau_c: float | None,
) -> None:
    """What the prompts show and how a reply is written."""
    if reply_style not in REPLY_STYLES:
        raise ValueError(f"reply_style must be one of {REPLY_STYLES}, got {reply_style!r}")
    check_int("max_trajectory_steps", max_trajectory_steps, 1, optional=True)
    check_int("trajectory_digits", trajectory_digits, 1)
    check_int("history_best_k", history_best_k, 0, optional=True)
    check_int("history_recent", history_recent, 0, optional=True)
    check_int("history_excerpts", history_excerpts, 0, optional=True)
    for name, value in (("target_return", target_return), ("tau_c", tau_c)):
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number or None, got {value}")


def check_llm_use(temperature: float, max_llm_retries: int, on_unusable_reply: str, max_iteration_attempts: int) -> None:
    """Sampling, and what an unusable reply leads to."""
    check_number("temperature", temperature, 0.0)
    check_int("max_llm_retries", max_llm_retries, 0)
    if on_unusable_reply not in ON_UNUSABLE_REPLY:
        raise ValueError(f"on_unusable_reply must be one of {ON_UNUSABLE_REPLY}, got {on_unusable_reply!r}")
    check_int("max_iteration_attempts", max_iteration_attempts, 1)


def check_racing(racing_chunk: int, racing_z: float) -> None:
    """Racing of challengers (:mod:`sb3_r2po.common.racing`)."""
    check_int("racing_chunk", racing_chunk, 2)  # the racing rule needs a standard deviation
    check_number("racing_z", racing_z, 0.0)


def check(model: R2PO, llm_given: bool = True) -> None:
    """Check the constructor arguments of ``model``, group by group (``llm_given``: also check ``model.llm``)."""
    m = model
    check_budget(m.n_eval_episodes, m.warmup_episodes, m.max_episodes, m.max_episode_steps)
    check_search_space(m.param_bounds, m.param_decimals, m.step_size)
    history = (m.history_best_k, m.history_recent, m.history_excerpts)
    check_prompts(m.reply_style, m.max_trajectory_steps, m.trajectory_digits, *history, m.target_return, m.tau_c)
    check_llm_use(m.temperature, m.max_llm_retries, m.on_unusable_reply, m.max_iteration_attempts)
    check_racing(m.racing_chunk, m.racing_z)
    if m.llm is not None and llm_given:
        check_llm_spec(m.llm)
    get_variant(m.variant)
    if m.env is not None:
        check_vec_env(m.env)
