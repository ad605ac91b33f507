"""Prefix reuse: prompts laid out so that what stays the same comes first, the embedded backend's state cache, and the
prompt tokens a backend did not have to process (``prompt_tokens_cached``) counted, recorded, replayed and logged.

The ``embedded``-marked tests run the shipped 0.5B model (short prompts, short replies)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from helpers import UNTIL_BUDGET, ScriptedLLM, vector
from stable_baselines3.common.logger import KVWriter, Logger
from test_llm_embedded import needs_model

from sb3_r2po import R2PO
from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.common.rollouts import Episode, build_evidence
from sb3_r2po.llm.base import ChatReply, Message
from sb3_r2po.llm.embedded import EmbeddedBackend, PrefixStateCache, common_prefix, reused_tokens
from sb3_r2po.llm.recording import ReplayBackend, read_records
from sb3_r2po.prompts import prompt_preset
from sb3_r2po.prompts.builder import HistoryLine, PromptBuilder, PromptContext
from sb3_r2po.prompts.tasks import TaskDescription
from sb3_r2po.r2po.roles import LLM_STATS

CRITIC_OPENING = "You are an optimization agent"


def is_critic(prompt: str) -> bool:
    return prompt.startswith(CRITIC_OPENING)


def headings(prompt: str) -> list[str]:
    return [line for line in prompt.splitlines() if line.startswith("## ")]


# -- the prompts' layout ---------------------------------------------------------------------------------------------

TASK = TaskDescription("Reach the flag.", ("s[0]: position",), ("0: left", "1: right"), "-1 a step", "at the flag")
EPISODES = [Episode([np.zeros(1)] * 3, [np.array(0)] * 2, [1.0, 2.0], "terminated") for _ in range(3)]


def critic_text(prompt: str, reuse_order: bool, hints: bool = True) -> str:
    history = (HistoryLine("params: [1.0]", 3.0, 3, excerpt="t=0: s=[0] -> a=0"), HistoryLine("params: [2.0]", 4.0, 3))
    ctx = PromptContext(
        TASK, ("layout line",), ParameterSpace(1), 10.0, history, 3, 9, 0.5, best=4.0, best_episodes=3,
        selection_hints=hints, extra_statistics=True, reuse_order=reuse_order, history_omitted=2,
    )  # fmt: skip
    statistics = prompt in ("r2po",)
    evidence = build_evidence(
        EPISODES, 10.0, 9.5, None, statistics=statistics, trajectories=("median",), step_rewards=not statistics
    )
    candidate = HistoryLine("params: [3.0]", 3.0, 3)
    return PromptBuilder(reply_style="list").critic(ctx, candidate, evidence, prompt, "reward")[0]["content"]


CLOSING = "Write your reply in the two-part layout given above."
REPLY_LAYOUT_LAST = {  # the last line of each Critic prompt in the reference's order: its reply layout's
    "r2po": "The following lines: explain what you changed and why.\n",
    "rep_traj": "The following lines: explain what you changed and why, pointing to specific steps of the trajectory.\n",
    "three_traj": "pointing to specific episodes and states of the summaries above.\n",
    "critic_only": "The first line holds only the final revised parameters, not the draft.\n",
}


@pytest.mark.parametrize("prompt", ["r2po", "rep_traj", "three_traj", "critic_only"])
def test_the_reuse_order_shows_the_same_lines_with_the_history_before_what_changes(prompt: str) -> None:
    reference, reuse = critic_text(prompt, reuse_order=False), critic_text(prompt, reuse_order=True)
    # the same information: the same lines, once the history is no longer "above" the points that refer to it, and a
    # closing line that points back to the reply layout, which the reuse order states before the history
    assert reference.endswith(REPLY_LAYOUT_LAST[prompt]) and reuse.endswith(f"\n\n{CLOSING}\n")
    normalise = lambda text: sorted(line.replace(" above.", " below.") for line in text.splitlines() if line)  # noqa: E731
    assert normalise(reuse.removesuffix(f"{CLOSING}\n")) == normalise(reference) and reuse != reference
    order = headings(reuse)
    assert order.index("## Your step") < order.index("## Previous attempts")
    assert reuse.index("Your reply has exactly two parts") < reuse.index("## Previous attempts")
    new = [h for h in order if h in ("## Proposal", "## Result") or "test" in h or "trace" in h.lower()]
    assert new and all(order.index(h) > order.index("## Previous attempts") for h in new)  # what changes comes last
    reference_order = headings(reference)
    assert reference_order.index("## Your step") > reference_order.index("## Previous attempts")
    # the lines up to the end of the history do not depend on the candidate or its evidence
    head = reuse.split("## Proposal")[0] if prompt != "critic_only" else reuse.split("## What happened")[0]
    assert "params: [3.0]" not in head and "t=1:" not in head


def test_the_threshold_hint_moves_to_the_result_in_the_reuse_order() -> None:
    reuse = critic_text("r2po", reuse_order=True)
    result = reuse.split("## Result")[1].split("## ")[0]
    assert "- The proposal's mean reward 3 is below the threshold 9.5." in result
    assert "threshold 9.5." not in reuse.split("## Result")[0]
    assert "- The proposal's mean reward 3 is below the threshold 9.5." not in critic_text("r2po", True, hints=False)


@pytest.mark.parametrize(
    "settings, reuse",
    [
        ({}, False),
        (prompt_preset("full"), False),
        (prompt_preset("lean"), True),
        (prompt_preset("tight"), True),
        ({"extra_statistics": True}, True),
        ({"history_recent": 3}, True),
    ],
)
def test_our_prompt_options_turn_the_reuse_order_on_and_r2po_defaults_keep_the_reference_order(
    make_r2po, settings: dict[str, Any], reuse: bool
) -> None:
    llm = ScriptedLLM([vector(*([0.5] * 9 + [i / 10])) for i in range(1, 20)])
    make_r2po(llm=llm, n_eval_episodes=2, warmup_episodes=2, max_episodes=10, seed=0, **settings).learn(UNTIL_BUDGET)
    critic = next(p for p in llm.prompts() if is_critic(p))
    order = headings(critic)
    assert (order.index("## Your step") < order.index("## Proposal")) is reuse


def lean_run(make_r2po, max_episodes: int) -> list[str]:
    llm = ScriptedLLM([vector(*([0.1 * (i % 7)] * 9 + [i / 10])) for i in range(1, 60)])
    model = make_r2po(
        llm=llm, n_eval_episodes=2, warmup_episodes=2, max_episodes=max_episodes, seed=0, **prompt_preset("lean")
    )
    model.learn(UNTIL_BUDGET)
    return llm.prompts()


def test_each_lean_prompt_starts_with_the_previous_prompt_of_its_role_up_to_the_end_of_its_history(make_r2po) -> None:
    """Until lean's history reaches 8 best + 4 latest + 8 of slack entries, it only grows at its end: everything of the
    previous prompt of the same role up to its history's last line is a prefix of the next one (without the slack,
    entries would leave the window from the 13th on)."""
    prompts = lean_run(make_r2po, max_episodes=2 + 12 * 4)  # 2 warm-up entries, then 12 iterations: 14 entries
    searches, critics = [p for p in prompts if not is_critic(p)], [p for p in prompts if is_critic(p)]
    assert len(searches) == len(critics) == 12
    assert "left out above" not in searches[-1]  # all 14 shown
    for role, ends in ((searches, "\n\nThe best "), (critics, "\n\n## Proposal")):
        for before, after in itertools.pairwise(role):
            shared = before.split(ends)[0]  # the prompt up to the end of its history
            assert after.startswith(shared) and len(shared) > len(before) / 2


@pytest.mark.parametrize("settings", [prompt_preset("lean"), {}])
def test_the_planned_iteration_count_is_stated_only_last_in_the_reuse_order(make_r2po, settings: dict[str, Any]) -> None:
    """A Critic that repeats the proposal (an unchanged revision, not evaluated again) leaves episodes for more
    iterations than planned: the planned count changes during the run. Our prompt options state it only in the
    Search's last line, so what precedes the history stays the same; R2PO's defaults state it where the reference does."""
    vectors = [vector(*([0.5] * 9 + [i / 10])) for i in range(1, 30)]
    llm = ScriptedLLM([v for v in vectors for _ in range(2)])  # each Critic repeats the Search's vector
    settings = {**settings, "skip_unchanged_revisions": True}
    make_r2po(llm=llm, n_eval_episodes=2, warmup_episodes=2, max_episodes=2 + 4 * 4, seed=0, **settings).learn(UNTIL_BUDGET)
    searches = [p for p in llm.prompts() if not is_critic(p)]
    planned = {re.findall(r"This is iteration \d+ of (\d+)\.", p)[0] for p in searches}
    assert len(planned) > 1  # the count changed
    heads = {p.split("## Evaluated so far")[0] for p in searches}
    if settings.get("search_sees_task"):
        assert len(heads) == 1 and not re.search(r"\(\d+\)", heads.pop())
    else:  # the reference's "within a limited number of iterations (N)" and "the iteration budget (N)"
        assert len(heads) == len(planned) and all(len(re.findall(r"\(\d+\)", head)) == 2 for head in heads)


def test_a_compressed_history_says_what_it_left_out_after_its_lines(make_r2po) -> None:
    # 24 iterations: more entries than lean's 8 best + 4 latest + 8 of slack, so some are left out
    last_search = [p for p in lean_run(make_r2po, max_episodes=2 + 24 * 4) if not is_critic(p)][-1]
    history = last_search.split("## Evaluated so far")[1].split("\n\n")[0].splitlines()
    assert re.fullmatch(
        r"\(\d+ entries so far; the \d+ left out above are neither among the best nor the most recent\.\)", history[-1]
    )
    assert all(line.startswith("params: [") for line in history[2:-1])


# -- the state cache -------------------------------------------------------------------------------------------------


def state(tokens: Sequence[int], size: int = 100, vocab: int = 7, n_ctx: int = 16) -> SimpleNamespace:
    """A stand-in for llama-cpp-python's LlamaState: tokens (the rest of the context stale), logits rows, a size."""
    ids = np.full(n_ctx, 5, dtype=np.intc)
    ids[: len(tokens)] = tokens
    return SimpleNamespace(
        input_ids=ids, scores=np.ones((4, vocab), np.single), n_tokens=len(tokens), llama_state_size=size, seed=0
    )


