"""Checks of R2PO's constructor arguments, one function per parameter group; each bad value gets a ``ValueError``."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from gymnasium import spaces

from sb3_r2po.common.parameters import REPLY_STYLES
from sb3_r2po.common.rollouts import check_vec_env
from sb3_r2po.llm.resolve import check_llm_spec
from sb3_r2po.prompts.builder import PROMPT_LAYOUTS
from sb3_r2po.r2po.policies import CompactPolicy
from sb3_r2po.variants import get_variant
from sb3_r2po.zoo.settings import WITHOUT_TABLE

if TYPE_CHECKING:
    from sb3_r2po.r2po.r2po import R2PO

ON_UNUSABLE_REPLY = ("rerun", "reask")
"""What an unusable reply leads to: the reference's rerun of the iteration, or our re-ask and fallback."""

REPLY_READINGS = ("reference", "last_vector")
"""How replies are read: as the reference's agent of the variant reads them, or our last complete vector."""


def check_int(name: str, value: Any, low: int, optional: bool = False) -> None:
    """Raise a ``ValueError`` unless ``value`` is an integer >= ``low`` (or ``None`` when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        allowed = f"an integer >= {low}" + (" or None" if optional else "")
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number (an int or float, numpy's included; not a bool, not a string)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_number(name: str, value: Any, low: float = -math.inf, strict: bool = False, optional: bool = False) -> None:
    """Raise a ``ValueError`` unless ``value`` is a finite number >= ``low`` (> with ``strict``; or ``None``)."""
    if value is None and optional:
        return
    if not is_number(value) or not math.isfinite(value) or value < low or (strict and value == low):
        allowed = f"a finite number {'>' if strict else '>='} {low:g}" if low > -math.inf else "a finite number"
        raise ValueError(f"{name} must be {allowed}{' or None' if optional else ''}, got {value!r}")


def check_flag(name: str, value: Any) -> None:
    """Raise a ``ValueError`` unless ``value`` is ``True`` or ``False``."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def check_path(name: str, value: Any) -> None:
    """Raise a ``ValueError`` unless ``value`` is a path (a string or ``os.PathLike``) or ``None``."""
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"{name} must be a path (str or os.PathLike) or None, got {value!r}")


def check_policy(policy: Any, aliases: Mapping[str, type], env: Any = None) -> None:
    """Raise a ``ValueError`` unless ``policy`` is one of the policy names or a policy class, or when it does not take
    the observation space of ``env`` (an env or a VecEnv; an env id is checked once made): before SB3 wraps the env,
    so that the error names the env's own space, not a wrapper SB3 adds (``VecTransposeImage`` for images)."""
    if isinstance(policy, str) and policy not in aliases:
        raise ValueError(f"Unknown policy {policy!r}; R2PO accepts {sorted(aliases)} or a CompactPolicy class")
    if not isinstance(policy, (str, type)):
        raise ValueError(f"policy must be one of {sorted(aliases)} or a CompactPolicy class, got {policy!r}")
    policy_class = aliases[policy] if isinstance(policy, str) else policy
    space = getattr(env, "observation_space", None)
    if isinstance(space, spaces.Space) and issubclass(policy_class, CompactPolicy):
        policy_class.check_observation_space(space)


def check_budget(
    n_eval_episodes: int, warmup_episodes: int, max_episodes: int | None, max_episode_steps: int, max_iterations: int | None
) -> None:
    """The budget: K, the warm-up, the cap on episodes, the episode length cap and the planned iterations."""
    check_int("n_eval_episodes", n_eval_episodes, 1)
    check_int("warmup_episodes", warmup_episodes, 0)
    check_int("max_episodes", max_episodes, 1, optional=True)
    check_int("max_episode_steps", max_episode_steps, 1)
    check_int("max_iterations", max_iterations, 1, optional=True)


def check_search_space(param_bounds: tuple[float, float] | None, param_decimals: int, step_size: float) -> None:
    """The parameter space of a continuous policy (``param_bounds=None``: the policy's own), and the suggested step."""
    check_int("param_decimals", param_decimals, 0)
    check_number("step_size", step_size, 0.0, strict=True)
    if param_bounds is None:
        return
    pair = isinstance(param_bounds, (tuple, list, np.ndarray)) and len(param_bounds) == 2
    if not pair or not all(is_number(b) and math.isfinite(b) for b in param_bounds):
        raise ValueError(f"param_bounds must be two finite numbers (low, high), got {param_bounds!r}")
    if not float(param_bounds[0]) < float(param_bounds[1]):
        raise ValueError(f"param_bounds are empty or reversed: {param_bounds}")


