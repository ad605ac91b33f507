"""R2PO's settings (:class:`R2POSettings`, checked once when built: a bad value gets a ``ValueError`` naming it) and
the variants as data (a :class:`Variant` per method of the paper's comparison; adding one is an entry in :data:`VARIANTS`)."""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from gymnasium import spaces

from sb3_r2po.common.parameters import REPLY_STYLES, Reading, ReplyStyle
from sb3_r2po.prompts.builder import PROMPT_LAYOUTS, PromptLayout
from sb3_r2po.r2po.policies import CodePolicy, CompactPolicy

ON_UNUSABLE_REPLY = ("rerun", "reask")  # the reference's rerun of the iteration, or our re-ask and fallback
REPLY_READINGS = ("reference", "last_vector")  # as the reference's agent of the variant, or our last complete vector
TAU_C_MARGIN = 0.05  # a derived tau_c: target - TAU_C_MARGIN * |target|
SettingsSource = Literal["given", "reference", "derived"]  # the constructor's argument, the settings table, or derived


def check_int(name: str, value: Any, low: int, optional: bool = False) -> None:
    """Raise a ``ValueError`` unless ``value`` is an integer >= ``low`` (or ``None`` when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}{' or None' if optional else ''}, got {value!r}")


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


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raise a ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_path(name: str, value: Any) -> None:
    """Raise a ``ValueError`` unless ``value`` is a path (``str`` or ``os.PathLike``) or ``None``."""
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"{name} must be a path (str or os.PathLike) or None, got {value!r}")


def _checked(default: Any, check: Callable[..., None], *args: Any, **kwargs: Any) -> Any:
    """A settings field with its ``check(name, value, *args, **kwargs)``, run when the settings are built."""
    return field(default=default, metadata={"check": lambda name, value: check(name, value, *args, **kwargs)})


def check_policy(policy: Any, aliases: Mapping[str, type], env: Any = None, variant: str | None = None) -> None:
    """Raise a ``ValueError`` unless ``policy`` is a policy name or class taking the observation space of ``env``, and
    a code policy exactly when ``variant`` (unless ``None``) searches code."""
    if isinstance(policy, str) and policy not in aliases:
        raise ValueError(f"Unknown policy {policy!r}; R2PO accepts {sorted(aliases)} or a CompactPolicy class")
    if not isinstance(policy, (str, type)):
        raise ValueError(f"policy must be one of {sorted(aliases)} or a CompactPolicy class, got {policy!r}")
    policy_class = aliases[policy] if isinstance(policy, str) else policy
    code = variant in CODE_VARIANTS
    if variant is not None and code != issubclass(policy_class, CodePolicy):
        raise ValueError(f"variant={variant!r} {'needs' if code else 'cannot train'} the 'Code' policy (it writes code)")
    space = getattr(env, "observation_space", None)
    if isinstance(space, spaces.Space) and issubclass(policy_class, CompactPolicy):
        policy_class.check_observation_space(space)


WITHOUT_TABLE = tuple(
    "target_return tau_c warmup_episodes step_size max_episode_steps history_excerpts max_iterations".split()
)
"""The arguments ``R2PO(...)`` takes from the settings table when not given; for an env it lacks, the settings' default."""