def test_the_state_cache_serves_the_longest_common_prefix_and_drops_the_least_recent() -> None:
    cache = PrefixStateCache(capacity_bytes=3 * (100 + 16 * 4 + 7 * 4))
    search, critic = state([1, 2, 3, 4]), state([9, 8, 7])
    cache[[1, 2, 3, 4]], cache[[9, 8, 7]] = search, critic
    assert cache[[1, 2, 3, 6, 6]] is search and cache.served == (1, 2, 3, 4)
    assert cache[[9, 8, 0]] is critic
    with pytest.raises(KeyError):
        cache[[4, 4]]
    assert cache.served is None and [4] not in cache and [9] in cache
    # a state keeps one row of logits and no stale tokens (which would otherwise pass for a shared prefix)
    assert search.scores.shape == (1, 7) and not search.scores.any() and list(search.input_ids[4:]) == [-1] * 12
    cache[[1, 1]] = state([1, 1])  # three states fit
    cache[[2, 2]] = state([2, 2])  # a fourth drops the least recently used: the search state (the critic was used last)
    assert list(cache.states) == [(9, 8, 7), (1, 1), (2, 2)] and cache.cache_size <= cache.capacity_bytes
    cache[[3, 3]] = state([3, 3], size=10**6)  # larger than the capacity: not kept, and it pushed out everything
    assert not cache.states
    with pytest.raises(ValueError, match="capacity_bytes"):
        PrefixStateCache(-1)


