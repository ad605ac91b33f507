import json
import logging

import pytest
from helpers import UNTIL_BUDGET, BanditEnv, ScriptedLLM, vector
from stable_baselines3.common.logger import Logger, configure

from sb3_r2po import ExampleLLM

SCALARS = [
    "rollout/ep_rew_mean",
    "rollout/ep_len_mean",
    "time/episodes",
    "time/total_timesteps",
    "r2po/kept_return",
    "r2po/search_return",
    "r2po/critic_return",
    "r2po/revision_kept",
    "r2po/best_return",
    "r2po/iteration",
    "llm/calls",
    "llm/parse_failures",
    "llm/fallbacks",
    "llm/seconds",
    "llm/prompt_tokens",
    "llm/prompt_tokens_cached",
    "llm/completion_tokens",
]


def test_tensorboard_event_file_holds_the_keys(tmp_path, make_r2po) -> None:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    # a scripted LLM that reports token usage; the critic always edits, so critic_return is logged
    replies = [f"params: [{i % 5}.0, 1.0, 0.5, {i % 3}.0, 0.1, 0.2, 0.3, 0.4, 0.5, {i}.0]" for i in range(1, 6)]
    model = make_r2po(
        llm=ScriptedLLM(replies),
        n_eval_episodes=2,
        warmup_episodes=2,
        seed=0,
        tensorboard_log=str(tmp_path),
        max_episodes=10,
    )
    model.learn(UNTIL_BUDGET, tb_log_name="run")
    (run_dir,) = list(tmp_path.glob("run_*"))
    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={"tensors": 0, "histograms": 0, "scalars": 0})
    acc.Reload()
    tags = acc.Tags()
    missing = [key for key in SCALARS if key not in tags["scalars"]]
    assert not missing, f"missing scalars: {missing}"
    assert "r2po/theta" in tags["histograms"]
    text_tags = set(tags["tensors"])
    assert {"llm_text/search_prompt/text_summary", "llm_text/critic_reply/text_summary"} <= text_tags


def test_text_is_not_printed_to_stdout(tmp_path, capsys, make_r2po) -> None:
    model = make_r2po(llm=ExampleLLM(), n_eval_episodes=2, warmup_episodes=2, seed=0, max_episodes=None, verbose=1)
    model.set_logger(configure(str(tmp_path), ["stdout", "csv", "json"]))
    model.learn(200)
    out = capsys.readouterr().out
    assert "best_return" in out and "search_return" in out
    assert "seeded local search" not in out and "Search step" not in out  # no reply or prompt text
    csv_header = (tmp_path / "progress.csv").read_text().splitlines()[0]
    assert "llm_text" not in csv_header and "theta" not in csv_header


def test_logged_best_return_and_episodes_are_the_values_the_metrics_page_defines(tmp_path, make_r2po) -> None:
    """The scalars read back from SB3's JSON output (the values TensorBoard gets), one row per iteration:
    ``r2po/best_return`` is the highest K-episode mean of the iterations so far (the first's 4 after the second's 1,
    not the last record's), ``time/episodes`` every episode run so far, the warm-up's included."""
    replies = [vector(2.0, 2.0), vector(1.0, 1.0), vector(0.5, 0.5), vector(0.25, 0.25)]  # Search, Critic, Search, Critic
    model = make_r2po(BanditEnv(), llm=ScriptedLLM(replies), n_eval_episodes=2, warmup_episodes=2, seed=0, max_episodes=10)
    model.set_logger(configure(str(tmp_path), ["json"]))
    model.learn(UNTIL_BUDGET)
    rows = [json.loads(line) for line in (tmp_path / "progress.json").read_text().splitlines()]
    # the bandit's return is W + b: the Search candidates (2, 2) and (0.5, 0.5) beat their revisions and are kept
    assert [r["mean_return"] for r in model.history if r["kind"] != "warmup"] == [4.0, 1.0]
    assert [row["r2po/kept_return"] for row in rows] == [4.0, 1.0]
    assert [row["r2po/best_return"] for row in rows] == [4.0, 4.0]
    assert [row["time/episodes"] for row in rows] == [2 + 2 * 2, 2 + 2 * 2 * 2]  # warm-up, then K + K an iteration
    best = model.best_record()
    assert best is not None and rows[-1]["r2po/best_return"] == best["mean_return"]
    assert rows[-1]["time/episodes"] == model.episodes_used == 10


