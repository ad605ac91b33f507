"""What a run reports (``sb3_r2po/r2po/reporting.py``), stated exactly: the values and names of the logged metrics
(docs/metrics.md), the progress and call lines, the planned episodes of the progress bar, the warning of a learn() too
short. Each test kills mutants that survived the module's own test files (docs/mutation.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import time
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from stable_baselines3.common.callbacks import ConvertCallback, StopTrainingOnMaxEpisodes
from stable_baselines3.common.logger import Logger

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.r2po.arguments import R2POSettings
from sb3_r2po.r2po.reporting import (
    TEXT_ONLY,
    BudgetProgressBar,
    Progress,
    call_line,
    planned_episodes,
    record_metrics,
    warn_before_first_iteration,
    with_progress_bar,
)
from sb3_r2po.r2po.roles import LLMCall
from sb3_r2po.r2po.run_state import Clock

SPACE = ParameterSpace(2, low=-5, high=5, decimals=1)
STATS = {"calls": 0, "seconds": 0.0, "prompt_tokens": 0, "completion_tokens": 0}


def _settings(**changes: Any) -> R2POSettings:
    return dataclasses.replace(R2POSettings(n_eval_episodes=2, warmup_episodes=3), **changes)


def _warmup(mean: float, length: float = 10.0) -> dict[str, Any]:
    return {"kind": "warmup", "mean_return": mean, "params": [mean, 0.0], "n_episodes": 1, "mean_length": length}


def _iteration(mean: float, search: float | None, role: str | None, revision: float | None, status: str) -> dict[str, Any]:
    return {
        "kind": "search",
        "mean_return": mean,
        "params": [mean, 1.0],
        "n_episodes": 2,
        "search": None if search is None else {"kind": "search", "mean_return": search},
        "revision": {"role": role, "mean_return": revision, "status": status},
    }


def _call(role: str = "search", **changes: Any) -> LLMCall:
    messages = [{"role": "system", "content": "abc"}, {"role": "user", "content": "defgh"}]
    call = LLMCall(role, messages, "params: [1, 2]", None, 2.3456, None, None)
    return dataclasses.replace(call, **changes)


def test_call_line_states_sizes_tokens_time_and_outcome() -> None:
    """docs/metrics.md's ``verbose=2`` line: prompt chars (all messages), token counts where reported, cached ones."""
    params = np.array([1.0, -0.5])
    assert call_line(7, _call(), params, SPACE) == (
        "R2PO LLM call 7: search | prompt 8 chars | reply 14 chars | 2.35 s | params: [1.0, -0.5]"
    )
    call = _call("critic", prompt_tokens=512, completion_tokens=96, prompt_tokens_cached=448)
    assert call_line(8, call, params, SPACE) == (
        "R2PO LLM call 8: critic | prompt 8 chars (512 tokens, 448 cached) | reply 14 chars (96 tokens) | 2.35 s"
        " | params: [1.0, -0.5]"
    )
    call = _call(prompt_tokens=5, completion_tokens=None, error="expected exactly 2 values, got 3")
    assert call_line(1, call, None, SPACE) == (
        "R2PO LLM call 1: search | prompt 8 chars (5 tokens) | reply 14 chars | 2.35 s | unusable: expected exactly 2 "
        "values, got 3"
    )


def _logged(history: list[dict[str, Any]], clock: Clock, **kwargs: Any) -> Logger:
    logger = Logger(folder=None, output_formats=[])
    stats = {**STATS, **kwargs.pop("stats", {})}
    steps = kwargs.pop("steps", (0, 0, time.time_ns()))
    buffers = kwargs.pop("buffers", ([], []))
    record_metrics(logger, history, stats, clock, steps, buffers, kwargs.pop("exchanges", {}))
    return logger


