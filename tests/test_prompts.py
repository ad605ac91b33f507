import inspect
import re
from dataclasses import replace

import numpy as np
import pytest
from helpers import UNTIL_BUDGET, BanditEnv, ScriptedLLM, vector

from sb3_r2po import R2PO
from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.common.rollouts import Episode, build_evidence, sig
from sb3_r2po.prompts import PROMPT_PRESETS, prompt_preset
from sb3_r2po.prompts.builder import HistoryLine, PromptBuilder, PromptContext
from sb3_r2po.prompts.tasks import TaskDescription
from sb3_r2po.r2po.run_state import shown_history


def is_critic(prompt: str) -> bool:
    """Every Critic prompt opens with its role; the Search prompts open with the optimizer's."""
    return prompt.startswith("You are an optimization agent")


CARTPOLE_REPLIES = [vector(*([0.5] * 9 + [float(i)])) for i in range(1, 10)]


def test_search_prompt_content(make_r2po) -> None:
    llm = ScriptedLLM(CARTPOLE_REPLIES)
    model = make_r2po(llm=llm, n_eval_episodes=3, warmup_episodes=2, max_episodes=2 + 6, seed=0)
    model.learn(UNTIL_BUDGET)
    search = llm.calls[0]
    assert [m["role"] for m in search] == ["user"]  # one user message, no system message: the reference's calls
    prompt = search[0]["content"]
    assert "global maximum of an unknown function f(params)" in prompt  # a black box
    assert "Balance a pole" not in prompt and "## Task" not in prompt and "b (bias)" not in prompt
    assert "There are 10 parameters" in prompt and "[-6.0, 6.0]" in prompt
    assert f"The global maximum of f should be about {sig(model.settings.target, 4)}. Below that" in prompt
    assert "explore rather than exploit" in prompt
    assert prompt.count(" rollout_reward=") == 2  # the two warm-up entries
    assert "Never propose params that have already been evaluated" in prompt and "in steps of about 1.0" in prompt
    assert re.search(r"This is iteration 1 of \d+\.", prompt)
    assert "Median episode" not in prompt and "so far is" not in prompt


def test_search_sees_task_adds_the_task_and_the_layout(make_r2po) -> None:
    llm = ScriptedLLM(CARTPOLE_REPLIES)
    model = make_r2po(llm=llm, n_eval_episodes=3, warmup_episodes=2, max_episodes=2 + 6, seed=0, search_sees_task=True)
    model.learn(UNTIL_BUDGET)
    prompt = llm.prompts()[0]
    assert "## Task\n" in prompt and "Observation:" in prompt  # the registered CartPole description
    assert "params[8], params[9]: b (bias)" in prompt and "f(params) is the mean episode reward" in prompt


def test_critic_prompt_holds_the_evidence_package(make_r2po) -> None:
    llm = ScriptedLLM(CARTPOLE_REPLIES)
    model = make_r2po(llm=llm, n_eval_episodes=3, warmup_episodes=2, max_episodes=2 + 6, seed=0)
    model.learn(UNTIL_BUDGET)
    assert [m["role"] for m in llm.calls[1]] == ["user"]
    prompt = llm.calls[1][0]["content"]
    assert is_critic(prompt) and "## Task\n" in prompt and "b (bias)" in prompt
    assert "The optimizer proposed these parameters:\nparams[0]: 0.5" in prompt
    assert model.settings.target is not None and model.settings.revision_threshold is not None
    assert "Reward: mean=" in prompt and f"Success rate: 0/3 rollouts reached reward>={model.settings.target:.2f}" in prompt
    assert "Median rollout (rollout " in prompt and "Worst rollout" not in prompt
    assert f"When the mean reward is {sig(model.settings.revision_threshold, 4)} or more, prefer no change at all" in prompt
    assert "below the threshold" not in prompt and "repeat its parameters" not in prompt  # no selection hints
    assert "systematic" in prompt and "changes of 1.0 or less per parameter" in prompt


def test_no_target_no_rule(make_r2po) -> None:
    llm = ScriptedLLM([vector(1.0, 1.0), vector(0.5, 0.5)])
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=2, warmup_episodes=0, max_episodes=4, seed=0)
    model.learn(1)
    search, critic = llm.prompts()[:2]
    assert "should be about" not in search and "not known" in search
    assert "target" not in critic.lower() and "or more" not in critic
    assert "An unknown control task" in critic  # the generated description


