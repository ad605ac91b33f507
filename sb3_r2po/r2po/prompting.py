"""What the prompts of a run show: the history lines, the context of every prompt, and the Critic's evidence package."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from sb3_r2po.common import finite
from sb3_r2po.common.evidence import (
    EvidencePackage,
    ReferenceTrace,
    TraceStyle,
    ValueStyle,
    build_evidence,
    mean_closest_index,
    reference_excerpt,
    reference_table,
    render_excerpt,
    render_trajectory,
)
from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.common.rollouts import RolloutResult
from sb3_r2po.prompts.builder import HistoryLine, PromptContext
from sb3_r2po.prompts.tasks import describe_task
from sb3_r2po.r2po.history import best_record, shown_history
from sb3_r2po.variants import EXCERPT_STEPS
from sb3_r2po.zoo.settings import default_history_excerpts

if TYPE_CHECKING:
    from sb3_r2po.r2po.r2po import R2PO

REFERENCE_TRACES: dict[str, TraceStyle] = {"r2po": "chain", "three_traj": "ends", "rep_traj": "steps", "critic_only": "steps"}
"""The reference's trajectory format of each Critic template (see :data:`~sb3_r2po.common.evidence.TraceStyle`)."""

Shown = tuple[tuple[np.ndarray, RolloutResult], ...]
"""Candidates evaluated earlier in the running iteration, shown after the history (actor_second_pass)."""


