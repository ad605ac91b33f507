"""
Which hyperparameters a run gets: the zoo's hyperparameter files, as ``python -m sb3_r2po.zoo train`` reads them.

Baselines read the zoo's tuned ``hyperparams/<algo>.yml``, or ours in ``sb3_r2po/zoo/configs/`` for the env ids the zoo lacks
(:func:`sb3_r2po.zoo.resolve_train_args` picks the file). R2PO and its variants read ``sb3_r2po/zoo/configs/r2po.yml`` (the
paper's per-env settings; a variant gets the reference's own settings for the env from the entry's ``variants:``,
:func:`sb3_r2po.zoo.settings.apply_variant`), with the run's ``llm``, ``variant`` and ``max_episodes = budget`` on top.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sb3_r2po.prompts import prompt_preset
from sb3_r2po.variants import VARIANTS
from sb3_r2po.zoo import ALGO_NAME, config_env_ids, config_file, resolve_train_args
from sb3_r2po.zoo.settings import apply_variant

BASELINES: dict[str, str] = {
    "ppo": "stable-baselines3",
    "a2c": "stable-baselines3",
    "dqn": "stable-baselines3",
    "sac": "stable-baselines3",
    "td3": "stable-baselines3",
    "trpo": "sb3-contrib",
    "ars": "sb3-contrib",
}
"""Baseline methods (the zoo's ``--algo`` names) and the package that implements them."""

R2PO_METHODS: tuple[str, ...] = tuple(VARIANTS)
"""R2PO and its variants (``r2po``, ``props``, ``props_plus``, ...): each is R2PO with that ``variant``."""

IGNORE_STOP = ("ars",)
"""Algorithms whose ``learn()`` ignores a callback's ``False``: they are stopped with an exception."""


def hyperparams_file(algo: str, env_id: str) -> Path:
    """
    The hyperparameter file the zoo entry point would read for ``--algo algo --env env_id``: ours
    (``sb3_r2po/zoo/configs/<algo>.yml``) for R2PO and for the env ids we ship, the zoo's own ``hyperparams/<algo>.yml``
    otherwise.
    """
    resolved = resolve_train_args(["--algo", algo, "--env", env_id])
    if resolved[0] == "--conf-file":
        return Path(resolved[1])
    import rl_zoo3

    return Path(rl_zoo3.__file__).resolve().parent / "hyperparams" / f"{algo}.yml"


@functools.lru_cache(maxsize=64)
def _entries(path: str, mtime_ns: int) -> dict[str, Any]:
    """A hyperparameter file's entries, read once per version of the file (``mtime_ns``)."""
    import yaml

    with open(path) as file:
        return yaml.safe_load(file) or {}


def zoo_entry(path: Path, env_id: str) -> dict[str, Any]:
    """The entry of a zoo hyperparameter file for ``env_id`` (the ``default`` entry when there is none), as the zoo
    picks it (Atari's ``atari`` entry is not handled: these are not Atari comparisons). A copy: the caller may change it."""
    entries = _entries(str(path), Path(path).stat().st_mtime_ns)
    return copy.deepcopy(dict(entries.get(env_id, entries.get("default", {}))))


def r2po_entry(env_id: str, variant: str | None = None) -> dict[str, Any]:
    """
    The settings of ``variant`` for ``env_id`` in ``sb3_r2po/zoo/configs/r2po.yml`` (the ``default`` entry for other envs): the
    entry with the settings its ``variants:`` mapping gives ``variant`` (the reference's own settings for a baseline or
    ablation; :func:`sb3_r2po.zoo.settings.apply_variant`), without the mapping itself.

    :param env_id: The gymnasium id.
    :param variant: The R2PO variant; ``None``: the entry's own (``r2po``).
    """
    path = config_file(ALGO_NAME)
    if path is None:
        raise FileNotFoundError("sb3_r2po/zoo/configs/r2po.yml not found")
    return apply_variant(zoo_entry(path, env_id), variant)[0]


def is_tabular(env_id: str) -> bool:
    """Whether ``env_id``'s observations are ``Discrete`` (R2PO's ``Tabular`` policy) rather than a ``Box``."""
    import gymnasium as gym
    from gymnasium import spaces

    env = gym.make(env_id)
    try:
        return isinstance(env.observation_space, spaces.Discrete)
    finally:
        env.close()


def method_algo(method: str) -> str:
    """The zoo ``--algo`` of a method: ``r2po`` for R2PO and its variants, the method itself for a baseline."""
    if method in R2PO_METHODS:
        return ALGO_NAME
    if method in BASELINES:
        return method
    raise ValueError(f"unknown method {method!r}: choose from {', '.join([*R2PO_METHODS, *BASELINES])}")


def episode_cap(env_id: str, variant: str | None = None) -> tuple[int, bool]:
    """
    The episode length cap of an R2PO ``variant`` (``None``: R2PO's entry, the cap of the comparison's baselines) in
    ``sb3_r2po/zoo/configs/r2po.yml``: the ``max_episode_steps`` of its ``env_kwargs`` (which replaces the env's time limit;
    the reference's 100 steps of six Maze variants), else the env's own time limit, else its ``max_episode_steps``
    (default 1000), which every method then gets as a ``TimeLimit``.

    :return: ``(cap, added)``; ``added`` is True when the cap is not the env's (an env without a time limit of its own
        and no ``env_kwargs`` cap): the caller adds it as ``env_kwargs``.
    """
    import gymnasium as gym

    entry = r2po_entry(env_id, variant)
    from_kwargs = (entry.get("env_kwargs") or {}).get("max_episode_steps")
    if from_kwargs:
        return int(from_kwargs), False
    own = gym.spec(env_id).max_episode_steps
    if own:
        return int(own), False
    return int(entry.get("max_episode_steps", 1000)), True


def default_threshold(env_id: str) -> float | None:
    """The threshold of "episodes to threshold": the env's ``reward_threshold``, else R2PO's ``target_return``."""
    import gymnasium as gym

    threshold = gym.spec(env_id).reward_threshold
    if threshold is None:
        threshold = r2po_entry(env_id).get("target_return")
    return None if threshold is None else float(threshold)


def r2po_overrides(
    method: str,
    env_id: str,
    llm: str,
    budget: int,
    n_eval_episodes: int | None,
    warmup_episodes: int | None,
    prompts: str | None = None,
) -> dict[str, Any]:
    """
    The R2PO hyperparameters set on top of ``sb3_r2po/zoo/configs/r2po.yml``: the LLM, the variant, the budget and, when
    ``prompts`` names a preset (:func:`sb3_r2po.prompts.prompt_preset`), its ten prompt parameters. They win over the
    file's settings for the variant (its ``variants:`` entry), as ``--hyperparams`` do in the zoo. The budget is an
    episode budget, the same for every algorithm of a comparison: ``max_episodes = budget`` stops the run, and
    ``max_iterations = budget`` (an iteration spends at least one episode) lifts the file's planned iteration count,
    which would otherwise stop R2PO before a budget larger than the paper's.
    """
    overrides: dict[str, Any] = {"llm": llm, "variant": method, "max_episodes": budget, "max_iterations": budget}
    if prompts is not None:
        overrides.update(prompt_preset(prompts))
    if n_eval_episodes is not None:
        overrides["n_eval_episodes"] = n_eval_episodes
    if warmup_episodes is not None:
        overrides["warmup_episodes"] = warmup_episodes
    if env_id not in config_env_ids(ALGO_NAME) and is_tabular(env_id):
        overrides["policy"] = "Tabular"  # the default entry is MlpLinear (Box observations)
    return overrides


def episodes_used(env_id: str, method: str, budget: int, settings: dict[str, Any] | None = None) -> int:
    """
    The episodes an R2PO ``method`` uses of ``budget``: its warm-up, then K episodes per evaluation while another fits
    (``warmup + K * floor((budget - warmup) / K)``; K and the warm-up from ``settings``, else the variant's entry).
    """
    settings = settings or {}
    entry = r2po_entry(env_id, method)
    k = int(settings.get("n_eval_episodes", entry.get("n_eval_episodes", 20)))
    warmup = int(settings.get("warmup_episodes", entry.get("warmup_episodes", 20)))
    return min(budget, warmup) + k * (max(0, budget - warmup) // k)


def comparison_env_settings(env_id: str, methods: Sequence[str], threshold: float | None) -> dict[str, Any]:
    """The per-env settings of a comparison: the threshold (``None``: :func:`default_threshold`) and the episode caps
    of its R2PO ``methods`` (:func:`episode_cap`)."""
    source = "given"
    if threshold is None:
        threshold = default_threshold(env_id)
        source = "the env's reward_threshold, else R2PO's target_return"
    cap, added = episode_cap(env_id)
    variant_caps = {m: episode_cap(env_id, m)[0] for m in dict.fromkeys(methods) if m in R2PO_METHODS}
    return {
        "threshold": threshold,
        "threshold_source": source,
        "episode_cap": cap,
        "episode_cap_source": "R2PO's max_episode_steps, added as a TimeLimit" if added else "the env's time limit",
        "variant_episode_caps": {m: c for m, c in variant_caps.items() if c != cap},
    }