def test_the_metrics_are_the_values_the_metrics_page_defines() -> None:
    """Each key of docs/metrics.md with its value: the best K-episode mean (not the last entry, nor a warm-up draw once
    an iteration exists), the episodes and steps, the counters, the last iteration's returns and diagnostics."""
    history = [
        _warmup(9.0),
        _warmup(1.0),
        _iteration(5.0, 5.0, "critic", 3.0, "rejected"),
        _iteration(4.0, 2.0, "critic", 4.0, "kept"),
    ]
    history[-1]["diagnostics"] = {"salience": 1}
    stats = {"calls": 6, "parse_failures": 2, "fallbacks": 1, "seconds": 1.25, "discarded_attempts": 3}
    stats.update(discarded_episodes=4, prompt_tokens=100, completion_tokens=7, prompt_tokens_cached=60)
    infos = [{"r": 1.0, "l": 10}, {"r": 3.0, "l": 20}]
    exchanges = {"search": ("the prompt", "the reply")}
    logger = _logged(
        history, Clock(2, 11, 3.0), stats=stats, buffers=(infos, [True, False, False, False]), exchanges=exchanges
    )
    values, excluded = dict(logger.name_to_value), logger.name_to_excluded
    theta = values.pop("r2po/theta")
    assert np.array_equal(theta, [5.0, 1.0]) and isinstance(theta, np.ndarray)
    assert values.pop("time/fps") >= 0 and values.pop("time/time_elapsed") >= 0
    assert values == {
        "rollout/ep_rew_mean": 2.0,
        "rollout/ep_len_mean": 15.0,
        "rollout/success_rate": 0.25,
        "time/episodes": 11,
        "time/total_timesteps": 0,
        "r2po/kept_return": 4.0,
        "r2po/search_return": 2.0,
        "r2po/critic_return": 4.0,
        "r2po/revision_kept": 1,
        "diagnostics/salience": 1.0,
        "r2po/best_return": 5.0,
        "r2po/iteration": 2,
        "llm/calls": 6,
        "llm/parse_failures": 2,
        "llm/fallbacks": 1,
        "llm/discarded_attempts": 3,
        "llm/discarded_episodes": 4,
        "llm/seconds": 1.25,
        "llm/prompt_tokens": 100,
        "llm/prompt_tokens_cached": 60,
        "llm/completion_tokens": 7,
        "llm_text/search_prompt": "the prompt",
        "llm_text/search_reply": "the reply",
    }
    assert all(type(values[f"llm/{key}"]) is int for key in ("calls", "fallbacks", "prompt_tokens", "completion_tokens"))
    assert excluded["r2po/theta"] == excluded["llm_text/search_prompt"] == excluded["llm_text/search_reply"] == TEXT_ONLY
    assert excluded["time/time_elapsed"] == ("tensorboard",)
    assert (
        excluded["r2po/best_return"] == excluded["time/episodes"] == excluded["llm/seconds"] == ("",)
    )  # SB3 spells "none excluded" ("",)
    assert TEXT_ONLY == ("stdout", "log", "json", "csv")


def test_metrics_of_the_warm_up_of_a_rejected_revision_and_without_token_counts() -> None:
    """Before any iteration: the best warm-up draw, no iteration keys; a rejected Search-role revision logs
    ``revision_kept`` 0 and no ``critic_return``; token counts only when the backend reports them; missing
    counters are 0."""
    logger = _logged([_warmup(1.0), _warmup(9.0), _warmup(2.0)], Clock(0, 3, float("inf")))
    values = logger.name_to_value
    assert values["r2po/best_return"] == 9.0 and np.array_equal(values["r2po/theta"], [9.0, 0.0])
    assert not any(key.startswith(("r2po/kept", "r2po/search", "r2po/critic", "r2po/revision", "rollout/")) for key in values)
    assert not any(key.startswith("llm/prompt") or key == "llm/completion_tokens" for key in values)
    assert values["llm/discarded_attempts"] == 0 and values["llm/discarded_episodes"] == 0
    history = [_iteration(5.0, None, "search", 3.0, "rejected")]
    values = _logged(history, Clock(1, 4, 0.0), stats={"completion_tokens": 3}).name_to_value
    assert values["r2po/revision_kept"] == 0 and "r2po/search_return" not in values and "r2po/critic_return" not in values
    assert (
        values["llm/prompt_tokens"] == 0 and values["llm/prompt_tokens_cached"] == 0 and values["llm/completion_tokens"] == 3
    )
    values = _logged([_iteration(5.0, 5.0, "critic", None, "failed")], Clock(1, 2, 0.0)).name_to_value
    assert "r2po/critic_return" not in values and values["r2po/revision_kept"] == 0
    assert "r2po/best_return" not in _logged([], Clock(0, 0, 1.0)).name_to_value