def test_values_cannot_inject_template_syntax() -> None:
    builder = PromptBuilder()
    evil = "{{ 7 * 7 }} {% for x in range(3) %}X{% endfor %}"
    task = TaskDescription(summary=evil, observations=(evil,), actions=("a",), reward=evil, episode_end=evil)
    ctx = PromptContext(
        task=task,
        layout=(evil,),
        space=ParameterSpace(2),
        target=None,
        history=(HistoryLine(evil, 1.0, 1),),
        iteration=1,
        total_iterations=None,
        step_size=1.0,
    )
    text = builder.search(ctx)[0]["content"] + builder.search(replace(ctx, search_sees_task=True))[0]["content"]
    assert evil in text and "49" not in text and "XXX" not in text
    assert evil in builder.retry(evil, ParameterSpace(2))["content"]


def test_tabular_prompt_lists_the_action_set(make_r2po) -> None:
    llm = ScriptedLLM(["params: " + str([0] * 16)])
    model = make_r2po("FrozenLake-v1", policy="Tabular", llm=llm, n_eval_episodes=2, warmup_episodes=1, seed=0, max_episodes=5)
    model.learn(UNTIL_BUDGET)
    search, critic = llm.prompts()[:2]
    for prompt in (search, critic):
        assert "each one must be one of the values 0, 1, 2, 3" in prompt
    assert "params[s] is the action taken in state s" in critic and "params[s]" not in search


@pytest.mark.parametrize("max_steps, shown", [(None, 30), (10, 10)])
def test_critic_trajectory_budget(max_steps: int | None, shown: int) -> None:
    episodes = [Episode([np.zeros(2)] * 31, [np.array(0)] * 30, [1.0] * 30, "terminated")]
    evidence = build_evidence(episodes, None, None, max_steps, fold=False)
    assert sum(line.startswith("t=") for line in evidence.trajectories["median"].lines) == shown


def test_history_compression_keeps_the_best_and_the_most_recent(make_r2po) -> None:
    replies = [vector(*([0.5] * 9 + [i / 10])) for i in range(1, 30)]
    llm = ScriptedLLM(replies)
    model = make_r2po(
        llm=llm,
        n_eval_episodes=1,
        warmup_episodes=8,
        seed=0,
        max_episodes=8 + 6,
        history_best_k=2,
        history_recent=3,
    )
    model.learn(UNTIL_BUDGET)
    shown = shown_history(model.history, model.settings.history_best_k, model.settings.history_recent)
    best_two = sorted(model.history, key=lambda r: -r["mean_return"])[:2]
    assert all(r in shown for r in best_two) and all(r in shown for r in model.history[-3:])
    assert len(shown) <= 5 < len(model.history)
    last_search = [prompt for prompt in llm.prompts() if not is_critic(prompt)][-1]
    history = last_search.split("## Evaluated so far")[1].split("This is iteration")[0]
    omitted = r"\(\d+ entries so far; the \d+ left out above are neither among the best nor the most recent\.\)"
    assert re.fullmatch(omitted, history.strip().splitlines()[-1])  # after the lines: the lines before it stay a prefix
    assert 0 < len(re.findall(r"^Trial \d+: params=", history, re.M)) <= 5


@pytest.mark.parametrize(
    "best_k, recent, means, expected",
    [
        (2, 2, [5.0, 8.0, 1.0, 9.0, 3.0, 2.0, 4.0, 7.0], [1, 3, 6, 7]),  # oldest first, not ranked
        (2, 1, [9.0, 1.0, 9.0, 9.0, 2.0, 3.0], [0, 2, 5]),  # ties among the best go to the earliest entries
        (None, 2, [5.0, 9.0, 1.0, 8.0], [2, 3]),  # only the latest
        (2, None, [5.0, 9.0, 1.0, 8.0, 0.0], [1, 3]),  # only the best
        (0, 0, [5.0, 9.0], []),
    ],
)
def test_shown_history_picks_the_right_entries_in_history_order(
    best_k: int | None, recent: int | None, means: list[float], expected: list[int]
) -> None:
    history = [{"mean_return": m, "i": i} for i, m in enumerate(means)]
    assert [r["i"] for r in shown_history(history, best_k, recent)] == expected


