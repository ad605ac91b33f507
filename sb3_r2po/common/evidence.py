"""The evidence package: what the Critic-LLM sees of a candidate's K episodes (statistics, the median trajectory
and, with ``tau_c``, the revision rule), and how trajectories are written (ours and the reference's formats)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from sb3_r2po.common.rollouts import Episode, finite_mean, finite_std


@dataclass(frozen=True)
class EpisodeStatistics:
    """
    Aggregate statistics of K episodes.

    :param n_episodes: K.
    :param successes: Episodes whose return reached the target (``None`` without a target).
    :param failures: ``n_episodes - successes`` (``None`` without a target).
    """

    n_episodes: int
    mean_return: float
    std_return: float
    min_return: float
    max_return: float
    mean_length: float
    min_length: int
    max_length: int
    successes: int | None
    failures: int | None
    endings: dict[str, int]


def success_tolerance(target: float) -> float:
    """How far below ``target`` a return still reaches it, as the reference's ``np.isclose`` (500: 499.495 and above)."""
    return max(1e-6, 1e-3 * max(1.0, abs(target))) + 1e-5 * abs(target)


def summarize(episodes: Sequence[Episode], target: float | None = None) -> EpisodeStatistics:
    """Aggregate statistics of ``episodes``; a success is a return >= ``target`` (minus a tiny tolerance)."""
    if not episodes:
        raise ValueError("Cannot summarize zero episodes")
    returns = np.array([ep.total_return for ep in episodes], dtype=np.float64)
    lengths = np.array([ep.length for ep in episodes], dtype=np.int64)
    successes = None if target is None else int(np.sum(returns >= target - success_tolerance(target)))
    return EpisodeStatistics(
        n_episodes=len(episodes),
        mean_return=finite_mean(returns),
        std_return=finite_std(returns),
        min_return=float(returns.min()),
        max_return=float(returns.max()),
        mean_length=float(lengths.mean()),
        min_length=int(lengths.min()),
        max_length=int(lengths.max()),
        successes=successes,
        failures=None if successes is None else len(episodes) - successes,
        endings=dict(Counter(ep.end for ep in episodes)),
    )


def closest_index(returns: Sequence[float], value: float) -> int:
    """Index of the return closest to ``value``; ties go to the lowest index."""
    return int(np.argmin(np.abs(np.asarray(returns, dtype=np.float64) - value)))  # argmin: the first of equal minima