@dataclass(frozen=True)
class R2POSettings:
    """Every setting of a run (``R2PO``'s arguments of the same names), checked when built (``dataclasses.replace`` too).
    ``env_id``, ``reward_threshold`` and ``env_time_limit`` are the env's; ``sources``: where each table setting came
    from."""

    variant: str = "r2po"
    n_eval_episodes: int = _checked(20, check_int, 1)
    warmup_episodes: int = _checked(20, check_int, 0)
    target_return: float | None = _checked(None, check_number, optional=True)
    tau_c: float | None = _checked(None, check_number, optional=True)
    step_size: float = _checked(1.0, check_number, 0.0, strict=True)
    param_bounds: tuple[float, float] | None = None
    param_decimals: int = _checked(1, check_int, 0)
    temperature: float = _checked(0.0, check_number, 0.0)
    max_episodes: int | None = _checked(None, check_int, 1, optional=True)
    max_iterations: int | None = _checked(None, check_int, 1, optional=True)
    max_episode_steps: int = _checked(1000, check_int, 1)
    max_trajectory_steps: int | None = _checked(None, check_int, 1, optional=True)
    trajectory_digits: int = _checked(3, check_int, 1)
    fold_repeated_steps: bool = False
    history_best_k: int | None = _checked(None, check_int, 0, optional=True)
    history_recent: int | None = _checked(None, check_int, 0, optional=True)
    history_slack: int = _checked(0, check_int, 0)
    reply_style: ReplyStyle = "indexed"
    prompt_layout: PromptLayout = "reference"
    search_sees_task: bool = False
    critic_selection_hints: bool = False
    extra_statistics: bool = False
    history_excerpts: int | None = _checked(None, check_int, 0, optional=True)
    skip_unchanged_revisions: bool = False
    max_llm_retries: int = _checked(1, check_int, 0)
    on_unusable_reply: str = _checked("rerun", check_choice, ON_UNUSABLE_REPLY)
    max_iteration_attempts: int = _checked(5, check_int, 1)
    reject_duplicates: bool = False
    reply_reading: str = _checked("reference", check_choice, REPLY_READINGS)
    reject_cut_off_replies: bool = False
    clip_actions: bool | None = None
    prompt_template_dir: str | None = _checked(None, check_path)
    checkpoint_dir: str | None = _checked(None, check_path)
    stop_at_target: bool = False
    racing: bool = False
    racing_chunk: int = _checked(5, check_int, 2)  # the racing rule needs a standard deviation
    racing_z: float = _checked(1.645, check_number, 0.0)
    code_candidates: int = _checked(10, check_int, 1)
    code_reflection: bool = True
    code_repairs: int = _checked(10, check_int, 0)
    code_keep_best: bool = False
    env_id: str | None = None
    reward_threshold: float | None = None
    env_time_limit: int | None = None
    sources: Mapping[str, SettingsSource] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            flag = f.type == "bool" or (f.type == "bool | None" and value is not None)  # the on/off options
            if flag and not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{f.name} must be True or False, got {value!r}")
            if "check" in f.metadata:
                f.metadata["check"](f.name, value)
        if (bounds := self.param_bounds) is not None:
            pair = isinstance(bounds, (tuple, list, np.ndarray)) and len(bounds) == 2
            if not pair or not all(is_number(b) and math.isfinite(b) for b in bounds):
                raise ValueError(f"param_bounds must be two finite numbers (low, high), got {bounds!r}")
            if not float(bounds[0]) < float(bounds[1]):
                raise ValueError(f"param_bounds are empty or reversed: {bounds}")
            object.__setattr__(self, "param_bounds", (float(bounds[0]), float(bounds[1])))
        check_choice("reply_style", self.reply_style, REPLY_STYLES)
        check_choice("prompt_layout", self.prompt_layout, PROMPT_LAYOUTS)
        if self.history_slack and not self.compressed:
            raise ValueError("history_slack needs a compressed history (history_best_k or history_recent)")
        if self.variant not in ALL_VARIANTS:
            raise ValueError(f"Unknown variant {self.variant!r}; choose one of {sorted(ALL_VARIANTS)}")
        if self.variant_spec.search == "code" and self.warmup_episodes:
            raise ValueError(f"variant={self.variant!r} has no warm-up: warmup_episodes must be 0")

    @property
    def variant_spec(self) -> Variant:
        """The :class:`~sb3_r2po.r2po.arguments.Variant` named by ``variant``."""
        return ALL_VARIANTS[self.variant]

    @property
    def candidates_per_iteration(self) -> int:
        """Evaluated candidates (K episodes each) of a full iteration (without repairs and re-asks)."""
        spec = self.variant_spec
        searches = {"one": 1, "two_independent": 2, "two_sequential": 2, "none": 0, "code": self.code_candidates}
        return searches[spec.search] + (spec.critic is not None)

    @property
    def target(self) -> float | None:
        """The target mean return shown to the LLM: ``target_return``, else the env's ``reward_threshold``."""
        target = self.target_return if self.target_return is not None else self.reward_threshold
        return None if target is None else float(target)

    @property
    def revision_threshold(self) -> float | None:
        """``tau_c``, else ``target - 0.05 * |target|`` when a target is known, else ``None`` (no rule)."""
        if self.tau_c is not None:
            return float(self.tau_c)
        return None if (target := self.target) is None else target - TAU_C_MARGIN * abs(target)

    @property
    def actions_clipped(self) -> bool:
        """Whether training rollouts clip continuous actions: ``clip_actions``, else the variant's rule."""
        return self.variant_spec.clip_actions if self.clip_actions is None else bool(self.clip_actions)

    @property
    def episode_cap(self) -> int:
        """Length cap of an evaluation episode: the env's own time limit, else ``max_episode_steps``."""
        return int(self.env_time_limit) if self.env_time_limit else int(self.max_episode_steps)

    @property
    def compressed(self) -> bool:
        """Whether prompts show a compressed history (``history_best_k`` or ``history_recent``)."""
        return self.history_best_k is not None or self.history_recent is not None

    def warn_if_no_iteration(self) -> None:
        """Warn when ``max_episodes`` cannot pay for the warm-up and one iteration."""
        if self.max_episodes is not None and self.max_episodes < self.warmup_episodes + self.n_eval_episodes:
            warnings.warn(
                f"R2PO: max_episodes={self.max_episodes} cannot pay for one iteration after the warm-up "
                f"(warmup_episodes={self.warmup_episodes} + n_eval_episodes={self.n_eval_episodes}): learn() runs the "
                "warm-up only",
                RuntimeWarning,
                stacklevel=3,
            )