@pytest.mark.parametrize("best_k, recent, slack", [(8, 4, 8), (2, 3, 1), (3, None, 4), (None, 2, 3), (0, 0, 2)])
def test_history_slack_appends_until_the_limit_then_cuts_back_to_the_best_and_the_latest(
    best_k: int | None, recent: int | None, slack: int
) -> None:
    rng = np.random.default_rng(0)
    history = [{"mean_return": float(m), "i": i} for i, m in enumerate(rng.integers(0, 10, size=80))]
    limit, cut_backs, before = (best_k or 0) + (recent or 0) + slack, 0, []
    for n in range(1, len(history) + 1):
        shown = shown_history(history[:n], best_k, recent, slack)
        ranked = sorted(history[:n], key=lambda r: (-r["mean_return"], r["i"]))
        assert all(r in shown for r in ranked[: best_k or 0] + history[:n][n - (recent or 0) :])
        assert len(shown) <= limit and [r["i"] for r in shown] == sorted(r["i"] for r in shown)
        if shown != [*before, history[n - 1]]:  # not appended: cut back to the window, as the limit was reached
            assert len(before) + 1 > limit and shown == shown_history(history[:n], best_k, recent)
            cut_backs += 1
        before = shown
    longest_period = limit - max(best_k or 0, recent or 0) + 1  # a cut-back keeps at least the best or the latest
    assert cut_backs >= 1 + (len(history) - limit - 1) // longest_period


def test_history_slack_needs_a_compressed_history_and_a_count() -> None:
    with pytest.raises(ValueError, match="history_slack needs a compressed history"):
        R2PO("MlpLinear", "CartPole-v1", llm="example", history_slack=4)
    with pytest.raises(ValueError, match="history_slack must be an integer >= 0"):
        R2PO("MlpLinear", "CartPole-v1", llm="example", history_best_k=2, history_slack=-1)


def test_list_reply_style_writes_every_vector_as_a_list(make_r2po) -> None:
    replies = [f"params: [{', '.join(['0.5'] * 9 + [str(i)])}]" for i in range(1, 10)]
    llm = ScriptedLLM(replies)
    model = make_r2po(
        llm=llm, n_eval_episodes=3, warmup_episodes=2, seed=0, max_episodes=8, reply_style="list", prompt_layout="compact"
    )
    model.learn(UNTIL_BUDGET)
    search, critic = llm.prompts()[:2]
    assert "written as `params: [<value>, <value>, ..., <value>]`" in search
    assert "exactly like this:\nparams: [<value>, <value>, ..., <value>]" in critic
    for prompt, heading, end in (
        (search, "## Evaluated so far", "This is iteration"),
        (critic, "## Previous attempts", "## Your"),
    ):
        history = prompt.split(heading)[1].split(end)[0]
        assert history.count("params: [") == 2 and "params[0]:" not in history
    assert "proposed these parameters:\nparams: [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0]\n" in critic
    np.testing.assert_array_equal(model.history[2]["search"]["params"], [0.5] * 9 + [1.0])  # the list reply, read back


def test_bad_reply_style_is_rejected() -> None:
    with pytest.raises(ValueError, match="reply_style must be one of"):
        R2PO("MlpLinear", "CartPole-v1", llm="example", reply_style="json")
    with pytest.raises(ValueError, match="reply_style must be one of"):
        PromptBuilder(reply_style="json")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="style must be one of"):
        ParameterSpace(2).format(np.zeros(2), "json")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(PROMPT_PRESETS))
def test_prompt_preset_sets_every_prompt_parameter(name: str) -> None:
    settings = prompt_preset(name)
    model = R2PO("MlpLinear", "CartPole-v1", llm="example", **settings)
    assert {key: getattr(model.settings, key) for key in settings} == settings
    settings["history_best_k"] = 99  # a copy: the preset itself is unchanged
    assert prompt_preset(name)["history_best_k"] != 99


def test_the_full_preset_is_r2pos_defaults() -> None:
    defaults = {name: p.default for name, p in inspect.signature(R2PO).parameters.items()}
    assert {key: defaults[key] for key in prompt_preset("full")} == prompt_preset("full")


