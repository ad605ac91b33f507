"""R2PO: Reflective Prompted Policy Optimization as a Stable-Baselines3 algorithm.

One iteration (the R2PO paper, arXiv 2605.08315), as :meth:`R2PO._iterate` runs it::

    theta_init = Search-LLM(history)                  # 1. propose from the history
    init       = evaluate(theta_init, K episodes)     # 2. roll out
    evidence   = statistics + median trajectory + rule  # 3. calibrated evidence
    theta_rev  = Critic-LLM(theta_init, evidence)     # 4. revise
    rev        = evaluate(theta_rev, K episodes)      # 5. roll out
    kept       = rev if rev.mean >= init.mean else init  # 6. keep-best, ties to the revision
    history.append(kept)                              # 7. only the kept candidate enters the history

Every variant runs this loop, with the LLM steps of its search pattern (:mod:`~sb3_r2po.r2po.patterns`); the other
concerns are components of ``sb3_r2po.r2po`` (roles, prompting, run_state, records, reporting). Not to be confused with
"R²PO, Residual Rollout Policy Optimization" (arXiv 2601.11960), an unrelated method.
"""

from __future__ import annotations

import copy
import io
import math
import os
import warnings
from collections.abc import Callable, Iterable
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
from sb3_r2po.common.racing import run_race
from sb3_r2po.common.rollouts import RolloutResult, check_vec_env, env_spec
from sb3_r2po.llm.asking import Answer
from sb3_r2po.llm.base import ChatBackend
from sb3_r2po.llm.resolve import check_llm_spec, imports_a_module
from sb3_r2po.r2po import arguments, stepping
from sb3_r2po.r2po.history import MAX_DRAWS, best_record, draw_new, perturb_best, reached
from sb3_r2po.r2po.patterns import Start, pattern_for
from sb3_r2po.r2po.policies import POLICY_ALIASES, CompactPolicy
from sb3_r2po.r2po.records import Candidate, DiscardedAttempt, HistoryEntry, Revision, Role
from sb3_r2po.r2po.reporting import Progress, record_metrics
from sb3_r2po.r2po.roles import LLMRoles, new_llm_stats
from sb3_r2po.r2po.run_state import COMMITTED_STATE, RunState, check_model_file, loaded_checkpoint_dir
from sb3_r2po.variants import Variant, get_variant

SelfR2PO = TypeVar("SelfR2PO", bound="R2PO")

LLMSpec = str | ChatBackend | Callable[[list[dict[str, str]]], str]

TAU_C_MARGIN = 0.05
"""When ``tau_c`` is derived from the target: ``tau_c = target - TAU_C_MARGIN * |target|``."""