class _SlowToLoad(ScriptedLLM):
    """A backend with a slow first step (``Preparable``) that reports its progress through ``logging``."""

    def __init__(self) -> None:
        super().__init__([vector(1.0, 1.0), vector(1.5, 1.0)])
        self.prepared = 0

    def prepare(self) -> None:
        logging.getLogger("sb3_r2po.llm.fake").info("joining the model file")
        self.prepared += 1


@pytest.mark.parametrize("verbose", [0, 1])
def test_a_preparable_backend_is_prepared_once_and_shown_at_verbose_1(capsys, make_r2po, verbose: int) -> None:
    llm = _SlowToLoad()
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=1, warmup_episodes=1, max_episodes=3, seed=None, verbose=verbose)
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.learn(UNTIL_BUDGET)
    model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert llm.prepared == 1 and llm.calls  # before the first call, once
    out = capsys.readouterr().out.splitlines()
    progress = [line for line in out if line.startswith("R2PO")]
    if verbose == 0:
        assert progress == []
        return
    settings = progress.pop(0)  # at construction: where the settings came from (an env without an id: derived)
    assert settings.startswith("R2PO settings for an env without an id, variant r2po: given: warmup_episodes=1; derived:")
    assert progress[0] == "R2PO: preparing the LLM _SlowToLoad"
    assert progress[1] == "R2PO: joining the model file"
    assert progress[2].startswith("R2PO: LLM ready in ")
    assert progress[3].startswith("R2PO warm-up: 1 random candidates, 1 episode each | episodes 1/3 | best return ")
    assert progress[4].startswith("R2PO iteration 1/1 | episodes 3/3 | search 2 | critic 2.5 kept | best 2.5 | LLM 2 calls ")
    assert not logging.getLogger("sb3_r2po").handlers  # the handler is gone after the preparation


@pytest.mark.parametrize("verbose", [1, 2])
def test_verbose_2_prints_a_line_per_llm_call(capsys, make_r2po, verbose: int) -> None:
    """``verbose=2``: per call its role, prompt and reply sizes, time and the vector read (or why the reply was
    unusable); ``verbose=1`` keeps the one line per iteration."""
    llm = ScriptedLLM(["no numbers here", vector(1.0, 1.0), vector(1.5, 1.0)])
    model = make_r2po(
        BanditEnv(),
        llm=llm,
        n_eval_episodes=1,
        warmup_episodes=1,
        max_episodes=3,
        on_unusable_reply="reask",
        max_llm_retries=1,
        verbose=verbose,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.learn(UNTIL_BUDGET)
    out = capsys.readouterr().out.splitlines()
    calls = [line for line in out if line.startswith("R2PO LLM call")]
    assert [line for line in out if line.startswith("R2PO iteration")]  # the iteration line at both levels
    if verbose == 1:
        assert calls == []
        return
    assert len(calls) == len(llm.calls) == model.llm_stats["calls"] == 3  # one line per call, the re-ask included
    sizes = [sum(len(m["content"]) for m in messages) for messages in llm.calls]
    assert calls[0].startswith(f"R2PO LLM call 1: search | prompt {sizes[0]} chars (10 tokens) | reply 15 chars (5 tokens) |")
    assert " s | unusable: " in calls[0]
    assert calls[1] == (
        f"R2PO LLM call 2: search | prompt {sizes[1]} chars (10 tokens) | reply 30 chars (5 tokens) | 0.00 s "
        "| params: [1.0, 1.0]"
    )
    assert calls[2].startswith("R2PO LLM call 3: critic |") and calls[2].endswith("| params: [1.5, 1.0]")
    assert out.index(calls[2]) < out.index(next(line for line in out if line.startswith("R2PO iteration")))
