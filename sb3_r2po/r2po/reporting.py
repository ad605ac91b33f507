"""What a run reports: a line per iteration (``verbose >= 1``) and per LLM call (``verbose >= 2``), the metrics of
SB3's logger (the Metrics page of the documentation), the progress bar and the warning of a learn() too short."""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback, ConvertCallback, ProgressBarCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.utils import safe_mean

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.r2po.arguments import R2POSettings
from sb3_r2po.r2po.run_state import Clock, LLMCall, best_record

TEXT_ONLY = ("stdout", "log", "json", "csv")  # logger formats that get no prompts, replies or histograms
Plan = Callable[[], tuple[int | None, Clock]]  # the episodes the rest of the run may take (planned_episodes), and the clock


class Progress:
    """Prints a line per history entry (the warm-up: one when complete) for ``verbose >= 1``, with the LLM calls since."""

    def __init__(self, settings: R2POSettings, history: list[dict[str, Any]], stats: dict[str, float]) -> None:
        self.settings, self.history, self.stats = settings, history, stats
        self._llm = (int(stats["calls"]), float(stats["seconds"]))  # LLM calls and seconds at the last line

    def entry(self, record: dict[str, Any], clock: Clock) -> None:
        """Report a history entry just committed."""
        s = self.settings
        episodes = f"episodes {clock.episodes_used}" + (f"/{s.max_episodes}" if s.max_episodes is not None else "")
        best = best_record(self.history)
        assert best is not None
        if record["kind"] == "given":
            given = f"mean return {record['mean_return']:.4g} over {record['n_episodes']} episodes"
            print(f"R2PO given vector (set_parameters): {given} | {episodes} | best {best['mean_return']:.4g}", flush=True)
            return
        if record["kind"] == "warmup":
            if (done := sum(r["kind"] == "warmup" for r in self.history)) == s.warmup_episodes:
                warmup = f"{done} random candidates, 1 episode each"
                print(f"R2PO warm-up: {warmup} | {episodes} | best return {best['mean_return']:.4g}", flush=True)
            return
        planned = s.max_iterations  # the plan, or fewer: this iteration, the full ones a cap pays for, a partial one
        if s.max_episodes is not None:
            full, rest = divmod(clock.episodes_left, s.candidates_per_iteration * s.n_eval_episodes)
            paid = clock.iteration + int(full) + int(rest >= s.n_eval_episodes)
            planned = paid if planned is None else min(planned, paid)
        parts = [f"R2PO iteration {clock.iteration}" + (f"/{planned}" if planned else ""), episodes]
        search, revision = record.get("search"), record.get("revision", {"role": None})
        if "candidates" in record:  # a code round (promptpo)
            parts.append(f"kept {record['mean_return']:.4g} of {len(record['candidates'])} candidates")
        if search is not None:
            parts.append(f"{search['kind']} {search['mean_return']:.4g}")
        if revision["role"] is not None:
            result = f" {revision['mean_return']:.4g}" if revision["mean_return"] is not None else ""
            unchanged = " (unchanged)" if revision.get("unchanged") else ""
            parts.append(f"{revision['role']}{result}{unchanged} {revision['status']}")
        parts.append(f"best {best['mean_return']:.4g}")
        calls, seconds = int(self.stats["calls"]), float(self.stats["seconds"])
        parts.append(f"LLM {calls - self._llm[0]} calls {seconds - self._llm[1]:.1f} s (total {calls} calls {seconds:.1f} s)")
        self._llm = (calls, seconds)
        print(" | ".join(parts), flush=True)


