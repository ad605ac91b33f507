import re

import numpy as np
import pytest
from helpers import BanditEnv, ScriptedLLM, vector

from sb3_r2po import R2PO
from sb3_r2po.common.evidence import build_evidence, sig
from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.common.rollouts import Episode
from sb3_r2po.prompts import PROMPT_PRESETS, prompt_preset
from sb3_r2po.prompts.builder import HistoryLine, PromptBuilder, PromptContext
from sb3_r2po.prompts.tasks import TaskDescription


def run_cartpole(n_iterations: int = 1) -> ScriptedLLM:
    llm = ScriptedLLM([vector(*([0.5] * 9 + [float(i)])) for i in range(1, 10)])
    model = R2PO(
        "MlpLinear", "CartPole-v1", llm=llm, n_eval_episodes=3, warmup_episodes=2, seed=0, max_episodes=2 + 6 * n_iterations
    )
    model.learn(10**6)
    return llm


def test_search_prompt_content() -> None:
    llm = run_cartpole()
    search = llm.calls[0]
    assert search[0]["role"] == "system" and "Search" in search[0]["content"]
    prompt = search[1]["content"]
    assert "Balance a pole" in prompt  # the registered CartPole task description
    assert "There are 10 parameters" in prompt and "[-6.0, 6.0]" in prompt
    assert "The target mean return is 475" in prompt
    assert "2 parameter vectors evaluated so far" in prompt
    assert "Do not propose a vector that is already in the history" in prompt and "about 1.0" in prompt
    assert "params[8], params[9]: b (bias)" in prompt
    assert "Median episode" not in prompt


def test_critic_prompt_holds_the_evidence_package() -> None:
    llm = run_cartpole()
    prompt = llm.calls[1][1]["content"]
    assert "Critic" in llm.calls[1][0]["content"]
    assert "## Candidate under review\nparams[0]: 0.5" in prompt
    assert "Statistics:" in prompt and "reached the target in 0 of 3 episodes" in prompt
    assert "Median episode" in prompt and "Worst episode" not in prompt
    assert "## Revision rule" in prompt and "451.2" in prompt and "below this threshold" in prompt
    assert "systematic" in prompt and "at most 1.0 per parameter" in prompt


def test_no_target_no_rule() -> None:
    llm = ScriptedLLM([vector(1.0, 1.0), vector(0.5, 0.5)])
    model = R2PO("MlpLinear", BanditEnv(), llm=llm, n_eval_episodes=2, warmup_episodes=0, max_episodes=4, seed=0)
    model.learn(1)
    assert "target" not in llm.calls[0][1]["content"].lower().replace("target mean", "")
    assert "Revision rule" not in llm.calls[1][1]["content"] and "reached the target" not in llm.calls[1][1]["content"]
    assert "An unknown control task" in llm.calls[0][1]["content"]  # the generated description


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
    text = builder.search(ctx)[1]["content"]
    assert evil in text and "49" not in text and "XXX" not in text
    assert evil in builder.retry(evil, ParameterSpace(2))["content"]


def test_tabular_prompt_lists_the_action_set() -> None:
    llm = ScriptedLLM(["params: " + str([0] * 16)])
    model = R2PO("Tabular", "FrozenLake-v1", llm=llm, n_eval_episodes=2, warmup_episodes=1, seed=0, max_episodes=3)
    model.learn(10**6)
    prompt = llm.calls[0][1]["content"]
    assert "Each one must be one of the values 0, 1, 2, 3" in prompt
    assert "params[s] is the action taken in state s" in prompt


@pytest.mark.parametrize("max_steps, shown", [(None, 30), (10, 10)])
def test_critic_trajectory_budget(max_steps: int | None, shown: int) -> None:
    episodes = [Episode([np.zeros(2)] * 31, [np.array(0)] * 30, [1.0] * 30, "terminated")]
    evidence = build_evidence(episodes, None, None, max_steps, fold=False)
    assert sum(line.startswith("t=") for line in evidence.trajectories["median"].lines) == shown


