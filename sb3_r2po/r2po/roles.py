"""The LLM's roles (the Search proposes a vector from the history, the Critic revises one from its evidence; replies
are parsed, never executed) and the search patterns, one per :data:`~sb3_r2po.r2po.arguments.SearchMode`, that ask them
for an iteration's proposal and its challenger."""

from __future__ import annotations

import math
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from sb3_r2po.common import rollouts
from sb3_r2po.common.parameters import ParameterSpace, Reading, bound_reason, parse_params
from sb3_r2po.common.rollouts import EvidencePackage, ReferenceTrace, RolloutResult, TraceStyle, ValueStyle, finite_mean
from sb3_r2po.llm.base import (
    ChatBackend,
    ChatReply,
    ChecksResources,
    Constrainable,
    Message,
    Preparable,
    chat_batch,
    log_progress,
)
from sb3_r2po.llm.resolve import make_backend
from sb3_r2po.prompts.builder import HistoryLine, PromptBuilder, PromptContext
from sb3_r2po.prompts.tasks import describe_task
from sb3_r2po.r2po import run_state
from sb3_r2po.r2po.arguments import EXCERPT_STEPS, R2POSettings, SearchMode, Variant
from sb3_r2po.r2po.policies import CompactPolicy
from sb3_r2po.r2po.reporting import call_line
from sb3_r2po.r2po.run_state import Answer, Candidate, Clock, DiscardedAttempt, LLMCall, Record, Revision, Role
from sb3_r2po.zoo.settings import default_history_excerpts

Check = Callable[[np.ndarray], "str | None"]  # extra validation of a parsed vector: an error to state in a re-ask

LLM_STATS = ("calls", "parse_failures", "fallbacks", "seconds", "prompt_tokens", "completion_tokens", "prompt_tokens_cached")
"""The keys of ``R2PO.llm_stats`` (``discarded_attempts`` and ``discarded_episodes`` appear at the first discarded
attempt; ``prompt_tokens_cached`` is absent from older models)."""


class UnusableReply(Exception):
    """An LLM reply that cannot be used discards the running iteration (``on_unusable_reply="rerun"``)."""

    def __init__(self, role: Role, reason: str) -> None:
        super().__init__(f"unusable {role} reply: {reason}")
        self.role, self.reason = role, reason


def new_llm_stats() -> dict[str, float]:
    """``llm_stats`` of a model that has made no call."""
    return {key: 0.0 if key == "seconds" else 0 for key in LLM_STATS}


def make_llm(llm: Any, confirmed: bool, space: ParameterSpace | None, verbose: int) -> ChatBackend:
    """The backend of an ``llm`` spec, prepared (loaded) and constrained to ``space`` where it can be (``None``: a code
    policy's replies are free text); ``confirmed``: whether a loaded ``llm`` string that imports a module may be used."""
    if llm is None:
        raise ValueError(
            "This model has no llm: it was saved with an llm object, which is never stored. "
            "Pass one again, e.g. R2PO.load(path, env=env, llm=...), or set model.llm before learn()."
        )
    if not confirmed:
        raise ValueError(
            f"This model was loaded with llm={llm!r}, which imports a module named in the saved file. "
            "Load only files you trust; to use it, pass llm=... to R2PO.load() or call model.set_llm(model.llm)."
        )
    if verbose >= 1:
        print(f"R2PO: preparing the LLM {llm if isinstance(llm, str) else type(llm).__name__}", flush=True)
    start = time.perf_counter()
    backend = make_backend(llm)
    if isinstance(backend, ChecksResources):  # fail before any download or load when the model cannot fit
        backend.check_resources()
    if isinstance(backend, Preparable):  # load it now (with its progress logged) rather than in the first call
        with log_progress(verbose >= 1):
            backend.prepare()
        if verbose >= 1:
            print(f"R2PO: LLM ready in {time.perf_counter() - start:.1f} s", flush=True)
    if isinstance(backend, Constrainable) and space is not None:  # e.g. a grammar from the parameter space
        backend.constrain(space)
    return backend