def test_fps_counts_the_steps_of_this_learn_per_second() -> None:
    """``time/fps``: steps since this ``learn()`` started over its wall time; ``time/time_elapsed`` its seconds."""
    start = time.time_ns() - 2_000_000_000  # two seconds ago
    values = _logged([], Clock(0, 0, 1.0), steps=(1500, 500, start)).name_to_value
    assert values["time/total_timesteps"] == 1500
    assert 400 <= values["time/fps"] <= 500 and type(values["time/fps"]) is int
    assert values["time/time_elapsed"] == 2


def test_progress_lines_state_the_entry_the_budget_and_the_llm_calls() -> None:
    """docs/metrics.md's ``verbose=1`` lines: the warm-up once complete, a given vector, each iteration with its plan
    (``max_iterations``, or the iterations ``max_episodes`` still pays for), returns, the best, the LLM calls since the
    last line and in total."""
    history: list[dict[str, Any]] = []
    stats = {"calls": 1, "seconds": 0.5}
    progress = Progress(_settings(max_episodes=20), history, stats)
    for mean in (1.0, 3.0):
        history.append(_warmup(mean))
        assert _printed(lambda: progress.entry(history[-1], Clock(0, len(history), 20.0 - len(history)))) == ""
    history.append(_warmup(2.0))  # the warm-up's 3 episodes complete
    assert (
        _printed(lambda: progress.entry(history[-1], Clock(0, 3, 17.0)))
        == "R2PO warm-up: 3 random candidates, 1 episode each | episodes 3/20 | best return 3\n"
    )
    history.append({"kind": "given", "mean_return": 2.25, "n_episodes": 2, "params": [0.0, 0.0]})
    assert _printed(lambda: progress.entry(history[-1], Clock(0, 5, 15.0))) == (
        "R2PO given vector (set_parameters): mean return 2.25 over 2 episodes | episodes 5/20 | best 2.25\n"
    )
    stats.update(calls=3, seconds=2.75)
    history.append(_iteration(4.5, 4.5, "critic", 4.0, "rejected"))
    history[-1]["revision"]["unchanged"] = True
    # 11 left: two iterations of 4 and a partial one of 2 (K)
    assert _printed(lambda: progress.entry(history[-1], Clock(1, 9, 11.0))) == (
        "R2PO iteration 1/4 | episodes 9/20 | search 4.5 | critic 4 (unchanged) rejected | best 4.5 | "
        "LLM 2 calls 2.2 s (total 3 calls 2.8 s)\n"
    )
    stats.update(calls=4)
    history.append(_iteration(1.0, None, "critic", None, "failed"))
    # 1 left: no evaluation of K = 2 episodes
    assert _printed(lambda: progress.entry(history[-1], Clock(2, 13, 1.0))) == (
        "R2PO iteration 2/2 | episodes 13/20 | critic failed | best 4.5 | LLM 1 calls 0.0 s (total 4 calls 2.8 s)\n"
    )