def test_a_state_is_kept_under_the_tokens_it_evaluated() -> None:
    """llama-cpp-python keys a call's state by its prompt and reply, whose last tokens the state may not hold (a reply cut
    at max_tokens, tokens the grammar forced): it is kept, and counted as served, by the tokens it holds."""
    cache = PrefixStateCache(capacity_bytes=10**6)
    cache[[1, 2, 3, 4, 5]] = state([1, 2, 3])
    assert list(cache.states) == [(1, 2, 3)]
    cache[[1, 2, 3, 4, 5, 6]]
    assert cache.served == (1, 2, 3) and reused_tokens([], cache.served, [1, 2, 3, 4, 5, 6]) == 3


@pytest.mark.parametrize(
    "live, served, prompt, reused",
    [
        ([1, 2, 3], None, [1, 2, 4, 5], 2),  # the previous call's prefix
        ([7, 7], [1, 2, 3, 9], [1, 2, 3, 4], 3),  # a cached state shares more: it is loaded
        ([1, 2, 3, 4], [1, 2], [1, 2, 3, 5], 3),  # the live context shares more: it stays
        ([1, 2, 3], None, [1, 2, 3], 2),  # the whole prompt: its last token is evaluated again
        ([], None, [1], 0),
        ([5], [6], [1, 2], 0),
    ],
)
def test_reused_tokens_follow_llama_cpp_pythons_choice(
    live: list[int], served: list[int] | None, prompt: list[int], reused: int
) -> None:
    assert reused_tokens(live, served, prompt) == reused


