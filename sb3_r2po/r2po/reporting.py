"""What a run reports: a progress line per iteration (``verbose >= 1``) and the metrics of SB3's logger.

The metric names are documented in docs/metrics.md.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.utils import safe_mean

from sb3_r2po.r2po.history import best_record

if TYPE_CHECKING:
    from sb3_r2po.r2po.r2po import R2PO

TEXT_ONLY = ("stdout", "log", "json", "csv")
"""Logger formats that must not receive prompts, replies or histograms (TensorBoard only)."""


class Progress:
    """
    Prints one line per iteration, and one when the warm-up is complete (``verbose >= 1``).

    :param model: The model.
    """

    def __init__(self, model: R2PO) -> None:
        self.model = model
        self._llm = (0, 0.0)  # LLM calls and seconds at the last line

    def start(self) -> None:
        """Count LLM calls from here (a ``learn()`` call starts)."""
        self._llm = (int(self.model.llm_stats["calls"]), float(self.model.llm_stats["seconds"]))

    def entry(self, record: dict[str, Any]) -> None:
        """Report a history entry just committed."""
        model = self.model
        budget = f"/{model.max_episodes}" if model.max_episodes is not None else ""
        best = best_record(model.history)
        assert best is not None
        if record["kind"] == "warmup":
            done = sum(r["kind"] == "warmup" for r in model.history)
            if done == model.warmup_episodes:
                print(
                    f"R2PO warm-up: {done} random candidates, 1 episode each | episodes {model.episodes_used}{budget} | "
                    f"best return {best['mean_return']:.4g}",
                    flush=True,
                )
            return
        planned = model.max_iterations  # the plan, or fewer: this iteration, the full ones a cap pays for, a partial one
        if model.max_episodes is not None:
            per_iteration = model.variant_spec.candidates_per_iteration * model.n_eval_episodes
            full, rest = divmod(model.episodes_left, per_iteration)
            paid = model.iteration + int(full) + int(rest >= model.n_eval_episodes)
            planned = paid if planned is None else min(planned, paid)
        parts = [
            f"R2PO iteration {model.iteration}" + (f"/{planned}" if planned else ""),
            f"episodes {model.episodes_used}{budget}",
        ]
        search, revision = record.get("search"), record["revision"]
        if search is not None:
            parts.append(f"{search['kind']} {search['mean_return']:.4g}")
        if revision["role"] is not None:
            result = f" {revision['mean_return']:.4g}" if revision["mean_return"] is not None else ""
            unchanged = " (unchanged)" if revision.get("unchanged") else ""
            parts.append(f"{revision['role']}{result}{unchanged} {revision['status']}")
        parts.append(f"best {best['mean_return']:.4g}")
        calls, seconds = int(model.llm_stats["calls"]), float(model.llm_stats["seconds"])
        parts.append(f"LLM {calls - self._llm[0]} calls {seconds - self._llm[1]:.1f} s (total {calls} calls {seconds:.1f} s)")
        self._llm = (calls, seconds)
        print(" | ".join(parts), flush=True)


def record_metrics(
    logger: Logger, model: R2PO, start_time: float, timesteps_at_start: int, exchanges: dict[str, tuple[str, str]]
) -> None:
    """
    Record the run's metrics in ``logger`` (the caller dumps them).

    :param start_time: ``time.time_ns()`` when ``learn()`` started.
    :param timesteps_at_start: ``num_timesteps`` when ``learn()`` started.
    :param exchanges: The last prompt and reply of each role (TensorBoard only).
    """
    time_elapsed = max((time.time_ns() - start_time) / 1e9, sys.float_info.epsilon)
    if model.ep_info_buffer:
        logger.record("rollout/ep_rew_mean", safe_mean([ep["r"] for ep in model.ep_info_buffer]))
        logger.record("rollout/ep_len_mean", safe_mean([ep["l"] for ep in model.ep_info_buffer]))
    if model.ep_success_buffer:  # envs that report info["is_success"] at episode end
        logger.record("rollout/success_rate", safe_mean(list(model.ep_success_buffer)))
    logger.record("time/episodes", model.episodes_used)
    logger.record("time/fps", int((model.num_timesteps - timesteps_at_start) / time_elapsed))
    logger.record("time/time_elapsed", int(time_elapsed), exclude="tensorboard")
    logger.record("time/total_timesteps", model.num_timesteps)
    last = model.history[-1] if model.history else None
    if last is not None and last["kind"] != "warmup":
        _record_iteration(logger, last)
    best = best_record(model.history)
    if best is not None:
        logger.record("r2po/best_return", best["mean_return"])
        logger.record("r2po/theta", np.asarray(best["params"]), exclude=TEXT_ONLY)
    logger.record("r2po/iteration", model.iteration)
    for key in ("calls", "parse_failures", "fallbacks"):
        logger.record(f"llm/{key}", int(model.llm_stats[key]))
    for key in ("discarded_attempts", "discarded_episodes"):  # attempts discarded for an unusable reply, and their episodes
        logger.record(f"llm/{key}", int(model.llm_stats.get(key, 0)))
    logger.record("llm/seconds", float(model.llm_stats["seconds"]))
    if model.llm_stats["prompt_tokens"] or model.llm_stats["completion_tokens"]:
        logger.record("llm/prompt_tokens", int(model.llm_stats["prompt_tokens"]))
        logger.record("llm/prompt_tokens_cached", int(model.llm_stats.get("prompt_tokens_cached", 0)))
        logger.record("llm/completion_tokens", int(model.llm_stats["completion_tokens"]))
    for role, (prompt, reply) in exchanges.items():
        logger.record(f"llm_text/{role}_prompt", prompt, exclude=TEXT_ONLY)
        logger.record(f"llm_text/{role}_reply", reply, exclude=TEXT_ONLY)


def _record_iteration(logger: Logger, last: dict[str, Any]) -> None:
    """The ``r2po/`` and ``diagnostics/`` metrics of the last iteration's history entry."""
    logger.record("r2po/kept_return", last["mean_return"])
    if last.get("search"):
        logger.record("r2po/search_return", last["search"]["mean_return"])
    revision = last["revision"]
    if revision["role"] == "critic" and revision["mean_return"] is not None:
        logger.record("r2po/critic_return", revision["mean_return"])
    logger.record("r2po/revision_kept", int(revision["status"] == "kept"))
    for key, value in last.get("diagnostics", {}).items():
        logger.record(f"diagnostics/{key}", float(value))