def test_prompt_presets_shrink_the_critic_prompt_in_order(make_r2po) -> None:
    sizes = {}
    presets = {name: prompt_preset(name) for name in PROMPT_PRESETS}
    presets["full, compact layout"] = {**prompt_preset("full"), "prompt_layout": "compact"}
    for name, settings in presets.items():
        llm = ScriptedLLM([vector(*([0.1 * (i % 7)] * 9 + [i / 10])) for i in range(1, 40)])
        model = make_r2po(llm=llm, n_eval_episodes=1, warmup_episodes=6, seed=0, max_episodes=26, **settings)
        model.learn(UNTIL_BUDGET)
        critics = [prompt for prompt in llm.prompts() if is_critic(prompt)]
        assert len(model.history) > 12  # more entries than lean (8 + 4) or tight (5 + 3) show
        sizes[name] = len(critics[-1])
    assert sizes["full, compact layout"] > sizes["lean"] > sizes["tight"]
    assert sizes["full"] > sizes["tight"]  # the reference's layout, whole history: fewer characters per entry


def test_unknown_prompt_preset_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown prompt preset 'huge'; choose one of"):
        prompt_preset("huge")


def critic_prompt(
    evidence_kwargs: dict, space: ParameterSpace | None = None, tau_c: float | None = None, prompt: str = "r2po", **options
) -> str:
    """The Critic's user prompt for three CartPole-like episodes of returns 10, 20 and 30."""
    episodes = [Episode([np.zeros(2)] * (n + 1), [np.array(0)] * n, [1.0] * n, "terminated") for n in (10, 20, 30)]
    evidence = build_evidence(episodes, 100.0, tau_c, **evidence_kwargs)
    space = space or ParameterSpace(3)
    ctx = replace(PromptContext(None, ("layout",), space, 100.0, (), 1, None, 1.0), **{"prompt_layout": "compact", **options})
    params = ", ".join(f"params[{i}]: 0" for i in range(space.size))
    return PromptBuilder().critic(ctx, HistoryLine(params, 20.0, 3), evidence, prompt)[0]["content"]


def your_step(prompt: str) -> str:
    return prompt.split("## Your step")[1]


def test_critic_instructions_use_statistics_only_when_they_are_shown() -> None:
    r2po = your_step(critic_prompt({}))
    assert "statistics" in r2po and "systematic" in r2po and "median episode" in r2po
    # the ablation Critics (rep_traj, always_critic: one trajectory; three_traj: three) see no statistics
    bare = your_step(critic_prompt(dict(statistics=False, trajectories=("mean",), rule=False), prompt="rep_traj"))
    three = your_step(
        critic_prompt(dict(statistics=False, trajectories=("worst", "median", "best"), rule=False), prompt="three_traj")
    )
    for step in (bare, three):
        assert "statistics" not in step
    assert "failure point" in bare and "the worst, median and best episodes" in three


def test_tabular_prompts_search_all_values_and_have_no_step_size() -> None:
    space = ParameterSpace(9, values=(0, 1, 2, 3))
    ctx = PromptContext(None, ("layout",), space, 0.9, (HistoryLine("params: [0]", 0.1, 1),), 1, None, 1.0, best=0.1)
    search = PromptBuilder().search(ctx)[0]["content"]
    assert "Search over all the possible values of the params." in search
    assert "only a few" not in search and "steps of about" not in search
    for prompt in ("r2po", "rep_traj", "three_traj", "critic_only"):
        text = critic_prompt({}, space, prompt=prompt)
        assert "per parameter" not in text and "1.0" not in your_step(text), prompt
        assert "Each parameter value must be one of 0, 1, 2, 3." in text, prompt
        assert "only the few states" not in text, prompt
    # continuous parameters keep the step size
    assert "changes of 1.0 or less per parameter" in your_step(critic_prompt({}))


def test_tabular_prompt_states_the_value_set_once(make_r2po) -> None:
    llm = ScriptedLLM(["params: " + str([0] * 16)])
    model = make_r2po("FrozenLake-v1", policy="Tabular", llm=llm, n_eval_episodes=2, warmup_episodes=1, seed=0, max_episodes=3)
    model.learn(UNTIL_BUDGET)
    prompt = llm.calls[0][0]["content"]
    assert prompt.count("must be one of") == 1