SETTINGS = tuple(f.name for f in dataclasses.fields(R2POSettings))


def resolve_settings(
    given: Mapping[str, Any], table: Mapping[str, Any] | None, env: tuple[str | None, float | None, int | None]
) -> R2POSettings:
    """The settings from the constructor's arguments ``given``; for those of :data:`WITHOUT_TABLE` an argument given wins,
    then the ``table``'s value, then the derived one. ``env``: the env's id, reward threshold and time limit."""
    values = {name: given[name] for name in SETTINGS if name in given}
    sources: dict[str, SettingsSource] = {}
    own = dict(ALL_VARIANTS[values["variant"]].settings) if values.get("variant") in ALL_VARIANTS else {}
    defaults = {f.name: f.default for f in dataclasses.fields(R2POSettings)} | own  # a variant's own: not the table's
    for name in ("n_eval_episodes", "temperature"):  # None: the variant's own, else R2PO's default
        values[name] = defaults[name] if values.get(name) is None else values[name]
    for name in WITHOUT_TABLE:
        if given.get(name) is not None:
            values[name], sources[name] = given[name], "given"
        elif table is not None and not own and table.get(name) is not None:
            values[name], sources[name] = table[name], "reference"
        else:
            values[name], sources[name] = defaults[name], "derived"
    settings = R2POSettings(**values, env_id=env[0], reward_threshold=env[1], env_time_limit=env[2], sources=sources)
    if given.get("verbose", 0) >= 1 and given.get("_init_setup_model", True):  # load(): the saved settings follow
        print(describe_settings(settings), flush=True)
    return settings


def describe_settings(settings: R2POSettings) -> str:
    """The line ``verbose >= 1`` prints at construction: the table's settings by source."""
    groups = {"reference": "the reference's (settings table)", "given": "given", "derived": "derived"}
    parts = []
    for source, title in groups.items():
        if names := [name for name in WITHOUT_TABLE if settings.sources.get(name) == source]:
            shown = [name if (v := getattr(settings, name)) is None else f"{name}={v!r}" for name in names]
            parts.append(f"{title}: {', '.join(shown)}")
    where = settings.env_id or "an env without an id"
    return f"R2PO settings for {where}, variant {settings.variant}: " + "; ".join(parts)


SearchMode = Literal["one", "two_independent", "two_sequential", "none", "code"]
SearchPrompt = Literal["r2po", "props", "props_plus"]  # the Search template search_<name>.j2
CriticPrompt = Literal["r2po", "rep_traj", "three_traj", "critic_only"]  # the Critic template critic_<name>.j2
HistoryStyle = Literal["r2po", "f", "labelled", "reward"]
"""How a prompt writes the history: ``r2po`` (rewards, warm-up marked), ``f`` (ProPS's f(params)), ``labelled`` (warm-up
or training trial) or ``reward`` (mean rewards, the latest with an excerpt)."""
EXCERPT_STEPS = 8  # steps of a history entry's rollout excerpt: the first 4 and the last 4 (the reference's max_steps)


@dataclass(frozen=True)
class CriticEvidence:
    """What the Critic is shown, and with which template.

    :param prompt: The Critic template (see :data:`CriticPrompt`).
    :param statistics: Aggregate statistics (return, length, successes).
    :param trajectories: Named trajectories: ``median``, ``mean`` (closest to the mean return), ``worst``, ``best``.
    :param rule: The revision rule (when ``tau_c`` is known).
    :param max_steps: Step budget per trajectory; ``None`` uses the model's ``max_trajectory_steps``.
    :param step_rewards: Whether trajectories show each step's reward.
    :param history: How the history is written (see :data:`HistoryStyle`); ``reward`` adds the rollout excerpts.
    """

    prompt: CriticPrompt = "r2po"
    statistics: bool = True
    trajectories: tuple[str, ...] = ("median",)
    rule: bool = True
    max_steps: int | None = None
    step_rewards: bool = False
    history: HistoryStyle = "r2po"

    @property
    def excerpts(self) -> bool:
        """Whether the history shows rollout excerpts of its latest entries."""
        return self.history == "reward"