def test_history_compression_keeps_the_best_and_the_most_recent() -> None:
    replies = [vector(*([0.5] * 9 + [i / 10])) for i in range(1, 30)]
    llm = ScriptedLLM(replies)
    model = R2PO(
        "MlpLinear",
        "CartPole-v1",
        llm=llm,
        n_eval_episodes=1,
        warmup_episodes=8,
        seed=0,
        max_episodes=8 + 6,
        history_best_k=2,
        history_recent=3,
    )
    model.learn(10**6)
    shown = model.shown_history()
    best_two = sorted(model.history, key=lambda r: -r["mean_return"])[:2]
    assert all(r in shown for r in best_two) and all(r in shown for r in model.history[-3:])
    assert len(shown) <= 5 < len(model.history)
    last_search = [call for call in llm.calls if "Search" in call[0]["content"]][-1][1]["content"]
    assert "not shown are neither among the best nor the most recent" in last_search
    assert last_search.split("## History")[1].count("; mean return:") <= 5


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
    model = R2PO("MlpLinear", "CartPole-v1", llm="example", history_best_k=best_k, history_recent=recent)
    model.history = [{"mean_return": m, "i": i} for i, m in enumerate(means)]
    assert [r["i"] for r in model.shown_history()] == expected


def test_list_reply_style_writes_every_vector_as_a_list() -> None:
    replies = [f"params: [{', '.join(['0.5'] * 9 + [str(i)])}]" for i in range(1, 10)]
    llm = ScriptedLLM(replies)
    model = R2PO(
        "MlpLinear", "CartPole-v1", llm=llm, n_eval_episodes=3, warmup_episodes=2, seed=0, max_episodes=8, reply_style="list"
    )
    model.learn(10**6)
    search, critic = llm.calls[0][1]["content"], llm.calls[1][1]["content"]
    for prompt in (search, critic):
        assert "exactly like this:\nparams: [<value>, <value>, ..., <value>]" in prompt
        history = prompt.split("## History")[1].split("## Your step")[0]
        assert history.count("params: [") == 2 and "params[0]:" not in history
    assert "## Candidate under review\nparams: [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0]; mean return" in critic
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
    assert {key: getattr(model, key) for key in settings} == settings
    settings["history_best_k"] = 99  # a copy: the preset itself is unchanged
    assert prompt_preset(name)["history_best_k"] != 99


def test_prompt_presets_shrink_the_critic_prompt_in_order() -> None:
    sizes = {}
    for name in ("full", "lean", "tight"):
        llm = ScriptedLLM([vector(*([0.1 * (i % 7)] * 9 + [i / 10])) for i in range(1, 40)])
        budget = dict(n_eval_episodes=1, warmup_episodes=6, seed=0, max_episodes=26)
        model = R2PO("MlpLinear", "CartPole-v1", llm=llm, **budget, **prompt_preset(name))
        model.learn(10**6)
        critics = [call[1]["content"] for call in llm.calls if "Critic" in call[0]["content"]]
        assert len(model.history) > 12  # more entries than lean (8 + 4) or tight (5 + 3) show
        sizes[name] = len(critics[-1])
    assert sizes["full"] > sizes["lean"] > sizes["tight"]


def test_unknown_prompt_preset_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown prompt preset 'huge'; choose one of"):
        prompt_preset("huge")


def critic_prompt(evidence_kwargs: dict, space: ParameterSpace | None = None, tau_c: float | None = None) -> str:
    """The Critic's user prompt for three CartPole-like episodes of returns 10, 20 and 30."""
    episodes = [Episode([np.zeros(2)] * (n + 1), [np.array(0)] * n, [1.0] * n, "terminated") for n in (10, 20, 30)]
    evidence = build_evidence(episodes, 100.0, tau_c, **evidence_kwargs)
    space = space or ParameterSpace(3)
    ctx = PromptContext(None, ("layout",), space, 100.0, (), 1, None, 1.0)
    params = ", ".join(f"params[{i}]: 0" for i in range(space.size))
    return PromptBuilder().critic(ctx, HistoryLine(params, 20.0, 3), evidence)[1]["content"]


def your_step(prompt: str) -> str:
    return prompt.split("## Your step")[1]


