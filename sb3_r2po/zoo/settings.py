"""The settings table ``sb3_r2po/zoo/configs/r2po.yml`` (R2PO's zoo hyperparameter file, the RL Zoo page of the
documentation): an env entry's settings, its ``variants:`` and ``policies:`` layers, resolved by :func:`apply_variant`
wherever a variant is built from the file (the zoo, ``compare``, ``ablate``, ``R2PO(policy, env_id)``). Nothing here
imports ``rl_zoo3`` at import time."""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import yaml

from sb3_r2po.r2po.arguments import VARIANTS, WITHOUT_TABLE

VARIANTS_KEY = "variants"  # an env entry's per-variant overrides, {variant: {key: value}}
HISTORY_EXCERPTS_KEY = "history_excerpts"  # the reference's traj_history_last_n
POLICIES_KEY = "policies"  # an env entry's settings per policy alias: {policy: {key: value, ..., variants: {...}}}
MERGED_KEYS = ("env_kwargs",)  # merged with the entry's (a variant's episode cap keeps FrozenLake's is_slippery)
DEFAULT_VARIANT = "r2po"
SETTINGS_FILE = Path(__file__).resolve().parent / "configs" / "r2po.yml"  # R2PO(...) reads it whatever the env var says
REFERENCE_KEYS = tuple(WITHOUT_TABLE)


def _layer(entry: Mapping[str, Any], key: str, noun: str, name: str | None, known: Collection[str] = ()) -> dict[str, Any]:
    """``entry[key][name]`` (``{}`` when absent); ``ValueError`` for a malformed table or, with ``known``, unknown names."""
    table = entry.get(key) or {}
    if not isinstance(table, Mapping):
        raise ValueError(f"'{key}' must map {noun} names to settings, got {table!r}")
    unknown = sorted(str(other) for other in table if other not in known) if known else []
    if unknown:
        raise ValueError(f"'{key}' names unknown {noun}s {unknown}; choose from {sorted(known)}")
    layer = table.get(name) or {} if name is not None else {}
    if not isinstance(layer, Mapping):
        raise ValueError(f"'{key}: {name}' must be a mapping of settings, got {layer!r}")
    return dict(layer)


