"""R2PO: Reflective Prompted Policy Optimization as a Stable-Baselines3 algorithm.

One iteration (the R2PO paper, arXiv 2605.08315)::

    theta_init = Search-LLM(history)                  # 1. propose from the history
    init       = evaluate(theta_init, K episodes)     # 2. roll out
    evidence   = statistics + median trajectory + rule  # 3. calibrated evidence
    theta_rev  = Critic-LLM(theta_init, evidence)     # 4. revise
    rev        = evaluate(theta_rev, K episodes)      # 5. roll out (skipped if unchanged)
    kept       = rev if rev.mean >= init.mean else init  # 6. keep-best, ties to the revision
    history.append(kept)                              # 7. only the kept candidate enters the history

Not to be confused with "R²PO, Residual Rollout Policy Optimization" (arXiv 2601.11960), an unrelated
LLM-reasoning method with the same acronym.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import sys
import time
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
from stable_baselines3.common.utils import safe_mean

from sb3_r2po.common.evidence import (
    EvidencePackage,
    build_evidence,
    mean_closest_index,
    render_excerpt,
    render_trajectory,
    success_tolerance,
)
from sb3_r2po.common.files import atomic_write
from sb3_r2po.common.parameters import REPLY_STYLES, ReplyStyle
from sb3_r2po.common.racing import should_stop
from sb3_r2po.common.rollouts import RolloutResult, check_vec_env, run_episodes
from sb3_r2po.diagnostics import diagnose_revision
from sb3_r2po.llm.asking import Answer, ask_for_params, ask_together
from sb3_r2po.llm.base import ChatBackend, Preparable, log_progress
from sb3_r2po.llm.recording import RecordingBackend
from sb3_r2po.llm.resolve import check_llm_spec, make_backend
from sb3_r2po.prompts.builder import HistoryLine, PromptBuilder, PromptContext
from sb3_r2po.prompts.tasks import describe_task
from sb3_r2po.r2po.policies import CompactPolicy, LinearPolicy, TabularPolicy
from sb3_r2po.variants import EXCERPT_STEPS, Variant, default_history_excerpts, get_variant

SelfR2PO = TypeVar("SelfR2PO", bound="R2PO")

LLMSpec = str | ChatBackend | Callable[[list[dict[str, str]]], str]

MAX_WARMUP_DRAWS = 1000
"""Random draws in a row that may repeat evaluated vectors before the warm-up gives up (a tiny parameter space)."""

ON_UNUSABLE_REPLY = ("rerun", "reask")
"""What an unusable reply leads to: the reference's rerun of the iteration, or our re-ask and fallback."""

TAU_C_MARGIN = 0.05
"""When ``tau_c`` is derived from the target: ``tau_c = target - TAU_C_MARGIN * |target|``."""

COMMITTED_STATE = (
    "num_timesteps",
    "_episode_num",
    "_n_evaluations",
    "_rng",
    "llm_stats",
    "iteration",
    "ep_info_buffer",
    "_transcript_calls",
)
"""What an iteration changes before its history entry is written: :meth:`R2PO.save` stores these as of the last entry."""

TEXT_ONLY = ("stdout", "log", "json", "csv")
"""Logger formats that must not receive prompts, replies or histograms (TensorBoard only)."""


class UnusableReply(Exception):
    """An LLM reply that cannot be used discards the running iteration (``on_unusable_reply="rerun"``)."""

    def __init__(self, role: str, reason: str) -> None:
        super().__init__(f"unusable {role} reply: {reason}")
        self.role = role
        self.reason = reason