def test_iteration_lines_count_the_plan_without_a_budget_and_the_smaller_bound() -> None:
    def line(settings: R2POSettings, clock: Clock) -> str:
        history = [_iteration(1.0, 1.0, None, None, "none")]
        return _printed(lambda: Progress(settings, history, dict(STATS)).entry(history[-1], clock))

    none = line(_settings(max_episodes=None), Clock(3, 9, float("inf")))
    assert none == "R2PO iteration 3 | episodes 9 | search 1 | best 1 | LLM 0 calls 0.0 s (total 0 calls 0.0 s)\n"
    assert line(_settings(max_iterations=5), Clock(3, 9, float("inf"))).startswith("R2PO iteration 3/5 | episodes 9 |")
    # 8 left pay for exactly two iterations of 2 candidates x K = 2 (no partial one): 3 + 2
    assert line(_settings(max_episodes=17, max_iterations=9), Clock(3, 9, 8.0)).startswith("R2PO iteration 3/5 | ")
    assert line(_settings(max_episodes=17, max_iterations=4), Clock(3, 9, 8.0)).startswith("R2PO iteration 3/4 | ")
    # 2 left: one partial iteration (one candidate of K = 2); critic_only: one candidate an iteration
    assert line(_settings(max_episodes=11), Clock(3, 9, 2.0)).startswith("R2PO iteration 3/4 | ")
    assert line(_settings(max_episodes=14, variant="critic_only"), Clock(3, 9, 5.0)).startswith("R2PO iteration 3/5 | ")


class _Stdout(io.StringIO):
    """Standard output that keeps only what was flushed (docs/metrics.md: the lines are flushed at once)."""

    flushed = ""

    def flush(self) -> None:
        self.flushed = self.getvalue()


def _printed(action: Any) -> str:
    out = _Stdout()
    with contextlib.redirect_stdout(out):
        action()
    return out.flushed


def test_planned_episodes_is_the_smaller_of_the_budget_and_the_plan() -> None:
    """The rest of the warm-up plus ``max_iterations`` iterations of K episodes per candidate, or what
    ``max_episodes`` leaves, whichever is smaller; ``None`` with neither; never below 0."""
    warm = [_warmup(1.0)]
    assert planned_episodes(_settings(), warm, Clock(0, 1, float("inf"))) is None
    assert planned_episodes(_settings(max_episodes=30), warm, Clock(0, 1, 29.0)) == 29
    assert planned_episodes(_settings(max_iterations=3), warm, Clock(0, 1, float("inf"))) == 2 + 3 * 2 * 2
    assert planned_episodes(_settings(max_iterations=3), warm * 4, Clock(1, 12, float("inf"))) == 2 * 2 * 2
    assert planned_episodes(_settings(max_iterations=3, variant="critic_only"), warm, Clock(0, 1, float("inf"))) == 8
    assert planned_episodes(_settings(max_iterations=3, max_episodes=10), warm, Clock(0, 1, 9.0)) == 9
    assert planned_episodes(_settings(max_iterations=3, max_episodes=30), warm, Clock(0, 1, 29.0)) == 14
    assert planned_episodes(_settings(max_iterations=3), warm * 3, Clock(5, 40, float("inf"))) == 0