def test_best_line_counts_k_episode_candidates_and_history_marks_warmup() -> None:
    history = (
        HistoryLine("params[0]: 1.0", 61.0, 1, warmup=True),
        HistoryLine("params[0]: 2.0", 9.0, 1, warmup=True),
        HistoryLine("params[0]: 3.0", 10.4, 5),
    )
    ctx = PromptContext(
        None,
        ("layout",),
        ParameterSpace(1),
        475.0,
        history,
        2,
        10,
        1.0,
        best=10.4,
        extra_statistics=True,
        prompt_layout="compact",
    )
    prompt = PromptBuilder().search(ctx)[0]["content"]
    assert "params[0]: 1.0; reward of its one episode: 61 (1 warm-up episode)" in prompt
    assert "params[0]: 3.0; mean reward: 10.4 (5 episodes)" in prompt
    assert "The best mean reward over 5 episodes so far is 10.4" in prompt
    assert "The best mean reward so far is" not in prompt
    # before the first iteration every entry has one episode: the best is a single-episode reward
    warmup = PromptContext(
        None, ("layout",), ParameterSpace(1), 475.0, history[:2], 1, 10, 1.0, best=61.0, extra_statistics=True
    )
    prompt = PromptBuilder().search(warmup)[0]["content"]
    assert "The best single-episode reward so far is 61." in prompt
    # off by default (the reference shows neither the episode counts nor a best line)
    plain = PromptBuilder().search(replace(ctx, extra_statistics=False))[0]["content"]
    assert "so far is" not in plain and "episodes)" not in plain and "params[0]: 3.0; mean reward: 10.4\n" in plain


@pytest.mark.parametrize("k", [1, 3])
def test_best_line_agrees_with_the_history_in_real_runs(make_r2po, k: int) -> None:
    """Also with K = 1, where warm-up and iteration entries have as many episodes: R2PO flags the warm-up lines."""
    llm = ScriptedLLM([vector(*([0.1 * (i % 7)] * 9 + [i / 10])) for i in range(1, 40)])
    model = make_r2po(
        llm=llm,
        n_eval_episodes=k,
        warmup_episodes=10,
        seed=0,
        max_episodes=10 + 6 * k,
        extra_statistics=True,
        prompt_layout="compact",
    )
    model.learn(UNTIL_BUDGET)
    searches = [prompt for prompt in llm.prompts() if not is_critic(prompt)]
    assert len(searches) >= 2
    unit = "episodes" if k > 1 else "episode"
    for prompt in searches[1:]:  # after the first iteration
        assert prompt.count("(1 warm-up episode)") == 10  # every warm-up line is marked, whatever K
        match = re.search(rf"The best mean reward over {k} {unit} so far is (\d+(?:\.\d+)?)", prompt)
        assert match, prompt
        best = float(match.group(1))
        k_means = [float(x) for x in re.findall(rf"; mean reward: (\d+(?:\.\d+)?) \({k} {unit}\)", prompt)]
        assert k_means and best == max(k_means)


def test_revision_rule_prints_enough_digits_to_tell_mean_and_threshold_apart() -> None:
    episodes = [Episode([np.zeros(2)] * 3, [np.zeros(1)] * 2, [50.0, 46.9996], "terminated")] * 2
    evidence = build_evidence(episodes, 100.0, 97.0)
    ctx = PromptContext(None, ("layout",), ParameterSpace(3), 100.0, (), 1, None, 1.0, selection_hints=True)
    text = PromptBuilder().critic(ctx, HistoryLine("params: ...", 96.9996, 2), evidence)[0]["content"]
    assert "When the mean reward is 97 or more" in text
    assert "The proposal's mean reward 96.9996 is below the threshold 97." in text
    assert "proposed these parameters:\nparams: ...\n" in text and "evaluation episodes: 96.9996\n" in text
    # distinct at 4 figures: unchanged
    ctx = PromptContext(None, ("layout",), ParameterSpace(3), 475.0, (), 1, None, 1.0, selection_hints=True)
    evidence = build_evidence(episodes, 475.0, 451.25)
    text = PromptBuilder().critic(ctx, HistoryLine("params: ...", 96.9996, 2), evidence)[0]["content"]
    assert "mean reward is 451.2 or more" in text and "mean reward 97 is below" in text


def _best_lines(prompts: list[str]) -> list[str]:
    return [line for p in prompts for line in p.splitlines() if "so far is" in line]


TWO_EVALUATIONS = dict(n_eval_episodes=3, warmup_episodes=5, max_episodes=5 + 6, seed=0)
"""A CartPole run of 5 warm-up episodes and 2 evaluations of K = 3."""