def apply_variant(
    entry: Mapping[str, Any], variant: str | None = None, explicit: Iterable[str] = (), policy: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """An env entry of ``r2po.yml`` (not modified) resolved for one variant and policy.

    :param entry: The env entry.
    :param variant: The variant; ``None``: the entry's ``variant`` (``r2po`` when it sets none).
    :param explicit: Keys the user set explicitly: the variant's and the policy's values for them are not applied.
    :param policy: The policy's short alias (``ProjectedMlp``); ``None``: the entry's ``policy``.
    :return: ``(settings, applied)``: the entry without ``variants:`` and ``policies:``, the variant's and then the
        policy's settings applied (mappings of :data:`MERGED_KEYS` merged into the entry's); the settings applied.
    """
    explicit = set(explicit)
    settings = {key: value for key, value in entry.items() if key not in (VARIANTS_KEY, POLICIES_KEY)}
    name = variant if variant is not None else str(settings.get("variant") or DEFAULT_VARIANT)
    policy = policy if policy is not None else settings.get("policy")
    applied: dict[str, Any] = {}
    overrides = _layer(entry, VARIANTS_KEY, "variant", name, VARIANTS)
    policy_layer = _layer(entry, POLICIES_KEY, "policy", None if policy is None else str(policy))
    overrides |= {key: value for key, value in policy_layer.items() if key != VARIANTS_KEY}
    overrides |= _layer(policy_layer, VARIANTS_KEY, "variant", name, VARIANTS)  # the policy's settings for the variant
    for key, value in overrides.items():
        if key not in explicit:
            merge = key in MERGED_KEYS and isinstance(value, Mapping) and isinstance(settings.get(key), Mapping)
            settings[key] = applied[key] = {**settings[key], **value} if merge else value
    return settings, applied


@functools.lru_cache(maxsize=64)
def _read_entries(path: str, mtime_ns: int) -> dict[str, Any]:
    return yaml.safe_load(Path(path).read_text()) or {}


def read_entries(path: str | Path) -> dict[str, Any]:
    """A hyperparameter file's entries, read once per modification (not to be modified)."""
    return _read_entries(str(path), Path(path).stat().st_mtime_ns)


def reference_settings(env_id: str | None, variant: str, policy: str | None = None) -> dict[str, Any] | None:
    """The reference's settings of ``variant`` on ``env_id`` from :data:`SETTINGS_FILE` (:func:`apply_variant`).

    :param env_id: The env id; ``None`` (an env without a spec) gives ``None``.
    :param variant: The variant; one the table does not name gets the env entry's own (R2PO's) settings.
    :param policy: The policy's short alias (``ProjectedMlp``): its ``policies:`` settings apply; ``None``: none.
    :return: The :data:`REFERENCE_KEYS` the entry sets (a ``None`` value: the table leaves it to R2PO's derivation),
        plus ``env_kwargs`` when the entry has them; ``None`` for an env the table has no entry for.
    """
    entry = read_entries(SETTINGS_FILE).get(env_id) if env_id not in (None, "default") else None
    if not isinstance(entry, Mapping):
        return None
    settings, _ = apply_variant(entry, variant, policy=policy)
    resolved = {key: settings[key] for key in REFERENCE_KEYS if key in settings}
    if isinstance(settings.get("env_kwargs"), Mapping):
        resolved["env_kwargs"] = dict(settings["env_kwargs"])
    return resolved


def reference_env(env_id: str, variant: str) -> Any:
    """``env_id`` made with the table's ``env_kwargs`` for ``variant`` as SB3 makes an env; ``env_id`` when it has none."""
    env_kwargs = (reference_settings(env_id, variant) or {}).get("env_kwargs")
    if not env_kwargs:
        return env_id
    try:
        return gym.make(env_id, render_mode="rgb_array", **env_kwargs)
    except TypeError:  # an env without render_mode, as SB3's maybe_make_env
        return gym.make(env_id, **env_kwargs)


def default_history_excerpts(env_id: str | None, variant: str, tabular: bool) -> int:
    """``history_excerpts`` when it is ``None``: the table's for ``env_id``, else 100 on a tabular task and 5."""
    excerpts = (reference_settings(env_id, variant) or {}).get(HISTORY_EXCERPTS_KEY)
    return int(excerpts) if excerpts is not None else (100 if tabular else 5)


def install_variant_settings(r2po_class: type) -> None:
    """Make RL Zoo's ``ExperimentManager`` resolve the entry of an algorithm that is ``r2po_class`` (:func:`apply_variant`)
    after reading the hyperparameters; ``--hyperparams`` keys and ``--env-kwargs`` keep the user's values. Idempotent."""
    import rl_zoo3.exp_manager
    import rl_zoo3.utils

    manager_class = rl_zoo3.exp_manager.ExperimentManager
    if getattr(manager_class.read_hyperparameters, "sb3_r2po_variants", False):
        return
    original = manager_class.read_hyperparameters

    def read_hyperparameters(self: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        hyperparams, saved_hyperparams = original(self)
        algo_class = rl_zoo3.utils.ALGOS.get(self.algo)
        if not (isinstance(algo_class, type) and issubclass(algo_class, r2po_class)):
            return hyperparams, saved_hyperparams
        explicit = set(self.custom_hyperparams or {})
        if self.env_kwargs:  # --env-kwargs (or a caller's env_kwargs): the zoo lets them win over the file's
            explicit.add("env_kwargs")
        variant = str(hyperparams.get("variant") or DEFAULT_VARIANT)
        resolved, applied = apply_variant(hyperparams, variant, explicit)
        kept = sorted(set(apply_variant(hyperparams, variant)[1]) & explicit)
        if applied or kept:
            shown = ", ".join(f"{key}={value!r}" for key, value in applied.items()) or "none"
            note = f" (yours kept: {', '.join(kept)})" if kept else ""
            print(f"Settings of variant {variant!r} for this env ({VARIANTS_KEY} of the config): {shown}{note}")
        return resolved, OrderedDict((key, resolved[key]) for key in sorted(resolved))

    read_hyperparameters.sb3_r2po_variants = True  # type: ignore[attr-defined]  # the mark read above
    manager_class.read_hyperparameters = read_hyperparameters  # type: ignore[method-assign]