@dataclass(eq=False)
class Asking:
    """What the LLM roles of one ``learn()`` share: they ask ``backend``, count every call in ``stats`` (``llm_stats``),
    read the run's counts from ``clock`` and rerun an iteration after an unusable reply."""

    settings: R2POSettings
    history: list[Record]
    stats: dict[str, float]
    backend: ChatBackend
    clock: Callable[[], Clock]
    verbose: int
    space: ParameterSpace | None = field(default=None, init=False)  # the policy's vector, which ``verbose=2`` prints
    last_exchanges: dict[str, tuple[str, str]] = field(default_factory=dict, init=False)  # each role's last prompt and reply

    def check_usable(self, role: Role, answer: Answer) -> None:
        """With ``on_unusable_reply="rerun"`` (the reference), an answer without a vector discards the iteration."""
        if answer.params is None and self.settings.on_unusable_reply == "rerun":
            raise UnusableReply(role, answer.failures[-1] if answer.failures else "no reply")

    def with_reruns(self, iterate: Callable[[list[DiscardedAttempt]], bool]) -> bool:
        """Run ``iterate(discarded)``; with ``on_unusable_reply="rerun"`` an unusable reply discards the attempt (its
        episodes stay spent) and the iteration runs again, at most ``max_iteration_attempts`` times; then training stops."""
        stats, attempts, discarded = self.stats, self.settings.max_iteration_attempts, list[DiscardedAttempt]()
        for attempt in range(1, attempts + 1):
            episodes = self.clock().episodes_used
            try:
                return iterate(discarded)
            except UnusableReply as exc:
                clock = self.clock()
                discarded.append(DiscardedAttempt(exc.role, exc.reason, clock.episodes_used - episodes))
                stats["discarded_attempts"] = stats.get("discarded_attempts", 0) + 1
                stats["discarded_episodes"] = stats.get("discarded_episodes", 0) + discarded[-1].episodes
                if self.verbose >= 1:
                    print(
                        f"R2PO: iteration {clock.iteration + 1}, attempt {attempt} of {attempts}: "
                        f"unusable {exc.role} reply ({exc.reason}); the iteration is discarded",
                        flush=True,
                    )
                if clock.episodes_left < self.settings.n_eval_episodes:  # (a callback's stop skips every LLM step)
                    return False
        warnings.warn(
            f"R2PO: {attempts} attempts of iteration {self.clock().iteration + 1} ended in an unusable "
            f"reply (last: {discarded[-1].role}: {discarded[-1].reason}); training stops, as the reference does. "
            "on_unusable_reply='reask' re-asks with the error stated and falls back instead.",
            RuntimeWarning,
            stacklevel=2,
        )
        return False

    def _account(self, role: str, answer: Answer) -> Answer:
        """Count an answer's calls in ``llm_stats``, keep the last exchange and print them (``verbose``)."""
        stats, verbose = self.stats, self.verbose
        for call in answer.calls:
            if verbose >= 2:  # only a reply without error gave the answer's vector (the last call)
                usable = answer.params if call.error is None else None
                print(call_line(int(stats["calls"]) + 1, call, usable, self.space), flush=True)
            stats["calls"] += 1
            stats["parse_failures"] += int(call.error is not None)
            stats["seconds"] += call.seconds
            for key in ("prompt_tokens", "completion_tokens", "prompt_tokens_cached"):  # the last: absent from older models
                stats[key] = stats.get(key, 0) + (getattr(call, key) or 0)
            self.last_exchanges[role] = (call.messages[-1]["content"], call.reply)
            if call.error is not None and verbose >= 1:
                print(f"R2PO: unusable {role} reply ({call.error})", file=sys.stderr)
        if answer.notes and verbose >= 1:
            print(f"R2PO: {role} reply adjusted: " + "; ".join(answer.notes), file=sys.stderr)
        return answer


