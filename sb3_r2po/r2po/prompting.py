"""What the prompts of a run show: the history lines, the context of every prompt, and the Critic's evidence package."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

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
from sb3_r2po.common.rollouts import RolloutResult, finite_mean
from sb3_r2po.prompts.builder import HistoryLine, PromptContext
from sb3_r2po.prompts.tasks import describe_task
from sb3_r2po.r2po.arguments import R2POSettings
from sb3_r2po.r2po.policies import CompactPolicy
from sb3_r2po.r2po.records import Clock, best_record, shown_history
from sb3_r2po.variants import EXCERPT_STEPS
from sb3_r2po.zoo.settings import default_history_excerpts

REFERENCE_TRACES: dict[str, TraceStyle] = {"r2po": "chain", "three_traj": "ends", "rep_traj": "steps", "critic_only": "steps"}
"""The reference's trajectory format of each Critic template (see :data:`~sb3_r2po.common.evidence.TraceStyle`)."""

Shown = tuple[tuple[np.ndarray, RolloutResult], ...]  # candidates evaluated earlier in the iteration (actor_second_pass)


class PromptView:
    """Builds what a prompt shows from the run's ``settings``, ``history`` and ``policy`` (spaces and layout)."""

    def __init__(self, settings: R2POSettings, history: list[dict[str, Any]], policy: CompactPolicy) -> None:
        self.settings, self.history, self.policy, self.space = settings, history, policy, policy.parameter_space

    def format(self, params: list[float] | np.ndarray) -> str:
        """A vector in the settings' reply style."""
        return self.space.format(np.asarray(params, dtype=np.float64), self.settings.reply_style)

    def context(self, clock: Clock, shown: Shown = (), critic: bool = False) -> PromptContext:
        """What a prompt shows; ``shown``: candidates evaluated earlier in this iteration; ``critic``: the Critic's
        (its history shows excerpts where the variant's does; the Search's, props_plus's first episodes)."""
        s, spec, policy, history = self.settings, self.settings.variant_spec, self.policy, self.history
        best = best_record(history)
        planned = s.max_iterations  # the plan, or fewer: the iterations a max_episodes cap still pays for
        if s.max_episodes is not None:
            per_iteration = spec.candidates_per_iteration * s.n_eval_episodes
            paid = clock.iteration + max(1, math.ceil(clock.episodes_left / max(1, per_iteration)))
            planned = paid if planned is None else min(planned, paid)
        shown_entries = shown_history(history, s.history_best_k, s.history_recent, s.history_slack)
        lines = self._history_lines(shown_entries, critic)
        n = len(history)
        lines += [
            HistoryLine(self.format(p), finite_mean(res.returns), len(res.episodes), index=n + j, values=self.values(p))
            for j, (p, res) in enumerate(shown)
        ]
        return PromptContext(
            task=describe_task(s.env_id, policy.observation_space, policy.action_space, type(policy).__name__),
            layout=policy.layout_lines(s.actions_clipped),
            space=self.space,
            target=s.target,
            history=tuple(lines),
            iteration=clock.iteration + 1,
            total_iterations=planned,
            step_size=s.step_size,
            best=None if best is None else best["mean_return"],
            best_episodes=0 if best is None else int(best["n_episodes"]),
            best_warmup=best is not None and best["kind"] == "warmup",
            search_sees_task=s.search_sees_task,
            selection_hints=s.critic_selection_hints,
            extra_statistics=s.extra_statistics,
            keep_best=spec.keep_best,
            history_omitted=n - len(shown_entries),
            reuse_order=s.compressed or s.search_sees_task or s.critic_selection_hints or s.extra_statistics,
            prompt_layout=s.prompt_layout,
            extra={"policy_kind": policy.kind, "policy_summary": policy.summary_lines()},
        )

    @staticmethod
    def values(params: list[float] | np.ndarray) -> tuple[float, ...]:
        """A vector's values as the reference layout writes them (:class:`~sb3_r2po.prompts.builder.HistoryLine`)."""
        return tuple(np.asarray(params, dtype=np.float64).reshape(-1).tolist())

    def reference_trace(self) -> ReferenceTrace:
        """The reference's trajectory format for the variant, spaces and policy (step cap: ``max_episode_steps``)."""
        spec = self.settings.variant_spec.critic
        observation: ValueStyle = "int" if isinstance(self.policy.observation_space, spaces.Discrete) else "list"
        action: ValueStyle = "nested"
        if self.space.is_discrete:
            action = "int"
        elif isinstance(self.policy.action_space, spaces.Discrete):
            action = "wrapped"
        trace = REFERENCE_TRACES.get(spec.prompt, "chain") if spec is not None else "chain"
        return ReferenceTrace(trace, observation, action, int(self.settings.max_episode_steps))

    def _history_lines(self, shown: list[dict[str, Any]], critic: bool) -> list[HistoryLine]:
        spec = self.settings.variant_spec
        n, position = len(self.history), {id(r): i for i, r in enumerate(self.history)}
        excerpts = self.excerpted_entries() if critic and spec.critic is not None and spec.critic.excerpts else 0
        trajectories = not critic and spec.search_trajectories and self.space.is_discrete
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
        s = self.settings
        if s.history_excerpts is not None:
            return int(s.history_excerpts)
        return default_history_excerpts(s.env_id, s.variant, self.space.is_discrete)

    def stored_fields(self, result: RolloutResult) -> dict[str, Any]:
        """What later prompts show of an entry's episodes, stored in its record: ``rollout_excerpt`` (the episode closest
        to the mean return, 8 steps; Critics shown excerpts) and ``first_episode`` (props_plus on tabular tasks)."""
        s, spec, fields = self.settings, self.settings.variant_spec, dict[str, Any]()
        if spec.critic is not None and spec.critic.excerpts and result.episodes:
            episode = result.episodes[mean_closest_index([float(r) for r in result.returns])]
            if s.prompt_layout == "reference":
                trace = self.reference_trace()
                fields["rollout_excerpt"] = reference_excerpt(episode, trace, EXCERPT_STEPS, s.trajectory_digits)
            else:
                fields["rollout_excerpt"] = render_excerpt(episode, EXCERPT_STEPS, s.trajectory_digits)
        if spec.search_trajectories and self.space.is_discrete and result.episodes:
            if s.prompt_layout == "reference":
                lines = reference_table(result.episodes[0], self.reference_trace())
            else:
                lines = render_trajectory(result.episodes[0], None, s.trajectory_digits, fold=False).lines
            fields["first_episode"] = list(lines)
        return fields

    def evidence(self, result: RolloutResult | None) -> EvidencePackage:
        """The Critic's evidence package from a candidate's episodes (``None``: critic_only after a load)."""
        s, spec = self.settings, self.settings.variant_spec.critic
        assert spec is not None
        if result is None:  # critic_only after a load: the last candidate's episodes are not saved
            return EvidencePackage(None, {}, {}, None, False, spec.step_rewards)
        max_steps = spec.max_steps if spec.max_steps is not None else s.max_trajectory_steps
        return build_evidence(
            result.episodes,
            s.target,
            s.revision_threshold,
            max_steps,
            digits=s.trajectory_digits,
            fold=s.fold_repeated_steps,
            statistics=spec.statistics,
            trajectories=spec.trajectories,
            rule=spec.rule,
            step_rewards=spec.step_rewards,
            reference=self.reference_trace() if s.prompt_layout == "reference" else None,
        )