def median(values: Sequence[float]) -> float:
    """What ``np.median(values)`` gives (NaN when one is NaN), without overflowing the mean of two huge values."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    if ordered.size == 0 or np.isnan(ordered[-1]):  # sort puts NaN last
        return math.nan
    low, high = float(ordered[(ordered.size - 1) // 2]), float(ordered[ordered.size // 2])  # equal for an odd size
    return (low + high) / 2 if math.isfinite(low + high) else low / 2 + high / 2  # two finite ones may overflow a sum


def median_index(returns: Sequence[float]) -> int:
    """The episode whose return is closest to the median of the returns (ties to the lowest index)."""
    return closest_index(returns, median(returns))


def mean_closest_index(returns: Sequence[float]) -> int:
    """The episode whose return is closest to the mean of the returns (ties to the lowest index)."""
    return closest_index(returns, finite_mean(returns))


LARGEST_INTEGER_PRINTED = 1e15
"""Magnitude from which :func:`sig` keeps the exponent form."""

_G_FORMATS = tuple(f".{n}g" for n in range(18))  # built once: sig runs for every number shown


def sig(x: float, digits: int = 3) -> str:
    """A number to ``digits`` significant figures, compactly (``0.0123``, ``-1.5``, ``500``, ``nan``); a value that rounds
    to ``10**digits`` or more is a rounded integer (``305``, not ``3e+02``) below :data:`LARGEST_INTEGER_PRINTED`."""
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    text = format(x, _G_FORMATS[digits] if digits < len(_G_FORMATS) else f".{digits}g")
    if "e+" in text and abs(x) < LARGEST_INTEGER_PRINTED:
        text = f"{x:.0f}"
    return "0" if text in ("-0", "0") else text


def digits_apart(x: float, other: float | None, digits: int = 4) -> int:
    """The fewest significant figures, at least ``digits``, at which :func:`sig` prints ``x`` and ``other`` differently
    (``digits`` when they are equal or ``other`` is ``None``): ``96.9996`` against ``97`` needs 6."""
    if other is None or x == other or not (np.isfinite(x) and np.isfinite(other)):
        return digits
    for n in range(digits, 18):  # 17 significant figures tell any two float64 values apart
        if sig(x, n) != sig(other, n):
            return n
    return 17


def _rows(x: np.ndarray | list[np.ndarray]) -> np.ndarray | list[np.ndarray]:
    """The observations or actions of an episode as flat float64 rows: a 2-D array, or a list where shapes differ."""
    if isinstance(x, np.ndarray) and x.ndim >= 1 and x.size:
        return np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    return [np.asarray(row, dtype=np.float64).reshape(-1) for row in x]


def _vector(row: np.ndarray, digits: int) -> str:
    """An observation or action (a row of :func:`_rows`); a non-finite entry is written ``non-finite``."""
    texts = [sig(v, digits) if math.isfinite(v) else "non-finite" for v in row.tolist()]
    return texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"


def _shown(n: int, max_steps: int | None) -> list[range]:
    """The steps shown of ``n``: all, or the first ``max_steps / 2`` (at least 1) and the rest from the end."""
    if max_steps is None or n <= max_steps:
        return [range(n)]
    head = max(1, max_steps // 2)
    return [range(head), range(n - max(0, max_steps - head), n)]


def _same_step(episode: Episode, t: int, u: int) -> bool:
    """Whether steps ``t`` and ``u`` have exactly equal raw observation, action and reward."""
    return (
        episode.rewards[t] == episode.rewards[u]
        and np.array_equal(np.asarray(episode.actions[t]), np.asarray(episode.actions[u]))
        and np.array_equal(np.asarray(episode.observations[t]), np.asarray(episode.observations[u]))
    )


def _runs(episode: Episode, part: range, fold: bool) -> Iterator[tuple[int, int]]:
    """The steps of ``part`` as runs ``t..u`` of identical steps (:func:`_same_step`; without ``fold``, one step each)."""
    t = part.start
    while t < part.stop:
        u = t
        while fold and u + 1 < part.stop and _same_step(episode, t, u + 1):
            u += 1
        yield t, u
        t = u + 1


@dataclass(frozen=True)
class RenderedTrajectory:
    """
    A trajectory as prompt lines.

    :param lines: The lines (see :func:`render_trajectory` and :func:`reference_trajectory`).
    :param omitted: Number of steps left out (0 when the whole episode is shown).
    :param length: The episode's number of steps (0: not recorded).
    """

    lines: tuple[str, ...]
    omitted: int
    length: int = 0


def render_trajectory(
    episode: Episode, max_steps: int | None = 40, digits: int = 3, fold: bool = True, rewards: bool = True
) -> RenderedTrajectory:
    """
    An episode as one line per step ``t: s -> a`` (``, r=...`` when rewards vary, else one reward line first), head and
    tail around a marker when it is longer than ``max_steps`` (``None``: all), then how it ended and the final
    observation; ``digits`` significant figures. ``fold`` writes a run of equal steps once (``t=3..7 (5 identical
    steps): ...``); ``rewards=False`` shows no rewards.
    """
    n = episode.length
    observations, actions = _rows(episode.observations), _rows(episode.actions)
    step_rewards = np.asarray(episode.rewards, dtype=np.float64)
    constant_reward = n > 0 and bool(np.all(step_rewards == step_rewards[0]))
    shown = _shown(n, max_steps)
    lines: list[str] = []
    if constant_reward and rewards:
        lines.append(f"(reward {sig(float(step_rewards[0]), digits)} at every step)")
    for part_index, part in enumerate(shown):
        if part_index == 1:
            lines.append(f"... {part.start - shown[0].stop} steps omitted ...")
        for t, u in _runs(episode, part, fold):
            body = f"s={_vector(observations[t], digits)} -> a={_vector(actions[t], digits)}"
            if rewards and not constant_reward:
                body += f", r={sig(float(step_rewards[t]), digits)}"
            label = f"t={t}" if u == t else f"t={t}..{u} ({u - t + 1} identical steps)"
            lines.append(f"{label}: {body}")
    ending = {
        "terminated": "terminated",
        "truncated": "truncated by the time limit",
        "capped": "stopped at the step cap",
        "non-finite": "stopped: the environment returned a non-finite value",
    }
    lines.append(f"end after {n} steps ({ending.get(episode.end, episode.end)}): final s={_vector(observations[-1], digits)}")
    omitted = 0 if len(shown) == 1 else n - len(shown[0]) - len(shown[1])
    return RenderedTrajectory(tuple(lines), omitted, n)


def render_excerpt(episode: Episode, max_steps: int = 8, digits: int = 3) -> str:
    """A history entry's rollout excerpt: :func:`render_trajectory`'s lines joined by ``" | "``, without rewards."""
    return " | ".join(render_trajectory(episode, max_steps, digits, fold=False, rewards=False).lines)


TraceStyle = Literal["chain", "ends", "steps"]
"""The reference's Critic trajectories: ``chain``, ``s->a->s' | ... | s->a->[TERMINATED]`` (r2po); ``ends``, the same
with 25 first and 25 last steps, each part's last step ``[GOAL]`` or ``[END]`` (three_traj); ``steps``, a line per step
with its reward (rep_traj, always_critic, critic_only)."""

ValueStyle = Literal["int", "list", "wrapped", "nested"]
"""The reference's ``_format_value``: ``int`` a state or tabular action (``5``); ``list`` a vector (``[0.0123, -1.5]``);
``wrapped`` a linear policy's discrete action (``[1]``); ``nested`` a continuous action (``[[0.123...]]``, every digit)."""