class LLMRoles(Asking):
    """The Search and Critic roles of one ``learn()`` (:class:`Asking`), shown ``policy`` (its spaces and layout)."""

    def __init__(
        self,
        settings: R2POSettings,
        history: list[Record],
        policy: CompactPolicy,
        stats: dict[str, float],
        backend: ChatBackend,
        clock: Callable[[], Clock],
        verbose: int,
    ) -> None:
        super().__init__(settings, history, stats, backend, clock, verbose)
        self.space: ParameterSpace = policy.parameter_space
        self.view = PromptView(settings, history, policy)
        self.prompts = PromptBuilder(settings.prompt_template_dir, settings.reply_style)

    def first_candidate(self, role: Role, answer: Answer, rng: np.random.Generator) -> Candidate:
        """The iteration's first candidate: the answer's vector; else, with ``on_unusable_reply="reask"``, a fallback
        step from the best candidate (counted in ``llm_stats``), and with ``"rerun"`` the iteration is discarded."""
        if answer.params is not None:
            return Candidate.answered(role, answer.params, answer)
        self.check_usable(role, answer)
        self.stats["fallbacks"] += 1
        fallback = run_state.perturb_best(self.history, self.space, self.settings.step_size, rng)
        return Candidate.answered("fallback", fallback, answer)

    def search(self, shown: Shown = (), also: tuple[np.ndarray, ...] = ()) -> Answer:
        """The Search's proposal from the history (plus ``shown``); with ``reject_duplicates``, not one of ``also``."""
        return self._ask("search", self._search_messages(shown), self.not_new(also))

    def search_pair(self) -> tuple[Answer, Answer]:
        """Two independent Search proposals from the same history, asked as one batch (pure_search)."""
        messages = self._search_messages()
        checks = [lambda settled: self.not_new(tuple(a.params for a in settled if a.params is not None))] * 2
        first, second = ask_together(self.backend, [messages, messages], self.space, checks=checks, **self._asking("search"))
        return self._account("search", first), self._account("search", second)

    def revise(
        self, theta: np.ndarray, mean_return: float, n_episodes: int, evidence: EvidencePackage, check: Check
    ) -> Answer:
        """The Critic revises ``theta`` (its mean return over ``n_episodes``) from ``evidence``; ``check``: :meth:`seen`
        (a revision may repeat ``theta``) or :meth:`not_new` (critic_only: an unchanged vector would be evaluated)."""
        spec = self.settings.variant_spec.critic
        assert spec is not None
        candidate = self.view.line(theta, mean_return, n_episodes)
        context = self.view.context(self.clock(), critic=True)
        return self._ask("critic", self.prompts.critic(context, candidate, evidence, spec.prompt, spec.history), check)

    def not_new(self, also: tuple[np.ndarray, ...] = ()) -> Check:
        """With ``reject_duplicates``: a check refusing vectors of the history and ``also``; otherwise none."""

        def check(params: np.ndarray) -> str | None:
            if self.settings.reject_duplicates and any(np.array_equal(params, other) for other in also):
                return "this vector was already proposed in this iteration; propose a different one"
            return self.seen(params)

        return check

    def seen(self, params: np.ndarray) -> str | None:
        """With ``reject_duplicates``: why ``params``, a history vector, is unusable; otherwise ``None``."""
        return run_state.duplicate_error(self.history, params) if self.settings.reject_duplicates else None

    def _search_messages(self, shown: Shown = ()) -> list[Message]:
        spec = self.settings.variant_spec
        return self.prompts.search(self.view.context(self.clock(), shown), spec.search_prompt, spec.search_history)

    def _asking(self, role: str) -> dict[str, Any]:  # ask_for_params's arguments from the settings
        s, (linear, tabular) = self.settings, self.settings.variant_spec.reading
        variant_reading = tabular if self.space.values is not None else linear
        return dict(
            role=role,
            retry_message=lambda reason: self.prompts.retry(reason, self.space),
            temperature=s.temperature,
            max_retries=s.max_llm_retries if s.on_unusable_reply == "reask" else 0,  # "rerun": no re-ask
            reading="last_vector" if s.reply_reading == "last_vector" else variant_reading,
            reject_cut_off=s.reject_cut_off_replies,
        )

    def _ask(self, role: str, messages: list[Message], check: Check) -> Answer:
        answer = ask_for_params(self.backend, messages, self.space, check=check, **self._asking(role))
        return self._account(role, answer)