def test_common_prefix() -> None:
    assert [common_prefix(a, b) for a, b in (([1, 2, 3], [1, 2, 4]), ([1, 2], [1, 2, 3]), ([], [1]), ([2], [1]))] == [
        2,
        2,
        0,
        0,
    ]


def test_the_prefix_cache_is_an_option_of_the_backend_and_costs_memory() -> None:
    on, off = EmbeddedBackend(), EmbeddedBackend(prefix_cache=False)
    assert on.prefix_cache and not off.prefix_cache
    assert on.memory_needed() - off.memory_needed() == on.prefix_cache_bytes == 512 * 2**20
    assert on.state_cache is None  # nothing before the first call
    with pytest.raises(ValueError, match="prefix_cache_bytes"):
        EmbeddedBackend(prefix_cache_bytes=-1)


# -- the real model --------------------------------------------------------------------------------------------------

RULES = "\n".join(f"{i}. Propose a vector of ten numbers and explain it in one line." for i in range(1, 9))


def search_prompt(history: str) -> list[Message]:
    return [
        {"role": "user", "content": f"You are a global optimizer.\n{RULES}\nHistory:\n{history}\nPropose the next vector."}
    ]


CRITIC = [{"role": "user", "content": f"You are an optimization agent.\n{RULES}\nRevise the proposal params: [1, 2]."}]
FIRST = search_prompt("params: [1, 2]; reward 3")
SECOND = search_prompt("params: [1, 2]; reward 3\nparams: [2, 2]; reward 5")


def short_backend(model_dir: Path, prefix_cache: bool) -> EmbeddedBackend:
    return EmbeddedBackend(n_ctx=1024, max_tokens=6, grammar=False, cache_dir=model_dir, prefix_cache=prefix_cache)


@pytest.mark.slow
@needs_model
def test_a_search_call_after_a_critic_call_reuses_the_previous_search_prefix(model_dir: Path) -> None:
    backend = short_backend(model_dir, prefix_cache=True)
    first, critic, second = (backend.chat(m) for m in (FIRST, CRITIC, SECOND))
    assert first.prompt_tokens_cached == 0  # nothing before it
    assert second.prompt_tokens and second.prompt_tokens_cached
    # everything up to where the two Search prompts part (their rules and first history line), not just the chat
    # template's opening, which the Critic call between them shares
    assert critic.prompt_tokens_cached is not None and second.prompt_tokens_cached > critic.prompt_tokens_cached + 100
    assert second.prompt_tokens_cached < second.prompt_tokens
    assert backend.state_cache is not None and backend.state_cache.hits >= 1
    without = short_backend(model_dir, prefix_cache=False)  # llama.cpp alone: only the call just before
    results = [without.chat(m) for m in (FIRST, CRITIC, SECOND)]
    assert results[2].prompt_tokens_cached == critic.prompt_tokens_cached  # the chat template's opening only
    assert [r.text for r in results] == [r.text for r in (first, critic, second)]  # greedy: the same replies
    backend.close()
    without.close()


@pytest.mark.slow
@needs_model
def test_the_same_prompt_and_seed_give_the_same_sampled_reply_with_and_without_the_cache(model_dir: Path) -> None:
    """Sampling (temperature 0.8, the embedded backend's fixed seed) draws the same reply from the cached state as
    from a prompt evaluated whole; the greedy case is checked in the test above."""
    temperature = 0.8
    cached = short_backend(model_dir, prefix_cache=True)
    replies = [cached.chat(m, temperature=temperature) for m in (FIRST, CRITIC, SECOND)]
    assert replies[2].prompt_tokens_cached and replies[2].prompt_tokens_cached > 100  # served from the cache
    fresh = short_backend(model_dir, prefix_cache=False)  # nothing to reuse: the whole prompt is evaluated
    alone = fresh.chat(SECOND, temperature=temperature)
    assert alone.prompt_tokens_cached == 0 and alone.text == replies[2].text
    cached.close()
    fresh.close()


# -- counted, recorded, replayed, logged -----------------------------------------------------------------------------


