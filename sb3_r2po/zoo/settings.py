"""
The settings table: ``sb3_r2po/zoo/configs/r2po.yml``, R2PO's zoo hyperparameter file, each env entry with its
``variants:`` mapping, read by the zoo, ``compare``, ``ablate`` and a plain ``R2PO(policy, env_id)``
(:func:`reference_settings`).

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
:func:`sb3_r2po.compare.r2po_entry`), and ``R2PO.__init__`` (through :func:`reference_settings`, for the arguments
of :data:`REFERENCE_KEYS` left at ``None``). Settings the user gives explicitly (``--hyperparams``, ``--env-kwargs``,
the options of ``compare`` and ``ablate``, the constructor's arguments) win over the table's.

To add an env: an entry (``<<: *r2po-defaults``, its keys, a ``variants:`` mapping for the variants that differ).

Nothing here imports ``rl_zoo3`` at import time.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

VARIANTS_KEY = "variants"
"""The key of an env entry holding its per-variant overrides, ``{variant: {key: value}}``; never passed to R2PO."""

HISTORY_EXCERPTS_KEY = "history_excerpts"
"""
The number N of most recent history entries whose rollout excerpts the reference's ``rep_traj``, ``always_critic``
and ``critic_only`` prompts show (the reference's ``traj_history_last_n``; R2PO's ``history_excerpts``).
"""

POLICIES_KEY = "policies"
"""
The key of an env entry holding settings that differ for a policy class (by its short alias, ``ProjectedMlp``), over
the entry's and its variant's: ``{policy: {key: value, ..., variants: {variant: {key: value}}}}``; never passed to R2PO
(the reference's Swimmer configs of its nonlinear policies).
"""

MERGED_KEYS = ("env_kwargs",)
"""Keys whose mapping values are merged with the entry's (a variant's episode cap keeps FrozenLake's ``is_slippery``)."""

DEFAULT_VARIANT = "r2po"
"""The variant of an entry that sets none (R2PO's default)."""

SETTINGS_FILE = Path(__file__).resolve().parent / "configs" / "r2po.yml"
"""The settings table: R2PO's zoo hyperparameter file as the package ships it (``sb3_r2po/zoo/configs/r2po.yml``; in
a source checkout a link to the repository's own copy). ``R2PO(...)`` reads it (:func:`reference_settings`) whatever
``$SB3_R2PO_ZOO_CONFIGS`` says; the zoo, ``compare`` and ``ablate`` read the same file unless that variable replaces it."""

WITHOUT_TABLE: dict[str, Any] = {
    "target_return": None,
    "tau_c": None,
    "warmup_episodes": 20,
    "step_size": 1.0,
    "max_episode_steps": 1000,
    "history_excerpts": None,
    "max_iterations": None,
}
"""
The constructor arguments a plain ``R2PO(...)`` takes from the table for an env it lists (:func:`reference_settings`)
when they are not given (the reference's ``optimum``, ``critic_llm_conservative_threshold``, ``warmup_episodes``,
``search_step_size``, ``max_traj_length``, ``traj_history_last_n`` and ``num_episodes``, its completed iterations),
with R2PO's value for an env the table lacks; ``None``: derived where it is used (the target from the env's
``reward_threshold``, ``tau_c`` from the target, the excerpts from the policy's kind), or no planned iteration count.
"""

REFERENCE_KEYS = tuple(WITHOUT_TABLE)
"""The names of :data:`WITHOUT_TABLE`."""


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


def policy_overrides(entry: Mapping[str, Any], variant: str, policy: str | None) -> dict[str, Any]:
    """
    The settings the entry's ``policies:`` mapping gives ``policy`` and ``variant``: the policy's own keys, then its
    ``variants:`` entry for ``variant`` (empty for a policy it does not name).

    :raises ValueError: when ``policies:`` or a policy's settings are not mappings.
    """
    table = entry.get(POLICIES_KEY) or {}
    if not isinstance(table, Mapping):
        raise ValueError(f"'{POLICIES_KEY}' must map policy names to settings, got {table!r}")
    layer = table.get(policy) or {} if policy is not None else {}
    if not isinstance(layer, Mapping):
        raise ValueError(f"'{POLICIES_KEY}: {policy}' must be a mapping of settings, got {layer!r}")
    own = {key: value for key, value in layer.items() if key != VARIANTS_KEY}
    return {**own, **variant_overrides(layer, variant)}


def apply_variant(
    entry: Mapping[str, Any], variant: str | None = None, explicit: Iterable[str] = (), policy: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """
    An env entry of ``r2po.yml`` resolved for one variant (and policy).

    :param entry: The env entry (with or without ``variants:`` and ``policies:`` mappings); not modified.
    :param variant: The variant; ``None``: the entry's ``variant`` (``r2po`` when it sets none).
    :param explicit: Keys the user set explicitly: the variant's and the policy's values for them are not applied.
    :param policy: The policy's short alias (``ProjectedMlp``); ``None``: the entry's ``policy``.
    :return: ``(settings, applied)``: the entry without ``variants:`` and ``policies:``, with the variant's settings,
        then the policy's (:func:`policy_overrides`), applied (mappings of :data:`MERGED_KEYS` merged into the entry's),
        and the settings that were applied.
    """
    explicit = set(explicit)
    settings = {key: value for key, value in entry.items() if key not in (VARIANTS_KEY, POLICIES_KEY)}
    name = variant if variant is not None else str(settings.get("variant") or DEFAULT_VARIANT)
    policy = policy if policy is not None else settings.get("policy")
    applied: dict[str, Any] = {}
    overrides = {**variant_overrides(entry, name), **policy_overrides(entry, name, None if policy is None else str(policy))}
    for key, value in overrides.items():
        if key in explicit:
            continue
        base = settings.get(key)
        if key in MERGED_KEYS and isinstance(value, Mapping) and isinstance(base, Mapping):
            value = {**base, **value}
        settings[key] = applied[key] = value
    return settings, applied


@functools.cache
def _table() -> dict[str, Any]:
    """The parsed :data:`SETTINGS_FILE` (read once per process)."""
    import yaml

    with open(SETTINGS_FILE) as file:
        return dict(yaml.safe_load(file) or {})


def reference_env_ids() -> list[str]:
    """The env ids the table has an entry for (the reference's envs; ``default`` excluded)."""
    return [str(env_id) for env_id in _table() if env_id != "default"]


def reference_settings(env_id: str | None, variant: str, policy: str | None = None) -> dict[str, Any] | None:
    """
    The reference's settings of ``variant`` on ``env_id``, read from the table (:data:`SETTINGS_FILE`), resolved for
    the variant as the zoo resolves them (:func:`apply_variant`).

    :param env_id: The env id; ``None`` (an env without a spec) gives ``None``.
    :param variant: The variant; one the table does not name gets the env entry's own (R2PO's) settings.
    :param policy: The policy's short alias (``ProjectedMlp``): its ``policies:`` settings apply; ``None``: none.
    :return: The :data:`REFERENCE_KEYS` the entry sets (a ``None`` value: the table leaves it to R2PO's derivation),
        plus ``env_kwargs`` when the entry has them; ``None`` for an env the table has no entry for.
    """
    entry = _table().get(env_id) if env_id not in (None, "default") else None
    if not isinstance(entry, Mapping):
        return None
    settings, _ = apply_variant(entry, variant, policy=policy)
    resolved = {key: settings[key] for key in REFERENCE_KEYS if key in settings}
    if isinstance(settings.get("env_kwargs"), Mapping):
        resolved["env_kwargs"] = dict(settings["env_kwargs"])
    return resolved


def reference_env(env_id: str, variant: str) -> Any:
    """
    The env of ``env_id`` made with the table's ``env_kwargs`` for it and ``variant`` (the Maze's 100-step cap of six
    variants), as SB3 makes an env from an id (``render_mode="rgb_array"`` where the env takes it); ``env_id`` itself
    when the table gives none.
    """
    env_kwargs = (reference_settings(env_id, variant) or {}).get("env_kwargs")
    if not env_kwargs:
        return env_id
    import gymnasium as gym

    try:
        return gym.make(env_id, render_mode="rgb_array", **env_kwargs)
    except TypeError:  # an env without render_mode, as SB3's maybe_make_env
        return gym.make(env_id, **env_kwargs)


def default_history_excerpts(env_id: str | None, variant: str, tabular: bool) -> int:
    """
    The number of excerpted history entries when ``history_excerpts`` is ``None`` (a model saved before the table
    gave it, or an env the table lacks): the table's value for ``env_id``, else 100 on a tabular task and 5 otherwise.
    """
    excerpts = (reference_settings(env_id, variant) or {}).get(HISTORY_EXCERPTS_KEY)
    return int(excerpts) if excerpts is not None else (100 if tabular else 5)


def install_variant_settings(is_r2po: Callable[[str], bool]) -> None:
    """
    Make RL Zoo's ``ExperimentManager`` resolve an R2PO entry's ``variants:`` (:func:`apply_variant`) after it has
    read the hyperparameters: the variant is the ``variant`` of the merged hyperparameters (the file's or
    ``--hyperparams variant:'props'``); the keys of ``--hyperparams`` (the manager's ``hyperparams``) and, when given,
    ``--env-kwargs`` (the manager's ``env_kwargs``) keep the user's values. Idempotent; other algorithms are untouched.

    :param is_r2po: Whether a zoo ``--algo`` name is registered as R2PO.
    """
    import rl_zoo3.exp_manager

    manager_class = rl_zoo3.exp_manager.ExperimentManager
    if getattr(manager_class.read_hyperparameters, "sb3_r2po_variants", False):
        return
    original = manager_class.read_hyperparameters

    def read_hyperparameters(self: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        hyperparams, saved_hyperparams = original(self)
        if not is_r2po(self.algo):
            return hyperparams, saved_hyperparams
        explicit = set(self.custom_hyperparams or {})
        if self.env_kwargs:  # --env-kwargs (or a caller's env_kwargs): the zoo lets them win over the file's
            explicit.add("env_kwargs")
        variant = str(hyperparams.get("variant") or DEFAULT_VARIANT)
        resolved, applied = apply_variant(hyperparams, variant, explicit)
        policy = hyperparams.get("policy")
        overridden = {**variant_overrides(hyperparams, variant), **policy_overrides(hyperparams, variant, policy)}
        kept = sorted(set(overridden) & explicit)
        if applied or kept:
            shown = ", ".join(f"{key}={value!r}" for key, value in applied.items()) or "none"
            note = f" (yours kept: {', '.join(kept)})" if kept else ""
            print(f"Settings of variant {variant!r} for this env ({VARIANTS_KEY} of the config): {shown}{note}")
        saved = OrderedDict((key, resolved[key]) for key in sorted(resolved))
        return resolved, saved

    # the mark that makes this idempotent: an attribute of our own wrapper, read above on whatever the zoo's method is
    read_hyperparameters.sb3_r2po_variants = True  # type: ignore[attr-defined]
    manager_class.read_hyperparameters = read_hyperparameters  # type: ignore[method-assign]


__all__ = [
    "DEFAULT_VARIANT",
    "HISTORY_EXCERPTS_KEY",
    "MERGED_KEYS",
    "POLICIES_KEY",
    "REFERENCE_KEYS",
    "SETTINGS_FILE",
    "VARIANTS_KEY",
    "WITHOUT_TABLE",
    "apply_variant",
    "default_history_excerpts",
    "install_variant_settings",
    "policy_overrides",
    "reference_env",
    "reference_env_ids",
    "reference_settings",
    "variant_overrides",
]