FIXATION_PATTERN = re.compile(
    r"\bworst\b"
    r"|\blowest[- ](?:return(?:s|ing)?|scor(?:e|ing))\b"
    r"|\b(?:episode|rollout|trajectory|run)s? with the (?:lowest|smallest|minimum|worst) (?:return|score)\b",
    re.I,
)
"""References to the worst (lowest-return) episode in a Critic reply. Generic failure words are not matched: R2PO's
prompt asks the Critic to tell systematic from occasional failures."""


def points_at_worst(text: str) -> bool:
    """Whether a Critic reply refers to the worst episode (:data:`FIXATION_PATTERN`)."""
    return bool(FIXATION_PATTERN.search(text or ""))


Vector = Sequence[float] | np.ndarray  # a parameter vector, as a record's list or an array


def edit_size(before: Vector, after: Vector) -> dict[str, float]:
    """Number of changed parameters, largest absolute change and L1 norm of the change."""
    delta = np.abs(np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64))
    return {"n_changed": int((delta > 1e-12).sum()), "max_change": float(delta.max(initial=0.0)), "l1": float(delta.sum())}


def diagnose_revision(
    before: Vector,
    after: Vector,
    before_return: float,
    after_return: float | None,
    reply: str,
    accepted: bool,
    above_tau_c: bool,
) -> dict[str, Any]:
    """A revision's ``record["diagnostics"]``: ``accepted`` (committed), ``regression`` (an evaluated revision's mean
    below the candidate's), :func:`edit_size`, ``worst_fixation`` (:func:`points_at_worst`) and ``above_tau_c``."""
    return {
        "accepted": bool(accepted),
        "regression": bool(after_return is not None and after_return < before_return),
        **edit_size(before, after),
        "worst_fixation": points_at_worst(reply),
        "above_tau_c": bool(above_tau_c),
    }


@dataclass(frozen=True)
class Start:
    """What an iteration starts from: the episodes left, K, the last entry's episodes (in memory) and ``tau_c``."""

    episodes_left: float
    n_eval_episodes: int
    last_result: RolloutResult | None
    revision_threshold: float | None

    def above_tau_c(self, mean_return: float) -> bool:
        return self.revision_threshold is not None and mean_return >= self.revision_threshold


class SearchPattern:
    """One Search proposal, then its Critic revision when the variant has a Critic (``one``)."""

    first_role: Role = "search"  # the role whose reply is the iteration's first candidate
    second_role: Role | None = "critic"  # the role asked for a second candidate (the Critic: when the variant has one)

    def __init__(self, variant: Variant) -> None:
        self.variant = variant  # the challenger: the role asked for its second candidate (None: one per iteration)
        self.challenger = None if self.second_role == "critic" and variant.critic is None else self.second_role

    def propose(self, roles: LLMRoles, start: Start) -> Answer:
        """Step 1: the first candidate's answer."""
        return roles.search()

    def challenge(self, roles: LLMRoles, first: Candidate) -> Answer:
        """Steps 3-4: the evidence package of the evaluated first candidate, and the Critic's revision of it."""
        assert first.result is not None
        evidence = roles.view.evidence(first.result)
        return roles.revise(first.params, first.mean_return, len(first.result.episodes), evidence, roles.seen)

    def entry(self, first: Candidate, revision: Revision) -> tuple[Candidate | None, Revision]:
        """The history entry's ``search`` and ``revision`` fields."""
        return first, revision

    def diagnose(self, first: Candidate, revision: Revision, start: Start, history: list[Record]) -> dict | None:
        """The diagnostics of a Critic revision (:func:`diagnose_revision`); ``None`` without one."""
        revised = revision.candidate
        if revision.role != "critic" or revised is None or revised.reply is None:
            return None
        after = revised.mean_return if revised.result is not None else None
        accepted = revision.status in ("kept", "declined")
        above = start.above_tau_c(first.mean_return)
        return diagnose_revision(first.params, revised.params, first.mean_return, after, revised.reply, accepted, above)


