"""Fidelity to the reference implementation (HWUDLabAIRoboticsResearch/R2PO @ 9449c38): what each variant's prompts
show with R2PO's defaults, on a linear (CartPole-v1) and a tabular (FrozenLake-v1) task, rendered through real runs
with a scripted LLM; and each variant's calls, episodes and history entries per iteration (the reference's pattern).

Which reference template each of ours follows: the Jinja comment at the top of every file in
``sb3_r2po/prompts/templates``; the variants' choices: :mod:`sb3_r2po.r2po.arguments`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from helpers import UNTIL_BUDGET, BanditEnv, ScriptedLLM, vector

from sb3_r2po import R2PO
from sb3_r2po.common.rollouts import sig
from sb3_r2po.llm.base import ChatReply
from sb3_r2po.prompts.tasks import describe_task
from sb3_r2po.r2po.arguments import VARIANTS, R2POSettings
from sb3_r2po.zoo.settings import reference_settings

K = 3
WARMUP = 7  # more than CartPole's 5 excerpted entries: the excerpts cover only the latest ones
ITERATIONS = 2
ENVS = {"CartPole-v1": "MlpLinear", "FrozenLake-v1": "Tabular"}
BLACK_BOX = [name for name, v in VARIANTS.items() if v.search != "none" and v.search_prompt != "props_plus"]
PROPS_SEARCH = ["props", "pure_search", "actor_second_pass", "rep_traj", "always_critic", "three_traj"]
CRITICS = [name for name, v in VARIANTS.items() if v.critic is not None]
SELECTION_HINTS = ("repeat its parameters", "kept only if", "replaces the proposal", "the threshold", "always enter")


def replies(env_id: str) -> list[str]:
    """Distinct vectors, each on the first line with an explanation after it (the layout the prompts ask for)."""
    if env_id == "FrozenLake-v1":
        vectors = [[(3 * i + j) % 4 for j in range(16)] for i in range(1, 40)]
        return [vector(*v) + "\nBecause." for v in vectors]
    good = [0, 0, 0, 0, 0, 1, 0, 1, 0]  # pushes towards where the pole falls: long episodes
    return [vector(*good, i / 10) + "\nBecause." for i in range(1, 40)]


def is_critic(prompt: str) -> bool:
    return prompt.startswith("You are an optimization agent")


Run = Callable[[str, str], tuple[R2PO, ScriptedLLM]]


@pytest.fixture(scope="module")
def run(make_r2po) -> Run:
    """``run(variant, env_id)``: one run per (variant, env) with R2PO's defaults, warm-up, then two iterations of the
    variant; made on first use and shared by the module's tests, which only read it."""
    runs: dict[tuple[str, str], tuple[R2PO, ScriptedLLM]] = {}

    def run(variant: str, env_id: str) -> tuple[R2PO, ScriptedLLM]:
        if (variant, env_id) not in runs:
            llm = ScriptedLLM(replies(env_id))
            budget = WARMUP + ITERATIONS * R2POSettings(variant=variant).candidates_per_iteration * K
            model = make_r2po(
                env_id,
                policy=ENVS[env_id],
                llm=llm,
                variant=variant,
                n_eval_episodes=K,
                warmup_episodes=WARMUP,
                max_episodes=budget,
                seed=0,
            )
            model.learn(UNTIL_BUDGET)
            assert model.iteration == ITERATIONS and model.episodes_used == budget
            runs[variant, env_id] = (model, llm)
        return runs[variant, env_id]

    return run


@pytest.fixture(scope="module")
def prompts(run: Run) -> Callable[[str, str, str], list[str]]:
    """``prompts(variant, env_id, role)``: the prompts of one role ("search" or "critic") in that run."""

    def prompts(variant: str, env_id: str, role: str) -> list[str]:
        _, llm = run(variant, env_id)
        return [p for p in llm.prompts() if is_critic(p) == (role == "critic")]

    return prompts


