"""PromptPO's rounds (arXiv 2605.30719) for the ``"Code"`` policy (``variant="promptpo"``): the LLM writes Python
policies from PromptPO's prompts (:mod:`sb3_r2po.prompts.code`); code runs only in a
:class:`~sb3_r2po.common.sandbox.CodeSandbox`. One round, as :meth:`CodeRoles.round` runs it::

    feedback   = LLM(feedback prompt)                   # once per run: a Feedback class summarising an episode
    reflection = LLM(the last kept policy vs earlier)   # rounds 2.. (code_reflection)
    prompt     = policy prompt (round 1), else the refinement prompt (every kept policy, feedback, reflection)
    for each of N candidates (code_candidates):         # independent replies to the same prompt
        code   = LLM(prompt), repaired (at most code_repairs times) after a missing code block, a syntax error,
                 or a crash, a timeout or an invalid action in its K episodes
    kept       = the best mean return (ties: the earlier), with its episodes' feedback lines -> the history
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv

from sb3_r2po.common.rollouts import RolloutResult, finite_mean
from sb3_r2po.common.sandbox import CodeSandbox, SandboxError, shorten_traceback
from sb3_r2po.prompts.code import CodeTask, extract_code, find_policy_class
from sb3_r2po.r2po.policies import Code, CodePolicy
from sb3_r2po.r2po.roles import Asking, UnusableReply
from sb3_r2po.r2po.run_state import Answer, Candidate, LLMCall

MAX_FEEDBACK_REPAIRS = 3  # PromptPO's repairs of its Feedback class
Evaluate = Callable[[Code], "RolloutResult | None"]  # K episodes of a candidate (None: a callback stopped training)


@dataclass
class Tried:
    """A candidate of a round: its code and episodes (``None``: none), why its replies or runs failed (in order)."""

    code: Code | None = None
    result: RolloutResult | None = None
    failures: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"mean_return": None if self.result is None else finite_mean(self.result.returns), "failures": self.failures}


@dataclass(eq=False)
class CodeRoles(Asking):
    """PromptPO's LLM calls of one ``learn()`` (:class:`~sb3_r2po.r2po.roles.Asking`'s fields, the policy, the env); the
    Feedback class is made once per run and kept in the record of the round that made or repaired it (``feedback_source``)."""

    policy: CodePolicy
    env: VecEnv | None
    feedback: Code | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        assert self.env is not None  # what the prompts show: its first sub-env, with the policy's own descriptions
        task = CodeTask.for_env(self.env.get_attr("unwrapped", indices=[0])[0], self.settings.episode_cap)
        self.task = dataclasses.replace(task, **self.policy.descriptions)
        if feedback := [r["feedback_source"] for r in self.history if r.get("feedback_source")]:
            self.feedback = (feedback[-1], "Feedback")

    def round(self, evaluate: Evaluate, stop: Callable[[], bool]) -> tuple[Candidate, dict[str, Any]] | None:
        """One round: the kept candidate and its record's fields, or ``None`` when a callback stopped training during
        ``evaluate`` (K episodes of a candidate); ``stop``: whether a callback asked to stop. An :class:`UnusableReply`
        when no candidate ran (the round runs again)."""
        s, task, feedback = self.settings, self.task, self.feedback
        if feedback is None:  # asked again next round when every reply failed
            self._feedback_class(task.feedback())
        reflection = (
            self._ask("reflection", task.reflection(self._attempts("")))[1] if self.history and s.code_reflection else ""
        )
        prompt = task.refine(self._attempts(reflection)) if self.history else task.policy()
        tried: list[Tried] = []
        while len(tried) < s.code_candidates and self.clock().episodes_left >= s.n_eval_episodes and not stop():
            tried.append(self._candidate(prompt, evaluate))
            if tried[-1].code is not None and tried[-1].result is None:
                return None  # a callback stopped training during its episodes
        if not (scored := [t for t in tried if t.result is not None]):
            reason = next((t.failures[-1].splitlines()[-1] for t in reversed(tried) if t.failures), "no candidate was asked")
            raise UnusableReply("search", f"no candidate of the round ran: {reason}")
        best = max(scored, key=lambda t: finite_mean(t.result.returns) if t.result else -np.inf)  # the earlier of equals
        assert best.code is not None and best.result is not None
        fields: dict[str, Any] = {"source": best.code[0], "policy_class": best.code[1], "reflection": reflection}
        fields |= {"feedback": self._summaries(best.result), "candidates": [t.summary() for t in tried]}
        if self.feedback is not None and self.feedback != feedback:  # a new or repaired Feedback class
            fields["feedback_source"] = self.feedback[0]
        return Candidate("search", np.zeros(0), best.failures, result=best.result), fields

    def _ask(self, role: str, content: str, expected: str | None = None) -> tuple[Code | None, str, str]:
        """One call: its code and class when ``expected`` names the class asked for, the reply's code (or the reply)
        to quote in a repair, and why it is unusable (``""``: usable); counted in ``llm_stats``."""
        messages = [{"role": "user", "content": content}]
        reply = self.backend.chat(messages, temperature=self.settings.temperature)
        source, reason, name = reply.text, "", None
        if expected is not None:
            code, reason = extract_code(reply.text)
            if code is not None:
                source, (name, reason) = code, find_policy_class(code, expected)
        tokens = (reply.prompt_tokens, reply.completion_tokens, reply.prompt_tokens_cached)
        call = LLMCall(role, messages, reply.text, reason or None, reply.seconds, *tokens)
        self._account(role, Answer(None, [call]))
        return (None if name is None else (source, name)), source, reason

    def _candidate(self, prompt: str, evaluate: Evaluate) -> Tried:
        """A candidate asked with ``prompt``, repaired until it runs its K episodes or ``code_repairs`` run out."""
        tried, content, role = Tried(), prompt, "search"
        for _ in range(1 + self.settings.code_repairs):
            if self.clock().episodes_left < self.settings.n_eval_episodes:  # a repair's episodes may not fit
                tried.failures.append(f"the episode budget cannot pay for {self.settings.n_eval_episodes} more episodes")
                return tried
            tried.code, source, reason = self._ask(role, content, self.task.policy_class)
            if tried.code is not None:
                try:
                    tried.result = evaluate(tried.code)
                    return tried
                except (SandboxError, TimeoutError) as error:  # a crash, a timeout (a call's, an episode's), a dead worker
                    reason = getattr(error, "traceback", "") or f"{type(error).__name__}: {error}"
            tried.failures.append(shorten_traceback(reason))
            content, role, tried.code = self.task.repair(source, reason), "repair", None
        return tried

    def _feedback_class(self, content: str) -> None:
        """Ask for the Feedback class with ``content``, repaired until it parses (at most 3 times; else ``None``)."""
        for _ in range(1 + MAX_FEEDBACK_REPAIRS):
            self.feedback, source, reason = self._ask("feedback", content, "Feedback")
            if self.feedback is not None:
                return
            content = self.task.feedback_repair(source, reason)

    def _summaries(self, result: RolloutResult) -> list[str]:
        """``Episode i: <summary>`` for each episode (the observations before each step); the Feedback class is repaired
        (at most 3 times) when it fails; no lines when it cannot be."""
        discrete = isinstance(self.policy.observation_space, spaces.Discrete)
        trajectories = [np.asarray(ep.observations[:-1], dtype=np.int64 if discrete else np.float64) for ep in result.episodes]
        for _ in range(1 + MAX_FEEDBACK_REPAIRS):
            if self.feedback is None:
                return []
            source, name = self.feedback
            try:
                with CodeSandbox(source, class_name=name, method="summarize_trajectory", mode=self.policy.sandbox) as box:
                    return [f"Episode {i + 1}: {box.summarize(traj)}" for i, traj in enumerate(trajectories)]
            except SandboxError as error:
                reason = getattr(error, "traceback", "") or f"{type(error).__name__}: {error}"
                self._feedback_class(self.task.feedback_repair(source, reason))
        return []

    def _attempts(self, reflection: str) -> list[dict[str, Any]]:
        """The history as PromptPO's prompts show it: each kept policy with its returns, its feedback and the reflection
        made after it (the next record's; the last one's: ``reflection``)."""
        after = [r.get("reflection", "") for r in self.history[1:]] + [reflection]
        return [
            {"source": r["source"], "returns": r["returns"], "feedback": "\n".join(r["feedback"]), "reflection": text}
            for r, text in zip(self.history, after, strict=True)
        ]
