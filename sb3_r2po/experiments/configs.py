"""
Which hyperparameters a run gets: the zoo's files as ``python -m sb3_r2po.zoo train`` reads them (ours in
``sb3_r2po/zoo/configs/`` for R2PO and the env ids the zoo lacks), with the run's ``llm``, ``variant`` and
``max_episodes = budget`` on top for R2PO.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from sb3_r2po.prompts import prompt_preset
from sb3_r2po.r2po.arguments import VARIANTS
from sb3_r2po.zoo import ALGO_NAME, config_env_ids, config_file, resolve_train_args
from sb3_r2po.zoo.settings import apply_variant, read_entries

_SB3, _CONTRIB = ("ppo", "a2c", "dqn", "sac", "td3"), ("trpo", "ars")
BASELINES: dict[str, str] = {**dict.fromkeys(_SB3, "stable-baselines3"), **dict.fromkeys(_CONTRIB, "sb3-contrib")}
R2PO_METHODS: tuple[str, ...] = tuple(VARIANTS)  # each is R2PO with that variant
IGNORE_STOP = ("ars",)  # their learn() ignores a callback's False: stopped with an exception


def hyperparams_file(algo: str, env_id: str) -> Path:
    """The file ``python -m sb3_r2po.zoo train --algo algo --env env_id`` reads: ours or the zoo's ``<algo>.yml``."""
    resolved = resolve_train_args(["--algo", algo, "--env", env_id])
    if resolved[0] == "--conf-file":
        return Path(resolved[1])
    import rl_zoo3

    return Path(rl_zoo3.__file__).resolve().parent / "hyperparams" / f"{algo}.yml"


def zoo_entry(path: Path, env_id: str) -> dict[str, Any]:
    """A copy of the file's entry for ``env_id`` (else ``default``; Atari's ``atari`` entry is not handled)."""
    entries = read_entries(path)
    return copy.deepcopy(dict(entries.get(env_id, entries.get("default", {}))))


def r2po_entry(env_id: str, variant: str | None = None) -> dict[str, Any]:
    """``env_id``'s entry of ``sb3_r2po/zoo/configs/r2po.yml`` (else ``default``) resolved for ``variant`` (``None``:
    the entry's own) by :func:`sb3_r2po.zoo.settings.apply_variant`."""
    path = config_file(ALGO_NAME)
    if path is None:
        raise FileNotFoundError("sb3_r2po/zoo/configs/r2po.yml not found")
    return apply_variant(zoo_entry(path, env_id), variant)[0]


def method_algo(method: str) -> str:
    """The zoo ``--algo`` of a method (``r2po`` for the variants); ``ValueError`` for an unknown one."""
    if method in R2PO_METHODS:
        return ALGO_NAME
    if method in BASELINES:
        return method
    raise ValueError(f"unknown method {method!r}: choose from {', '.join([*R2PO_METHODS, *BASELINES])}")


def episode_cap(env_id: str, variant: str | None = None) -> tuple[int, bool]:
    """
    The episode cap of an R2PO ``variant`` (``None``: R2PO's, the baselines'): its ``env_kwargs``' ``max_episode_steps``,
    else the env's time limit, else its entry's ``max_episode_steps`` (default 1000).

    :return: ``(cap, added)``; ``added``: the env has no cap of its own, and the caller adds it as ``env_kwargs``.
    """
    entry = r2po_entry(env_id, variant)
    from_kwargs = (entry.get("env_kwargs") or {}).get("max_episode_steps")
    if from_kwargs:
        return int(from_kwargs), False
    own = gym.spec(env_id).max_episode_steps
    if own:
        return int(own), False
    return int(entry.get("max_episode_steps", 1000)), True


def r2po_settings(
    n_eval_episodes: int | None = None, warmup_episodes: int | None = None, prompts: str | None = None
) -> dict[str, Any]:
    """R2PO's settings from a command line's options: a prompt preset's parameters, K and the warm-up (those given)."""
    settings: dict[str, Any] = dict(prompt_preset(prompts)) if prompts is not None else {}
    if n_eval_episodes is not None:
        settings["n_eval_episodes"] = n_eval_episodes
    if warmup_episodes is not None:
        settings["warmup_episodes"] = warmup_episodes
    return settings


def r2po_overrides(method: str, env_id: str, llm: str, budget: int) -> dict[str, Any]:
    """
    The R2PO hyperparameters over ``sb3_r2po/zoo/configs/r2po.yml`` (as the zoo's ``--hyperparams``) beneath a run's
    own settings: the LLM, the variant, ``max_episodes = budget``, ``max_iterations = budget`` (lifts the file's planned
    count), and ``Tabular`` for a Discrete env the file lacks.
    """
    overrides: dict[str, Any] = {"llm": llm, "variant": method, "max_episodes": budget, "max_iterations": budget}
    if env_id not in config_env_ids(ALGO_NAME):  # the default entry is MlpLinear (Box observations)
        env = gym.make(env_id)
        if isinstance(env.observation_space, gym.spaces.Discrete):
            overrides["policy"] = "Tabular"
        env.close()
    return overrides


def episodes_used(env_id: str, method: str, budget: int, settings: dict[str, Any] | None = None) -> int:
    """The episodes an R2PO ``method`` uses of ``budget``: ``warmup + K * floor((budget - warmup) / K)``."""
    settings = settings or {}
    entry = r2po_entry(env_id, method)
    k = int(settings.get("n_eval_episodes", entry.get("n_eval_episodes", 20)))
    warmup = int(settings.get("warmup_episodes", entry.get("warmup_episodes", 20)))
    return min(budget, warmup) + k * (max(0, budget - warmup) // k)


def comparison_env_settings(env_id: str, methods: Sequence[str], threshold: float | None) -> dict[str, Any]:
    """A comparison's settings of one env: the threshold (``None``: the env's ``reward_threshold``, else R2PO's
    ``target_return``) and the episode caps."""
    source = "given"
    if threshold is None:
        threshold = gym.spec(env_id).reward_threshold
        threshold = r2po_entry(env_id).get("target_return") if threshold is None else threshold
        threshold = None if threshold is None else float(threshold)
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