def test_critic_instructions_use_statistics_only_when_they_are_shown() -> None:
    r2po = your_step(critic_prompt({}))
    assert "Use the statistics" in r2po and "systematic" in r2po
    assert "the states of the shown episode to" in r2po
    # the ablation Critics (rep_traj, always_critic, critic_only: one trajectory; three_traj: three) see no statistics
    bare = your_step(critic_prompt(dict(statistics=False, trajectories=("mean",), rule=False)))
    three = your_step(critic_prompt(dict(statistics=False, trajectories=("worst", "median", "best"), rule=False)))
    for step in (bare, three):
        assert "statistics" not in step and "systematic" not in step and "occasional" not in step
    assert "the states of the shown episode to" in bare
    assert "the states of the shown episodes to" in three and "shown episode to" not in three


def test_tabular_prompts_ask_for_few_action_changes_not_a_step_size() -> None:
    space = ParameterSpace(9, values=(0, 1, 2, 3))
    ctx = PromptContext(None, ("layout",), space, 0.9, (HistoryLine("params: [0]", 0.1, 1),), 1, None, 1.0, best=0.1)
    prompts = {"search": PromptBuilder().search(ctx)[1]["content"], "critic": critic_prompt({}, space)}
    for role, prompt in prompts.items():
        step = your_step(prompt)
        assert "1.0" not in step and "per parameter" not in step and "by about" not in step, role
        assert "the actions of only" in step and "states" in step, role
    # continuous parameters keep the step size
    assert "at most 1.0 per parameter" in your_step(critic_prompt({}))


def test_tabular_prompt_states_the_value_set_once() -> None:
    llm = ScriptedLLM(["params: " + str([0] * 16)])
    model = R2PO("Tabular", "FrozenLake-v1", llm=llm, n_eval_episodes=2, warmup_episodes=1, seed=0, max_episodes=3)
    model.learn(10**6)
    prompt = llm.calls[0][1]["content"]
    assert prompt.count("must be one of") == 1 and prompt.count("0, 1, 2, 3") == 1


def test_best_line_counts_k_episode_candidates_and_history_marks_warmup() -> None:
    history = (
        HistoryLine("params[0]: 1.0", 61.0, 1, warmup=True),
        HistoryLine("params[0]: 2.0", 9.0, 1, warmup=True),
        HistoryLine("params[0]: 3.0", 10.4, 5),
    )
    ctx = PromptContext(None, ("layout",), ParameterSpace(1), 475.0, history, 2, 10, 1.0, best=10.4)
    prompt = PromptBuilder().search(ctx)[1]["content"]
    assert "params[0]: 1.0; mean return: 61 (1 warm-up episode)" in prompt
    assert "params[0]: 3.0; mean return: 10.4 (5 episodes)" in prompt
    assert "The best mean return over 5 episodes so far is 10.4" in prompt
    assert "The best mean return so far is" not in prompt
    # before the first iteration every entry has one episode: the best is a single-episode return
    warmup = PromptContext(None, ("layout",), ParameterSpace(1), 475.0, history[:2], 1, 10, 1.0, best=61.0)
    prompt = PromptBuilder().search(warmup)[1]["content"]
    assert "The best single-episode return so far is 61." in prompt


@pytest.mark.parametrize("k", [1, 3])
def test_best_line_agrees_with_the_history_in_real_runs(k: int) -> None:
    """Also with K = 1, where warm-up and iteration entries have as many episodes: R2PO flags the warm-up lines."""
    llm = ScriptedLLM([vector(*([0.1 * (i % 7)] * 9 + [i / 10])) for i in range(1, 40)])
    model = R2PO("MlpLinear", "CartPole-v1", llm=llm, n_eval_episodes=k, warmup_episodes=10, seed=0, max_episodes=10 + 6 * k)
    model.learn(10**6)
    searches = [call[1]["content"] for call in llm.calls if "Search" in call[0]["content"]]
    assert len(searches) >= 2
    unit = "episodes" if k > 1 else "episode"
    for prompt in searches[1:]:  # after the first iteration
        assert prompt.count("(1 warm-up episode)") == 10  # every warm-up line is marked, whatever K
        match = re.search(rf"The best mean return over {k} {unit} so far is (\d+(?:\.\d+)?)", prompt)
        assert match, prompt
        best = float(match.group(1))
        k_means = [float(x) for x in re.findall(rf"; mean return: (\d+(?:\.\d+)?) \({k} {unit}\)", prompt)]
        assert k_means and best == max(k_means)