@dataclass(frozen=True)
class ReferenceTrace:
    """
    The reference's trajectory format of one variant.

    :param trace: How the Critic's trajectories are written.
    :param observation: How observations are written.
    :param action: How actions are written.
    :param cap: An episode of at least this many steps ends ``[ROLLOUT_CAP]`` (the reference's ``max_traj_length``),
        a shorter one ``[TERMINATED]``; an episode our own step cap stopped always ends ``[ROLLOUT_CAP]``.
    """

    trace: TraceStyle = "chain"
    observation: ValueStyle = "list"
    action: ValueStyle = "list"
    cap: int = 1000


def reference_number(x: float, digits: int = 3) -> str:
    """A float as the reference's ``_format_number`` writes it: 3 significant figures (``digits``: ours)."""
    return format(float(x), _G_FORMATS[digits] if digits < len(_G_FORMATS) else f".{digits}g")


def reference_value(row: np.ndarray, style: ValueStyle, digits: int = 3) -> str:
    """An observation or action row as the reference writes it (:data:`ValueStyle`); a non-finite entry: ``non-finite``."""
    values = row.tolist()
    if not all(math.isfinite(v) for v in values):
        texts = [reference_number(v, digits) if math.isfinite(v) else "non-finite" for v in values]
        return texts[0] if style == "int" else "[" + ", ".join(texts) + "]"
    if style == "int":
        return str(int(values[0]))
    if style == "wrapped":
        return "[" + ", ".join(str(int(v)) for v in values) + "]"
    if style == "nested" and digits == 3:
        return "[" + str(values) + "]"
    text = "[" + ", ".join(reference_number(v, digits) for v in values) + "]"
    return "[" + text + "]" if style == "nested" else text


def _reference_steps(episode: Episode, fmt: ReferenceTrace, digits: int = 3) -> list[tuple[str, str, float]]:
    observations, actions = _rows(episode.observations), _rows(episode.actions)
    return [
        (
            reference_value(observations[t], fmt.observation, digits),
            reference_value(actions[t], fmt.action, digits),
            float(episode.rewards[t]),
        )
        for t in range(episode.length)
    ]