def test_best_line_after_the_warm_up_counts_the_candidate_of_this_iteration(make_r2po) -> None:
    """actor_second_pass, iteration 1: the second Search sees candidate A (3 episodes) next to warm-up lines; the
    best over 3 episodes is A's mean, not the best warm-up episode."""
    llm = ScriptedLLM([vector(*([0.1] * 10)), vector(*([0.2] * 10))])
    model = make_r2po(llm=llm, variant="actor_second_pass", extra_statistics=True, **TWO_EVALUATIONS)
    model.learn(UNTIL_BUDGET)
    first_mean = model.history[-1]["search"]["mean_return"]
    warmup_best = max(r["mean_return"] for r in model.history if r["kind"] == "warmup")
    assert warmup_best > first_mean  # the case that matters: a warm-up episode beat candidate A
    first, second = _best_lines(llm.prompts())
    assert first == f"The best single-episode reward so far is {sig(warmup_best, 4)}."
    assert second.startswith(f"The best mean reward over 3 episodes so far is {sig(first_mean, 4)} (the warm-up")


def test_best_line_when_compression_shows_only_warm_up_lines(make_r2po) -> None:
    """history_best_k=3, history_recent=0: the shown lines are all warm-up ones, the best is a 3-episode mean."""
    llm = ScriptedLLM([vector(*([0.1 * i] * 10)) for i in range(1, 5)])
    model = make_r2po(llm=llm, variant="props", history_best_k=3, history_recent=0, extra_statistics=True, **TWO_EVALUATIONS)
    model.learn(UNTIL_BUDGET)
    best_after_first = model.history[5]["mean_return"]
    second_prompt = llm.prompts()[1]
    assert second_prompt.count("(1 warm-up episode)") == 3 and "(3 episodes)" not in second_prompt.split("This is")[0]
    assert _best_lines([second_prompt]) == [
        f"The best mean reward over 3 episodes so far is {sig(best_after_first, 4)} (the warm-up entries, run for 1 "
        "episode each, are not counted: one episode is a noisy estimate)."
    ]


def test_selection_hints_state_whether_the_revision_must_beat_the_candidate() -> None:
    texts = {
        (keep_best, hints): critic_prompt({}, tau_c=15.0, keep_best=keep_best, selection_hints=hints)
        for keep_best in (True, False)
        for hints in (True, False)
    }
    keep = "kept only if its mean reward is at least the proposal's; otherwise the proposal is kept"
    always = "replaces the proposal whatever its mean reward"
    assert keep in texts[True, True] and always not in texts[True, True]
    assert always in texts[False, True] and keep not in texts[False, True]
    for keep_best in (True, False):
        assert "To keep the proposal as it is, repeat its parameters exactly." in texts[keep_best, True]
        assert "The proposal's mean reward 20 is at or above the threshold 15." in texts[keep_best, True]
        plain = texts[keep_best, False]  # off by default: no reference Critic is told about the selection
        assert keep not in plain and always not in plain and "repeat its parameters" not in plain and "threshold" not in plain


def test_rule_wording_differs_for_linear_and_tabular_policies() -> None:
    linear = critic_prompt({}, tau_c=15.0)
    tabular = critic_prompt({}, ParameterSpace(3, values=(0, 1)), tau_c=15.0)
    assert "- When the mean reward is 15 or more, prefer no change at all, or only one very small edit" in linear
    assert "consistent failure" not in linear.split("Points to consider")[1]
    assert (
        "- If the proposed policy already has a mean reward of 15 or more and the evidence shows no consistent failure, "
        "keep the parameters unchanged, or make at most one very small edit that is strongly justified." in tabular
    )
    assert "prefer no change at all" not in tabular
    assert "Reward: mean 20, min 10, max 30" in linear and "Episode length: mean 20, min 10, max 30" in linear
    assert "std" not in linear and "Endings" not in linear  # ours, with extra_statistics
    extra = critic_prompt({}, tau_c=15.0, extra_statistics=True)
    assert "Reward: mean 20, min 10, max 30, std 8.16" in extra and "Endings: terminated 3" in extra
    assert "Median episode (the one whose reward is closest to the median reward), reward 20;" in linear
    three = critic_prompt(dict(trajectories=("worst", "median", "best")), prompt="three_traj")
    assert (
        "Worst episode (the lowest reward), reward 10;" in three and "Best episode (the highest reward), reward 30;" in three
    )