class PairedSearch(SearchPattern):
    """pure_search: two independent Search proposals from the same history, asked as one batch before any rollout, as
    the reference does (with ``on_unusable_reply="rerun"`` an unusable second one discards the iteration); keep the best."""

    second_role: Role | None = "search"
    _spare: Answer | None = None  # the pair's second proposal, until challenge() takes it

    def propose(self, roles: LLMRoles, start: Start) -> Answer:
        self._spare = None
        if start.episodes_left < 2 * start.n_eval_episodes:  # the budget pays for one evaluation only
            return roles.search()
        first, self._spare = roles.search_pair()
        if first.params is not None:  # an unusable first proposal is the iteration's first unusable reply
            roles.check_usable("search", self._spare)  # "rerun": discarded before any rollout
        return first

    def challenge(self, roles: LLMRoles, first: Candidate) -> Answer:
        """The pair's second proposal; asked again (never the first vector) when it repeats the first with
        ``reject_duplicates``, or when the first candidate came from the fallback of a single proposal."""
        spare, self._spare = self._spare, None
        repeated = spare is not None and spare.params is not None and np.array_equal(spare.params, first.params)
        if spare is not None and not (repeated and roles.settings.reject_duplicates):
            return spare
        return roles.search(also=(first.params,))


class SecondPass(SearchPattern):
    """actor_second_pass: a second Search proposal that sees the first one evaluated; keep the best."""

    second_role: Role | None = "search"

    def challenge(self, roles: LLMRoles, first: Candidate) -> Answer:
        assert first.result is not None
        return roles.search(shown=((first.params, first.result),), also=(first.params,))


class CriticOnly(SearchPattern):
    """critic_only: the Critic revises the last history entry from its representative episode; always kept."""

    first_role: Role = "critic"
    second_role: Role | None = None

    def propose(self, roles: LLMRoles, start: Start) -> Answer:
        history = roles.history
        if not history:  # no warm-up: the reference asks with an empty history and no trace
            return roles.revise(np.zeros(roles.space.size), 0.0, 0, roles.view.evidence(None), roles.not_new())
        last, result = history[-1], start.last_result  # None after a load (not saved)
        if result is not None and (
            len(result.episodes) != last["n_episodes"] or not np.isclose(finite_mean(result.returns), last["mean_return"])
        ):
            result = None  # not the last entry's episodes
        params, evidence = np.asarray(last["params"]), roles.view.evidence(result)
        return roles.revise(params, last["mean_return"], last["n_episodes"], evidence, roles.not_new())

    def entry(self, first: Candidate, revision: Revision) -> tuple[Candidate | None, Revision]:
        return None, Revision("critic", "kept", first, own_episodes=False)

    def diagnose(self, first: Candidate, revision: Revision, start: Start, history: list[Record]) -> dict | None:
        if not history or first.reply is None:
            return None
        last = history[-1]
        before, above = last["mean_return"], start.above_tau_c(last["mean_return"])
        return diagnose_revision(last["params"], first.params, before, first.mean_return, first.reply, True, above)


def pattern_for(variant: Variant) -> SearchPattern:
    """The search pattern of ``variant`` (one per :data:`~sb3_r2po.r2po.arguments.SearchMode`)."""
    patterns: dict[SearchMode, type[SearchPattern]] = {
        "one": SearchPattern,
        "two_independent": PairedSearch,
        "two_sequential": SecondPass,
        "none": CriticOnly,
    }
    return patterns[variant.search](variant)


MAX_ECHOED_REPLY_CHARS = 2000  # a re-ask quotes at most this much of the unusable reply back to the model