def test_revision_rule_prints_enough_digits_to_tell_mean_and_threshold_apart() -> None:
    episodes = [Episode([np.zeros(2)] * 3, [np.zeros(1)] * 2, [50.0, 46.9996], "terminated")] * 2
    evidence = build_evidence(episodes, 100.0, 97.0)
    ctx = PromptContext(None, ("layout",), ParameterSpace(3), 100.0, (), 1, None, 1.0)
    text = PromptBuilder().critic(ctx, HistoryLine("params: ...", 96.9996, 2), evidence)[1]["content"]
    assert "mean return is at least 97 and" in text
    assert "The candidate's mean return 96.9996 is below this threshold." in text
    assert "## Candidate under review\nparams: ...; mean return: 96.9996 (2 episodes)" in text
    # distinct at 4 figures: unchanged
    ctx = PromptContext(None, ("layout",), ParameterSpace(3), 475.0, (), 1, None, 1.0)
    evidence = build_evidence(episodes, 475.0, 451.25)
    text = PromptBuilder().critic(ctx, HistoryLine("params: ...", 96.9996, 2), evidence)[1]["content"]
    assert "at least 451.2 and" in text and "mean return 97 is below" in text


def _best_lines(prompts: list[str]) -> list[str]:
    return [line for p in prompts for line in p.splitlines() if "so far is" in line]


def _scripted_run(replies: list[str], **kwargs) -> tuple[R2PO, ScriptedLLM]:
    """A CartPole run of 5 warm-up episodes and 2 evaluations of K = 3 with scripted replies."""
    llm = ScriptedLLM(replies)
    settings = dict(n_eval_episodes=3, warmup_episodes=5, max_episodes=5 + 6, seed=0)
    return R2PO("MlpLinear", "CartPole-v1", llm=llm, **settings, **kwargs).learn(10**6), llm


def test_best_line_after_the_warm_up_counts_the_candidate_of_this_iteration() -> None:
    """actor_second_pass, iteration 1: the second Search sees candidate A (3 episodes) next to warm-up lines; the
    best over 3 episodes is A's mean, not the best warm-up episode."""
    model, llm = _scripted_run([vector(*([0.1] * 10)), vector(*([0.2] * 10))], variant="actor_second_pass")
    first_mean = model.history[-1]["search"]["mean_return"]
    warmup_best = max(r["mean_return"] for r in model.history if r["kind"] == "warmup")
    assert warmup_best > first_mean  # the case that matters: a warm-up episode beat candidate A
    first, second = _best_lines(llm.prompts())
    assert first == f"The best single-episode return so far is {sig(warmup_best, 4)}."
    assert second.startswith(f"The best mean return over 3 episodes so far is {sig(first_mean, 4)} (the warm-up")


def test_best_line_when_compression_shows_only_warm_up_lines() -> None:
    """history_best_k=3, history_recent=0: the shown lines are all warm-up ones, the best is a 3-episode mean."""
    replies = [vector(*([0.1 * i] * 10)) for i in range(1, 5)]
    model, llm = _scripted_run(replies, variant="props", history_best_k=3, history_recent=0)
    best_after_first = model.history[5]["mean_return"]
    second_prompt = llm.prompts()[1]
    assert second_prompt.count("(1 warm-up episode)") == 3 and "(3 episodes)" not in second_prompt.split("## Your step")[0]
    assert _best_lines([second_prompt]) == [
        f"The best mean return over 3 episodes so far is {sig(best_after_first, 4)} (the warm-up vectors, run for 1 "
        "episode each, are not counted: one episode is a noisy estimate)."
    ]


def test_critic_system_prompt_states_whether_the_revision_must_beat_the_candidate() -> None:
    builder, evidence = (
        PromptBuilder(),
        build_evidence([Episode([np.zeros(1)] * 2, [np.zeros(1)], [1.0], "terminated")], None, None),
    )
    systems = {}
    for keep_best in (True, False):
        ctx = PromptContext(None, ("layout",), ParameterSpace(1), None, (), 1, None, 1.0, extra={"keep_best": keep_best})
        systems[keep_best] = builder.critic(ctx, HistoryLine("params[0]: 0", 1.0, 1), evidence)[0]["content"]
    assert (
        "only kept if its mean return is at least that of the candidate, so do not change what already works" in systems[True]
    )
    assert "replaces the candidate whatever its return" not in systems[True]
    assert "replaces the candidate whatever its return" in systems[False]
    assert "only kept if" not in systems[False]