def test_prompts_show_the_whole_task_description() -> None:
    task = TaskDescription(
        "Reach the flag.", ("s[0]: position", "s[1]: velocity"), ("0: left", "1: right"), "-1 a step", "at the flag"
    )
    ctx = PromptContext(task, ("layout",), ParameterSpace(2, decimals=2), 1.0, (), 1, None, 0.5)
    episodes = [Episode([np.zeros(2)] * 2, [np.array(0)], [1.0], "terminated")]
    search = PromptBuilder().search(replace(ctx, search_sees_task=True))[0]["content"]
    critic = PromptBuilder().critic(ctx, HistoryLine("params: ...", 1.0, 1), build_evidence(episodes, 1.0, None))[0]["content"]
    props_plus = PromptBuilder().search(ctx, "props_plus", "f")[0]["content"]
    for prompt in (search, critic, props_plus):
        for line in ("## Task\nReach the flag.", "- s[0]: position\n- s[1]: velocity", "- 0: left\n- 1: right"):
            assert line in prompt
        assert "Reward: -1 a step" in prompt and "Episode end: at the flag" in prompt
        assert "written with 2 decimal(s)" in prompt
    for prompt, history in (("r2po", "r2po"), ("props", "f"), ("props", "labelled")):  # the black boxes
        assert "Reach the flag" not in PromptBuilder().search(ctx, prompt, history)[0]["content"]


def test_search_prompt_explores_below_a_target_and_balances_without_one() -> None:
    prompts = {
        target: PromptBuilder().search(PromptContext(None, ("l",), ParameterSpace(1), target, (), 1, None, 1.0))[0]["content"]
        for target in (None, 5.0)
    }
    assert "The global maximum of f should be about 5. Below that you are only at a local optimum" in prompts[5.0]
    assert "balance exploring" not in prompts[5.0]
    assert "The global maximum is not known: balance exploring new regions with refining the best inputs." in prompts[None]
    assert "explore rather than exploit" not in prompts[None]


def test_history_section_counts_omitted_entries_and_says_when_it_is_empty() -> None:
    compact = PromptContext(None, ("layout",), ParameterSpace(1), None, (), 1, None, 1.0, prompt_layout="compact")
    empty = PromptBuilder().search(compact)[0]["content"]
    assert "oldest first:\nNothing has been evaluated yet." in empty
    history = (HistoryLine("params[0]: 1.0", 3.0, 5), HistoryLine("params[0]: 2.0", 4.0, 5))
    ctx = replace(compact, history=history, iteration=9, best=4.0, history_omitted=7)
    prompt = PromptBuilder().search(ctx)[0]["content"]
    omitted = "(9 entries so far; the 7 left out above are neither among the best nor the most recent.)"
    assert "params[0]: 2.0; mean reward: 4\n" + omitted in prompt  # after the lines
    assert "Nothing has been evaluated" not in prompt


def test_best_line_mentions_the_warm_up_only_when_warm_up_lines_are_shown() -> None:
    history = (HistoryLine("params[0]: 3.0", 10.4, 5),)
    ctx = PromptContext(
        None, ("layout",), ParameterSpace(1), 475.0, history, 2, 10, 1.0, best=10.4, best_episodes=5, extra_statistics=True
    )
    prompt = PromptBuilder().search(ctx)[0]["content"]
    assert "The best mean reward over 5 episodes so far is 10.4.\n" in prompt and "warm-up" not in prompt


def test_a_template_directory_is_read_again_when_its_files_change(tmp_path, monkeypatch) -> None:
    """Builders share one compiled environment per directory (relative paths resolved at construction); a template
    file changed since is read again, not served from the compiled copy."""
    import os
    import shutil
    from importlib.resources import files

    shutil.copytree(str(files("sb3_r2po") / "prompts" / "templates"), tmp_path / "templates")
    monkeypatch.chdir(tmp_path)
    space = ParameterSpace(2)
    first = PromptBuilder("templates").retry("too short", space)["content"]
    assert first.startswith("Your reply could not be used: too short.")
    retry = tmp_path / "templates" / "retry.j2"
    retry.write_text("Changed: {{ reason }}.\n")
    os.utime(retry, (1, 1))  # a different modification time, whatever the file system's time resolution
    assert PromptBuilder(str(tmp_path / "templates")).env is PromptBuilder("templates").env
    assert PromptBuilder("templates").retry("too short", space)["content"] == "Changed: too short.\n"
    assert PromptBuilder().retry("too short", space)["content"] == first  # the packaged templates are untouched