def call_line(number: int, call: LLMCall, params: np.ndarray | None, space: ParameterSpace | None) -> str:
    """The ``verbose >= 2`` line of call ``number``: ``R2PO LLM call 7: critic | prompt 5230 chars (1304 tokens, 1024
    cached) | reply 412 chars (98 tokens) | 2.31 s | [0.5, -1.2]`` (``params``), or ``| unusable: <reason>``."""

    def size(chars: int, tokens: int | None, cached: int | None = None) -> str:
        counted = [] if tokens is None else [f"{tokens} tokens"] + ([] if cached is None else [f"{cached} cached"])
        return f"{chars} chars" + (f" ({', '.join(counted)})" if counted else "")

    prompt = size(sum(len(m["content"]) for m in call.messages), call.prompt_tokens, call.prompt_tokens_cached)
    outcome = "used" if call.error is None else f"unusable: {call.error}"  # no vector: an unusable reply, or a code policy's
    if params is not None and space is not None:
        outcome = space.format(params, "list")
    reply = size(len(call.reply), call.completion_tokens)
    return f"R2PO LLM call {number}: {call.role} | prompt {prompt} | reply {reply} | {call.seconds:.2f} s | {outcome}"


def record_metrics(
    logger: Logger,
    history: list[dict[str, Any]],
    stats: dict[str, float],
    clock: Clock,
    steps: tuple[int, int, float],
    buffers: tuple[Any, Any],
    exchanges: dict[str, tuple[str, str]],
) -> None:
    """Record the run's metrics in ``logger``; ``steps``: ``num_timesteps`` now and at the start of ``learn()`` and
    ``time.time_ns()`` then; ``buffers``: SB3's episode and success buffers; ``exchanges``: each role's last prompt and
    reply (TensorBoard only)."""
    num_timesteps, timesteps_at_start, start_time = steps
    time_elapsed = max((time.time_ns() - start_time) / 1e9, sys.float_info.epsilon)
    infos, successes = buffers
    if infos:
        logger.record("rollout/ep_rew_mean", safe_mean([ep["r"] for ep in infos]))
        logger.record("rollout/ep_len_mean", safe_mean([ep["l"] for ep in infos]))
    if successes:  # envs that report info["is_success"] at episode end
        logger.record("rollout/success_rate", safe_mean(list(successes)))
    logger.record("time/episodes", clock.episodes_used)
    logger.record("time/fps", int((num_timesteps - timesteps_at_start) / time_elapsed))
    logger.record("time/time_elapsed", int(time_elapsed), exclude="tensorboard")
    logger.record("time/total_timesteps", num_timesteps)
    last = history[-1] if history else {}
    if "revision" in last:  # an iteration's entry (not the warm-up's, nor a given vector's)
        _record_iteration(logger, last)
    if (best := best_record(history)) is not None:
        logger.record("r2po/best_return", best["mean_return"])
        if "source" in last:  # a code round: the source it kept, as text
            logger.record("code/source", last["source"], exclude=TEXT_ONLY)
        else:
            logger.record("r2po/theta", np.asarray(best["params"]), exclude=TEXT_ONLY)
    logger.record("r2po/iteration", clock.iteration)
    for key in ("calls", "parse_failures", "fallbacks", "discarded_attempts", "discarded_episodes"):  # the last two: rerun
        logger.record(f"llm/{key}", int(stats.get(key, 0)))
    logger.record("llm/seconds", float(stats["seconds"]))
    if stats["prompt_tokens"] or stats["completion_tokens"]:
        for key in ("prompt_tokens", "prompt_tokens_cached", "completion_tokens"):
            logger.record(f"llm/{key}", int(stats.get(key, 0)))
    for role, (prompt, reply) in exchanges.items():
        logger.record(f"llm_text/{role}_prompt", prompt, exclude=TEXT_ONLY)
        logger.record(f"llm_text/{role}_reply", reply, exclude=TEXT_ONLY)


def _record_iteration(logger: Logger, last: dict[str, Any]) -> None:
    logger.record("r2po/kept_return", last["mean_return"])
    if last.get("search"):
        logger.record("r2po/search_return", last["search"]["mean_return"])
    revision = last["revision"]
    if revision["role"] == "critic" and revision["mean_return"] is not None:
        logger.record("r2po/critic_return", revision["mean_return"])
    logger.record("r2po/revision_kept", int(revision["status"] == "kept"))
    for key, value in last.get("diagnostics", {}).items():
        logger.record(f"diagnostics/{key}", float(value))


