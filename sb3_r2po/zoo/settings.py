"""
The per-variant settings of ``zoo_configs/r2po.yml``: each env entry's ``variants:`` mapping.

The paper's baselines and ablations (``variant=props``, ``rep_traj``, ...) do not run with R2PO's settings in the
authors' reference code: each has its own config per env (``configs/<env>/<env>_<variant>.yaml`` of
``HWUDLabAIRoboticsResearch/R2PO``), with its own warm-up, target, episode cap, no ``tau_c`` (only R2PO has a revision
rule) and, for ``rep_traj``, ``always_critic`` and ``critic_only``, the number of recent history entries whose
rollout excerpts the prompt shows. An env entry of ``r2po.yml`` holds R2PO's own settings, and its ``variants:``
mapping holds, per variant, the keys whose values differ for that variant::

    R2PO/Maze3x3-v0:
      <<: *r2po-defaults
      target_return: 0.9
      ...
      variants:
        props: {tau_c: null, target_return: 1.0, env_kwargs: {max_episode_steps: 100}, ...}

:func:`apply_variant` resolves an entry for one variant; every place that builds a variant from the file uses it:
``python -m sb3_r2po.zoo train`` (through :func:`install_variant_settings`, which :func:`sb3_r2po.zoo.register_r2po`
calls), ``python -m sb3_r2po.compare`` and ``python -m sb3_r2po.ablate`` (through
:func:`sb3_r2po.compare.r2po_entry`). Settings the user gives explicitly (``--hyperparams``, ``--env-kwargs``, the
options of ``compare`` and ``ablate``) win over the variant's.

Nothing here imports ``rl_zoo3`` at import time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

VARIANTS_KEY = "variants"
"""The key of an env entry holding its per-variant overrides, ``{variant: {key: value}}``; never passed to R2PO."""

HISTORY_EXCERPTS_KEY = "history_excerpts"
"""
The number N of most recent history entries whose rollout excerpts the reference's ``rep_traj``, ``always_critic``
and ``critic_only`` prompts show (the reference's ``traj_history_last_n``; R2PO's ``history_excerpts``).
"""

MERGED_KEYS = ("env_kwargs",)
"""Keys whose mapping values are merged with the entry's (a variant's episode cap keeps FrozenLake's ``is_slippery``)."""

DEFAULT_VARIANT = "r2po"
"""The variant of an entry that sets none (R2PO's default)."""


def variant_overrides(entry: Mapping[str, Any], variant: str) -> dict[str, Any]:
    """
    The settings the entry's ``variants:`` mapping gives ``variant`` (empty when it gives none, as for ``r2po``).

    :raises ValueError: when ``variants:`` is not a mapping of variant names (:data:`sb3_r2po.variants.VARIANTS`) to
        mappings.
    """
    from sb3_r2po.variants import VARIANTS

    table = entry.get(VARIANTS_KEY) or {}
    if not isinstance(table, Mapping):
        raise ValueError(f"'{VARIANTS_KEY}' must map variant names to settings, got {table!r}")
    unknown = sorted(str(name) for name in table if name not in VARIANTS)
    if unknown:
        raise ValueError(f"'{VARIANTS_KEY}' names unknown variants {unknown}; choose from {sorted(VARIANTS)}")
    overrides = table.get(variant) or {}
    if not isinstance(overrides, Mapping):
        raise ValueError(f"'{VARIANTS_KEY}: {variant}' must be a mapping of settings, got {overrides!r}")
    return dict(overrides)


def apply_variant(
    entry: Mapping[str, Any], variant: str | None = None, explicit: Iterable[str] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """
    An env entry of ``r2po.yml`` resolved for one variant.

    :param entry: The env entry (with or without a ``variants:`` mapping); not modified.
    :param variant: The variant; ``None``: the entry's ``variant`` (``r2po`` when it sets none).
    :param explicit: Keys the user set explicitly: the variant's values for them are not applied.
    :return: ``(settings, applied)``: the entry without ``variants:``, with the variant's settings applied (mappings of
        :data:`MERGED_KEYS` merged into the entry's), and the settings that were applied.
    """
    explicit = set(explicit)
    settings = {key: value for key, value in entry.items() if key != VARIANTS_KEY}
    name = variant if variant is not None else str(settings.get("variant") or DEFAULT_VARIANT)
    applied: dict[str, Any] = {}
    for key, value in variant_overrides(entry, name).items():
        if key in explicit:
            continue
        base = settings.get(key)
        if key in MERGED_KEYS and isinstance(value, Mapping) and isinstance(base, Mapping):
            value = {**base, **value}
        settings[key] = applied[key] = value
    return settings, applied


def install_variant_settings() -> None:
    """
    Make RL Zoo's ``ExperimentManager`` resolve an R2PO entry's ``variants:`` (:func:`apply_variant`) after it has
    read the hyperparameters: the variant is the ``variant`` of the merged hyperparameters (the file's or
    ``--hyperparams variant:'props'``); the keys of ``--hyperparams`` (the manager's ``hyperparams``) and, when given,
    ``--env-kwargs`` (the manager's ``env_kwargs``) keep the user's values. Idempotent; other algorithms are untouched.
    """
    import rl_zoo3.exp_manager

    manager_class = rl_zoo3.exp_manager.ExperimentManager
    if getattr(manager_class.read_hyperparameters, "sb3_r2po_variants", False):
        return
    original = manager_class.read_hyperparameters

    def read_hyperparameters(self: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        hyperparams, saved_hyperparams = original(self)
        if not _is_r2po(self.algo):
            return hyperparams, saved_hyperparams
        explicit = set(self.custom_hyperparams or {})
        if self.env_kwargs:  # --env-kwargs (or a caller's env_kwargs): the zoo lets them win over the file's
            explicit.add("env_kwargs")
        variant = str(hyperparams.get("variant") or DEFAULT_VARIANT)
        resolved, applied = apply_variant(hyperparams, variant, explicit)
        kept = sorted(set(variant_overrides(hyperparams, variant)) & explicit)
        if applied or kept:
            shown = ", ".join(f"{key}={value!r}" for key, value in applied.items()) or "none"
            note = f" (yours kept: {', '.join(kept)})" if kept else ""
            print(f"Settings of variant {variant!r} for this env ({VARIANTS_KEY} of the config): {shown}{note}")
        saved = OrderedDict((key, resolved[key]) for key in sorted(resolved))
        return resolved, saved

    # the mark that makes this idempotent: an attribute of our own wrapper, read above on whatever the zoo's method is
    read_hyperparameters.sb3_r2po_variants = True  # type: ignore[attr-defined]
    manager_class.read_hyperparameters = read_hyperparameters  # type: ignore[method-assign]


def _is_r2po(algo: str) -> bool:
    """Whether the zoo's ``--algo`` name is registered as R2PO (under any name)."""
    from rl_zoo3.utils import ALGOS

    from sb3_r2po import R2PO

    algo_class = ALGOS.get(algo)
    return isinstance(algo_class, type) and issubclass(algo_class, R2PO)


__all__ = [
    "DEFAULT_VARIANT",
    "HISTORY_EXCERPTS_KEY",
    "MERGED_KEYS",
    "VARIANTS_KEY",
    "apply_variant",
    "install_variant_settings",
    "variant_overrides",
]