def ask_for_params(
    backend: ChatBackend,
    messages: Sequence[Message],
    space: ParameterSpace,
    *,
    role: str,
    retry_message: Callable[[str], Message],
    check: Check = lambda params: None,
    temperature: float = 0.0,
    max_retries: int = 1,
    first_reply: ChatReply | None = None,
    reading: Reading = "first",
    reject_cut_off: bool = False,
) -> Answer:
    """Ask for a vector, re-asking up to ``max_retries`` times with the reason of the failure.

    :param role: ``"search"`` or ``"critic"`` (for the logs).
    :param retry_message: Builds the follow-up user message from a failure reason.
    :param check: Extra validation of a parsed vector: an error (cut like the parser's reasons) or ``None``.
    :param max_retries: Number of re-asks after the first unusable reply.
    :param first_reply: The reply to the first attempt when it was already asked (see :func:`ask_together`).
    :param reading: Which values of a reply make the vector (:data:`~sb3_r2po.common.parameters.Reading`).
    :param reject_cut_off: Whether a reply cut off at the token limit is unusable (``parse_params``).
    """
    conversation = [dict(m) for m in messages]
    answer = Answer(params=None)
    for attempt in range(1 + max(0, max_retries)):
        reply = backend.chat(conversation, temperature=temperature) if attempt or first_reply is None else first_reply
        result = parse_params(reply.text, space, reading, reject_cut_off)
        error = result.error if not result.ok else check(result.params)  # type: ignore[arg-type]
        error = None if error is None else bound_reason(str(error))
        tokens = (reply.prompt_tokens, reply.completion_tokens, reply.prompt_tokens_cached)
        answer.calls.append(LLMCall(role, conversation, reply.text, error, reply.seconds, *tokens))
        if error is None:
            answer.params, answer.notes = result.params, result.notes
            return answer
        echoed: Message = {"role": "assistant", "content": reply.text[:MAX_ECHOED_REPLY_CHARS]}
        conversation = [*conversation, echoed, retry_message(error)]
    return answer


def ask_together(
    backend: ChatBackend,
    conversations: Sequence[Sequence[Message]],
    space: ParameterSpace,
    *,
    checks: Sequence[Callable[[list[Answer]], Check]],
    temperature: float = 0.0,
    **asking: Any,
) -> list[Answer]:
    """Ask several independent prompts: the first attempts as one batch (:func:`~sb3_r2po.llm.base.chat_batch`), the
    re-asks one by one, in order; one :class:`Answer` per prompt (the other arguments as :func:`ask_for_params`).

    :param checks: One factory per prompt: given the answers settled so far, it returns this prompt's extra check.
    """
    firsts = chat_batch(backend, conversations, temperature=temperature)
    answers: list[Answer] = []
    for messages, make_check, first in zip(conversations, checks, firsts, strict=True):
        check = make_check(answers)
        answers.append(
            ask_for_params(backend, messages, space, check=check, first_reply=first, temperature=temperature, **asking)
        )
    return answers


REFERENCE_TRACES: dict[str, TraceStyle] = {"r2po": "chain", "three_traj": "ends", "rep_traj": "steps", "critic_only": "steps"}
"""The reference's trajectory format of each Critic template (see :data:`~sb3_r2po.common.rollouts.TraceStyle`)."""

Shown = tuple[tuple[np.ndarray, RolloutResult], ...]  # candidates evaluated earlier in the iteration (actor_second_pass)