def test_the_warning_of_a_learn_too_short_states_the_warm_up_and_the_steps_needed() -> None:
    """Before the first iteration: the warm-up's episodes and steps, the steps the first iteration needs (from the
    warm-up's mean length, or the episode cap before any), and a ``max_episodes`` too small for it."""
    settings = _settings(max_episodes=4, max_episode_steps=50)
    with pytest.warns(UserWarning) as caught:
        warn_before_first_iteration(settings, [_warmup(1.0, 10.0), _warmup(1.0, 20.0)], Clock(0, 2, 2.0))
    assert str(caught[0].message) == (
        "R2PO: learn() ended before the first LLM iteration: the warm-up ran 2 of 3 episodes (30 steps); the first "
        "iteration needs about 75 more steps (1 warm-up episodes, then 4 episodes of about 15 steps). Give learn() more "
        "total_timesteps (a later learn(..., reset_num_timesteps=False) continues this run); max_episodes=4 leaves 2 "
        "episodes, too few."
    )
    with pytest.warns(UserWarning) as caught:
        warn_before_first_iteration(_settings(max_episode_steps=50), [], Clock(0, 0, float("inf")))
    assert str(caught[0].message) == (
        "R2PO: learn() ended before the first LLM iteration: the warm-up ran 0 of 3 episodes (0 steps); the first "
        "iteration needs about 350 more steps (3 warm-up episodes, then 4 episodes of about 50 steps, the episode cap). "
        "Give learn() more total_timesteps (a later learn(..., reset_num_timesteps=False) continues this run)."
    )
    # a complete warm-up, max_episodes leaving exactly the 2 (K) episodes of one evaluation: no "too few"
    warm = [_warmup(1.0, 10.0)] * 3
    with pytest.warns(UserWarning) as caught:
        warn_before_first_iteration(settings, warm, Clock(0, 3, 2.0))
    assert str(caught[0].message).endswith(
        "needs about 40 more steps (4 episodes of about 10 steps). Give learn() more "
        "total_timesteps (a later learn(..., reset_num_timesteps=False) continues this run)."
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_before_first_iteration(settings, warm, Clock(1, 7, 0.0))  # after the first iteration: nothing


def test_with_progress_bar_adds_the_budget_bar_to_the_given_callbacks() -> None:
    plan = lambda: (None, Clock(0, 0, float("inf")))  # noqa: E731
    given = StopTrainingOnMaxEpisodes(5)
    assert with_progress_bar(given, False, plan) is given
    (bar,) = with_progress_bar(None, True, plan)
    assert isinstance(bar, BudgetProgressBar) and bar.plan is plan
    calls: list[dict] = []
    first, converted, bar = with_progress_bar([given, lambda local, _g: calls.append(local) or True], True, plan)
    assert first is given and isinstance(converted, ConvertCallback) and isinstance(bar, BudgetProgressBar)
    assert converted.callback is not None and converted.callback({"step": 1}, {}) and calls == [{"step": 1}]
    one, bar = with_progress_bar(given, True, plan)
    assert one is given and isinstance(bar, BudgetProgressBar)


class _Bar:
    """Stands in for tqdm.rich's bar: its total and position."""

    def __init__(self, total: int, **kwargs: Any) -> None:
        self.total, self.n, self.kwargs = total, 0, kwargs

    def update(self, n: int) -> None:
        self.n += n

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_budget_bar_moves_with_episodes_or_steps_whichever_is_further(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bar of a ``learn()`` that continues a run: this call's episodes against the planned ones, or its share of
    this call's steps, whichever is further, never past the plan, and full at the end."""
    tqdm_rich = pytest.importorskip("tqdm.rich")
    monkeypatch.setattr(tqdm_rich, "tqdm", _Bar)
    clock = [Clock(2, 5, 10.0)]
    bar = BudgetProgressBar(lambda: (10, clock[0]))
    model = SimpleNamespace(num_timesteps=100)
    bar.model, bar.locals = model, {"total_timesteps": 300}  # type: ignore[assignment]
    bar._on_training_start()
    assert (bar.pbar.total, bar.pbar.kwargs) == (10, {"unit": "episodes"})
    model.num_timesteps, clock[0] = 150, Clock(2, 6, 9.0)  # 1 episode of 10; 50 of 200 steps: a quarter, 2.5
    assert bar._on_step() and bar.pbar.n == 2
    model.num_timesteps, clock[0] = 160, Clock(3, 9, 6.0)  # 4 episodes of 10, further than the steps' 3
    bar._on_step()
    assert bar.pbar.n == 4
    model.num_timesteps = 1000  # past total_timesteps: at most the plan
    bar._on_step()
    assert bar.pbar.n == 10
    bar = BudgetProgressBar(lambda: (4, Clock(0, 0, 4.0)))
    bar.model, bar.locals = SimpleNamespace(num_timesteps=7), {"total_timesteps": 8}  # type: ignore[assignment]
    bar._on_training_start()
    bar.model.num_timesteps = 8  # the last of one step: all of it
    bar._on_step()
    assert bar.pbar.n == 4
    bar = BudgetProgressBar(lambda: (6, Clock(0, 0, 6.0)))
    bar.model, bar.locals = SimpleNamespace(num_timesteps=0), {"total_timesteps": 10**9}  # type: ignore[assignment]
    bar._on_training_start()
    bar._on_training_end()
    assert bar.pbar.n == 6  # full when training ends