def _chain(steps: list[tuple[str, str, float]], last: str | None) -> list[str]:
    """``s->a->s'`` per step, the last ``s'`` being ``last`` (``None``: ``[GOAL]`` if its reward is > 0, else ``[END]``)."""
    texts = [f"{s}->{a}->{steps[t + 1][0]}" for t, (s, a, _) in enumerate(steps[:-1])]
    if steps:
        s, a, r = steps[-1]
        texts.append(f"{s}->{a}->{last if last is not None else ('[GOAL]' if r > 0 else '[END]')}")
    return texts


def reference_marker(episode: Episode, cap: int) -> str:
    """``[ROLLOUT_CAP]`` at the step cap, else ``[TERMINATED]`` (the reference's); ``[NON_FINITE]`` (ours)."""
    if episode.end == "non-finite":
        return "[NON_FINITE]"
    return "[ROLLOUT_CAP]" if episode.length >= cap or episode.end == "capped" else "[TERMINATED]"


def _reference_part(
    episode: Episode, steps: list[tuple[str, str, float]], part: range, trace: TraceStyle, marker: str, digits: int, fold: bool
) -> list[str]:
    texts = []
    for t, u in _runs(episode, part, fold):
        s, a, r = steps[t]
        if trace == "steps":
            label = f"step {t}" if u == t else f"steps {t}-{u} ({u - t + 1} identical steps)"
            texts.append(f"  {label}: state={s} -> action={a} -> reward={reference_number(r, digits)}")
        else:
            if u > t:  # steps t..u-1 led back to the same state
                texts.append(f"{s}->{a}->{s} ({u - t} identical steps)")
            texts.append(f"{s}->{a}->{steps[u + 1][0] if u + 1 < len(steps) else marker}")
    return texts


def reference_trajectory(
    episode: Episode, fmt: ReferenceTrace, max_steps: int | None = None, digits: int = 3, fold: bool = False
) -> RenderedTrajectory:
    """An episode as the reference's Critics write it (:data:`TraceStyle`); ours, for ``chain`` and ``steps``:
    ``max_steps`` keeps head and tail, ``digits`` the figures, ``fold`` writes a run of identical steps once."""
    steps = _reference_steps(episode, fmt, digits)
    n = len(steps)
    if not steps:
        return RenderedTrajectory(("No trajectory available.",), 0, 0)
    if fmt.trace == "ends":
        if n <= 50:
            return RenderedTrajectory((" | ".join(_chain(steps, None)),), 0, n)
        parts = [*_chain(steps[:25], None), f"... {n - 50} omitted steps ...", *_chain(steps[-25:], None)]
        return RenderedTrajectory((" | ".join(parts),), n - 50, n)
    shown = _shown(n, max_steps)
    marker, texts = reference_marker(episode, fmt.cap), []
    for part in shown:
        if part is not shown[0]:
            omitted = part.start - shown[0].stop
            texts.append(f"... {omitted} omitted steps ..." if fmt.trace == "chain" else f"  ... {omitted} omitted steps ...")
        texts += _reference_part(episode, steps, part, fmt.trace, marker, digits, fold)
    omitted = 0 if len(shown) == 1 else n - len(shown[0]) - len(shown[1])
    return RenderedTrajectory((" | ".join(texts),) if fmt.trace == "chain" else tuple(texts), omitted, n)


def reference_excerpt(episode: Episode, fmt: ReferenceTrace, max_steps: int = 8, digits: int = 3) -> str:
    """A history entry's ``rollout_excerpt`` as the reference writes it: the first and last ``max_steps / 2`` steps
    as ``s->a->s'`` joined by ``" | "`` around ``... n omitted steps ...``, ending with :func:`reference_marker`."""
    steps = _reference_steps(episode, fmt, digits)
    if not steps:
        return "No trajectory available."
    marker = reference_marker(episode, fmt.cap)
    if len(steps) <= max_steps:
        return " | ".join(_chain(steps, marker))
    head = max_steps // 2
    # the head's last step shows its next state, as every step but the episode's last
    parts = [f"{s}->{a}->{steps[t + 1][0]}" for t, (s, a, _) in enumerate(steps[:head])]
    return " | ".join([*parts, f"... {len(steps) - max_steps} omitted steps ...", *_chain(steps[head - max_steps :], marker)])