@dataclass(frozen=True)
class Variant:
    """One method of the paper's comparison.

    :param name: The ``variant=`` value.
    :param summary: One line for docs and tables.
    :param search: ``one`` Search proposal, ``two_independent`` proposals from the same history,
        ``two_sequential`` (the second sees the first's return), ``none``, or ``code`` (PromptPO's rounds).
    :param critic: The Critic's template and evidence, or ``None`` for no Critic call.
    :param keep_best: Whether the second candidate must match the first's mean return to be kept.
    :param search_prompt: The Search template (see :data:`SearchPrompt`).
    :param search_history: How the Search prompt writes the history (see :data:`HistoryStyle`).
    :param search_trajectories: Whether, on tabular tasks, the Search prompt shows each entry's first episode (ProPS+).
    :param clip_actions: Whether a continuous action is clipped to the bounds (the six ablations use the raw output).
    :param reading: How a reply is read (:data:`~sb3_r2po.common.parameters.Reading`) for a linear and a tabular policy.
    :param settings: Settings the variant sets in place of R2PO's defaults; then the settings table does not apply.
    """

    name: str
    summary: str
    search: SearchMode = "one"
    critic: CriticEvidence | None = CriticEvidence()
    keep_best: bool = True
    search_prompt: SearchPrompt = "r2po"
    search_history: HistoryStyle = "r2po"
    search_trajectories: bool = False
    clip_actions: bool = True
    reading: tuple[Reading, Reading] = ("first", "last")
    settings: tuple[tuple[str, Any], ...] = ()


_REP_TRAJ = CriticEvidence(
    "rep_traj", statistics=False, trajectories=("mean",), rule=False, step_rewards=True, history="reward"
)


def _props(name: SearchPrompt, summary: str, **more: Any) -> Variant:
    """ProPS and ProPS+: one Search proposal, no Critic, ProPS's history and reading of replies."""
    return Variant(name, summary, critic=None, search_prompt=name, search_history="f", reading=("first_line", "last"), **more)


def _ablation(name: str, summary: str, **changes: Any) -> Variant:
    """One of the reference's six ablations: the ProPS Search prompt and history, the raw (unclipped) actions."""
    return Variant(name, summary, **{"search_prompt": "props", "search_history": "f", "clip_actions": False, **changes})


def _two_searches(name: str, summary: str, search: SearchMode) -> Variant:
    """An ablation of two Search calls, no Critic, replies read at the first occurrence of each value."""
    return _ablation(name, summary, search=search, critic=None, reading=("first", "first"))


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("r2po", "Search, then a Critic shown statistics, the median rollout and the revision rule; keep-best"),
        _props("props", "ProPS: one Search proposal per iteration, a black box (no task description)"),
        _props(
            "props_plus",
            "ProPS+: ProPS with the task description (tabular tasks: each history entry's first episode)",
            search_trajectories=True,
        ),
        _two_searches(
            "pure_search", "two independent Search proposals from the same history; keep the best", "two_independent"
        ),
        _two_searches("actor_second_pass", "Search A is evaluated and shown, then Search B; keep the best", "two_sequential"),
        Variant(
            "critic_only",
            "one draft-critique-revise Critic call per iteration (history excerpts, the latest trace); always kept",
            "none",
            dataclasses.replace(_REP_TRAJ, prompt="critic_only"),
            keep_best=False,
            clip_actions=False,
            reading=("first", "first"),
        ),
        _ablation(
            "rep_traj", "Search, then a Critic shown the rollout closest to the mean return only; keep-best", critic=_REP_TRAJ
        ),
        _ablation("always_critic", "rep_traj with the revision always committed", critic=_REP_TRAJ, keep_best=False),
        _ablation(
            "three_traj",
            "Search, then a Critic shown the worst, median and best rollouts (25 head + 25 tail steps); keep-best",
            critic=CriticEvidence(
                "three_traj",
                statistics=False,
                trajectories=("worst", "median", "best"),
                rule=False,
                max_steps=50,
                history="labelled",
            ),
            search_history="labelled",
        ),
    ]
}
"""Every variant of the R2PO paper's comparison by name."""

CODE_VARIANTS: dict[str, Variant] = {
    "promptpo": Variant(
        "promptpo",
        "PromptPO: the LLM writes a Python policy; N independent candidates a round, the best enters the history",
        "code",
        None,
        settings=(("n_eval_episodes", 5), ("warmup_episodes", 0), ("max_iterations", 10), ("temperature", 1.0)),
    )
}
"""The variants of the ``"Code"`` policy (its candidates are source code), by name."""
ALL_VARIANTS = VARIANTS | CODE_VARIANTS