class PromptView:
    """
    Builds what a prompt shows from the model's public state (its history, budget, settings and variant).

    :param model: The model.
    """

    def __init__(self, model: R2PO) -> None:
        self.model = model
        self._formatted: dict[tuple[ParameterSpace, str, bytes], str] = {}  # every prompt shows the history

    def format(self, params: list[float] | np.ndarray) -> str:
        """A vector in the model's reply style (each vector formatted once per space and style)."""
        space, style = self.model.policy.parameter_space, self.model.reply_style
        vector = np.asarray(params, dtype=np.float64)
        key = (space, style, vector.tobytes())  # the bytes tell -0.0 from 0.0
        text = self._formatted.get(key)
        if text is None:
            text = self._formatted[key] = space.format(vector, style)
        return text

    def context(self, shown: Shown = (), critic: bool = False) -> PromptContext:
        """
        What a prompt shows; ``shown`` appends candidates evaluated earlier in this iteration. ``critic``: the Critic's
        history shows the rollout excerpts of its latest entries (rep_traj, always_critic, critic_only); the Search's
        history shows, on tabular tasks, each entry's first episode (props_plus). The templates decide whether the task
        description is shown (every Critic; the Search only for props_plus or with ``search_sees_task``).
        """
        model, spec = self.model, self.model.variant_spec
        best = best_record(model.history)
        planned = model.max_iterations  # the plan, or fewer: the iterations a max_episodes cap still pays for
        if model.max_episodes is not None:
            per_iteration = spec.candidates_per_iteration * model.n_eval_episodes
            paid = model.iteration + max(1, math.ceil(model.episodes_left / max(1, per_iteration)))
            planned = paid if planned is None else min(planned, paid)
        shown_entries = shown_history(model.history, model.history_best_k, model.history_recent, model.history_slack)
        lines = self._history_lines(shown_entries, critic)
        n = len(model.history)
        lines += [
            HistoryLine(self.format(p), finite.mean(res.returns), len(res.episodes), index=n + j, values=self.values(p))
            for j, (p, res) in enumerate(shown)
        ]
        return PromptContext(
            task=describe_task(model.env_id, model.observation_space, model.action_space, type(model.policy).__name__),
            layout=model.policy.layout_lines(model.actions_clipped),
            space=model.policy.parameter_space,
            target=model.target,
            history=tuple(lines),
            iteration=model.iteration + 1,
            total_iterations=planned,
            step_size=model.step_size,
            best=None if best is None else best["mean_return"],
            best_episodes=0 if best is None else int(best["n_episodes"]),
            best_warmup=best is not None and best["kind"] == "warmup",
            search_sees_task=model.search_sees_task,
            selection_hints=model.critic_selection_hints,
            extra_statistics=model.extra_statistics,
            keep_best=spec.keep_best,
            history_omitted=len(model.history) - len(shown_entries),
            reuse_order=self.ours(),
            prompt_layout=model.prompt_layout,
            extra={"policy_kind": model.policy.kind, "policy_summary": model.policy.summary_lines()},
        )

    @staticmethod
    def values(params: list[float] | np.ndarray) -> tuple[float, ...]:
        """A vector's values as the reference layout writes them (:class:`~sb3_r2po.prompts.builder.HistoryLine`)."""
        return tuple(np.asarray(params, dtype=np.float64).reshape(-1).tolist())

    def reference_trace(self) -> ReferenceTrace:
        """The reference's trajectory format for this model's variant, spaces and policy (step cap: ``max_episode_steps``)."""
        model, spec = self.model, self.model.variant_spec.critic
        observation: ValueStyle = "int" if isinstance(model.observation_space, spaces.Discrete) else "list"
        action: ValueStyle = "nested"
        if model.policy.parameter_space.is_discrete:
            action = "int"
        elif isinstance(model.action_space, spaces.Discrete):
            action = "wrapped"
        trace = REFERENCE_TRACES.get(spec.prompt, "chain") if spec is not None else "chain"
        return ReferenceTrace(trace, observation, action, int(model.max_episode_steps))

    def ours(self) -> bool:
        """
        Whether any of our prompt options is on (a compressed history, ``search_sees_task``, ``critic_selection_hints``,
        ``extra_statistics``): the prompts are then a variant of R2PO's, and their sections are ordered for prefix reuse
        (:class:`~sb3_r2po.prompts.builder.PromptContext`'s ``reuse_order``). R2PO's defaults keep the reference's order.
        """
        model = self.model
        compressed = model.history_best_k is not None or model.history_recent is not None
        return compressed or model.search_sees_task or model.critic_selection_hints or model.extra_statistics

    def _history_lines(self, shown: list[dict[str, Any]], critic: bool) -> list[HistoryLine]:
        """The lines of ``shown``, the entries of the history the prompt shows."""
        model, spec = self.model, self.model.variant_spec
        n, position = len(model.history), {id(r): i for i, r in enumerate(model.history)}
        excerpts = self.excerpted_entries() if critic and spec.critic is not None and spec.critic.excerpts else 0
        trajectories = not critic and spec.search_trajectories and model.policy.parameter_space.is_discrete
        return [
            HistoryLine(
                self.format(r["params"]),
                r["mean_return"],
                r["n_episodes"],
                r["kind"] == "warmup",
                excerpt=r.get("rollout_excerpt") if n - position[id(r)] <= excerpts else None,
                trajectory=tuple(r["first_episode"]) if trajectories and r.get("first_episode") else None,
                index=position[id(r)],
                values=self.values(r["params"]),
            )
            for r in shown
        ]

    def excerpted_entries(self) -> int:
        """How many of the latest history entries the Critic shows a rollout excerpt of (``history_excerpts``)."""
        if self.model.history_excerpts is not None:
            return int(self.model.history_excerpts)
        model = self.model
        return default_history_excerpts(model.env_id, model.variant, model.policy.parameter_space.is_discrete)

    def stored_fields(self, result: RolloutResult) -> dict[str, Any]:
        """
        What later prompts show of a history entry's episodes, stored in its record: ``rollout_excerpt``, the episode
        closest to the mean return in 8 steps (variants whose Critic shows history excerpts), and ``first_episode``, the
        first episode whole (props_plus on tabular tasks). Other variants store nothing.
        """
        model, spec, fields = self.model, self.model.variant_spec, dict[str, Any]()
        if spec.critic is not None and spec.critic.excerpts and result.episodes:
            episode = result.episodes[mean_closest_index([float(r) for r in result.returns])]
            if model.prompt_layout == "reference":
                trace = self.reference_trace()
                fields["rollout_excerpt"] = reference_excerpt(episode, trace, EXCERPT_STEPS, model.trajectory_digits)
            else:
                fields["rollout_excerpt"] = render_excerpt(episode, EXCERPT_STEPS, model.trajectory_digits)
        if spec.search_trajectories and model.policy.parameter_space.is_discrete and result.episodes:
            if model.prompt_layout == "reference":
                lines = reference_table(result.episodes[0], self.reference_trace())
            else:
                lines = render_trajectory(result.episodes[0], None, model.trajectory_digits, fold=False).lines
            fields["first_episode"] = list(lines)
        return fields

    def evidence(self, result: RolloutResult | None) -> EvidencePackage:
        """The Critic's evidence package from a candidate's episodes (``None``: critic_only after a load)."""
        model, spec = self.model, self.model.variant_spec.critic
        assert spec is not None
        if result is None:  # critic_only after a load: the last candidate's episodes are not saved
            return EvidencePackage(None, {}, {}, None, False, spec.step_rewards)
        max_steps = spec.max_steps if spec.max_steps is not None else model.max_trajectory_steps
        return build_evidence(
            result.episodes,
            model.target,
            model.revision_threshold,
            max_steps,
            digits=model.trajectory_digits,
            fold=model.fold_repeated_steps,
            statistics=spec.statistics,
            trajectories=spec.trajectories,
            rule=spec.rule,
            step_rewards=spec.step_rewards,
            reference=self.reference_trace() if model.prompt_layout == "reference" else None,
        )
