"""The LLM's two roles in R2PO: the Search proposes a vector from the history, the Critic revises one from its evidence.

:class:`LLMRoles` owns the backend (created at the first ``learn()``), the prompt builder, the retry policy and the
accounting of every call in ``R2PO.llm_stats``. Replies are parsed (:mod:`sb3_r2po.common.parsing`), never executed.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from sb3_r2po.common.evidence import EvidencePackage
from sb3_r2po.common.parsing import Reading
from sb3_r2po.llm.asking import Answer, ask_for_params, ask_together
from sb3_r2po.llm.base import ChatBackend, ChecksResources, Constrainable, Message, Preparable, log_progress
from sb3_r2po.llm.resolve import make_backend
from sb3_r2po.prompts.builder import HistoryLine, PromptBuilder
from sb3_r2po.r2po.history import duplicate_error, perturb_best
from sb3_r2po.r2po.prompting import PromptView, Shown
from sb3_r2po.r2po.records import Candidate, DiscardedAttempt, Role
from sb3_r2po.r2po.reporting import call_line
from sb3_r2po.r2po.run_state import RunState

if TYPE_CHECKING:
    from sb3_r2po.r2po.r2po import R2PO

Check = Callable[[np.ndarray], "str | None"]
"""Extra validation of a parsed vector: an error to state in a re-ask, or ``None``."""

LLM_STATS = ("calls", "parse_failures", "fallbacks", "seconds", "prompt_tokens", "completion_tokens", "prompt_tokens_cached")
"""The keys of ``R2PO.llm_stats`` (``discarded_attempts`` and ``discarded_episodes`` are added at the first discarded
attempt).
``prompt_tokens_cached``: of ``prompt_tokens``, those the backend reported it did not have to process (a prefix
cache); absent from the ``llm_stats`` of models saved before it was counted, which count it from their next call."""


class UnusableReply(Exception):
    """An LLM reply that cannot be used discards the running iteration (``on_unusable_reply="rerun"``)."""

    def __init__(self, role: Role, reason: str) -> None:
        super().__init__(f"unusable {role} reply: {reason}")
        self.role: Role = role
        self.reason = reason


def new_llm_stats() -> dict[str, float]:
    """``llm_stats`` of a model that has made no call."""
    return {key: 0.0 if key == "seconds" else 0 for key in LLM_STATS}


class LLMRoles:
    """
    The Search and Critic roles of one model.

    :param model: The model; its public settings (``llm``, ``temperature``, ``reply_style``, the retry options) and its
        ``history`` are read at every call, and every call is counted in its ``llm_stats``.
    """

    def __init__(self, model: R2PO) -> None:
        self.model = model
        self.view = PromptView(model)
        self.backend: ChatBackend | None = None
        self.prompts: PromptBuilder | None = None
        self.last_exchanges: dict[str, tuple[str, str]] = {}
        """The last prompt and reply of each role (logged to TensorBoard)."""

    def connect(self, run: RunState) -> None:
        """Create the backend (first ``learn()`` only: loading a model takes long) and the prompt builder."""
        model = self.model
        if self.backend is None:
            if model.llm is None:
                raise ValueError(
                    "This model has no llm: it was saved with an llm object, which is never stored. "
                    "Pass one again, e.g. R2PO.load(path, env=env, llm=...), or set model.llm before learn()."
                )
            if not model.llm_confirmed:
                raise ValueError(
                    f"This model was loaded with llm={model.llm!r}, which imports a module named in the saved file. "
                    "Load only files you trust; to use it, pass llm=... to R2PO.load() or call model.set_llm(model.llm)."
                )
            if model.verbose >= 1:
                name = model.llm if isinstance(model.llm, str) else type(model.llm).__name__
                print(f"R2PO: preparing the LLM {name}", flush=True)
            start = time.perf_counter()
            backend = make_backend(model.llm)
            if isinstance(backend, ChecksResources):  # fail before any download or load when the model cannot fit
                backend.check_resources()
            if isinstance(backend, Preparable):  # load it now (with its progress logged) rather than in the first call
                with log_progress(model.verbose >= 1):
                    backend.prepare()
                if model.verbose >= 1:
                    print(f"R2PO: LLM ready in {time.perf_counter() - start:.1f} s", flush=True)
            if isinstance(backend, Constrainable):  # constrained decoding (e.g. a grammar) from the parameter space
                backend.constrain(model.policy.parameter_space)
            self.backend = run.open(
                backend, model.checkpoint_dir, model.history
            )  # with a checkpoint_dir: a transcript of every call
        if self.prompts is None:
            self.prompts = PromptBuilder(model.prompt_template_dir, model.reply_style)

    @property
    def reading(self) -> Reading:
        """How replies are read (``reply_reading``): the variant's reading for the policy's kind of parameters."""
        model = self.model
        if model.reply_reading == "last_vector":
            return "last_vector"
        linear, tabular = model.variant_spec.reading
        return tabular if model.policy.parameter_space.values is not None else linear

    @property
    def reasks(self) -> int:
        """Re-asks after an unusable reply: ``max_llm_retries`` with ``on_unusable_reply="reask"``, none otherwise."""
        return self.model.max_llm_retries if self.model.on_unusable_reply == "reask" else 0

    def check_usable(self, role: Role, answer: Answer) -> None:
        """With ``on_unusable_reply="rerun"`` (the reference), an answer without a vector discards the iteration."""
        if answer.params is None and self.model.on_unusable_reply == "rerun":
            raise UnusableReply(role, answer.failures[-1] if answer.failures else "no reply")

    def first_candidate(self, role: Role, answer: Answer, rng: np.random.Generator) -> Candidate:
        """The iteration's first candidate: the answer's vector; else, with ``on_unusable_reply="reask"``, a fallback
        step from the best candidate (counted in ``llm_stats``), and with ``"rerun"`` the iteration is discarded."""
        if answer.params is not None:
            return Candidate.answered(role, answer.params, answer)
        self.check_usable(role, answer)
        model = self.model
        model.llm_stats["fallbacks"] += 1
        fallback = perturb_best(model.history, model.policy.parameter_space, model.step_size, rng)
        return Candidate.answered("fallback", fallback, answer)

    def with_reruns(self, iterate: Callable[[list[DiscardedAttempt]], bool]) -> bool:
        """
        Run one iteration, ``iterate(discarded)``. With ``on_unusable_reply="rerun"`` an unusable reply (of either role)
        discards the attempt, as the reference does: its episodes stay spent (and counted, in ``llm_stats``'s
        ``discarded_episodes`` too) on top of the plan (``max_iterations`` counts completed iterations only; a
        ``max_episodes`` cap counts them), nothing enters the history, and the iteration runs again from its first LLM
        call, at most ``max_iteration_attempts`` times; then training stops with a warning. ``discarded`` lists the
        attempts discarded so far (the entry records them).
        """
        model, discarded = self.model, list[DiscardedAttempt]()
        for attempt in range(1, model.max_iteration_attempts + 1):
            episodes = model.episodes_used
            try:
                return iterate(discarded)
            except UnusableReply as exc:
                discarded.append(DiscardedAttempt(exc.role, exc.reason, model.episodes_used - episodes))
                model.llm_stats["discarded_attempts"] = model.llm_stats.get("discarded_attempts", 0) + 1
                spent = model.llm_stats.get("discarded_episodes", 0) + discarded[-1].episodes  # on top of the plan
                model.llm_stats["discarded_episodes"] = spent
                if model.verbose >= 1:
                    print(
                        f"R2PO: iteration {model.iteration + 1}, attempt {attempt} of {model.max_iteration_attempts}: "
                        f"unusable {exc.role} reply ({exc.reason}); the iteration is discarded",
                        flush=True,
                    )
                if (
                    model.episodes_left < model.n_eval_episodes
                ):  # (a callback's stop is never pending here: it skips every LLM step)
                    return False
        warnings.warn(
            f"R2PO: {model.max_iteration_attempts} attempts of iteration {model.iteration + 1} ended in an unusable "
            f"reply (last: {discarded[-1].role}: {discarded[-1].reason}); training stops, as the reference does. "
            "on_unusable_reply='reask' re-asks with the error stated and falls back instead.",
            RuntimeWarning,
            stacklevel=2,
        )
        return False

    def search(self, shown: Shown = (), also: tuple[np.ndarray, ...] = ()) -> Answer:
        """The Search proposes a new vector from the history (plus ``shown``); with ``reject_duplicates``, not one of
        ``also`` (candidates of the running iteration)."""
        return self._ask("search", self._search_messages(shown), self.not_new(also))

    def search_pair(self) -> tuple[Answer, Answer]:
        """Two independent Search proposals from the same history, asked as one batch (pure_search)."""
        prompts, space = self._prompts(), self.model.policy.parameter_space
        messages = self._search_messages()  # the same for both
        assert self.backend is not None
        first, second = ask_together(
            self.backend,
            [messages, messages],
            space,
            role="search",
            retry_message=lambda reason: prompts.retry(reason, space),
            checks=[
                lambda settled: self.not_new(),
                lambda settled: self.not_new(tuple(a.params for a in settled if a.params is not None)),
            ],
            temperature=self.model.temperature,
            max_retries=self.reasks,
            reading=self.reading,
            reject_cut_off=self.model.reject_cut_off_replies,
        )
        return self._account("search", first), self._account("search", second)

    def revise(
        self, theta: np.ndarray, mean_return: float, n_episodes: int, evidence: EvidencePackage, check: Check
    ) -> Answer:
        """
        The Critic revises ``theta`` (its mean return over ``n_episodes``) from its evidence package, with the
        variant's template (critic_only's shows no candidate: its evidence is the latest candidate's episode).

        :param check: :meth:`seen` (a revision may repeat ``theta``: it is not evaluated as a new vector) or
            :meth:`not_new` (critic_only: an unchanged vector would be evaluated again).
        """
        prompts = self._prompts()
        spec = self.model.variant_spec.critic
        assert spec is not None
        candidate = HistoryLine(self.view.format(theta), mean_return, n_episodes, values=self.view.values(theta))
        messages = prompts.critic(self.view.context(critic=True), candidate, evidence, spec.prompt, spec.history)
        return self._ask("critic", messages, check)

    def not_new(self, also: tuple[np.ndarray, ...] = ()) -> Check:
        """With ``reject_duplicates``: a check refusing vectors of the history and ``also``; otherwise none."""

        def check(params: np.ndarray) -> str | None:
            if self.model.reject_duplicates and any(np.array_equal(params, other) for other in also):
                return "this vector was already proposed in this iteration; propose a different one"
            return self.seen(params)

        return check

    def seen(self, params: np.ndarray) -> str | None:
        """With ``reject_duplicates``: why ``params``, a history vector, is unusable; otherwise ``None``."""
        return duplicate_error(self.model.history, params) if self.model.reject_duplicates else None

    def _search_messages(self, shown: Shown = ()) -> list[Message]:
        spec = self.model.variant_spec
        return self._prompts().search(self.view.context(shown), spec.search_prompt, spec.search_history)

    def _prompts(self) -> PromptBuilder:
        assert self.prompts is not None, "connect() first"
        return self.prompts

    def _ask(self, role: str, messages: list[Message], check: Check) -> Answer:
        prompts, space = self._prompts(), self.model.policy.parameter_space
        assert self.backend is not None
        answer = ask_for_params(
            self.backend,
            messages,
            space,
            role=role,
            retry_message=lambda reason: prompts.retry(reason, space),
            check=check,
            temperature=self.model.temperature,
            max_retries=self.reasks,
            reading=self.reading,
            reject_cut_off=self.model.reject_cut_off_replies,
        )
        return self._account(role, answer)

    def _account(self, role: str, answer: Answer) -> Answer:
        """Count an answer's calls in ``llm_stats`` and keep the last exchange for the logs; with ``verbose >= 2`` print
        a line per call (:func:`~sb3_r2po.r2po.reporting.call_line`)."""
        stats, verbose = self.model.llm_stats, self.model.verbose
        for call in answer.calls:
            if verbose >= 2:  # only a reply without error gave the answer's vector (the last call)
                usable = answer.params if call.error is None else None
                print(call_line(int(stats["calls"]) + 1, call, usable, self.model.policy.parameter_space), flush=True)
            stats["calls"] += 1
            stats["parse_failures"] += int(call.error is not None)
            stats["seconds"] += call.seconds
            stats["prompt_tokens"] += call.prompt_tokens or 0
            stats["completion_tokens"] += call.completion_tokens or 0
            stats["prompt_tokens_cached"] = stats.get("prompt_tokens_cached", 0) + (call.prompt_tokens_cached or 0)
            self.last_exchanges[role] = (call.messages[-1]["content"], call.reply)
            if call.error is not None and verbose >= 1:
                print(f"R2PO: unusable {role} reply ({call.error})", file=sys.stderr)
        if answer.notes and verbose >= 1:
            print(f"R2PO: {role} reply adjusted: " + "; ".join(answer.notes), file=sys.stderr)
        return answer