def test_critic_prompt_spells_out_the_rule_the_evidence_and_how_to_decline() -> None:
    prompt = critic_prompt({}, tau_c=15.0)
    rule = prompt.split("## Revision rule")[1].split("## History")[0]
    assert "at least 15 and the statistics show no failure that happens consistently, keep the parameters unchanged" in rule
    assert "or make at most one very small edit that the evidence strongly justifies" in rule
    assert "- To keep the candidate as it is, repeat its parameters exactly." in your_step(prompt)
    assert "- episode length: mean 20, min 10, max 30" in prompt and "- endings: terminated 3" in prompt
    assert "closest to the median return (return 20); each line is one step" in prompt
    three = critic_prompt(dict(trajectories=("worst", "median", "best")))
    assert "Worst episode (return 10); each" in three and "Best episode (return 30); each" in three


def test_prompts_show_the_whole_task_description() -> None:
    task = TaskDescription(
        "Reach the flag.", ("s[0]: position", "s[1]: velocity"), ("0: left", "1: right"), "-1 a step", "at the flag"
    )
    ctx = PromptContext(task, ("layout",), ParameterSpace(2, decimals=2), 1.0, (), 1, None, 0.5)
    episodes = [Episode([np.zeros(2)] * 2, [np.array(0)], [1.0], "terminated")]
    search = PromptBuilder().search(ctx)[1]["content"]
    critic = PromptBuilder().critic(ctx, HistoryLine("params: ...", 1.0, 1), build_evidence(episodes, 1.0, None))[1]["content"]
    for prompt in (search, critic):
        for line in ("## Task\nReach the flag.", "- s[0]: position\n- s[1]: velocity", "- 0: left\n- 1: right"):
            assert line in prompt
        assert "Reward: -1 a step" in prompt and "Episode end: at the flag" in prompt
        assert "written with 2 decimal(s)" in prompt


def test_search_prompt_explores_below_a_target_and_balances_without_one() -> None:
    system = PromptBuilder().search(PromptContext(None, ("layout",), ParameterSpace(1), None, (), 1, None, 1.0))[0]["content"]
    assert "You never see the environment directly: you learn from the returns of the vectors evaluated so far." in system
    prompts = {
        target: your_step(
            PromptBuilder().search(PromptContext(None, ("l",), ParameterSpace(1), target, (), 1, None, 1.0))[1]["content"]
        )
        for target in (None, 5.0)
    }
    assert "explore: try regions of the space the history has not covered" in prompts[5.0]
    assert "Balance exploring" not in prompts[5.0]
    assert "Balance exploring new regions of the space with refining the best vectors." in prompts[None]
    assert "explore:" not in prompts[None]


def test_history_section_counts_omitted_entries_and_says_when_it_is_empty() -> None:
    empty = PromptBuilder().search(PromptContext(None, ("layout",), ParameterSpace(1), None, (), 1, None, 1.0))[1]["content"]
    assert "## History\nNo parameter vector has been evaluated yet." in empty
    history = (HistoryLine("params[0]: 1.0", 3.0, 5), HistoryLine("params[0]: 2.0", 4.0, 5))
    ctx = PromptContext(
        None, ("layout",), ParameterSpace(1), None, history, 9, None, 1.0, best=4.0, extra={"history_omitted": 7}
    )
    prompt = PromptBuilder().search(ctx)[1]["content"]
    assert "9 parameter vectors evaluated so far; the 7 not shown are neither among the best nor the most recent" in prompt
    assert "No parameter vector" not in prompt


def test_best_line_mentions_the_warm_up_only_when_warm_up_lines_are_shown() -> None:
    history = (HistoryLine("params[0]: 3.0", 10.4, 5),)
    ctx = PromptContext(None, ("layout",), ParameterSpace(1), 475.0, history, 2, 10, 1.0, best=10.4, best_episodes=5)
    prompt = PromptBuilder().search(ctx)[1]["content"]
    assert "The best mean return over 5 episodes so far is 10.4.\n" in prompt and "warm-up" not in prompt