class R2PO(BaseAlgorithm):
    """
    Reflective Prompted Policy Optimization: an LLM proposes (Search) and revises (Critic) the parameters
    of a linear or tabular policy from evaluated rollouts; keep-best selection decides.

    Paper: "Reflective Prompted Policy Optimization: Trajectory-Grounded Revision and Salience Bias"
    (arXiv 2605.08315), building on ProPS (arXiv 2511.21928).

    :param policy: ``"MlpLinear"`` / ``"LinearPolicy"`` (Box observations) or ``"Tabular"`` / ``"TabularPolicy"``
        (Discrete observations), or a :class:`CompactPolicy` subclass.
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
    :param max_episodes: Episode budget of the whole run, warm-up included (``None``: unlimited). The paper's
        budget is 4000 episodes after the warm-up: ``max_episodes=4020`` with 20 warm-up episodes.
    :param max_episode_steps: Length cap of an evaluation episode for envs without a time limit of their own.
    :param max_trajectory_steps: Most steps of a trajectory shown to the Critic (head and tail kept); ``None`` (default,
        the reference's): the whole episode. A budget is ours, for small models and long episodes.
    :param trajectory_digits: Significant figures of the numbers in rendered trajectories.
    :param fold_repeated_steps: Fold runs of identical consecutive steps of a trajectory into one line (ours; off by
        default: the reference shows every step).
    :param history_best_k: With ``history_recent``, compress the history shown in prompts to the ``history_best_k``
        best entries plus the ``history_recent`` most recent ones (``None`` for both: the whole history). Duplicate
        detection always uses the whole history.
    :param history_recent: See ``history_best_k``.
    :param reply_style: How prompts write vectors (history, candidate) and which reply they ask for: ``"indexed"``
        (``params[0]: v, params[1]: v, ...``, the reference's format) or ``"list"`` (``params: [v, v, ...]``, about 45 %
        fewer tokens per vector; the shape the embedded backend's grammar enforces by default). The parser reads both.
    :param search_sees_task: Show the Search the task description and the policy layout (ours). Off by default: the
        reference's Search is a black box that maximises an unknown f(params) (only ProPS+ shows the task).
    :param critic_selection_hints: Tell the Critic what the selection does with its revision (kept only if it scores at
        least as well, or always committed), that repeating the proposal keeps it, and whether the proposal's mean reaches
        the revision rule's threshold (ours). Off by default: no reference Critic is told any of this.
    :param extra_statistics: History lines give the episodes behind each value, the Search states the best value so
        far, the Critic's statistics add the standard deviation and how the episodes ended (ours; off by default).
    :param history_excerpts: The rep_traj, always_critic and critic_only Critics show an excerpt of the representative
        episode of this many of the latest history entries; ``None`` (default): the reference's number for the env
        (:data:`sb3_r2po.variants.HISTORY_EXCERPTS`; 100 for other tabular tasks, 5 for other linear ones).
    :param skip_unchanged_revisions: Do not evaluate a revision equal to its candidate (the iteration spends K episodes
        instead of 2K, and the revision is recorded as ``declined``). Off by default: the reference evaluates it again,
        so the kept mean is the larger of two K-episode estimates.
    :param max_llm_retries: With ``on_unusable_reply="reask"``: re-asks, with the error stated, after an unusable reply.
    :param on_unusable_reply: What an unusable reply (no parseable vector; with ``reject_duplicates``, a history
        vector) leads to. ``"rerun"`` (default, the reference's): the iteration is discarded (its episodes stay spent
        and counted; the record of the attempt that succeeds lists the discarded ones under ``discarded_attempts``) and
        runs again from its Search call, at most ``max_iteration_attempts`` times, then training stops with a
        ``RuntimeWarning``. ``"reask"`` (ours): re-ask up to ``max_llm_retries`` times, then the Search falls back to a
        Gaussian perturbation of the best candidate (kind ``fallback``) and a Critic's revision is recorded ``failed``.
    :param max_iteration_attempts: Attempts of one iteration with ``on_unusable_reply="rerun"`` (the reference: 5).
    :param reject_duplicates: Treat a reply that repeats a history vector (or, for a second Search proposal, the first)
        as unusable, instead of evaluating it again as the reference does. Off by default.
    :param prompt_template_dir: A directory of Jinja2 templates replacing the packaged ones.
    :param checkpoint_dir: A run directory: after every history entry the model (``model.zip``) and the history
        (``history.json``) are written there atomically, every LLM call is appended to ``llm_calls.jsonl`` (flushed per
        call; ``llm="replay:<dir>/llm_calls.jsonl"`` replays it), so a crashed or interrupted run resumes with
        ``R2PO.load(checkpoint_dir + "/model.zip", env=..., llm=...).learn(..., reset_num_timesteps=False)``.
    :param stop_at_target: End training once the target is confirmed: a history candidate reached the target in
        every one of its K episodes (see :meth:`target_confirmed`).
    :param racing: Evaluate challengers (revisions, second proposals) in chunks of ``racing_chunk`` episodes and stop
        once they statistically cannot reach the candidate they compete with (see :mod:`sb3_r2po.common.racing`).
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

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpLinear": LinearPolicy,
        "LinearPolicy": LinearPolicy,
        "Tabular": TabularPolicy,
        "TabularPolicy": TabularPolicy,
    }
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
        _check_int("n_eval_episodes", n_eval_episodes, 1)
        _check_int("warmup_episodes", warmup_episodes, 0)
        _check_int("max_episodes", max_episodes, 1, optional=True)
        _check_int("max_episode_steps", max_episode_steps, 1)
        _check_int("max_trajectory_steps", max_trajectory_steps, 1, optional=True)
        _check_int("history_excerpts", history_excerpts, 0, optional=True)
        _check_int("trajectory_digits", trajectory_digits, 1)
        _check_int("history_best_k", history_best_k, 0, optional=True)
        _check_int("history_recent", history_recent, 0, optional=True)
        _check_int("max_llm_retries", max_llm_retries, 0)
        _check_int("max_iteration_attempts", max_iteration_attempts, 1)
        if on_unusable_reply not in ON_UNUSABLE_REPLY:
            raise ValueError(f"on_unusable_reply must be one of {ON_UNUSABLE_REPLY}, got {on_unusable_reply!r}")
        _check_int("param_decimals", param_decimals, 0)
        _check_int("racing_chunk", racing_chunk, 2)  # the racing rule needs a standard deviation
        if len(param_bounds) != 2 or not all(math.isfinite(float(b)) for b in param_bounds):
            raise ValueError(f"param_bounds must be two finite numbers (low, high), got {param_bounds!r}")
        if not float(param_bounds[0]) < float(param_bounds[1]):
            raise ValueError(f"param_bounds are empty or reversed: {param_bounds}")
        if not (math.isfinite(step_size) and step_size > 0):
            raise ValueError(f"step_size must be a finite number > 0, got {step_size}")
        if not (math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
        if not (math.isfinite(racing_z) and racing_z >= 0):
            raise ValueError(f"racing_z must be a finite number >= 0, got {racing_z}")
        for name, value in (("target_return", target_return), ("tau_c", tau_c)):
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number or None, got {value}")
        if reply_style not in REPLY_STYLES:
            raise ValueError(f"reply_style must be one of {REPLY_STYLES}, got {reply_style!r}")
        if llm is not None and _init_setup_model:  # load() rebuilds with defaults first, then sets the saved llm
            check_llm_spec(llm)
        get_variant(variant)
        if self.env is not None:
            check_vec_env(self.env)

        self.llm = llm
        self.variant = variant
        self.n_eval_episodes = n_eval_episodes
        self.warmup_episodes = warmup_episodes
        self.target_return = target_return
        self.tau_c = tau_c
        self.step_size = step_size
        self.param_bounds = (float(param_bounds[0]), float(param_bounds[1]))
        self.param_decimals = param_decimals
        self.temperature = temperature
        self.max_episodes = max_episodes
        self.max_episode_steps = max_episode_steps
        self.max_trajectory_steps = max_trajectory_steps
        self.trajectory_digits = trajectory_digits
        self.fold_repeated_steps = fold_repeated_steps
        self.history_best_k = history_best_k
        self.history_recent = history_recent
        self.reply_style: ReplyStyle = reply_style
        self.search_sees_task = search_sees_task
        self.critic_selection_hints = critic_selection_hints
        self.extra_statistics = extra_statistics
        self.history_excerpts = history_excerpts
        self.skip_unchanged_revisions = skip_unchanged_revisions
        self.max_llm_retries = max_llm_retries
        self.on_unusable_reply = on_unusable_reply
        self.max_iteration_attempts = max_iteration_attempts
        self.reject_duplicates = reject_duplicates
        self._discarded_attempts: list[dict[str, Any]] = []
        self.prompt_template_dir = prompt_template_dir
        self.checkpoint_dir = checkpoint_dir
        self.stop_at_target = stop_at_target
        self.racing = racing
        self.racing_chunk = racing_chunk
        self.racing_z = racing_z

        self.history: list[dict[str, Any]] = []
        self.iteration = 0
        self.llm_stats: dict[str, float] = {
            "calls": 0,
            "parse_failures": 0,
            "fallbacks": 0,
            "seconds": 0.0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
        }
        self.env_id, self.reward_threshold, self.env_time_limit = self._read_env_spec()
        self._rng = np.random.default_rng(seed)
        self._backend: ChatBackend | None = None
        self._prompts: PromptBuilder | None = None
        self._last_exchanges: dict[str, tuple[str, str]] = {}
        self._progress_llm: tuple[int, float] = (0, 0.0)  # LLM calls and seconds at the last progress line

        self._last_result: RolloutResult | None = None
        self._n_evaluations = 0
        self._stop_requested = False
        self._committed: dict[str, Any] | None = None  # the state as of the last history entry (what save() writes)
        self._transcript_calls: int | None = None  # calls in checkpoint_dir's transcript at the last history entry
        self._transcript: RecordingBackend | None = None  # checkpoint_dir's transcript (not a recording the user passed)

        if _init_setup_model:
            self._setup_model()

    # ------------------------------------------------------------------ setup

    def _setup_model(self) -> None:
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        policy_kwargs = {"param_bounds": self.param_bounds, "param_decimals": self.param_decimals, **self.policy_kwargs}
        self.policy = self.policy_class(self.observation_space, self.action_space, **policy_kwargs)  # type: ignore[assignment]
        self.policy = self.policy.to(self.device)
        if not isinstance(self.policy, CompactPolicy):
            raise TypeError(f"R2PO needs a CompactPolicy (linear or tabular), got {type(self.policy).__name__}")
        self._use_best()

    def _use_best(self) -> None:
        """Put the best history candidate (:meth:`best_record`) into the policy; an empty history leaves it as it is."""
        best = self.best_record()
        if best is not None:
            self.policy.set_flat(np.asarray(best["params"], dtype=np.float64))

    def set_env(self, env: GymEnv, force_reset: bool = True) -> None:
        """SB3's ``set_env``, refusing VecEnv wrappers that change observations or rewards (see :func:`check_vec_env`)."""
        super().set_env(env, force_reset=force_reset)
        assert self.env is not None
        check_vec_env(self.env)

    def _read_env_spec(self) -> tuple[str | None, float | None, int | None]:
        """The env id, reward threshold and time limit of the training env, when it has a spec."""
        if self.env is None:
            return None, None, None
        try:
            spec = self.env.get_attr("spec", indices=[0])[0]
        except Exception:  # a VecEnv that cannot answer: treat as no spec
            spec = None
        if spec is None:
            return None, None, None
        return spec.id, spec.reward_threshold, spec.max_episode_steps

    def _excluded_save_params(self) -> list[str]:
        excluded = [*super()._excluded_save_params(), "_backend", "_transcript", "_prompts", "_last_exchanges", "_committed"]
        excluded.append("_progress_llm")
        if self.variant_spec.search != "none":  # only critic_only reads the last candidate's episodes again
            excluded.append("_last_result")
        return excluded

    def save(
        self,
        path: str | os.PathLike[str] | io.BufferedIOBase,
        exclude: Iterable[str] | None = None,
        include: Iterable[str] | None = None,
    ) -> None:
        """
        Save the model (SB3's zip format) as of its last history entry: a save in the middle of an iteration (e.g.
        from SB3's ``CheckpointCallback``) stores the counters, random state and LLM statistics of the last entry,
        so that a model loaded from it repeats the running iteration instead of charging its episodes twice.
        An ``llm`` given as a string is saved; a backend object or callable never is (it may hold API keys,
        clients or file handles): it is stored as ``None``, and ``load`` needs ``llm=...``.

        The model itself is not changed: what is written is a shallow copy carrying the saved values, so a save
        from another thread (or a callback) never disturbs the training in progress.
        """
        saved = copy.copy(self)  # a new __dict__ sharing the policy, env and history with the model
        for name, value in self._committed_state().items():
            setattr(saved, name, value)  # snapshots are replaced at every commit, never changed in place
        if self._committed:
            saved.history = self.history[: self._committed["history_length"]]
        if not isinstance(self.llm, str):
            saved.llm = None
        target = path if isinstance(path, io.BufferedIOBase) else Path(path)
        BaseAlgorithm.save(saved, target, exclude=exclude, include=include)

    def _snapshot(self) -> None:
        """Remember the state of the last history entry (see :meth:`save`)."""
        self._committed = {name: copy.deepcopy(getattr(self, name)) for name in COMMITTED_STATE}
        self._committed["history_length"] = len(self.history)

    def _committed_state(self) -> dict[str, Any]:
        """The :data:`COMMITTED_STATE` values of the last snapshot (none before the first one)."""
        committed = self._committed or {}
        return {name: committed[name] for name in COMMITTED_STATE if name in committed}

    def _roll_back(self) -> None:
        """
        Return to the state of the last history entry after an exception cut an iteration short (an LLM error, a
        failing env, Ctrl-C): the next ``learn()`` repeats that iteration in full, as a run resumed from its
        checkpoint would, and the run stays identical to an uninterrupted one (and replayable from its transcript,
        which ``learn()`` rewinds to the same point). The cut iteration's episodes are not charged.
        """
        for name, value in self._committed_state().items():
            setattr(self, name, copy.deepcopy(value))  # the snapshot stays intact for save() and the next roll-back
        if self._committed and len(self.history) > self._committed["history_length"]:
            # cut inside _commit, after the append and before the snapshot (a Ctrl-C can land there): the entry goes
            del self.history[self._committed["history_length"] :]
            self._use_best()

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
        if self.target_return is not None:
            return float(self.target_return)
        return None if self.reward_threshold is None else float(self.reward_threshold)

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
        """
        Replace the LLM; the new one is created (or used) at the next ``learn()``.

        :param llm: An ``llm`` string, a ``ChatBackend`` or a callable ``(messages) -> str``.
        """
        check_llm_spec(llm)
        self.llm = llm
        self._backend = None

    def _ensure_llm(self) -> ChatBackend:
        """Create the LLM backend (first ``learn()`` only) and the prompt builder."""
        if self._backend is None:
            if getattr(self, "llm", None) is None:
                raise ValueError(
                    "This model has no llm: it was saved with an llm object, which is never stored. "
                    "Pass one again, e.g. R2PO.load(path, env=env, llm=...), or set model.llm before learn()."
                )
            if self.verbose >= 1:
                name = self.llm if isinstance(self.llm, str) else type(self.llm).__name__
                print(f"R2PO: preparing the LLM {name}", flush=True)
            start = time.perf_counter()
            backend = make_backend(self.llm)  # type: ignore[arg-type]
            check_resources = getattr(backend, "check_resources", None)
            if callable(check_resources):  # fail before any download or load when the model cannot fit
                check_resources()
            if isinstance(backend, Preparable):  # load it now (with its progress logged) rather than in the first call
                with log_progress(self.verbose >= 1):
                    backend.prepare()
                if self.verbose >= 1:
                    print(f"R2PO: LLM ready in {time.perf_counter() - start:.1f} s", flush=True)
            constrain = getattr(backend, "constrain", None)
            if callable(constrain):  # constrained decoding (e.g. a grammar) from the parameter space
                constrain(self.policy.parameter_space)
            if self.checkpoint_dir is not None:  # the run directory keeps a transcript of every call, flushed per call
                self._check_run_directory(Path(self.checkpoint_dir))
                backend = self._transcript = RecordingBackend(backend, Path(self.checkpoint_dir) / "llm_calls.jsonl")
            else:
                self._transcript = None
            self._backend = backend
        if self._prompts is None:
            self._prompts = PromptBuilder(self.prompt_template_dir, self.reply_style)
        return self._backend

    def _check_run_directory(self, directory: Path) -> None:
        """Refuse a run directory that holds another run (a history this model's history does not start with)."""
        saved = directory / "model.zip"
        if not saved.exists():
            return
        history_file = directory / "history.json"
        theirs = json.loads(history_file.read_text()) if history_file.exists() else None
        ours = json.loads(json.dumps(self.history))
        if self.history and theirs is not None and ours[: len(theirs)] == theirs:
            return  # this run's own directory: resumed, or trained on
        raise ValueError(
            f"checkpoint_dir {str(directory)!r} already holds another run ({saved}); resume it with "
            f"R2PO.load({str(saved)!r}, env=..., llm=...).learn(..., reset_num_timesteps=False), "
            "or give this run another directory"
        )

    # ------------------------------------------------------------------ history

    def best_record(self) -> dict[str, Any] | None:
        """
        The best history record: the highest K-episode mean among iteration records, or, before the first
        iteration, the best warm-up record. ``None`` for an empty history.
        """
        evaluated = [r for r in self.history if r["kind"] != "warmup"] or self.history
        if not evaluated:
            return None
        return max(evaluated, key=lambda r: r["mean_return"])

    def target_confirmed(self) -> bool:
        """Whether a candidate evaluated for K episodes reached the target in every one of them."""
        target = self.target
        if target is None:
            return False
        floor = target - success_tolerance(target)
        return any(r["n_episodes"] >= self.n_eval_episodes and r["min_return"] >= floor for r in self.history)

    def _in_history(self, params: np.ndarray) -> dict[str, Any] | None:
        """The history record holding ``params``, if any."""
        for record in self.history:
            if np.array_equal(np.asarray(record["params"]), params):
                return record
        return None

    def _seen_error(self, params: np.ndarray) -> str | None:
        """With ``reject_duplicates``, why a reply repeating a history vector is unusable; otherwise ``None``."""
        record = self._in_history(params) if self.reject_duplicates else None
        if record is None:
            return None
        return (
            f"this vector was already evaluated (iteration {record['iteration']}, mean return "
            f"{record['mean_return']:.4g}); propose a vector that is not in the history"
        )

    def _record(self, kind: str, params: np.ndarray, result: RolloutResult, **extra: Any) -> dict[str, Any]:
        returns = result.returns
        lengths = [ep.length for ep in result.episodes]
        record = {
            "iteration": self.iteration,
            "kind": kind,
            "params": [float(v) for v in params],
            "mean_return": float(returns.mean()),
            "std_return": float(returns.std()),
            "min_return": float(returns.min()),
            "max_return": float(returns.max()),
            "mean_length": float(np.mean(lengths)),
            "n_episodes": len(result.episodes),
            "returns": [float(r) for r in returns],
            "non_finite_episodes": sum(ep.end == "non-finite" for ep in result.episodes),
            **self._rollout_fields(result),  # what later prompts show of its episodes (some variants)
            **extra,
        }
        if kind != "warmup" and self._discarded_attempts:  # the attempts of this iteration an unusable reply discarded
            record["discarded_attempts"] = list(self._discarded_attempts)
        return record

    def _commit(self, record: dict[str, Any]) -> None:
        """Append a record to the history and keep the best candidate in the policy."""
        record["episodes"] = int(self._episode_num)
        record["timesteps"] = int(self.num_timesteps)
        self.history.append(record)
        self._use_best()
        if self._transcript is not None:
            self._transcript_calls = self._transcript.recorded
        self._snapshot()
        if self.checkpoint_dir is not None:
            self.write_checkpoint(self.checkpoint_dir)
        if self.verbose >= 1:
            self._print_progress(record)

    def _print_progress(self, record: dict[str, Any]) -> None:
        """``verbose >= 1``: one line per iteration, and one when the warm-up is complete."""
        budget = f"/{self.max_episodes}" if self.max_episodes is not None else ""
        best = self.best_record()
        calls, seconds = int(self.llm_stats["calls"]), float(self.llm_stats["seconds"])
        if record["kind"] == "warmup":
            done = sum(r["kind"] == "warmup" for r in self.history)
            if done == self.warmup_episodes:
                print(
                    f"R2PO warm-up: {done} random candidates, 1 episode each | episodes {self._episode_num}{budget} | "
                    f"best return {best['mean_return']:.4g}",  # type: ignore[index]
                    flush=True,
                )
            return
        planned = None
        if self.max_episodes is not None:  # this iteration, the full ones the budget still pays for, a last partial one
            full, rest = divmod(self._episodes_left(), self.variant_spec.candidates_per_iteration * self.n_eval_episodes)
            planned = self.iteration + int(full) + int(rest >= self.n_eval_episodes)
        parts = [
            f"R2PO iteration {self.iteration}" + (f"/{planned}" if planned else ""),
            f"episodes {self._episode_num}{budget}",
        ]
        search, revision = record.get("search"), record["revision"]
        if search is not None:
            parts.append(f"{search['kind']} {search['mean_return']:.4g}")
        if revision["role"] is not None:
            result = f" {revision['mean_return']:.4g}" if revision["mean_return"] is not None else ""
            unchanged = " (unchanged)" if revision.get("unchanged") else ""
            parts.append(f"{revision['role']}{result}{unchanged} {revision['status']}")
        parts.append(f"best {best['mean_return']:.4g}")  # type: ignore[index]
        parts.append(
            f"LLM {calls - self._progress_llm[0]} calls {seconds - self._progress_llm[1]:.1f} s "
            f"(total {calls} calls {seconds:.1f} s)"
        )
        self._progress_llm = (calls, seconds)
        print(" | ".join(parts), flush=True)

    def write_checkpoint(self, directory: str | os.PathLike[str]) -> None:
        """Write ``model.zip`` and ``history.json`` to ``directory`` atomically (temp file, fsync, rename)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        self.save(buffer)
        atomic_write(directory / "model.zip", buffer.getvalue())
        atomic_write(directory / "history.json", json.dumps(self.history, indent=1).encode())

    # ------------------------------------------------------------------ rollouts

    def _episodes_left(self) -> float:
        return math.inf if self.max_episodes is None else self.max_episodes - self._episode_num

    def _evaluate(
        self, params: np.ndarray, n_episodes: int, callback: BaseCallback, incumbent: float | None = None
    ) -> RolloutResult | None:
        """
        Run ``params`` for ``n_episodes`` episodes; ``None`` when a callback stopped training meanwhile. With racing
        on and an ``incumbent`` mean to beat, stop early once the candidate cannot reach it.
        """
        if not self.racing or incumbent is None:
            return self._run(params, n_episodes, callback)
        episodes: list = []
        while len(episodes) < n_episodes:
            chunk = self._run(params, min(self.racing_chunk, n_episodes - len(episodes)), callback)
            if chunk is None or (self._stop_requested and len(episodes) + len(chunk.episodes) < n_episodes):
                return None
            for ep in chunk.episodes:
                ep.index += len(episodes)
            episodes += chunk.episodes
            if len(episodes) < n_episodes and should_stop([ep.total_return for ep in episodes], incumbent, self.racing_z):
                break
        return RolloutResult(episodes)

    def _run(self, params: np.ndarray, n_episodes: int, callback: BaseCallback) -> RolloutResult | None:
        """One rollout call: ``n_episodes`` episodes of ``params``, counted and reported to the callbacks."""
        assert self.env is not None
        if self.seed is not None:  # each evaluation's episodes depend only on (seed, evaluation index): resumable
            self.env.seed(self.seed + self._n_evaluations * self.env.num_envs)
        self._n_evaluations += 1
        callback.on_rollout_start()

        def on_step(dones: np.ndarray, infos: list[dict], rewards: np.ndarray, n_steps: int) -> bool:
            self.num_timesteps += n_steps
            self._episode_num += int(dones.sum())
            callback.update_locals({"dones": dones, "infos": infos, "rewards": rewards, "params": params})
            return callback.on_step()

        result = run_episodes(self.env, self.policy.actor(params), n_episodes, self.episode_cap, on_step)
        self.ep_info_buffer.extend({"r": ep.total_return, "l": ep.length} for ep in result.episodes)  # type: ignore[union-attr]
        broken = [ep.index for ep in result.episodes if ep.end == "non-finite"]
        if broken:
            self.logger.warn(
                f"R2PO: the env returned NaN/inf in episode(s) {broken} of a candidate; those episodes were cut there"
            )
        callback.on_rollout_end()
        self._stop_requested = self._stop_requested or result.stop_requested
        return None if result.stopped else result

    # ------------------------------------------------------------------ LLM roles

    def _context(self, extra: tuple[tuple[np.ndarray, RolloutResult], ...] = (), critic: bool = False) -> PromptContext:
        """
        What a prompt shows; ``extra`` appends candidates evaluated earlier in this iteration. ``critic``: the Critic's
        history shows the rollout excerpts of its latest entries (rep_traj, always_critic, critic_only); the Search's
        history shows, on tabular tasks, each entry's first episode (props_plus). The templates decide whether the task
        description is shown (every Critic; the Search only for props_plus or with ``search_sees_task``).
        """
        spec = self.variant_spec
        best = self.best_record()
        planned = None
        if self.max_episodes is not None:
            per_iteration = spec.candidates_per_iteration * self.n_eval_episodes
            planned = self.iteration + max(1, math.ceil(self._episodes_left() / max(1, per_iteration)))
        shown = self.shown_history()
        n, position = len(self.history), {id(r): i for i, r in enumerate(self.history)}
        excerpts = self._excerpted_entries() if critic and spec.critic is not None and spec.critic.excerpts else 0
        trajectories = not critic and spec.search_trajectories and self.policy.parameter_space.is_discrete
        lines = [
            HistoryLine(
                self._format(r["params"]),
                r["mean_return"],
                r["n_episodes"],
                r["kind"] == "warmup",
                excerpt=r.get("rollout_excerpt") if n - position[id(r)] <= excerpts else None,
                trajectory=tuple(r["first_episode"]) if trajectories and r.get("first_episode") else None,
            )
            for r in shown
        ]
        lines += [HistoryLine(self._format(p), float(res.returns.mean()), len(res.episodes)) for p, res in extra]
        return PromptContext(
            task=describe_task(self.env_id, self.observation_space, self.action_space),
            layout=self.policy.layout_lines(),
            space=self.policy.parameter_space,
            target=self.target,
            history=tuple(lines),
            iteration=self.iteration + 1,
            total_iterations=planned,
            step_size=self.step_size,
            best=None if best is None else best["mean_return"],
            best_episodes=0 if best is None else int(best["n_episodes"]),
            best_warmup=best is not None and best["kind"] == "warmup",
            search_sees_task=self.search_sees_task,
            selection_hints=self.critic_selection_hints,
            extra_statistics=self.extra_statistics,
            keep_best=spec.keep_best,
            history_omitted=n - len(shown),
        )

    def _excerpted_entries(self) -> int:
        """How many of the latest history entries the Critic shows a rollout excerpt of (``history_excerpts``)."""
        if self.history_excerpts is not None:
            return int(self.history_excerpts)
        return default_history_excerpts(self.env_id, self.policy.parameter_space.is_discrete)

    def _rollout_fields(self, result: RolloutResult) -> dict[str, Any]:
        """
        What later prompts show of a history entry's episodes, stored in its record: ``rollout_excerpt``, the episode
        closest to the mean return in 8 steps (variants whose Critic shows history excerpts), and ``first_episode``, the
        first episode whole (props_plus on tabular tasks). Other variants store nothing.
        """
        spec, fields = self.variant_spec, dict[str, Any]()
        if spec.critic is not None and spec.critic.excerpts and result.episodes:
            episode = result.episodes[mean_closest_index([float(r) for r in result.returns])]
            fields["rollout_excerpt"] = render_excerpt(episode, EXCERPT_STEPS, self.trajectory_digits)
        if spec.search_trajectories and self.policy.parameter_space.is_discrete and result.episodes:
            lines = render_trajectory(result.episodes[0], None, self.trajectory_digits, fold=False).lines
            fields["first_episode"] = list(lines)
        return fields

    def shown_history(self) -> list[dict[str, Any]]:
        """The history as prompts show it: all of it, or the best ``history_best_k`` plus the ``history_recent`` latest."""
        if self.history_best_k is None and self.history_recent is None:
            return self.history
        n = len(self.history)
        recent = set(range(max(0, n - (self.history_recent or 0)), n))
        ranked = sorted(range(n), key=lambda i: (-self.history[i]["mean_return"], i))
        best = set(ranked[: self.history_best_k or 0])
        return [self.history[i] for i in sorted(recent | best)]

    def _format(self, params: list[float] | np.ndarray) -> str:
        return self.policy.parameter_space.format(np.asarray(params, dtype=np.float64), self.reply_style)

    def _ask(self, role: str, messages: list[dict[str, str]], check: Callable[[np.ndarray], str | None]) -> Answer:
        assert self._backend is not None and self._prompts is not None
        space = self.policy.parameter_space
        answer = ask_for_params(
            self._backend,
            messages,
            space,
            role=role,
            retry_message=lambda reason: self._prompts.retry(reason, space),  # type: ignore[union-attr]
            check=check,
            temperature=self.temperature,
            max_retries=self._reasks,
        )
        return self._account(role, answer)

    def _account(self, role: str, answer: Answer) -> Answer:
        """Count an answer's calls in ``llm_stats`` and keep the last exchange for the logs."""
        for call in answer.calls:
            self.llm_stats["calls"] += 1
            self.llm_stats["parse_failures"] += int(call.error is not None)
            self.llm_stats["seconds"] += call.seconds
            self.llm_stats["prompt_tokens"] += call.prompt_tokens or 0
            self.llm_stats["completion_tokens"] += call.completion_tokens or 0
            self._last_exchanges[role] = (call.messages[-1]["content"], call.reply)
            if call.error is not None and self.verbose >= 1:
                print(f"R2PO: unusable {role} reply ({call.error})", file=sys.stderr)
        if answer.notes and self.verbose >= 1:
            print(f"R2PO: {role} reply adjusted: " + "; ".join(answer.notes), file=sys.stderr)
        return answer

    def _not_new(self, also: tuple[np.ndarray, ...] = ()) -> Callable[[np.ndarray], str | None]:
        """A check rejecting vectors of the history and ``also`` (candidates of the running iteration)."""

        def check(params: np.ndarray) -> str | None:
            if self.reject_duplicates and any(np.array_equal(params, other) for other in also):
                return "this vector was already proposed in this iteration; propose a different one"
            return self._seen_error(params)

        return check

    def _search(self, extra: tuple[tuple[np.ndarray, RolloutResult], ...] = (), also: tuple[np.ndarray, ...] = ()) -> Answer:
        """The Search-LLM proposes a new vector from the history (plus ``extra``); never one of ``also``."""
        assert self._prompts is not None
        spec = self.variant_spec
        messages = self._prompts.search(self._context(extra), spec.search_prompt, spec.search_history)
        return self._ask("search", messages, self._not_new(also))

    def _search_pair(self) -> tuple[Answer, Answer]:
        """``pure_search``: two independent Search proposals from the same history, asked as one batch."""
        assert self._backend is not None and self._prompts is not None
        space, spec = self.policy.parameter_space, self.variant_spec
        messages = self._prompts.search(self._context(), spec.search_prompt, spec.search_history)  # the same for both
        first, second = ask_together(
            self._backend,
            [messages, messages],
            space,
            role="search",
            retry_message=lambda reason: self._prompts.retry(reason, space),  # type: ignore[union-attr]
            checks=[
                lambda settled: self._not_new(),
                lambda settled: self._not_new(tuple(a.params for a in settled if a.params is not None)),
            ],
            temperature=self.temperature,
            max_retries=self._reasks,
        )
        return self._account("search", first), self._account("search", second)

    def _fallback_params(self) -> np.ndarray:
        """A Gaussian perturbation of the best candidate at ``step_size`` that is not in the history."""
        space = self.policy.parameter_space
        best = self.best_record()
        for _ in range(100):
            params = (
                space.sample(self._rng)
                if best is None
                else space.perturb(np.asarray(best["params"]), self.step_size, self._rng)
            )
            if self._in_history(params) is None:
                return params
        return space.sample(self._rng)

    def _critic_evidence(self, result: RolloutResult | None) -> EvidencePackage:
        spec = self.variant_spec.critic
        assert spec is not None
        if result is None:  # critic_only after a load: the last candidate's episodes are not saved
            return EvidencePackage(None, {}, {}, None, False, spec.step_rewards)
        max_steps = spec.max_steps if spec.max_steps is not None else self.max_trajectory_steps
        return build_evidence(
            result.episodes,
            self.target,
            self.revision_threshold,
            max_steps,
            digits=self.trajectory_digits,
            fold=self.fold_repeated_steps,
            statistics=spec.statistics,
            trajectories=spec.trajectories,
            rule=spec.rule,
            step_rewards=spec.step_rewards,
        )

    def _revise(self, theta: np.ndarray, mean_return: float, n_episodes: int, evidence: EvidencePackage) -> Answer:
        """
        The Critic-LLM revises ``theta`` from its evidence package, with the variant's template (critic_only's shows no
        candidate: its evidence is the latest candidate's episode).
        """
        assert self._prompts is not None
        spec = self.variant_spec.critic
        assert spec is not None
        candidate = HistoryLine(self._format(theta), mean_return, n_episodes)
        messages = self._prompts.critic(self._context(critic=True), candidate, evidence, spec.prompt, spec.history)
        unchanged_ok = self.variant_spec.search != "none"  # critic_only: an unchanged vector would be re-evaluated
        check = self._seen_error if unchanged_ok else self._not_new()
        return self._ask("critic", messages, check)

    # ------------------------------------------------------------------ the loop

    def _warmup(self, callback: BaseCallback) -> bool:
        """Evaluate the remaining warm-up candidates (one episode each); False if training must stop."""
        space = self.policy.parameter_space
        duplicates = 0
        while sum(r["kind"] == "warmup" for r in self.history) < self.warmup_episodes and self._episodes_left() >= 1:
            params = space.sample(self._rng)
            if self._in_history(params) is not None:
                duplicates += 1
                if duplicates >= MAX_WARMUP_DRAWS:  # a space with fewer vectors than warm-up episodes
                    warnings.warn(
                        f"R2PO: no new warm-up vector in {MAX_WARMUP_DRAWS} draws; the warm-up ends after "
                        f"{sum(r['kind'] == 'warmup' for r in self.history)} of {self.warmup_episodes} candidates",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    break
                continue
            duplicates = 0
            result = self._evaluate(params, 1, callback)
            if result is None:
                return False
            self._last_result = result
            self._commit(self._record("warmup", params, result))
            if self._stop_requested:
                return False
        return True

    def _iterate(self, callback: BaseCallback) -> bool:
        """One iteration of the configured variant (R2PO: the algorithm box of the module docstring)."""
        variant, k = self.variant_spec, self.n_eval_episodes
        if variant.search == "none":
            return self._iterate_critic_only(callback)

        paired = None
        if variant.search == "two_independent" and self._episodes_left() >= 2 * k:
            search, paired = self._search_pair()  # 1. both Search proposals at once (one batch)
        else:
            search = self._search()  # 1. Search-LLM proposes theta_init
        if search.params is None:
            self._unusable("search", search)  # the reference runs the iteration again; with "reask", a fallback
        theta_init, init_kind = (
            (search.params, "search") if search.params is not None else (self._fallback_params(), "fallback")
        )
        self.llm_stats["fallbacks"] += int(init_kind == "fallback")
        init = self._evaluate(theta_init, k, callback)  # 2. K rollouts
        if init is None:
            return False
        init_mean = float(init.returns.mean())

        second: dict[str, Any] = {
            "role": None,
            "status": "none",
            "params": None,
            "mean_return": None,
            "failures": [],
            "adjusted": [],
        }
        kept = (theta_init, init, init_kind)
        diagnostics = None
        if variant.calls_per_iteration > 1:
            second["role"] = "critic" if variant.critic is not None else "search"
            if self._episodes_left() < k or self._stop_requested:
                second["status"] = "skipped"  # the budget cannot pay for a second evaluation, or a callback stopped
            else:
                if variant.critic is not None:
                    evidence = self._critic_evidence(init)  # 3. evidence package
                    answer = self._revise(theta_init, init_mean, k, evidence)  # 4. Critic-LLM revises
                else:
                    shown = ((theta_init, init),) if variant.search == "two_sequential" else ()
                    repeated = paired is not None and paired.params is not None and np.array_equal(paired.params, theta_init)
                    usable = paired is not None and not (repeated and self.reject_duplicates)
                    answer = paired if paired is not None and usable else self._search(extra=shown, also=(theta_init,))
                    evidence = None
                second["failures"] = answer.failures
                second["adjusted"] = list(answer.notes)
                theta_2 = answer.params
                if theta_2 is not None:
                    second["unchanged"] = bool(np.array_equal(theta_2, theta_init))
                if theta_2 is None:
                    self._unusable(second["role"], answer)  # "rerun" discards the iteration; with "reask", no revision
                    second["status"] = "failed"
                elif second["unchanged"] and self.skip_unchanged_revisions:
                    second.update(status="declined", params=[float(v) for v in theta_2])
                else:  # the reference evaluates an unchanged revision too: the kept mean is the larger of two estimates
                    incumbent = init_mean if variant.keep_best else None
                    result_2 = self._evaluate(theta_2, k, callback, incumbent)  # 5. K rollouts (a race with racing=True)
                    second["params"] = [float(v) for v in theta_2]
                    if result_2 is None:
                        second["status"] = "interrupted"
                    else:
                        mean_2 = float(result_2.returns.mean())
                        second["mean_return"] = mean_2
                        second["n_episodes"] = len(result_2.episodes)
                        second["returns"] = [float(r) for r in result_2.returns]
                        if mean_2 >= init_mean or not variant.keep_best:  # 6. keep-best, ties to the second
                            kept = (theta_2, result_2, second["role"])
                            second["status"] = "kept"
                        else:
                            second["status"] = "rejected"
                if variant.critic is not None and theta_2 is not None and evidence is not None:
                    diagnostics = diagnose_revision(
                        theta_init,
                        theta_2,
                        init_mean,
                        second["mean_return"],
                        answer.calls[-1].reply,
                        accepted=second["status"] in ("kept", "declined"),
                        above_tau_c=self.revision_threshold is not None and init_mean >= self.revision_threshold,
                    )

        theta_kept, result_kept, kind_kept = kept
        first = {
            "kind": init_kind,
            "params": [float(v) for v in theta_init],
            "mean_return": init_mean,
            "failures": search.failures,
            "adjusted": list(search.notes) if init_kind == "search" else [],
        }
        self.iteration += 1
        extra: dict[str, Any] = {"search": first, "revision": second}
        if diagnostics is not None:
            extra["diagnostics"] = diagnostics
        self._last_result = result_kept
        self._commit(self._record(kind_kept, theta_kept, result_kept, **extra))  # 7. only the kept one enters the history
        return second["status"] != "interrupted" and not self._stop_requested

    @property
    def _reasks(self) -> int:
        """Re-asks after an unusable reply: ``max_llm_retries`` with ``on_unusable_reply="reask"``, none otherwise."""
        return self.max_llm_retries if self.on_unusable_reply == "reask" else 0

    def _unusable(self, role: str, answer: Answer) -> None:
        """With ``on_unusable_reply="rerun"`` (the reference), an unusable reply discards the running iteration."""
        if self.on_unusable_reply == "rerun":
            raise UnusableReply(role, answer.failures[-1] if answer.failures else "no reply")

    def _iterate_with_reruns(self, callback: BaseCallback) -> bool:
        """
        One iteration. With ``on_unusable_reply="rerun"`` an unusable reply (of either role) discards the attempt, as
        the reference does: its episodes stay spent (and counted), nothing enters the history, and the iteration runs
        again from its Search call, at most ``max_iteration_attempts`` times; then training stops with a warning.
        """
        self._discarded_attempts = []
        for attempt in range(1, self.max_iteration_attempts + 1):
            episodes = self._episode_num
            try:
                return self._iterate(callback)
            except UnusableReply as exc:
                self._discarded_attempts.append(
                    {"role": exc.role, "reason": exc.reason, "episodes": int(self._episode_num - episodes)}
                )
                self.llm_stats["discarded_attempts"] = self.llm_stats.get("discarded_attempts", 0) + 1
                if self.verbose >= 1:
                    print(
                        f"R2PO: iteration {self.iteration + 1}, attempt {attempt} of {self.max_iteration_attempts}: "
                        f"unusable {exc.role} reply ({exc.reason}); the iteration is discarded",
                        flush=True,
                    )
                if self._episodes_left() < self.n_eval_episodes or self._stop_requested:
                    return False
        warnings.warn(
            f"R2PO: {self.max_iteration_attempts} attempts of iteration {self.iteration + 1} ended in an unusable reply "
            f"(last: {self._discarded_attempts[-1]['role']}: {self._discarded_attempts[-1]['reason']}); training stops, "
            "as the reference does. on_unusable_reply='reask' re-asks with the error stated and falls back instead.",
            RuntimeWarning,
            stacklevel=2,
        )
        return False

    def _iterate_critic_only(self, callback: BaseCallback) -> bool:
        """``critic_only``: revise the last candidate from its representative rollout; always commit."""
        k = self.n_eval_episodes
        last = self.history[-1] if self.history else None
        if last is None:  # no warm-up: the reference asks with an empty history and no trace (its prompt shows no candidate)
            answer = self._revise(np.zeros(self.policy.parameter_space.size), 0.0, 0, self._critic_evidence(None))
        else:
            last_result = self._last_result if self._last_result_is(last) else None
            evidence = self._critic_evidence(last_result)
            answer = self._revise(np.asarray(last["params"]), last["mean_return"], last["n_episodes"], evidence)
        kind, failures = "critic", answer.failures
        if answer.params is not None:
            theta = answer.params
        else:
            self._unusable("critic", answer)  # "rerun" discards the iteration; with "reask", a fallback
            theta, kind = self._fallback_params(), "fallback"
            self.llm_stats["fallbacks"] += 1
        result = self._evaluate(theta, k, callback)
        if result is None:
            return False
        mean = float(result.returns.mean())
        extra: dict[str, Any] = {
            "search": None,
            "revision": {
                "role": "critic",
                "status": "kept",
                "params": [float(v) for v in theta],
                "mean_return": mean,
                "failures": failures,
                "adjusted": list(answer.notes) if kind == "critic" else [],
            },
        }
        if last is not None and answer.params is not None:
            extra["diagnostics"] = diagnose_revision(
                last["params"],
                theta,
                last["mean_return"],
                mean,
                answer.calls[-1].reply,
                accepted=True,
                above_tau_c=self.revision_threshold is not None and last["mean_return"] >= self.revision_threshold,
            )
        self.iteration += 1
        self._last_result = result
        self._commit(self._record(kind, theta, result, **extra))
        return not self._stop_requested

    def _last_result_is(self, record: dict[str, Any]) -> bool:
        result = getattr(self, "_last_result", None)
        if result is None or len(result.episodes) != record["n_episodes"]:
            return False
        return bool(np.isclose(float(result.returns.mean()), record["mean_return"]))

    def _start_learning(self) -> None:
        """What every ``learn()`` call does before the loop: the LLM, the run's transcript, the saved state."""
        self._stop_requested = False
        self._snapshot()  # a save before the first history entry of this call stores the state it started from
        self._ensure_llm()
        self._progress_llm = (int(self.llm_stats["calls"]), float(self.llm_stats["seconds"]))
        if self._transcript is not None:
            # calls recorded after the last history entry (a crash, or an exception this process caught) are
            # asked again from here: set them aside, so that a replay of the transcript follows this run
            calls = self._transcript_calls
            self._transcript.rewind(int(self.llm_stats["calls"]) if calls is None else calls)  # None: older checkpoints

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
        self._start_learning()

        try:
            if self._warmup(callback):
                while self.num_timesteps < total_timesteps and self._episodes_left() >= self.n_eval_episodes:
                    self._update_current_progress_remaining(self.num_timesteps, total_timesteps)
                    if not self._iterate_with_reruns(callback):
                        break
                    if log_interval is not None and self.iteration % log_interval == 0:
                        self.dump_logs()
                    if self.stop_at_target and self.target_confirmed():
                        break
        except BaseException:
            self._roll_back()
            raise
        callback.on_training_end()
        return self

    # ------------------------------------------------------------------ logging

    def dump_logs(self) -> None:
        """Write the iteration's metrics (see the README's metrics table) at ``step=num_timesteps``."""
        time_elapsed = max((time.time_ns() - self.start_time) / 1e9, sys.float_info.epsilon)
        fps = int((self.num_timesteps - self._num_timesteps_at_start) / time_elapsed)
        if self.ep_info_buffer:
            self.logger.record("rollout/ep_rew_mean", safe_mean([ep["r"] for ep in self.ep_info_buffer]))
            self.logger.record("rollout/ep_len_mean", safe_mean([ep["l"] for ep in self.ep_info_buffer]))
        self.logger.record("time/episodes", self._episode_num)
        self.logger.record("time/fps", fps)
        self.logger.record("time/time_elapsed", int(time_elapsed), exclude="tensorboard")
        self.logger.record("time/total_timesteps", self.num_timesteps)
        last = self.history[-1] if self.history else None
        if last is not None and last["kind"] != "warmup":
            self.logger.record("r2po/kept_return", last["mean_return"])
            if last.get("search"):
                self.logger.record("r2po/search_return", last["search"]["mean_return"])
            revision = last["revision"]
            if revision["role"] == "critic" and revision["mean_return"] is not None:
                self.logger.record("r2po/critic_return", revision["mean_return"])
            self.logger.record("r2po/revision_kept", int(revision["status"] == "kept"))
            for key, value in last.get("diagnostics", {}).items():
                self.logger.record(f"diagnostics/{key}", float(value))
        best = self.best_record()
        if best is not None:
            self.logger.record("r2po/best_return", best["mean_return"])
            self.logger.record("r2po/theta", np.asarray(best["params"]), exclude=TEXT_ONLY)
        self.logger.record("r2po/iteration", self.iteration)
        for key in ("calls", "parse_failures", "fallbacks"):
            self.logger.record(f"llm/{key}", int(self.llm_stats[key]))
        self.logger.record("llm/seconds", float(self.llm_stats["seconds"]))
        if self.llm_stats["prompt_tokens"] or self.llm_stats["completion_tokens"]:
            self.logger.record("llm/prompt_tokens", int(self.llm_stats["prompt_tokens"]))
            self.logger.record("llm/completion_tokens", int(self.llm_stats["completion_tokens"]))
        for role, (prompt, reply) in self._last_exchanges.items():
            self.logger.record(f"llm_text/{role}_prompt", prompt, exclude=TEXT_ONLY)
            self.logger.record(f"llm_text/{role}_reply", reply, exclude=TEXT_ONLY)
        self.logger.dump(step=self.num_timesteps)


def _check_int(name: str, value: Any, low: int, optional: bool = False) -> None:
    """Raise a ``ValueError`` unless ``value`` is an integer >= ``low`` (or ``None`` when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        allowed = f"an integer >= {low}" + (" or None" if optional else "")
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