class R2PO(BaseAlgorithm):
    """
    Reflective Prompted Policy Optimization: an LLM proposes (Search) and revises (Critic) the parameters of a linear
    or tabular policy from evaluated rollouts; keep-best selection decides. Paper: arXiv 2605.08315 (building on ProPS,
    arXiv 2511.21928). Options marked *ours* are off by default; docs/fidelity.md compares each with the reference.

    :param policy: ``"MlpLinear"`` (Box observations), ``"Tabular"`` (Discrete ones) or a :class:`CompactPolicy` class.
    :param env: The environment (a gymnasium id, an env or a VecEnv).
    :param llm: The LLM: a string (see :mod:`sb3_r2po.llm.resolve`), a ``ChatBackend`` or a callable
        ``(messages) -> str``. Nothing is loaded or contacted before the first ``learn()``; the backend is never saved.
    :param variant: ``"r2po"`` or one of the paper's baselines and ablations (see :mod:`sb3_r2po.variants`).
    :param n_eval_episodes: K, the episodes per evaluated candidate.
    :param warmup_episodes: Random candidates evaluated for one episode each before the first iteration.
    :param target_return: The target mean return shown to the LLM; defaults to the env spec's ``reward_threshold``.
    :param tau_c: Revision-rule threshold; defaults to ``target - 0.05 * |target|`` when a target is known.
    :param step_size: The suggested change per parameter.
    :param param_bounds: Range of every parameter of a linear policy.
    :param param_decimals: Precision of every parameter of a linear policy.
    :param temperature: Sampling temperature passed to the LLM.
    :param max_episodes: Episode budget of the run, warm-up included (``None``: unlimited; the paper's: 4020).
    :param max_episode_steps: Length cap of an evaluation episode for envs without a time limit of their own.
    :param max_trajectory_steps: *Ours*: most steps of a trajectory shown to the Critic (head and tail); ``None``: all.
    :param trajectory_digits: Significant figures of the numbers in rendered trajectories.
    :param fold_repeated_steps: *Ours*: fold runs of identical consecutive steps of a trajectory into one line.
    :param history_best_k: *Ours*, with ``history_recent``: prompts show the ``history_best_k`` best entries plus the
        ``history_recent`` latest (``None`` for both: the whole history; duplicate checks always use all of it).
    :param history_recent: See ``history_best_k``.
    :param history_slack: *Ours*: entries a compressed history grows by, appending, before it is cut back (prefix reuse).
    :param reply_style: How prompts write vectors and which reply they ask for: ``"indexed"`` (``params[0]: v, ...``,
        the reference's) or ``"list"`` (``params: [v, ...]``, *ours*, fewer tokens). The parser reads both.
    :param search_sees_task: *Ours*: the Search is shown the task and the policy layout (the reference's is a black box).
    :param critic_selection_hints: *Ours*: the Critic is told what the selection does with its revision, that repeating
        the proposal keeps it, and whether the proposal reaches the revision rule's threshold.
    :param extra_statistics: *Ours*: history lines give their episode counts, the Search is told the best value, the
        Critic's statistics add the standard deviation and how the episodes ended.
    :param history_excerpts: The rep_traj, always_critic and critic_only Critics show an excerpt of the representative
        episode of this many latest entries; ``None``: the reference's number for the env (:mod:`sb3_r2po.variants`).
    :param skip_unchanged_revisions: *Ours*: a revision equal to its candidate is not evaluated again (``declined``).
    :param max_llm_retries: With ``on_unusable_reply="reask"``: re-asks, with the error stated, after an unusable reply.
    :param on_unusable_reply: What a reply without a usable vector leads to: ``"rerun"`` (the reference's) discards the
        iteration (its episodes stay counted; the entry lists ``discarded_attempts``) and runs it again, at most
        ``max_iteration_attempts`` times, then training stops with a ``RuntimeWarning``; ``"reask"`` (*ours*) re-asks,
        then the first candidate falls back to a perturbation of the best (kind ``fallback``) and a revision ``failed``.
    :param max_iteration_attempts: Attempts of one iteration with ``on_unusable_reply="rerun"`` (the reference: 5).
    :param reject_duplicates: *Ours*: a reply repeating a history vector (or the iteration's first) is unusable.
    :param prompt_template_dir: A directory of Jinja2 templates replacing the packaged ones.
    :param checkpoint_dir: A run directory: after every history entry ``model.zip`` and ``history.json`` are written
        atomically and every LLM call is appended to ``llm_calls.jsonl`` (``llm="replay:<file>"`` replays it); resume
        with ``R2PO.load(checkpoint_dir + "/model.zip", env=..., llm=...).learn(..., reset_num_timesteps=False)``.
    :param stop_at_target: End training once a history candidate reached the target in each of its K episodes.
    :param racing: *Ours*: evaluate challengers in chunks of ``racing_chunk`` episodes and stop once they statistically
        cannot reach the candidate they compete with (see :mod:`sb3_r2po.common.racing`).
    :param racing_chunk: Episodes per racing chunk.
    :param racing_z: z-value of the racing rule's one-sided upper confidence bound.
    :param policy_kwargs: Extra arguments of the policy.
    :param stats_window_size: Window of the ``rollout/`` statistics.
    :param tensorboard_log: TensorBoard log directory.
    :param seed: Seed of the warm-up, the fallbacks and the environment.
    :param verbose: 0 silent, 1 info, 2 debug.
    :param device: Torch device of the policy (the policy is tiny; ``"cpu"`` is right).
    :param _init_setup_model: Whether to build the policy at construction.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = POLICY_ALIASES
    policy: CompactPolicy

    def __init__(
        self,
        policy: str | type[CompactPolicy],
        env: GymEnv | str,
        llm: LLMSpec | None = "openai/gpt-oss-20b",
        variant: str = "r2po",
        n_eval_episodes: int = 20,
        warmup_episodes: int = 20,
        target_return: float | None = None,
        tau_c: float | None = None,
        step_size: float = 1.0,
        param_bounds: tuple[float, float] = (-6.0, 6.0),
        param_decimals: int = 1,
        temperature: float = 0.0,
        max_episodes: int | None = None,
        max_episode_steps: int = 1000,
        max_trajectory_steps: int | None = None,
        trajectory_digits: int = 3,
        fold_repeated_steps: bool = False,
        history_best_k: int | None = None,
        history_recent: int | None = None,
        history_slack: int = 0,
        reply_style: ReplyStyle = "indexed",
        search_sees_task: bool = False,
        critic_selection_hints: bool = False,
        extra_statistics: bool = False,
        history_excerpts: int | None = None,
        skip_unchanged_revisions: bool = False,
        max_llm_retries: int = 1,
        on_unusable_reply: str = "rerun",
        max_iteration_attempts: int = 5,
        reject_duplicates: bool = False,
        prompt_template_dir: str | None = None,
        checkpoint_dir: str | None = None,
        stop_at_target: bool = False,
        racing: bool = False,
        racing_chunk: int = 5,
        racing_z: float = 1.645,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        seed: int | None = None,
        verbose: int = 0,
        device: th.device | str = "cpu",
        _init_setup_model: bool = True,
    ) -> None:
        arguments.check_policy(policy, self.policy_aliases)
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
        # the method
        self.llm, self.variant, self.temperature = llm, variant, temperature
        self.llm_confirmed = True  # False after a load() whose stored llm string would import a module (see load)
        self.n_eval_episodes, self.warmup_episodes, self.max_episodes = n_eval_episodes, warmup_episodes, max_episodes
        self.max_episode_steps, self.stop_at_target, self.step_size = max_episode_steps, stop_at_target, step_size
        self.target_return, self.tau_c, self.param_bounds = target_return, tau_c, param_bounds
        self.param_decimals: int = param_decimals
        self.max_trajectory_steps, self.trajectory_digits = max_trajectory_steps, trajectory_digits
        self.fold_repeated_steps, self.history_excerpts = fold_repeated_steps, history_excerpts
        self.history_best_k, self.history_recent, self.history_slack = history_best_k, history_recent, history_slack
        self.reply_style: ReplyStyle = reply_style
        self.search_sees_task, self.critic_selection_hints = search_sees_task, critic_selection_hints
        self.extra_statistics, self.prompt_template_dir = extra_statistics, prompt_template_dir
        self.max_llm_retries, self.on_unusable_reply = max_llm_retries, on_unusable_reply
        self.max_iteration_attempts, self.reject_duplicates = max_iteration_attempts, reject_duplicates
        self.skip_unchanged_revisions, self.checkpoint_dir = skip_unchanged_revisions, checkpoint_dir
        self.racing, self.racing_chunk, self.racing_z = racing, racing_chunk, racing_z
        arguments.check(self, llm_given=_init_setup_model)  # load() builds with defaults first, then sets the saved llm
        self.param_bounds = (float(param_bounds[0]), float(param_bounds[1]))

        self.history: list[dict[str, Any]] = []
        self.iteration = 0
        self.llm_stats: dict[str, float] = new_llm_stats()
        self.env_id, self.reward_threshold, self.env_time_limit = env_spec(self.env)
        self._rng = np.random.default_rng(seed)
        self._n_evaluations = 0
        self._stop_requested = False
        self._last_result: RolloutResult | None = None  # the last entry's episodes (critic_only's evidence)
        self._transcript_calls: int | None = None  # calls in checkpoint_dir's transcript at the last history entry
        self._llm = LLMRoles(self)
        self._run = RunState()
        self._progress = Progress(self)
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        policy_kwargs = {"param_bounds": self.param_bounds, "param_decimals": self.param_decimals, **self.policy_kwargs}
        self.policy = self.policy_class(self.observation_space, self.action_space, **policy_kwargs)  # type: ignore[assignment]
        self.policy = self.policy.to(self.device)
        if not isinstance(self.policy, CompactPolicy):
            raise TypeError(f"R2PO needs a CompactPolicy (linear or tabular), got {type(self.policy).__name__}")
        _use_best(self)

    def set_env(self, env: GymEnv, force_reset: bool = True) -> None:
        """SB3's ``set_env``, refusing VecEnv wrappers that change observations or rewards (see :func:`check_vec_env`)."""
        super().set_env(env, force_reset=force_reset)
        assert self.env is not None
        check_vec_env(self.env)

    def _excluded_save_params(self) -> list[str]:
        last = [] if self.variant_spec.search == "none" else ["_last_result"]  # only critic_only reads it again
        return [*super()._excluded_save_params(), "_llm", "_run", "_progress", "llm_confirmed", *last]

    def save(
        self,
        path: str | os.PathLike[str] | io.BufferedIOBase,
        exclude: Iterable[str] | None = None,
        include: Iterable[str] | None = None,
    ) -> None:
        """Save (SB3's zip) as of the last history entry (:mod:`~sb3_r2po.r2po.run_state`), from a shallow copy: a save
        from a callback or another thread never disturbs training. An ``llm`` object is never saved: ``load`` needs one."""
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
        is not imported unless ``llm=`` is given or :meth:`set_llm` confirms it; a run directory continues where it is."""
        if kwargs.get("llm") is not None:  # checked before it is stored (a credential in a URL is refused)
            check_llm_spec(kwargs["llm"])
        model = super().load(check_model_file(path) if isinstance(path, (str, Path)) else path, env, *args, **kwargs)
        if "checkpoint_dir" not in kwargs:  # a run directory copied or moved since continues where it is now
            model.checkpoint_dir = loaded_checkpoint_dir(path, model.checkpoint_dir)
        model.llm_confirmed = "llm" in kwargs or not (isinstance(model.llm, str) and imports_a_module(model.llm))
        return model

    @property
    def episodes_used(self) -> int:
        """Episodes run so far (warm-up, evaluations, and the episodes of discarded attempts)."""
        return int(self._episode_num)

    @property
    def variant_spec(self) -> Variant:
        """The :class:`~sb3_r2po.variants.Variant` named by ``variant``."""
        return get_variant(self.variant)

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
        target = self.target
        return None if target is None else target - TAU_C_MARGIN * abs(target)

    @property
    def episode_cap(self) -> int:
        """Length cap of an evaluation episode: the env's own time limit, else ``max_episode_steps``."""
        return int(self.env_time_limit) if self.env_time_limit else int(self.max_episode_steps)

    def set_llm(self, llm: LLMSpec) -> None:
        """Replace the LLM (an ``llm`` string, a ``ChatBackend`` or a callable): it is used from the next ``learn()``."""
        check_llm_spec(llm)
        self.llm, self.llm_confirmed = llm, True
        self._llm.backend = None

    def best_record(self) -> dict[str, Any] | None:
        """The best history record (see :func:`~sb3_r2po.r2po.history.best_record`); ``None`` for an empty history."""
        return best_record(self.history)

    def target_confirmed(self) -> bool:
        """Whether a candidate evaluated for K episodes reached the target in every one of them."""
        return self.target is not None and reached(self.history, self.target, self.n_eval_episodes)

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
        Train until at least ``total_timesteps`` environment steps (the running iteration completes), the
        ``max_episodes`` budget cannot pay for another K-episode evaluation, or a callback stops training.

        :param total_timesteps: Environment steps to train for (a lower bound).
        :param callback: Callback(s) called after every environment step.
        :param log_interval: Dump the logs every ``log_interval`` iterations.
        :param tb_log_name: Name of the TensorBoard run.
        :param reset_num_timesteps: Whether to reset the step and episode counters.
        :param progress_bar: Show a progress bar (tqdm and rich).
        :return: The trained model.
        """
        total_timesteps, callback = self._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        callback.on_training_start(locals(), globals())
        self._stop_requested = False
        self._run.snapshot({name: getattr(self, name) for name in COMMITTED_STATE}, len(self.history))  # what save() writes
        try:
            self._llm.connect(self._run)  # the first learn(): the backend, the run directory's lock and transcript
            self._run.acquire(self.history)  # a later learn(): the lock again; it is released when learn() ends
            self._progress.start()
            calls = self._transcript_calls  # calls recorded after the last entry are asked again: a replay follows this run
            self._run.rewind(int(self.llm_stats["calls"]) if calls is None else calls)  # None: older checkpoints
            if self._warmup(callback):
                while self.num_timesteps < total_timesteps and self.episodes_left >= self.n_eval_episodes:
                    self._update_current_progress_remaining(self.num_timesteps, total_timesteps)
                    if not self._llm.with_reruns(lambda discarded: self._iterate(callback, discarded)):
                        break
                    if log_interval is not None and self.iteration % log_interval == 0:
                        self.dump_logs()
                    if self.stop_at_target and self.target_confirmed():
                        break
        except BaseException:
            self._roll_back()
            raise
        finally:
            self._run.close()
        callback.on_training_end()
        return self

    def _warmup(self, callback: BaseCallback) -> bool:
        """Evaluate the remaining warm-up candidates (one episode each); False if training must stop."""
        while (done := sum(r["kind"] == "warmup" for r in self.history)) < self.warmup_episodes and self.episodes_left >= 1:
            params = draw_new(self.history, self.policy.parameter_space, self._rng)
            if params is None:  # a space with fewer vectors than warm-up episodes
                message = f"no new warm-up vector in {MAX_DRAWS} draws; the warm-up ends after {done} of"
                warnings.warn(f"R2PO: {message} {self.warmup_episodes} candidates", RuntimeWarning, stacklevel=2)
                break
            result = self._evaluate(params, 1, callback)
            if result is None:
                return False
            self._commit(HistoryEntry(self.iteration, Candidate("warmup", params, result=result)))
            if self._stop_requested:
                return False
        return True

    def _iterate(self, callback: BaseCallback, discarded: list[DiscardedAttempt]) -> bool:
        """One iteration: steps 1-7 of the algorithm in the module docstring. False when training must stop."""
        k, pattern = self.n_eval_episodes, pattern_for(self.variant_spec)  # the variant's LLM steps
        start = Start(self.episodes_left, k, self._last_result, self.revision_threshold)
        first = self._candidate(pattern.first_role, pattern.propose(self._llm, start))  # 1. Search-LLM proposes theta_init
        first.result = self._evaluate(first.params, k, callback)  # 2. K rollouts
        if first.result is None:
            return False
        kept, revision = first, Revision(pattern.challenger)
        if revision.role is not None and (self.episodes_left < k or self._stop_requested):
            revision.status = "skipped"  # the budget cannot pay for a second evaluation, or a callback stopped training
        elif revision.role is not None:
            answer = pattern.challenge(self._llm, first)  # 3. evidence package; 4. Critic-LLM revises theta_init
            if answer.params is None:
                self._llm.check_usable(revision.role, answer)  # "rerun" discards the iteration; "reask": no revision
                revision.status, revision.failures = "failed", answer.failures
            else:
                revision.candidate = Candidate.answered(revision.role, answer.params, answer)
                revision.unchanged = bool(np.array_equal(answer.params, first.params))
                if revision.unchanged and self.skip_unchanged_revisions:
                    revision.status = "declined"
                else:  # the reference evaluates an unchanged revision too: the kept mean is the larger of two estimates
                    incumbent = first.mean_return if pattern.variant.keep_best else None
                    revision.candidate.result = self._evaluate(answer.params, k, callback, incumbent)  # 5. K rollouts
                    if revision.decide(first.mean_return, pattern.variant.keep_best):  # 6. keep-best, ties to theta_rev
                        kept = revision.candidate
        self.iteration += 1
        search, revision_field = pattern.entry(first, revision)
        diagnostics = pattern.diagnose(first, revision, start, self.history)
        entry = HistoryEntry(self.iteration, kept, {}, search, revision_field, diagnostics, tuple(discarded))
        self._commit(entry)  # 7. only the kept candidate enters the history
        return revision.status != "interrupted" and not self._stop_requested

    def _candidate(self, role: Role, answer: Answer) -> Candidate:
        """The iteration's first candidate: the answer's vector, else (``on_unusable_reply="reask"``) the fallback."""
        if answer.params is not None:
            return Candidate.answered(role, answer.params, answer)
        self._llm.check_usable(role, answer)  # "rerun" discards the iteration
        self.llm_stats["fallbacks"] += 1
        fallback = perturb_best(self.history, self.policy.parameter_space, self.step_size, self._rng)
        return Candidate.answered("fallback", fallback, answer)

    @property
    def episodes_left(self) -> float:
        """Episodes the ``max_episodes`` budget still pays for (``inf`` without a budget)."""
        return math.inf if self.max_episodes is None else self.max_episodes - self._episode_num

    def _evaluate(
        self, params: np.ndarray, n_episodes: int, callback: BaseCallback, incumbent: float | None = None
    ) -> RolloutResult | None:
        """
        Run ``params`` for ``n_episodes`` episodes; ``None`` when a callback stopped training meanwhile. With racing
        on and an ``incumbent`` mean to beat, stop early once the candidate cannot reach it.
        """
        if not self.racing or incumbent is None:
            return self._run_episodes(params, n_episodes, callback)
        run = lambda m: self._run_episodes(params, m, callback)  # noqa: E731
        return run_race(run, n_episodes, self.racing_chunk, incumbent, self.racing_z, lambda: self._stop_requested)

    def _run_episodes(self, params: np.ndarray, n_episodes: int, callback: BaseCallback) -> RolloutResult | None:
        """One rollout call: ``n_episodes`` episodes of ``params``, counted and reported to the callbacks."""
        assert self.env is not None
        if self.seed is not None:  # each evaluation's episodes depend only on (seed, evaluation index): resumable
            self.env.seed(self.seed + self._n_evaluations * self.env.num_envs)
        self._n_evaluations += 1
        callback.on_rollout_start()

        def count(n_steps: int, n_episodes: int, successes: list[Any]) -> None:  # SB3's counters and success rate
            self.num_timesteps += n_steps
            self._episode_num += n_episodes
            self.ep_success_buffer.extend(successes)  # type: ignore[union-attr]

        act, extra_locals = self.policy.actor(params), {"env": self.env, "params": params}
        result = stepping.rollout(self.env, act, n_episodes, self.episode_cap, callback, count, extra_locals)
        self.ep_info_buffer.extend({"r": ep.total_return, "l": ep.length} for ep in result.episodes)  # type: ignore[union-attr]
        broken = [ep.index for ep in result.episodes if ep.end == "non-finite"]
        if broken:
            self.logger.warn(
                f"R2PO: the env returned NaN/inf in episode(s) {broken} of a candidate; those episodes were cut there"
            )
        callback.on_rollout_end()
        self._stop_requested = self._stop_requested or result.stop_requested
        return None if result.stopped else result

    def _commit(self, entry: HistoryEntry) -> None:
        """Append a history entry, keep the best candidate in the policy, and save the state as of this entry."""
        assert entry.kept.result is not None
        entry.shown = self._llm.view.stored_fields(entry.kept.result)  # what later prompts show of its episodes
        entry.episodes, entry.timesteps = int(self._episode_num), int(self.num_timesteps)
        record = entry.to_dict()
        self.history.append(record)
        self._last_result = entry.kept.result
        _use_best(self)
        calls = self._run.transcript_calls
        if calls is not None:
            self._transcript_calls = calls
        self._run.snapshot({name: getattr(self, name) for name in COMMITTED_STATE}, len(self.history))
        if self.checkpoint_dir is not None:
            self._run.write(self.checkpoint_dir, self.save, self.history)
        if self.verbose >= 1:
            self._progress.entry(record)

    def _roll_back(self) -> None:
        """Return to the last history entry's state after an exception cut an iteration short: ``learn()`` repeats it."""
        for name, value in self._run.committed().items():
            setattr(self, name, value)
        committed = len(self._run.saved_history(self.history))
        if len(self.history) > committed:  # cut inside _commit, after the append and before the snapshot (a Ctrl-C)
            del self.history[committed:]
            _use_best(self)

    def dump_logs(self) -> None:
        """Write the iteration's metrics (see the README's metrics table) at ``step=num_timesteps``."""
        record_metrics(self.logger, self, self.start_time, self._num_timesteps_at_start, self._llm.last_exchanges)
        self.logger.dump(step=self.num_timesteps)


def _use_best(model: R2PO) -> None:
    """Put the best history candidate into the policy; an empty history leaves it as it is."""
    best = model.best_record()
    if best is not None:
        model.policy.set_flat(np.asarray(best["params"], dtype=np.float64))