class PromptView:
    """Builds what a prompt shows from the run's ``settings``, ``history`` and ``policy`` (spaces and layout)."""

    def __init__(self, settings: R2POSettings, history: list[Record], policy: CompactPolicy) -> None:
        self.settings, self.history, self.policy, self.space = settings, history, policy, policy.parameter_space
        self.task = describe_task(settings.env_id, policy.observation_space, policy.action_space, type(policy).__name__)

    def line(self, params: list[float] | np.ndarray, mean_return: float, n_episodes: int, **more: Any) -> HistoryLine:
        """A prompt's line of a vector: in the settings' reply style, with its values as the reference layout writes them."""
        vector = np.asarray(params, dtype=np.float64)
        formatted, values = self.space.format(vector, self.settings.reply_style), tuple(vector.reshape(-1).tolist())
        return HistoryLine(formatted, mean_return, n_episodes, values=values, **more)

    def context(self, clock: Clock, shown: Shown = (), critic: bool = False) -> PromptContext:
        """What a prompt shows; ``shown``: candidates evaluated earlier in this iteration; ``critic``: the Critic's."""
        s, spec, policy, history = self.settings, self.settings.variant_spec, self.policy, self.history
        best = run_state.best_record(history)
        planned = s.max_iterations  # the plan, or fewer: the iterations a max_episodes cap still pays for
        if s.max_episodes is not None:
            per_iteration = s.candidates_per_iteration * s.n_eval_episodes
            paid = clock.iteration + max(1, math.ceil(clock.episodes_left / max(1, per_iteration)))
            planned = paid if planned is None else min(planned, paid)
        shown_entries = run_state.shown_history(history, s.history_best_k, s.history_recent, s.history_slack)
        n, lines = len(history), self._history_lines(shown_entries, critic)
        lines += [self.line(p, finite_mean(res.returns), len(res.episodes), index=n + j) for j, (p, res) in enumerate(shown)]
        return PromptContext(
            task=self.task,
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

    def reference_trace(self) -> ReferenceTrace:
        """The reference's trajectory format for the variant, spaces and policy (step cap: ``max_episode_steps``)."""
        spec = self.settings.variant_spec.critic
        observation: ValueStyle = "int" if isinstance(self.policy.observation_space, spaces.Discrete) else "list"
        wrapped = isinstance(self.policy.action_space, spaces.Discrete)
        action: ValueStyle = "int" if self.space.is_discrete else "wrapped" if wrapped else "nested"
        trace = REFERENCE_TRACES.get(spec.prompt, "chain") if spec is not None else "chain"
        return ReferenceTrace(trace, observation, action, int(self.settings.max_episode_steps))

    def _history_lines(self, shown: list[Record], critic: bool) -> list[HistoryLine]:
        spec = self.settings.variant_spec
        n, position = len(self.history), {id(r): i for i, r in enumerate(self.history)}
        excerpts = self.excerpted_entries() if critic and spec.critic is not None and spec.critic.excerpts else 0
        trajectories = not critic and spec.search_trajectories and self.space.is_discrete
        return [
            self.line(
                r["params"],
                r["mean_return"],
                r["n_episodes"],
                warmup=r["kind"] == "warmup",
                excerpt=r.get("rollout_excerpt") if n - position[id(r)] <= excerpts else None,
                trajectory=tuple(r["first_episode"]) if trajectories and r.get("first_episode") else None,
                index=position[id(r)],
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
        to the mean return, 8 steps) and ``first_episode`` (props_plus on tabular tasks)."""
        s, spec, fields = self.settings, self.settings.variant_spec, dict[str, Any]()
        if spec.critic is not None and spec.critic.excerpts and result.episodes:
            episode = result.episodes[rollouts.SELECTORS["mean"]([float(r) for r in result.returns])]
            if s.prompt_layout == "reference":
                trace = self.reference_trace()
                fields["rollout_excerpt"] = rollouts.reference_excerpt(episode, trace, EXCERPT_STEPS, s.trajectory_digits)
            else:
                fields["rollout_excerpt"] = rollouts.render_excerpt(episode, EXCERPT_STEPS, s.trajectory_digits)
        if spec.search_trajectories and self.space.is_discrete and result.episodes:
            if s.prompt_layout == "reference":
                lines = rollouts.reference_table(result.episodes[0], self.reference_trace())
            else:
                lines = rollouts.render_trajectory(result.episodes[0], None, s.trajectory_digits, fold=False).lines
            fields["first_episode"] = list(lines)
        return fields

    def evidence(self, result: RolloutResult | None) -> EvidencePackage:
        """The Critic's evidence package from a candidate's episodes (``None``: critic_only after a load)."""
        s, spec = self.settings, self.settings.variant_spec.critic
        assert spec is not None
        if result is None:
            return EvidencePackage(None, {}, {}, None, False, spec.step_rewards)
        max_steps = spec.max_steps if spec.max_steps is not None else s.max_trajectory_steps
        return rollouts.build_evidence(
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
