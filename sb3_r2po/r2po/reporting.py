"""What a run reports: a progress line per iteration (``verbose >= 1``), a line per LLM call (``verbose >= 2``,
:func:`call_line`) and the metrics of SB3's logger.

The metric names are documented on the Metrics page of the documentation.
"""

from __future__ import annotations

import sys
import time
import warnings
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback, ConvertCallback, ProgressBarCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.utils import safe_mean

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.llm.asking import LLMCall
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
        if record["kind"] == "given":
            print(
                f"R2PO given vector (set_parameters): mean return {record['mean_return']:.4g} over {record['n_episodes']} "
                f"episodes | episodes {model.episodes_used}{budget} | best {best['mean_return']:.4g}",
                flush=True,
            )
            return
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


def call_line(number: int, call: LLMCall, params: np.ndarray | None, space: ParameterSpace) -> str:
    """
    The ``verbose >= 2`` line of one LLM call: ``R2PO LLM call 7: critic | prompt 5230 chars (1304 tokens, 1024 cached)
    | reply 412 chars (98 tokens) | 2.31 s | params: [0.5, -1.2, ...]``, or ``| unusable: <reason>`` in place of the
    vector; token counts only where the backend reports them.

    :param number: The call's number in the model's calls (``llm_stats["calls"]`` once it is counted).
    :param call: The call.
    :param params: The vector its reply gave (``None``: the reply was unusable, ``call.error`` says why).
    :param space: The parameter space, to write the vector.
    """

    def size(chars: int, tokens: int | None, cached: int | None = None) -> str:
        counted = [] if tokens is None else [f"{tokens} tokens"] + ([] if cached is None else [f"{cached} cached"])
        return f"{chars} chars" + (f" ({', '.join(counted)})" if counted else "")

    prompt = size(sum(len(m["content"]) for m in call.messages), call.prompt_tokens, call.prompt_tokens_cached)
    outcome = space.format(params, "list") if params is not None else f"unusable: {call.error}"
    reply = size(len(call.reply), call.completion_tokens)
    return f"R2PO LLM call {number}: {call.role} | prompt {prompt} | reply {reply} | {call.seconds:.2f} s | {outcome}"


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
    if last is not None and "revision" in last:  # an iteration's entry (not the warm-up's, nor a given vector's)
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


def planned_episodes(model: R2PO) -> int | None:
    """
    The episodes the rest of the run may take by its episode budget (``max_episodes``) and its plan (the remaining
    warm-up, then ``max_iterations`` iterations of K episodes per candidate, discarded attempts not foreseen), the
    smaller of the two; ``None`` when neither is set.
    """
    bounds = [] if model.max_episodes is None else [int(model.episodes_left)]
    if model.max_iterations is not None:
        warmup = max(0, model.warmup_episodes - sum(r["kind"] == "warmup" for r in model.history))
        iterations = max(0, model.max_iterations - model.iteration)
        bounds.append(warmup + iterations * model.variant_spec.candidates_per_iteration * model.n_eval_episodes)
    return max(0, min(bounds)) if bounds else None


class BudgetProgressBar(ProgressBarCallback):
    """
    ``learn(..., progress_bar=True)``'s bar in the unit that binds. Without ``max_episodes`` and ``max_iterations`` it
    is SB3's (steps against ``total_timesteps``). With either, it counts the episodes of this ``learn()`` against
    :func:`planned_episodes`; steps move it too when ``total_timesteps`` would end training sooner (the same fraction
    of its episodes), and it is full when training ends (the budget cannot pay for another evaluation).
    """

    def _on_training_start(self) -> None:
        model = cast("R2PO", self.model)
        self._episodes = planned_episodes(model)
        if self._episodes is None:
            super()._on_training_start()
            return
        from tqdm.rich import tqdm  # SB3's progress bar (its "extra": tqdm and rich)

        self._start = (model.episodes_used, model.num_timesteps, int(self.locals["total_timesteps"]))
        self.pbar = tqdm(total=self._episodes, unit="episodes")

    def _on_step(self) -> bool:
        if self._episodes is None:
            return super()._on_step()
        model = cast("R2PO", self.model)
        episodes, steps, total = self._start
        by_steps = (model.num_timesteps - steps) / max(total - steps, 1) * self._episodes
        self.pbar.update(min(self._episodes, max(model.episodes_used - episodes, int(by_steps))) - self.pbar.n)
        return True

    def _on_training_end(self) -> None:
        if self._episodes is not None:
            self.pbar.update(self._episodes - self.pbar.n)
        super()._on_training_end()


def with_progress_bar(callback: MaybeCallback, progress_bar: bool) -> MaybeCallback:
    """``callback`` with :class:`BudgetProgressBar` added when ``progress_bar`` (R2PO's stand-in for SB3's bar)."""
    if not progress_bar:
        return callback
    given = [] if callback is None else list(callback) if isinstance(callback, list) else [callback]
    return [c if isinstance(c, BaseCallback) else ConvertCallback(c) for c in given] + [BudgetProgressBar()]


def warn_before_first_iteration(model: R2PO) -> None:
    """
    At the end of a ``learn()``, before the run's first LLM iteration is complete: one ``UserWarning`` with the
    warm-up's episodes and steps so far and about how many more steps the first iteration needs (the rest of the
    warm-up, then K x the mean warm-up episode length x the candidates per iteration), and when ``max_episodes`` is
    too small for it, that too. Nothing once an iteration is complete.
    """
    if model.iteration > 0:
        return
    warmup = [r for r in model.history if r["kind"] == "warmup"]
    steps = int(sum(r["mean_length"] * r["n_episodes"] for r in warmup))
    length = steps / len(warmup) if warmup else float(model.episode_cap)
    rest = max(0, model.warmup_episodes - len(warmup))
    episodes = model.variant_spec.candidates_per_iteration * model.n_eval_episodes
    first = f"{rest} warm-up episodes, then " if rest else ""
    text = (
        f"R2PO: learn() ended before the first LLM iteration: the warm-up ran {len(warmup)} of {model.warmup_episodes} "
        f"episodes ({steps} steps); the first iteration needs about {round((rest + episodes) * length)} more steps "
        f"({first}{episodes} episodes of about {length:.0f} steps{'' if warmup else ', the episode cap'}). Give learn() "
        "more total_timesteps (a later learn(..., reset_num_timesteps=False) continues this run)"
    )
    if model.episodes_left < rest + model.n_eval_episodes:
        text += f"; max_episodes={model.max_episodes} leaves {int(model.episodes_left)} episodes, too few"
    warnings.warn(text + ".", UserWarning, stacklevel=3)