def layout_shown(prompt: str) -> bool:
    return "Linear policy: y = s @ W + b" in prompt or "Tabular policy: params[s]" in prompt


def task_shown(prompt: str) -> bool:
    return "## Task\n" in prompt or "Observation:" in prompt


@pytest.mark.parametrize("env_id", ENVS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_call_is_one_user_message(run, variant: str, env_id: str) -> None:
    _, llm = run(variant, env_id)
    assert llm.calls and all([m["role"] for m in call] == ["user"] for call in llm.calls)


@pytest.mark.parametrize("env_id", ENVS)
@pytest.mark.parametrize("variant", BLACK_BOX)
def test_black_box_search_shows_no_task_and_no_layout(run, prompts, variant: str, env_id: str) -> None:
    model, _ = run(variant, env_id)
    task = describe_task(model.settings.env_id, model.observation_space, model.action_space)
    assert task is not None
    for prompt in prompts(variant, env_id, "search"):
        assert "global maximum of an unknown function f(params)" in prompt
        assert not task_shown(prompt) and not layout_shown(prompt)
        assert task.summary not in prompt and task.reward not in prompt and not any(line in prompt for line in task.actions)
        assert "Never propose params that have already been evaluated" in prompt
        assert f"should be about {model.settings.target:g}. Below that you are only at a local optimum" in prompt
        assert re.search(r"This is iteration \d of \d\.", prompt)
        assert "line 1: a new input" in prompt and "line 2: a detailed explanation" in prompt


@pytest.mark.parametrize("env_id", ENVS)
def test_props_plus_search_shows_the_task(prompts, env_id: str) -> None:
    for prompt in prompts("props_plus", env_id, "search"):
        assert "global reinforcement-learning policy optimizer" in prompt and task_shown(prompt) and layout_shown(prompt)
        assert "f(params) is the episodic reward of the policy" in prompt


def test_props_plus_shows_each_entrys_first_episode_on_tabular_tasks_only(run, prompts) -> None:
    model, _ = run("props_plus", "FrozenLake-v1")
    last = prompts("props_plus", "FrozenLake-v1", "search")[-1]
    # the reference's str(TrajectoryBuffer): a header, then "state | action | reward" per step; all but the newest entry
    assert last.count("\nTrajectory: State | Action | Reward\n") == len(model.history) - 1
    assert re.search(r"^\d+ \| [0-3] \| [01]\.0$", last, re.M)
    assert "think step by step" in last and "which action each state should take" in last
    linear = prompts("props_plus", "CartPole-v1", "search")[-1]
    assert "Trajectory:" not in linear and "State | Action" not in linear and "think step by step" not in linear


@pytest.mark.parametrize("env_id", ENVS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_search_template_and_history_format_per_variant(prompts, variant: str, env_id: str) -> None:
    searches = prompts(variant, env_id, "search")
    if VARIANTS[variant].search == "none":
        assert searches == []
        return
    assert searches
    for prompt in searches:
        lines = prompt.split("\n")
        if variant == "r2po":  # the reference's build_search_llm_history_text: one line per entry, indexed from 0
            assert "## Evaluated so far" in prompt and re.search(
                r"^Trial 0: params=\[[^] ]+\] rollout_reward=\d+\.\d\d$", prompt, re.M
            )
            assert [line.split(":")[0] for line in lines if line.startswith("Trial ")] == [
                f"Trial {i}" for i in range(WARMUP + searches.index(prompt))
            ]
            assert "; f(params): " not in prompt and "Warmup trial" not in prompt and "\n\nTrial 1" not in prompt
        elif variant == "three_traj":  # ProPS's prompt with three_traj's labelled history and its note
            assert "Below are examples of params with their value f(params)" in prompt
            assert re.search(r"^Warmup trial 0: params=\[[^] ]+\] rollout_reward=\d+\.\d\d$", prompt, re.M)
            assert "lucky warm-up rollout" in prompt
        else:  # ProPS's str_nd_examples: "params[0]: v; ...; f(params): x.xx", warm-up entries not told apart
            assert re.search(r"^params\[0\]: [^\n]+; f\(params\): -?\d+\.\d\d$", prompt, re.M)
            assert "warm-up" not in prompt.lower() and "## Evaluated so far" not in prompt and "Trial " not in prompt
        if variant in PROPS_SEARCH:
            assert "Below are examples of params with their value f(params)" in prompt
        assert "excerpt" not in prompt  # rollout excerpts are for the Critic


@pytest.mark.parametrize("variant", [v for v in sorted(VARIANTS) if VARIANTS[v].search != "none"])
def test_search_rules_per_action_type(prompts, variant: str) -> None:
    for prompt in prompts(variant, "FrozenLake-v1", "search"):
        assert "Search over all the possible values of the params." in prompt
        assert "only a few" not in prompt and "steps of about" not in prompt
    for prompt in prompts(variant, "CartPole-v1", "search"):
        assert "Try both positive and negative values; while exploring, move in steps of about 1.0." in prompt


@pytest.mark.parametrize("env_id", ENVS)
@pytest.mark.parametrize("variant", CRITICS)
def test_critic_sees_the_task_and_no_selection_hints_by_default(prompts, variant: str, env_id: str) -> None:
    critics = prompts(variant, env_id, "critic")
    assert len(critics) == ITERATIONS
    for prompt in critics:
        assert task_shown(prompt) and layout_shown(prompt)
        assert not any(hint in prompt for hint in SELECTION_HINTS), variant
        assert "First line, with nothing before it: the parameters only" in prompt


@pytest.mark.parametrize("env_id", ENVS)
def test_r2po_critic_shows_the_statistics_and_the_whole_median_episode(prompts, env_id: str) -> None:
    for prompt in prompts("r2po", env_id, "critic"):
        # the reference's build_median_trajectory_stats_summary: its statistics lines, then the whole median rollout
        assert re.search(r"^Reward: mean=-?\d+\.\d\d, min=-?\d+\.\d\d, max=-?\d+\.\d\d$", prompt, re.M)
        assert re.search(r"^Episode length: mean=\d+\.\d, min=\d+, max=\d+$", prompt, re.M)
        assert re.search(rf"^Success rate: \d+/{K} rollouts reached reward>=\d+\.\d\d$", prompt, re.M)
        assert re.search(rf"^Failure rate: \d+/{K} rollouts finished below reward=\d+\.\d\d$", prompt, re.M)
        assert "std" not in prompt and "Endings" not in prompt  # ours, with extra_statistics
        header = re.search(r"^Median rollout \(rollout \d, reward=-?\d+\.\d{4}, length=(\d+)\):\n(.*)$", prompt, re.M)
        assert header is not None and "omitted" not in prompt
        steps = header.group(2).split(" | ")  # every step, s->a->s', on one line
        assert len(steps) == int(header.group(1))
        assert all(step.count("->") == 2 for step in steps) and steps[-1].endswith("->[TERMINATED]")
        assert all(steps[t].split("->")[2] == steps[t + 1].split("->")[0] for t in range(len(steps) - 1))
        assert "reward=" not in header.group(2)  # states and actions, as the reference shows them


def test_r2po_critic_shows_a_long_median_episode_whole(prompts) -> None:
    lengths = [
        int(re.search(r"^Median rollout .*length=(\d+)\):$", p, re.M).group(1))
        for p in prompts("r2po", "CartPole-v1", "critic")
    ]
    assert max(lengths) > 40  # longer than our old default budget of 40 steps, shown whole


@pytest.mark.parametrize("variant", ["r2po", "three_traj"])
def test_the_titled_rollouts_are_the_median_worst_and_best_of_the_candidates_returns(run, variant: str) -> None:
    """The rollout shown as the median is the one whose return is the middle of the K (odd) returns, found here from
    the Search candidate's returns in the history, not by the code under test; three_traj's worst and best likewise."""
    model, llm = run(variant, "CartPole-v1")
    candidates = [r for r in model.history if r["kind"] != "warmup"]
    critics = [p for p in llm.prompts() if is_critic(p)]
    assert len(critics) == len(candidates) == ITERATIONS
    shown = []
    for record, prompt in zip(candidates, critics, strict=True):
        assert record["kind"] == "search"  # kept over its revision: the record holds the K returns the Critic was shown
        returns = record["returns"]
        assert len(returns) == K and K % 2 == 1  # an odd K: the median is one of the returns
        titled = {"Median": returns.index(sorted(returns)[K // 2])}
        if variant == "three_traj":
            titled |= {"Worst": returns.index(min(returns)), "Best": returns.index(max(returns))}
        for title, i in titled.items():
            assert re.search(rf"^{title} rollout \(rollout {i}, reward={returns[i]:.4f}[,)]", prompt, re.M), (title, returns)
        shown.append(titled["Median"])
    assert any(shown)  # a median that is not the first rollout


@pytest.mark.parametrize(
    "env_id, rule, other",
    [
        (
            "CartPole-v1",
            "- When the mean reward is {tau} or more, prefer no change at all, or only one very small edit",
            "consistent failure",
        ),
        (
            "FrozenLake-v1",
            "- If the proposed policy already has a mean reward of {tau} or more and the evidence shows no consistent "
            "failure, keep the parameters unchanged, or make at most one very small edit that is strongly justified.",
            "prefer no change at all",
        ),
    ],
)
def test_r2po_rule_wording_per_action_type(run, prompts, env_id: str, rule: str, other: str) -> None:
    model, _ = run("r2po", env_id)
    assert model.settings.revision_threshold is not None
    for prompt in prompts("r2po", env_id, "critic"):
        assert rule.format(tau=sig(model.settings.revision_threshold, 4)) in prompt
        assert other not in prompt.split("Points to consider")[1]


@pytest.mark.parametrize("env_id", ENVS)
@pytest.mark.parametrize("variant", ["rep_traj", "always_critic", "critic_only"])
def test_excerpt_critics_show_the_trace_with_rewards_and_excerpts_of_the_latest_entries(
    prompts, variant: str, env_id: str
) -> None:
    n = reference_settings(env_id, variant)["history_excerpts"]  # the reference's traj_history_last_n
    for i, prompt in enumerate(prompts(variant, env_id, "critic")):
        entries = WARMUP + i
        # the reference's _build_history_text: "Trial i: params=[v, v] mean_reward=x.xx", a blank line between entries,
        # and for the latest entries "  rollout_excerpt=s->a->s' | ... | s->a->[TERMINATED]" (4 first, 4 last steps)
        assert re.search(
            r"^Trial 0: params=\[[^]]+, [^]]+\] mean_reward=-?\d+\.\d\d(\n  rollout_excerpt=.*)?\n\nTrial 1: ", prompt, re.M
        )
        excerpts = re.findall(r"^  rollout_excerpt=(.*)$", prompt, re.M)
        assert len(excerpts) == min(n, entries)
        assert all(e.endswith(("->[TERMINATED]", "->[ROLLOUT_CAP]")) and "reward" not in e for e in excerpts)
        assert "Reward: mean" not in prompt and " or more" not in prompt  # no statistics, no rule
        # the reference's format_trajectory_summary: a header, then one line per step with its reward
        header = re.search(r"^Trajectory 0 \(length=(\d+)(, step_reward_sum=-?\d+\.\d\d)?\):$", prompt, re.M)
        assert header is not None and (header.group(2) is None) == (variant == "critic_only")
        steps = re.findall(r"^  step (\d+): state=\S.* -> action=\S+ -> reward=(\S+)$", prompt, re.M)
        assert [int(t) for t, _ in steps] == list(range(int(header.group(1))))  # every step, each with its reward
        assert "Do not propose parameters that already appear in the previous attempts above." in prompt
    if env_id == "CartPole-v1":
        assert n == 5 < WARMUP  # only the latest entries


def test_critic_only_is_one_draft_critique_revise_prompt(prompts) -> None:
    for env_id in ENVS:
        for prompt in prompts("critic_only", env_id, "critic"):
            assert "in a single pass" in prompt and "Draft a first" in prompt and "Revise it once" in prompt
            assert "proposed" not in prompt and "Candidate" not in prompt and "## Proposal" not in prompt
            assert "## What happened in the latest test" in prompt and "\nTrajectory 0 (length=" in prompt
            assert prompt.index("## Previous attempts") < prompt.index("## What happened in the latest test")


@pytest.mark.parametrize("env_id", ENVS)
def test_three_traj_critic_shows_worst_median_best_and_the_labelled_history(prompts, env_id: str) -> None:
    for prompt in prompts("three_traj", env_id, "critic"):
        # the reference's build_three_trajectory_summary: each rollout on one line, its parts' last steps marked
        # [GOAL] (a positive reward) or [END]
        for title in ("Worst", "Median", "Best"):
            trace = re.search(rf"^{title} rollout \(rollout \d, reward=-?\d+\.\d{{4}}\):\n(.*)$", prompt, re.M)
            assert trace is not None and trace.group(1).endswith(("->[GOAL]", "->[END]"))
        assert re.search(r"^Warmup trial 0: params=\[[^] ]+\] rollout_reward=\d+\.\d\d\n\nWarmup trial 1: ", prompt, re.M)
        assert "a training trial comes from the optimization loop" in prompt
        assert "excerpt" not in prompt and "Reward: mean" not in prompt and " or more" not in prompt


# ----------------------------------------------------------------------------- calls and evaluations per iteration

PATTERN = {  # REPORT 2.10: calls per iteration (in order), episodes per iteration in units of K, what enters the history
    "r2po": (["search", "critic"], 2, "kept"),
    "props": (["search"], 1, "proposal"),
    "props_plus": (["search"], 1, "proposal"),
    "pure_search": (["search", "search"], 2, "kept"),
    "actor_second_pass": (["search", "search"], 2, "kept"),
    "critic_only": (["critic"], 1, "proposal"),
    "rep_traj": (["search", "critic"], 2, "kept"),
    "always_critic": (["search", "critic"], 2, "revision"),
    "three_traj": (["search", "critic"], 2, "kept"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_calls_episodes_and_history_entries_per_iteration(run, variant: str) -> None:
    roles, units, entry = PATTERN[variant]
    model, llm = run(variant, "CartPole-v1")
    assert ["critic" if is_critic(p) else "search" for p in llm.prompts()] == roles * ITERATIONS
    assert model.episodes_used == WARMUP + ITERATIONS * units * K
    iterations = [r for r in model.history if r["kind"] != "warmup"]
    assert len(iterations) == ITERATIONS and all(r["n_episodes"] == K for r in iterations)
    for record in iterations:
        first, second = record["search"], record["revision"]
        if entry == "proposal":  # every proposal enters the history
            assert record["params"] == (second["params"] if variant == "critic_only" else first["params"])
        elif entry == "revision":  # always_critic: the revision, whatever its mean
            assert record["params"] == second["params"] and second["status"] == "kept"
        else:  # keep-best, ties to the second candidate
            better = second["mean_return"] >= first["mean_return"]
            assert record["params"] == (second["params"] if better else first["params"])


def test_pure_search_asks_twice_with_the_same_prompt_and_evaluates_both(run) -> None:
    _, llm = run("pure_search", "CartPole-v1")
    prompts_ = llm.prompts()
    assert prompts_[0] == prompts_[1] and prompts_[2] == prompts_[3]


def test_actor_second_pass_shows_the_first_proposal_to_the_second_call(run) -> None:
    model, llm = run("actor_second_pass", "CartPole-v1")
    first = model.history[WARMUP]["search"]["params"]
    row = "".join(f"params[{i}]: {v:.5g}; " for i, v in enumerate(first)) + "f(params): "
    assert row not in llm.prompts()[0] and row in llm.prompts()[1]


@pytest.mark.parametrize("variant", ["r2po", "rep_traj", "three_traj", "always_critic"])
def test_an_unchanged_revision_is_evaluated_again(make_r2po, variant: str) -> None:
    llm = ScriptedLLM([vector(1.0, 1.0)])  # the Critic repeats the candidate
    model = make_r2po(BanditEnv(), llm=llm, variant=variant, n_eval_episodes=2, warmup_episodes=0, max_episodes=4, seed=None)
    model.learn(UNTIL_BUDGET)
    assert model.episodes_used == 4 and model.history[-1]["revision"]["status"] == "kept"


# ----------------------------------------------------------------------------- issue 17, finding 8


class CompliantLLM:
    """Does what the prompt says: repeats the proposal when told that repeating it keeps it, else proposes anew."""

    _PROPOSAL = re.compile(r"(?:proposed these parameters:\n|## Candidate under review\n)(params[^\n]*)")

    def __init__(self, size: int) -> None:
        self.size, self.calls, self.n = size, 0, 0

    def chat(self, messages, *, temperature: float = 0.0) -> ChatReply:  # type: ignore[no-untyped-def]
        self.calls += 1
        prompt = messages[-1]["content"] if len(messages) == 1 else messages[0]["content"]
        proposal = self._PROPOSAL.search(prompt)
        if "repeat its parameters exactly" in prompt and proposal is not None:
            return ChatReply(text=proposal.group(1) + "\nKeeping it, as the prompt allows.")
        self.n += 1
        return ChatReply(text=vector(*([0.0] * (self.size - 1) + [round(0.1 * self.n, 1)])) + "\nA new vector.")


@pytest.mark.parametrize("hints", [False, True])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_no_prompt_asks_for_a_reply_the_loop_rejects(make_r2po, variant: str, hints: bool) -> None:
    """Finding 8: critic_only told the Critic to repeat the last candidate's parameters to keep it, then rejected that
    reply as a history vector. No prompt may ask for a reply the loop rejects, also with duplicate rejection on."""
    llm = CompliantLLM(10)
    model = make_r2po(
        llm=llm,
        variant=variant,
        n_eval_episodes=2,
        warmup_episodes=2,
        max_episodes=2 + 8,
        seed=0,
        critic_selection_hints=hints,
        reject_duplicates=True,
        on_unusable_reply="reask",
    )
    model.learn(UNTIL_BUDGET)
    assert model.llm_stats["parse_failures"] == 0 and model.llm_stats["fallbacks"] == 0
    assert all(not r.get("revision", {}).get("failures") for r in model.history)


def test_critic_only_never_asks_to_repeat_the_candidate(make_r2po) -> None:
    for hints in (False, True):
        llm = ScriptedLLM(replies("CartPole-v1"))
        model = make_r2po(
            llm=llm,
            variant="critic_only",
            n_eval_episodes=2,
            warmup_episodes=2,
            max_episodes=6,
            seed=None,
            critic_selection_hints=hints,
        )
        model.learn(UNTIL_BUDGET)
        assert all("repeat its parameters" not in p and "keep the proposal" not in p for p in llm.prompts())


def test_history_excerpts_can_be_overridden(make_r2po) -> None:
    llm = ScriptedLLM(replies("CartPole-v1"))
    model = make_r2po(
        llm=llm,
        variant="rep_traj",
        n_eval_episodes=2,
        warmup_episodes=4,
        max_episodes=8,
        seed=None,
        history_excerpts=1,
    )
    model.learn(UNTIL_BUDGET)
    critic = next(p for p in llm.prompts() if is_critic(p))
    assert critic.count("rollout_excerpt=") == 1
    latest = critic.split("## Previous attempts")[1].split("## Your step")[0].strip().split("\n")
    assert latest[-1].startswith("  rollout_excerpt=")  # the latest entry's
    assert model.history[3]["rollout_excerpt"] in latest[-1]