def planned_episodes(settings: R2POSettings, history: list[dict[str, Any]], clock: Clock) -> int | None:
    """The episodes the rest of the run may take: the smaller of what ``max_episodes`` leaves and the plan (the rest of
    the warm-up, then ``max_iterations`` iterations of K episodes per candidate); ``None`` when neither is set."""
    s = settings
    bounds = [] if s.max_episodes is None else [int(clock.episodes_left)]
    if s.max_iterations is not None:
        warmup = max(0, s.warmup_episodes - sum(r["kind"] == "warmup" for r in history))
        bounds.append(warmup + max(0, s.max_iterations - clock.iteration) * s.candidates_per_iteration * s.n_eval_episodes)
    return max(0, min(bounds)) if bounds else None


class BudgetProgressBar(ProgressBarCallback):
    """``learn(..., progress_bar=True)``'s bar: SB3's (steps) without ``max_episodes`` and ``max_iterations``; with
    either, episodes against :func:`planned_episodes` (steps move it too when they bind first), full at the end."""

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan

    def _on_training_start(self) -> None:
        self._episodes, clock = self.plan()
        if self._episodes is None:
            super()._on_training_start()
            return
        from tqdm.rich import tqdm  # SB3's progress bar (its "extra": tqdm and rich)

        self._start = (clock.episodes_used, self.model.num_timesteps, int(self.locals["total_timesteps"]))
        self.pbar = tqdm(total=self._episodes, unit="episodes")

    def _on_step(self) -> bool:
        if self._episodes is None:
            return super()._on_step()
        episodes, steps, total = self._start
        by_steps = (self.model.num_timesteps - steps) / max(total - steps, 1) * self._episodes
        used = self.plan()[1].episodes_used
        self.pbar.update(min(self._episodes, max(used - episodes, int(by_steps))) - self.pbar.n)
        return True

    def _on_training_end(self) -> None:
        if self._episodes is not None:
            self.pbar.update(self._episodes - self.pbar.n)
        super()._on_training_end()


def with_callback(callback: MaybeCallback, added: BaseCallback) -> list[BaseCallback]:
    """``callback`` (``None``, one or a list; a plain function through ``ConvertCallback``) as a list, then ``added``."""
    given = [] if callback is None else list(callback) if isinstance(callback, list) else [callback]
    return [c if isinstance(c, BaseCallback) else ConvertCallback(c) for c in given] + [added]


def with_progress_bar(callback: MaybeCallback, progress_bar: bool, plan: Plan) -> MaybeCallback:
    """``callback`` with :class:`BudgetProgressBar` added when ``progress_bar`` (R2PO's stand-in for SB3's bar)."""
    return with_callback(callback, BudgetProgressBar(plan)) if progress_bar else callback


def warn_before_first_iteration(settings: R2POSettings, history: list[dict[str, Any]], clock: Clock) -> None:
    """Before the first iteration is complete, warn with the warm-up so far and the steps the first iteration needs."""
    s = settings
    if clock.iteration > 0:
        return
    warmup = [r for r in history if r["kind"] == "warmup"]
    steps = int(sum(r["mean_length"] * r["n_episodes"] for r in warmup))
    length = steps / len(warmup) if warmup else float(s.episode_cap)
    rest = max(0, s.warmup_episodes - len(warmup))
    episodes = s.candidates_per_iteration * s.n_eval_episodes
    first = f"{rest} warm-up episodes, then " if rest else ""
    text = (
        f"R2PO: learn() ended before the first LLM iteration: the warm-up ran {len(warmup)} of {s.warmup_episodes} "
        f"episodes ({steps} steps); the first iteration needs about {round((rest + episodes) * length)} more steps "
        f"({first}{episodes} episodes of about {length:.0f} steps{'' if warmup else ', the episode cap'}). Give learn() "
        "more total_timesteps (a later learn(..., reset_num_timesteps=False) continues this run)"
    )
    if clock.episodes_left < rest + s.n_eval_episodes:
        text += f"; max_episodes={s.max_episodes} leaves {int(clock.episodes_left)} episodes, too few"
    warnings.warn(text + ".", UserWarning, stacklevel=3)