def reference_table(episode: Episode, fmt: ReferenceTrace) -> tuple[str, ...]:
    """An episode as the reference's ProPS+ tabular history writes it: ``State | Action | Reward``, then ``s | a | r``."""
    return ("State | Action | Reward", *(f"{s} | {a} | {r}" for s, a, r in _reference_steps(episode, fmt)))


@dataclass(frozen=True)
class EvidencePackage:
    """
    Everything the Critic is shown about a candidate's K episodes.

    :param statistics: Aggregate statistics (``None`` when a variant hides them).
    :param trajectories: Named rendered trajectories, e.g. ``{"median": ...}``.
    :param trajectory_returns: The return of each shown trajectory, by name.
    :param tau_c: Revision-rule threshold (``None``: no rule).
    :param above_tau_c: Whether the candidate's mean return reaches ``tau_c``.
    :param step_rewards: Whether the rendered trajectories show the rewards.
    :param trajectory_indices: The position of each shown trajectory among the K episodes, by name.
    :param reference: Whether the trajectories are written in the reference's format (:class:`ReferenceTrace`).
    """

    statistics: EpisodeStatistics | None
    trajectories: dict[str, RenderedTrajectory]
    trajectory_returns: dict[str, float]
    tau_c: float | None
    above_tau_c: bool
    step_rewards: bool = True
    trajectory_indices: dict[str, int] = field(default_factory=dict)
    reference: bool = False


SELECTORS = {
    "median": median_index,
    "mean": mean_closest_index,
    "worst": lambda returns: int(np.argmin(returns)),
    "best": lambda returns: int(np.argmax(returns)),
}
"""How each named trajectory is picked from the K returns (ties to the lowest index)."""


def build_evidence(
    episodes: Sequence[Episode],
    target: float | None,
    tau_c: float | None,
    max_steps: int | None = None,
    *,
    digits: int = 3,
    fold: bool = False,
    statistics: bool = True,
    trajectories: Sequence[str] = ("median",),
    rule: bool = True,
    step_rewards: bool = True,
    reference: ReferenceTrace | None = None,
) -> EvidencePackage:
    """
    The evidence package of a candidate: by default statistics, the median trajectory and (with ``tau_c``) the revision
    rule; the ablation variants switch parts off or show other trajectories.

    :param episodes: The K episodes of the candidate.
    :param target: The target return (defines success); may be ``None``.
    :param tau_c: Revision-rule threshold; ``None`` disables the rule.
    :param max_steps: Step budget of each rendered trajectory (head and tail kept); ``None``: the whole episode.
    :param digits: Significant figures in rendered trajectories.
    :param fold: Fold runs of exactly repeated steps (see :func:`render_trajectory`).
    :param statistics: Whether to include the aggregate statistics.
    :param trajectories: Which trajectories to show, by name (see :data:`SELECTORS`).
    :param rule: Whether to include the revision rule (needs ``tau_c``).
    :param step_rewards: Whether :func:`render_trajectory` shows the rewards.
    :param reference: Write the trajectories in the reference's format (:func:`reference_trajectory`); ``None``: ours.
    """
    stats = summarize(episodes, target)
    returns = [ep.total_return for ep in episodes]
    indices = {name: SELECTORS[name](returns) for name in trajectories}
    shown = {name: episodes[i] for name, i in indices.items()}
    threshold = tau_c if rule else None
    if reference is None:
        rendered = {name: render_trajectory(ep, max_steps, digits, fold, step_rewards) for name, ep in shown.items()}
    else:
        rendered = {name: reference_trajectory(ep, reference, max_steps, digits, fold) for name, ep in shown.items()}
    return EvidencePackage(
        statistics=stats if statistics else None,
        trajectories=rendered,
        trajectory_returns={name: ep.total_return for name, ep in shown.items()},
        tau_c=threshold,
        above_tau_c=threshold is not None and stats.mean_return >= threshold,
        step_rewards=step_rewards,
        trajectory_indices=indices,
        reference=reference is not None,
    )