class CachingLLM(ScriptedLLM):
    """A scripted LLM that reports 10 prompt tokens per call, 7 of them served from a cache."""

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        reply = super().chat(messages, temperature=temperature)
        return ChatReply(reply.text, prompt_tokens=10, completion_tokens=5, seconds=0.001, prompt_tokens_cached=7)


REPLIES = [vector(*([0.5] * 9 + [i / 10])) for i in range(1, 20)]


class Dumps(KVWriter):
    """Keeps every dump of a logger."""

    def __init__(self) -> None:
        self.dumps: list[dict[str, Any]] = []

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        self.dumps.append(dict(key_values))

    def close(self) -> None:
        pass


def test_cached_tokens_are_counted_recorded_replayed_and_logged(tmp_path: Path, make_r2po) -> None:
    model = make_r2po(llm=CachingLLM(REPLIES), checkpoint_dir=str(tmp_path / "run"), max_episodes=10, seed=0)
    dumps = Dumps()
    model.set_logger(Logger(folder=None, output_formats=[dumps]))
    model.learn(UNTIL_BUDGET)
    calls = int(model.llm_stats["calls"])
    assert "prompt_tokens_cached" in LLM_STATS and calls > 0
    assert (model.llm_stats["prompt_tokens"], model.llm_stats["prompt_tokens_cached"]) == (10 * calls, 7 * calls)
    last = dumps.dumps[-1]
    assert (last["llm/prompt_tokens"], last["llm/prompt_tokens_cached"]) == (10 * calls, 7 * calls)
    records = read_records(tmp_path / "run" / "llm_calls.jsonl")
    assert [r["reply"]["prompt_tokens_cached"] for r in records] == [7] * calls
    replayed = make_r2po(llm=ReplayBackend(tmp_path / "run" / "llm_calls.jsonl"), max_episodes=10, seed=0)
    replayed.learn(UNTIL_BUDGET)
    assert replayed.history == model.history
    assert {k: v for k, v in replayed.llm_stats.items() if k != "seconds"} == {
        k: v for k, v in model.llm_stats.items() if k != "seconds"
    }


def test_a_backend_that_does_not_report_cached_tokens_records_what_it_always_did(tmp_path: Path, make_r2po) -> None:
    model = make_r2po(llm=ScriptedLLM(REPLIES), checkpoint_dir=str(tmp_path / "run"), max_episodes=10, seed=0)
    model.learn(UNTIL_BUDGET)
    assert model.llm_stats["prompt_tokens_cached"] == 0 and model.llm_stats["prompt_tokens"] > 0
    records = read_records(tmp_path / "run" / "llm_calls.jsonl")
    assert records and all(set(r["reply"]) == {"text", "prompt_tokens", "completion_tokens", "seconds"} for r in records)
    replayed = ReplayBackend(tmp_path / "run" / "llm_calls.jsonl").chat(records[0]["messages"])
    assert replayed.prompt_tokens_cached is None and replayed.prompt_tokens == 10


def without_cached_key(path: Path) -> None:
    """Rewrite a saved model as a version before ``prompt_tokens_cached`` was counted wrote it."""
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(files["data"])
    assert data["llm_stats"].pop("prompt_tokens_cached") == 0
    files["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)


def test_a_model_saved_before_cached_tokens_were_counted_loads_and_continues(tmp_path: Path, make_r2po) -> None:
    model = make_r2po(llm=ScriptedLLM(REPLIES), max_episodes=10, seed=0)
    model.learn(UNTIL_BUDGET)
    model.save(tmp_path / "old.zip")
    without_cached_key(tmp_path / "old.zip")
    loaded = R2PO.load(tmp_path / "old.zip", env=model.get_env(), llm=CachingLLM(REPLIES))
    assert "prompt_tokens_cached" not in loaded.llm_stats
    dumps = Dumps()
    loaded.set_logger(Logger(folder=None, output_formats=[dumps]))
    calls = int(loaded.llm_stats["calls"])
    loaded.settings = dataclasses.replace(loaded.settings, max_episodes=16)
    loaded.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert loaded.llm_stats["calls"] > calls
    assert loaded.llm_stats["prompt_tokens_cached"] == 7 * (loaded.llm_stats["calls"] - calls)  # counted from here on
    assert dumps.dumps[-1]["llm/prompt_tokens_cached"] == loaded.llm_stats["prompt_tokens_cached"]