def check_prompts(
    reply_style: str,
    max_trajectory_steps: int | None,
    trajectory_digits: int,
    history_best_k: int | None,
    history_recent: int | None,
    history_slack: int,
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
    check_int("history_slack", history_slack, 0)
    if history_slack and history_best_k is None and history_recent is None:
        raise ValueError("history_slack needs a compressed history (history_best_k or history_recent)")
    check_int("history_excerpts", history_excerpts, 0, optional=True)
    check_number("target_return", target_return, optional=True)
    check_number("tau_c", tau_c, optional=True)


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


SettingsSource = Literal["given", "reference", "derived"]
"""Where a setting came from: the constructor's argument, the settings table, or R2PO's derivation."""


def policy_alias(policy: str | type, aliases: Mapping[str, type]) -> str | None:
    """The short alias of a policy name or class (``ProjectedMlpPolicy`` -> ``ProjectedMlp``): the first alias of its
    class, which names it in the settings table's ``policies:``; ``None`` for a class without an alias."""
    cls = aliases.get(policy) if isinstance(policy, str) else policy
    return next((name for name, alias_class in aliases.items() if alias_class is cls), None)


def resolve_settings(
    given: Mapping[str, Any], table: Mapping[str, Any] | None, env_id: str | None = None
) -> tuple[dict[str, Any], dict[str, SettingsSource]]:
    """
    The settings of :data:`~sb3_r2po.zoo.settings.WITHOUT_TABLE`: an argument given (not ``None``) wins, then the
    table's value for the env, variant and policy (:func:`~sb3_r2po.zoo.settings.reference_settings`; not ``None``),
    then R2PO's value for an env the table lacks.

    :param given: The constructor's arguments by name (``None``: not given); with ``verbose >= 1`` (and
        ``_init_setup_model``: not a load) the line of :func:`describe_settings` is printed.
    :param table: :func:`sb3_r2po.zoo.settings.reference_settings` of the env and variant (``None``: not in the table,
        or a model being loaded, whose saved values follow).
    :param env_id: The env's id, for that line.
    :return: ``(values, sources)``, both keyed by the names of :data:`~sb3_r2po.zoo.settings.WITHOUT_TABLE`.
    """
    values: dict[str, Any] = {}
    sources: dict[str, SettingsSource] = {}
    for name, derived in WITHOUT_TABLE.items():
        if given.get(name) is not None:
            values[name], sources[name] = given[name], "given"
        elif table is not None and table.get(name) is not None:
            values[name], sources[name] = table[name], "reference"
        else:
            values[name], sources[name] = derived, "derived"
    if given.get("verbose", 0) >= 1 and given.get("_init_setup_model", True):
        print(describe_settings(env_id, str(given.get("variant", "r2po")), values, sources), flush=True)
    return values, sources


def describe_settings(
    env_id: str | None, variant: str, values: Mapping[str, Any], sources: Mapping[str, SettingsSource]
) -> str:
    """The line ``verbose >= 1`` prints at construction: the settings of :func:`resolve_settings` by source."""
    groups = {"reference": "the reference's (settings table)", "given": "given", "derived": "derived"}
    parts = []
    for source, title in groups.items():
        names = [name for name in WITHOUT_TABLE if sources.get(name) == source]
        if names:
            shown = ", ".join(name if values[name] is None else f"{name}={values[name]!r}" for name in names)
            parts.append(f"{title}: {shown}")
    return f"R2PO settings for {env_id or 'an env without an id'}, variant {variant}: " + "; ".join(parts)


FLAGS = (
    "fold_repeated_steps",
    "search_sees_task",
    "critic_selection_hints",
    "extra_statistics",
    "skip_unchanged_revisions",
    "reject_duplicates",
    "reject_cut_off_replies",
    "stop_at_target",
    "racing",
)
"""R2PO's on/off options."""


def check(model: R2PO, llm_given: bool = True) -> None:
    """
    Check the constructor arguments of ``model``, group by group (``llm_given``: also check ``model.llm``); warn when
    the episode budget cannot pay for one iteration.
    """
    m = model
    for name in FLAGS:
        check_flag(name, getattr(m, name))
    check_path("checkpoint_dir", m.checkpoint_dir)
    check_path("prompt_template_dir", m.prompt_template_dir)
    check_int("seed", m.seed, 0, optional=True)
    check_budget(m.n_eval_episodes, m.warmup_episodes, m.max_episodes, m.max_episode_steps, m.max_iterations)
    check_search_space(m.param_bounds, m.param_decimals, m.step_size)
    history = (m.history_best_k, m.history_recent, m.history_slack, m.history_excerpts)
    check_prompts(m.reply_style, m.max_trajectory_steps, m.trajectory_digits, *history, m.target_return, m.tau_c)
    if m.prompt_layout not in PROMPT_LAYOUTS:
        raise ValueError(f"prompt_layout must be one of {PROMPT_LAYOUTS}, got {m.prompt_layout!r}")
    check_llm_use(m.temperature, m.max_llm_retries, m.on_unusable_reply, m.max_iteration_attempts)
    if m.reply_reading not in REPLY_READINGS:
        raise ValueError(f"reply_reading must be one of {REPLY_READINGS}, got {m.reply_reading!r}")
    if m.clip_actions is not None:
        check_flag("clip_actions", m.clip_actions)
    check_racing(m.racing_chunk, m.racing_z)
    if m.llm is not None and llm_given:
        check_llm_spec(m.llm)
    get_variant(m.variant)
    if m.env is not None:
        check_vec_env(m.env)
    if m.max_episodes is not None and m.max_episodes < m.warmup_episodes + m.n_eval_episodes:
        warnings.warn(
            f"R2PO: max_episodes={m.max_episodes} cannot pay for one iteration after the warm-up "
            f"(warmup_episodes={m.warmup_episodes} + n_eval_episodes={m.n_eval_episodes}): learn() runs the warm-up only",
            RuntimeWarning,
            stacklevel=3,
        )
