"""R2PO: Reflective Prompted Policy Optimization as a Stable-Baselines3 algorithm.

One iteration (the R2PO paper, arXiv 2605.08315), as :meth:`R2PO._iterate` runs it, and the file of each step::

    theta_init = Search-LLM(history)                     # 1. r2po/roles.py: the variant's pattern, the prompt
                                                         #    (PromptView -> prompts/builder.py), the reply parsed
                                                         #    (ask_for_params -> common/parameters.py)
    init       = evaluate(theta_init, K episodes)        # 2. R2PO._evaluate -> common/rollouts.py (episodes)
    evidence   = statistics + median trajectory + rule   # 3. PromptView.evidence -> common/rollouts.py
    theta_rev  = Critic-LLM(theta_init, evidence)        # 4. r2po/roles.py, as step 1
    rev        = evaluate(theta_rev, K episodes)         # 5. as step 2
    kept       = rev if rev.mean >= init.mean else init  # 6. keep-best, ties to the revision (r2po/run_state.py)
    history.append(kept)                                 # 7. R2PO._commit; the run saved by r2po/run_state.py

An iteration runs 8 files (these, r2po/policies.py and r2po/arguments.py), the LLM backend and templates aside, at most
6 calls deep from ``learn`` to the env (the structure tests). ``variant="promptpo"`` runs r2po/code_search.py's rounds.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import math
import os
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback

from sb3_r2po.common.parameters import ReplyStyle
from sb3_r2po.common.rollouts import RolloutResult, VecStep, cap_episodes, check_vec_env, env_spec, run_episodes, run_race
from sb3_r2po.llm.base import ChatBackend
from sb3_r2po.llm.resolve import check_llm_spec, imports_a_module
from sb3_r2po.prompts.builder import PromptLayout
from sb3_r2po.r2po import arguments, run_state
from sb3_r2po.r2po.arguments import SETTINGS, check_int
from sb3_r2po.r2po.code_search import CodeRoles
from sb3_r2po.r2po.policies import POLICY_ALIASES, Code, CodePolicy, CompactPolicy, short_name
from sb3_r2po.r2po.reporting import Progress, planned_episodes, record_metrics, warn_before_first_iteration, with_progress_bar
from sb3_r2po.r2po.roles import Asking, LLMRoles, Start, make_llm, new_llm_stats, pattern_for
from sb3_r2po.r2po.run_state import COMMITTED_STATE, Candidate, Clock, Revision, RunState, best_record
from sb3_r2po.zoo.settings import reference_env, reference_settings

SelfR2PO = TypeVar("SelfR2PO", bound="R2PO")

LLMSpec = str | ChatBackend | Callable[[list[dict[str, str]]], str]


class R2PO(BaseAlgorithm):
    """Reflective Prompted Policy Optimization (arXiv 2605.08315): an LLM proposes (Search) and revises (Critic) a compact
    policy's parameters from rollouts; keep-best decides. Options marked *ours* are off by default (the fidelity page).

    :param policy: ``"MlpLinear"``, ``"ProjectedMlp"``, ``"RandomFeatures"``, ``"Tabular"`` (Discrete observations),
        a :class:`CompactPolicy` class, or ``"Code"`` (``variant="promptpo"``: the policy is Python source).
    :param env: The environment (a gymnasium id, an env or a VecEnv).
    :param llm: A string (:mod:`sb3_r2po.llm.resolve`), a ``ChatBackend`` or a callable ``(messages) -> str``.
    :param variant: ``"r2po"`` or one of the paper's baselines and ablations (see :mod:`sb3_r2po.r2po.arguments`).
    :param n_eval_episodes: K, the episodes per evaluated candidate (``None``: 20; promptpo: 5).
    :param warmup_episodes: Random candidates run for one episode each before the first iteration (``None``: see below).
    :param target_return: The target mean return shown to the LLM (``None``: see below).
    :param tau_c: Revision-rule threshold (``None``: see below).
    :param step_size: The suggested change per parameter (``None``: see below).
    :param param_bounds: Range of every parameter of a continuous policy (``None``: the policy's own).
    :param param_decimals: Precision of every parameter of a linear policy.
    :param temperature: Sampling temperature passed to the LLM (``None``: 0.0; promptpo: 1.0, as PromptPO's Gemini client).
    :param max_episodes: A hard cap on the episodes of the run, warm-up and discarded attempts included.
    :param max_iterations: Planned completed iterations, stated in the Search prompt (``None``: see below).
    :param max_episode_steps: Length cap of an episode for envs without a time limit of their own (``None``: see below).
    :param max_trajectory_steps: *Ours*: most steps of a trajectory shown (head and tail); ``None``: all.
    :param trajectory_digits: Significant figures of the numbers in rendered trajectories.
    :param fold_repeated_steps: *Ours*: fold runs of identical consecutive steps of a trajectory into one line.
    :param history_best_k: *Ours*: prompts show this many best entries plus the ``history_recent`` latest (``None``: all).
    :param history_recent: See ``history_best_k``.
    :param history_slack: *Ours*: entries a compressed history grows by, appending, before it is cut back (prefix reuse).
    :param reply_style: The vectors' form in prompts and replies: ``"indexed"`` (the reference's) or ``"list"`` (*ours*).
    :param prompt_layout: The prompts' data formats: ``"reference"`` or ``"compact"`` (*ours*: the lean/tight presets').
    :param search_sees_task: *Ours*: the Search is shown the task and the policy layout (the reference's is a black box).
    :param critic_selection_hints: *Ours*: the Critic is told what the selection does with its revision.
    :param extra_statistics: *Ours*: episode counts, the best value, the standard deviation and the episodes' endings.
    :param history_excerpts: Latest entries whose episode excerpts rep_traj-style Critics see (``None``: see below).
    :param skip_unchanged_revisions: *Ours*: a revision equal to its candidate is not evaluated again (``declined``).
    :param max_llm_retries: With ``on_unusable_reply="reask"``: re-asks, with the error stated, after an unusable reply.
    :param on_unusable_reply: ``"rerun"`` (the reference's): an unusable reply discards the iteration and runs it again;
        ``"reask"`` (*ours*): re-asks, then a fallback step from the best (Search) or no revision (Critic).
    :param max_iteration_attempts: Attempts of one iteration with ``"rerun"``, then training stops with a warning.
    :param reject_duplicates: *Ours*: a reply repeating a history vector (or the iteration's first) is unusable.
    :param reply_reading: ``"reference"`` (the variant's ``Variant.reading``) or ``"last_vector"`` (*ours*).
    :param reject_cut_off_replies: *Ours*: a reply cut at the token limit is unusable (the reference reads its lines).
    :param clip_actions: Whether training clips continuous actions (``None``: the variant's rule); ``predict()`` does.
    :param prompt_template_dir: A directory of Jinja2 templates replacing the packaged ones.
    :param checkpoint_dir: A run directory: ``model.zip`` and ``history.json`` after every entry, the LLM calls' transcript.
    :param stop_at_target: End training once a history candidate reached the target in each of its K episodes.
    :param racing: *Ours*: challengers run in chunks of ``racing_chunk`` episodes until they cannot win.
    :param racing_chunk: Episodes per racing chunk.
    :param racing_z: z-value of the racing rule's one-sided upper confidence bound.
    :param code_candidates: promptpo: N, the independent candidates of a round.
    :param code_reflection: promptpo: a reflection call on the last kept policy before each round after the first.
    :param code_repairs: promptpo: repairs of a candidate (no code block, a syntax error, a crash, a timeout) at most.
    :param code_keep_best: *Ours*, promptpo: the trained policy is the best round's, not the last round's.
    :param policy_kwargs: Extra arguments of the policy.
    :param stats_window_size: Window of the ``rollout/`` statistics.
    :param tensorboard_log: TensorBoard log directory.
    :param seed: Seed of the warm-up, the fallbacks and the environment.
    :param verbose: 0 silent; 1 a line per iteration; 2 also a line per LLM call (its sizes, time and vector or error).
    :param device: Torch device of the policy (the policy is tiny; ``"cpu"`` is right).
    :param _init_setup_model: Whether to build the policy at construction (``load()``: no, nor read the table).

    ``None`` above: the settings table's value (:mod:`sb3_r2po.zoo.settings`), else derived; ``settings.sources`` says
    which. The settings (every argument but ``policy``, ``env``, ``llm`` and SB3's) are ``model.settings``.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = POLICY_ALIASES
    policy: CompactPolicy | CodePolicy

    def __init__(
        self,
        policy: str | type[CompactPolicy] | type[CodePolicy],
        env: GymEnv | str,
        llm: LLMSpec | None = "openai/gpt-oss-20b",
        variant: str = "r2po",
        n_eval_episodes: int | None = None,
        warmup_episodes: int | None = None,
        target_return: float | None = None,
        tau_c: float | None = None,
        step_size: float | None = None,
        param_bounds: tuple[float, float] | None = None,
        param_decimals: int = 1,
        temperature: float | None = None,
        max_episodes: int | None = None,
        max_iterations: int | None = None,
        max_episode_steps: int | None = None,
        max_trajectory_steps: int | None = None,
        trajectory_digits: int = 3,
        fold_repeated_steps: bool = False,
        history_best_k: int | None = None,
        history_recent: int | None = None,
        history_slack: int = 0,
        reply_style: ReplyStyle = "indexed",
        prompt_layout: PromptLayout = "reference",
        search_sees_task: bool = False,
        critic_selection_hints: bool = False,
        extra_statistics: bool = False,
        history_excerpts: int | None = None,
        skip_unchanged_revisions: bool = False,
        max_llm_retries: int = 1,
        on_unusable_reply: str = "rerun",
        max_iteration_attempts: int = 5,
        reject_duplicates: bool = False,
        reply_reading: str = "reference",
        reject_cut_off_replies: bool = False,
        clip_actions: bool | None = None,
        prompt_template_dir: str | None = None,
        checkpoint_dir: str | None = None,
        stop_at_target: bool = False,
        racing: bool = False,
        racing_chunk: int = 5,
        racing_z: float = 1.645,
        code_candidates: int = 10,
        code_reflection: bool = True,
        code_repairs: int = 10,
        code_keep_best: bool = False,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        seed: int | None = None,
        verbose: int = 0,
        device: th.device | str = "cpu",
        _init_setup_model: bool = True,
    ) -> None:
        arguments.check_policy(policy, self.policy_aliases, env, variant if _init_setup_model else None)
        given = dict(locals())
        if isinstance(env, str) and _init_setup_model and max_episode_steps is None:
            env = reference_env(env, variant)  # the table's env_kwargs
        super().__init__(
            policy,
            env,
            learning_rate=0.0,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            device=device,
            supported_action_spaces=(spaces.Box, spaces.Discrete),
            support_multi_env=True,
            seed=seed,
        )
        spec = env_spec(self.env)
        table = reference_settings(spec[0], variant, short_name(policy, self.policy_aliases))
        self.settings = arguments.resolve_settings(given, table if _init_setup_model else None, spec)
        check_int("seed", seed, 0, optional=True)
        if llm is not None and _init_setup_model:  # load() builds with defaults first, then sets the saved llm
            check_llm_spec(llm)
        if self.env is not None:
            check_vec_env(self.env)
        self.settings.warn_if_no_iteration()
        self.llm, self.llm_confirmed = llm, True  # False after a load() of an llm string that imports a module (see load)
        self.history: list[dict[str, Any]] = []
        self.iteration, self.llm_stats = 0, new_llm_stats()
        self._rng = np.random.default_rng(seed)
        self._n_evaluations, self._stop_requested = 0, False
        self._last_result: RolloutResult | None = None  # the last entry's episodes (critic_only's evidence)
        self._transcript_calls: int | None = None  # calls in checkpoint_dir's transcript at the last history entry
        self._placed: np.ndarray | None = None  # the vector run_state.place_kept left in the policy
        self._backend: ChatBackend | None = None
        self._llm: Asking | None = None
        self._run = RunState()
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        s = self.settings
        vector = {"param_decimals": s.param_decimals} | ({} if s.param_bounds is None else {"param_bounds": s.param_bounds})
        kwargs = self.policy_kwargs if issubclass(self.policy_class, CodePolicy) else {**vector, **self.policy_kwargs}
        self.policy = self.policy_class(self.observation_space, self.action_space, **kwargs).to(self.device)  # type: ignore[assignment]
        if not isinstance(self.policy, (CompactPolicy, CodePolicy)):
            raise TypeError(f"R2PO needs a CompactPolicy (linear or tabular), got {type(self.policy).__name__}")
        cap_episodes(self.env, s.episode_cap)  # Monitor files see the episodes R2PO's cap cuts
        self._placed = run_state.place_kept(self.history, self.settings, self.policy)

    def set_env(self, env: GymEnv, force_reset: bool = True) -> None:
        """SB3's ``set_env``, refusing VecEnv wrappers that change observations or rewards."""
        super().set_env(env, force_reset=force_reset)
        check_vec_env(self.env, cap=self.settings.episode_cap)

    def _excluded_save_params(self) -> list[str]:
        last = [] if self.settings.variant_spec.search == "none" else ["_last_result"]  # only critic_only reads it again
        return [*super()._excluded_save_params(), "_backend", "_llm", "_run", "_progress", "llm_confirmed", "_placed", *last]

    def save(
        self,
        path: str | os.PathLike[str] | io.BufferedIOBase,
        exclude: Iterable[str] | None = None,
        include: Iterable[str] | None = None,
    ) -> None:
        """Save (SB3's zip) as of the last history entry, from a shallow copy; an ``llm`` object is never saved."""
        saved = copy.copy(self)  # a new __dict__ sharing the policy, env and history with the model
        saved.__dict__.update(self._run.committed())
        saved.history = self._run.saved_history(self.history)
        saved.llm = self.llm if isinstance(self.llm, str) else None
        BaseAlgorithm.save(saved, path if isinstance(path, io.BufferedIOBase) else Path(path), exclude, include)

    @classmethod
    def load(  # type: ignore[override]
        cls, path: str | Path | io.BufferedIOBase, env: GymEnv | None = None, *args: Any, **kwargs: Any
    ) -> R2PO:
        """SB3's ``load`` (only of files you trust: they hold pickles); a stored ``package.module:attribute`` llm string
        is not imported unless ``llm=`` is given or :meth:`set_llm` confirms it."""
        if kwargs.get("llm") is not None:  # checked before it is stored (a credential in a URL is refused)
            check_llm_spec(kwargs["llm"])
        changes = {name: kwargs.pop(name) for name in SETTINGS if name in kwargs}  # settings given: checked by replace
        model = super().load(run_state.check_model_file(path) if isinstance(path, (str, Path)) else path, env, *args, **kwargs)
        if "checkpoint_dir" not in changes:  # a run directory copied or moved since continues where it is now
            changes["checkpoint_dir"] = run_state.loaded_checkpoint_dir(path, model.settings.checkpoint_dir)
        model.settings = dataclasses.replace(model.settings, **changes)
        model.llm_confirmed = "llm" in kwargs or not (isinstance(model.llm, str) and imports_a_module(model.llm))
        return model

    @property
    def episodes_used(self) -> int:
        """Episodes run so far (warm-up, evaluations, and the episodes of discarded attempts)."""
        return int(self._episode_num)

    def set_llm(self, llm: LLMSpec) -> None:
        """Replace the LLM from the next ``learn()``."""
        check_llm_spec(llm)
        self.llm, self.llm_confirmed, self._backend = llm, True, None

    def best_record(self) -> dict[str, Any] | None:
        """The best history record (see :func:`~sb3_r2po.r2po.run_state.best_record`); ``None`` for an empty history."""
        return best_record(self.history)

    def target_confirmed(self) -> bool:
        """Whether a candidate evaluated for K episodes reached the target in every one of them."""
        target = self.settings.target
        return target is not None and run_state.reached(self.history, target, self.settings.n_eval_episodes)

    def learn(
        self: SelfR2PO,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "R2PO",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfR2PO:
        """
        Train until ``total_timesteps`` environment steps (the running iteration completes), ``max_iterations``,
        ``max_episodes``, or a callback stops.

        :param total_timesteps: Environment steps to train for (a lower bound).
        :param callback: Callback(s) called after every environment step.
        :param log_interval: Dump the logs every ``log_interval`` iterations.
        :param tb_log_name: Name of the TensorBoard run.
        :param reset_num_timesteps: Whether to reset the step and episode counters.
        :param progress_bar: Show a progress bar (tqdm and rich).
        :return: The trained model.
        """
        clock = self._clock  # a bound method: the model pickles with its roles
        plan = lambda: (planned_episodes(self.settings, self.history, clock()), clock())  # noqa: E731
        callback = with_progress_bar(callback, progress_bar, plan)
        total_timesteps, callback = self._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name)
        callback.on_training_start(locals(), globals())
        self._stop_requested = False
        self._run.snapshot({name: getattr(self, name) for name in COMMITTED_STATE}, len(self.history))
        try:
            s = self.settings
            if self._backend is None:  # the first learn(): the backend, the run directory's lock and transcript
                space = getattr(self.policy, "parameter_space", None)  # None: a code policy
                backend = make_llm(self.llm, self.llm_confirmed, space, self.verbose)
                self._backend = self._run.open(backend, s.checkpoint_dir, self.history)
            self._run.acquire(self.history)
            shared = (self.llm_stats, self._backend, clock, self.verbose)
            if isinstance(self.policy, CodePolicy):  # PromptPO's rounds
                self._llm, iterate = CodeRoles(s, self.history, *shared, self.policy, self.env), self._code_round
            else:
                self._llm, iterate = LLMRoles(s, self.history, self.policy, *shared), self._iterate
            self._progress = Progress(s, self.history, self.llm_stats)
            calls = self._transcript_calls  # calls after the last entry are asked again
            self._run.rewind(int(self.llm_stats["calls"]) if calls is None else calls)
            if isinstance(self.policy, CodePolicy) or self._warmup(callback, total_timesteps):  # promptpo: no warm-up
                planned, k = s.max_iterations or math.inf, s.n_eval_episodes  # the plan: completed iterations
                while self.num_timesteps < total_timesteps and self.episodes_left >= k and self.iteration < planned:
                    self._update_current_progress_remaining(self.num_timesteps, total_timesteps)
                    if not self._llm.with_reruns(partial(iterate, callback)):
                        break
                    if log_interval is not None and self.iteration % log_interval == 0:
                        self.dump_logs()
                    if s.stop_at_target and self.target_confirmed():
                        break
            warn_before_first_iteration(s, self.history, clock())
        except BaseException:
            self._roll_back()
            raise
        finally:
            self._run.close()
        callback.on_training_end()
        return self

    def _warmup(self, callback: BaseCallback, total_timesteps: int) -> bool:
        """A vector set since (``set_parameters()``: K episodes), then random draws while budgets last; False: stop."""
        assert isinstance(self.policy, CompactPolicy)
        given, k, space = self.policy.get_flat(), self.settings.n_eval_episodes, self.policy.parameter_space
        first = self._placed is not None and not np.array_equal(given, self._placed) and self.episodes_left >= k
        warmup = lambda: sum(r["kind"] == "warmup" for r in self.history) < self.settings.warmup_episodes  # noqa: E731
        while self.num_timesteps < total_timesteps and (first or (warmup() and self.episodes_left >= 1)):  # as iterations
            candidate = Candidate("given", given) if first else Candidate("warmup", space.sample(self._rng))  # repeats allowed
            candidate.result, first = self._evaluate(candidate.params, k if first else 1, callback), False
            if candidate.result is None:
                return False
            self._commit(run_state.HistoryEntry(self.iteration, candidate))
            if self._stop_requested:
                return False
        return True

    def _iterate(self, callback: BaseCallback, discarded: list[run_state.DiscardedAttempt]) -> bool:
        """Steps 1-7 of the module docstring's algorithm; False when training must stop."""
        s, llm = self.settings, self._llm
        assert isinstance(llm, LLMRoles)
        k, pattern = s.n_eval_episodes, pattern_for(s.variant_spec)  # the variant's LLM steps
        start = Start(self.episodes_left, k, self._last_result, s.revision_threshold)
        first = llm.first_candidate(pattern.first_role, pattern.propose(llm, start), self._rng)  # 1. theta_init
        first.result = self._evaluate(first.params, k, callback)  # 2. K rollouts
        if first.result is None:
            return False
        kept, revision = first, Revision(pattern.challenger)
        if revision.role is not None and (self.episodes_left < k or self._stop_requested):
            revision.status = "skipped"  # the budget cannot pay for a second evaluation, or a callback stopped training
        elif revision.role is not None:
            answer = pattern.challenge(llm, first)  # 3. evidence package; 4. Critic-LLM revises theta_init
            if answer.params is None:
                llm.check_usable(revision.role, answer)  # "rerun" discards the iteration; "reask": no revision
                revision.status, revision.failures = "failed", answer.failures
            else:
                revision.candidate = Candidate.answered(revision.role, answer.params, answer)
                revision.unchanged = bool(np.array_equal(answer.params, first.params))
                if revision.unchanged and s.skip_unchanged_revisions:
                    revision.status = "declined"
                else:  # the reference evaluates an unchanged revision too: the kept mean is the larger of two estimates
                    incumbent = first.mean_return if pattern.variant.keep_best else None
                    revision.candidate.result = self._evaluate(answer.params, k, callback, incumbent)  # 5. K rollouts
                    if revision.decide(first.mean_return, pattern.variant.keep_best):  # 6. keep-best, ties to theta_rev
                        kept = revision.candidate
        self.iteration += 1
        search, revision_field = pattern.entry(first, revision)
        diagnostics = pattern.diagnose(first, revision, start, self.history)
        entry = run_state.HistoryEntry(self.iteration, kept, {}, search, revision_field, diagnostics, tuple(discarded))
        self._commit(entry)  # 7. only the kept candidate enters the history
        return revision.status != "interrupted" and not self._stop_requested

    def _code_round(self, callback: BaseCallback, discarded: list[run_state.DiscardedAttempt]) -> bool:
        """One PromptPO round (:mod:`sb3_r2po.r2po.code_search`); False when training must stop."""
        assert isinstance(self._llm, CodeRoles)
        evaluate = lambda code: self._evaluate(code, self.settings.n_eval_episodes, callback)  # noqa: E731
        if (done := self._llm.round(evaluate, lambda: self._stop_requested)) is None:
            return False
        self.iteration += 1
        self._commit(run_state.HistoryEntry(self.iteration, done[0], done[1], discarded=tuple(discarded)))
        return not self._stop_requested

    def _clock(self) -> Clock:
        return Clock(self.iteration, self.episodes_used, self.episodes_left)

    @property
    def episodes_left(self) -> float:
        """Episodes the ``max_episodes`` budget still pays for (``inf`` without a budget)."""
        budget = self.settings.max_episodes
        return math.inf if budget is None else budget - self._episode_num

    def _evaluate(
        self, params: np.ndarray | Code, n_episodes: int, callback: BaseCallback, incumbent: float | None = None
    ) -> RolloutResult | None:
        """``n_episodes`` episodes of ``params``, reported to the callbacks (``None``: a callback stopped training)."""
        s, env = self.settings, self.env
        assert env is not None
        if s.racing and incumbent is not None:
            run = lambda m: self._evaluate(params, m, callback)  # noqa: E731
            return run_race(run, n_episodes, s.racing_chunk, incumbent, s.racing_z, lambda: self._stop_requested)
        if self.seed is not None:  # the run's own stream of env seeds, at its position
            env.seed(run_state.evaluation_seed(self.seed, self._n_evaluations))
        self._n_evaluations += 1
        callback.on_rollout_start()

        def on_step(step: VecStep) -> object:  # SB3's counters and success rate, then the callback
            finished = [info for info, done in zip(step.infos, step.dones.tolist(), strict=True) if done]
            self.num_timesteps += step.n_steps
            self._episode_num += len(finished)
            self.ep_success_buffer.extend(i["is_success"] for i in finished if i.get("is_success") is not None)  # type: ignore[union-attr]
            callback.update_locals({**step._asdict(), "env": env, "params": params})
            return callback.on_step()

        actor, timeout = self.policy.actor(params, s.actions_clipped), getattr(self.policy, "episode_timeout", None)  # type: ignore[arg-type]
        result = run_episodes(env, actor, n_episodes, s.episode_cap, on_step, timeout)
        self.ep_info_buffer.extend({"r": ep.total_return, "l": ep.length} for ep in result.episodes)  # type: ignore[union-attr]
        if broken := [ep.index for ep in result.episodes if ep.end == "non-finite"]:
            self.logger.warn(f"R2PO: the env returned NaN/inf in episode(s) {broken} of a candidate; they were cut there")
        callback.on_rollout_end()
        self._stop_requested = self._stop_requested or result.stop_requested
        return None if result.stopped else result

    def _commit(self, entry: run_state.HistoryEntry) -> None:
        """Append a history entry, put the best candidate in the policy, and save."""
        assert entry.kept.result is not None and self._llm is not None
        if isinstance(self._llm, LLMRoles):  # what later prompts show of the episodes (the Critic's excerpts)
            entry.shown = self._llm.view.stored_fields(entry.kept.result)
        entry.episodes, entry.timesteps = int(self._episode_num), int(self.num_timesteps)
        record = entry.to_dict()
        self.history.append(record)
        self._last_result = entry.kept.result
        self._placed = run_state.place_kept(self.history, self.settings, self.policy)
        if (calls := self._run.transcript_calls) is not None:
            self._transcript_calls = calls
        self._run.snapshot({name: getattr(self, name) for name in COMMITTED_STATE}, len(self.history))
        if self.settings.checkpoint_dir is not None:
            self._run.write(self.settings.checkpoint_dir, self.save, self.history)
        if self.verbose >= 1:
            self._progress.entry(record, self._clock())

    def _roll_back(self) -> None:
        """Return to the last history entry's state after an exception."""
        for name, value in self._run.committed().items():
            setattr(self, name, value)
        if len(self.history) > (committed := len(self._run.saved_history(self.history))):  # cut inside _commit
            del self.history[committed:]
            self._placed = run_state.place_kept(self.history, self.settings, self.policy)

    def dump_logs(self) -> None:
        """Write the metrics (the documentation's Metrics page) at ``step=num_timesteps``."""
        steps = (self.num_timesteps, self._num_timesteps_at_start, self.start_time)
        exchanges = self._llm.last_exchanges if self._llm is not None else {}
        buffers = (self.ep_info_buffer, self.ep_success_buffer)
        record_metrics(self.logger, self.history, self.llm_stats, self._clock(), steps, buffers, exchanges)
        self.logger.dump(step=self.num_timesteps)


def _setting(name: str, derived: bool) -> property:
    """``model.<name>`` reads ``model.settings.<name>``; assigning a setting replaces the settings (checked again)."""

    def assign(model: R2PO, value: Any) -> None:
        model.settings = dataclasses.replace(model.settings, **{name: value})

    return property(lambda model: getattr(model.settings, name), None if derived else assign, doc=f"``settings.{name}``.")


for _name in SETTINGS:  # SB3 habit: the hyperparameters are the model's attributes (``model.n_eval_episodes``)
    setattr(R2PO, _name, _setting(_name, derived=False))
for _name in ("target", "revision_threshold", "episode_cap", "variant_spec"):
    setattr(R2PO, _name, _setting(_name, derived=True))
