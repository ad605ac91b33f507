"""Fidelity to the reference implementation (HWUDLabAIRoboticsResearch/R2PO @ 9449c38): what each variant's prompts
show with R2PO's defaults, on a linear (CartPole-v1) and a tabular (FrozenLake-v1) task, rendered through real runs
with a scripted LLM; and each variant's calls, episodes and history entries per iteration (the reference's pattern).

Which reference template each of ours follows: the Jinja comment at the top of every file in
``sb3_r2po/prompts/templates``; the variants' choices: :mod:`sb3_r2po.variants`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from helpers import UNTIL_BUDGET, BanditEnv, ScriptedLLM, vector

from sb3_r2po import R2PO
from sb3_r2po.llm.base import ChatReply
from sb3_r2po.prompts.tasks import describe_task
from sb3_r2po.variants import HISTORY_EXCERPTS, VARIANTS

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
            budget = WARMUP + ITERATIONS * VARIANTS[variant].candidates_per_iteration * K
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
    task = describe_task(model.env_id, model.observation_space, model.action_space)
    assert task is not None
    for prompt in prompts(variant, env_id, "search"):
        assert "global maximum of an unknown function f(params)" in prompt
        assert not task_shown(prompt) and not layout_shown(prompt)
        assert task.summary not in prompt and task.reward not in prompt and not any(line in prompt for line in task.actions)
        assert "Never propose params that have already been evaluated" in prompt
        assert f"should be about {model.target:g}. Below that you are only at a local optimum" in prompt
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
    assert last.count("its first episode, one step per line:") == len(model.history) - 1  # all but the newest entry
    assert "think step by step" in last and "which action each state should take" in last
    linear = prompts("props_plus", "CartPole-v1", "search")[-1]
    assert "first episode" not in linear and "t=0:" not in linear and "think step by step" not in linear


@pytest.mark.parametrize("env_id", ENVS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_search_template_and_history_format_per_variant(prompts, variant: str, env_id: str) -> None:
    searches = prompts(variant, env_id, "search")
    if VARIANTS[variant].search == "none":
        assert searches == []
        return
    assert searches
    for prompt in searches:
        if variant == "r2po":
            assert "## Evaluated so far" in prompt and "; reward of its one episode: " in prompt
            assert "f(params) = " not in prompt and "Warm-up trial" not in prompt
        elif variant == "three_traj":  # ProPS's prompt with three_traj's labelled history and its note
            assert "Below are examples of params with their value f(params)" in prompt
            assert "Warm-up trial: params[0]" in prompt and "lucky warm-up rollout" in prompt
        else:  # ProPS's format: warm-up entries not told apart
            assert "; f(params) = " in prompt and "warm-up" not in prompt.lower() and "## Evaluated so far" not in prompt
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
        assert "Reward: mean " in prompt and "Episode length: mean " in prompt and "Reached the target reward" in prompt
        assert "std" not in prompt and "Endings" not in prompt  # ours, with extra_statistics
        assert "Median episode" in prompt and "steps omitted" not in prompt and "identical steps" not in prompt
        length = int(re.search(r"end after (\d+) steps", prompt).group(1))
        steps = re.findall(r"^t=(\d+): ", prompt, re.M)
        assert [int(t) for t in steps] == list(range(length))  # every step, in order
        assert ", r=" not in prompt  # states and actions, as the reference shows them


def test_r2po_critic_shows_a_long_median_episode_whole(prompts) -> None:
    lengths = [int(re.search(r"end after (\d+) steps", p).group(1)) for p in prompts("r2po", "CartPole-v1", "critic")]
    assert max(lengths) > 40  # longer than our old default budget of 40 steps, shown whole


@pytest.mark.parametrize(
    "env_id, rule, other",
    [
        (
            "CartPole-v1",
            "- When the mean reward is 451.2 or more, prefer no change at all, or only one very small edit",
            "consistent failure",
        ),
        (
            "FrozenLake-v1",
            "- If the proposed policy already has a mean reward of 0.665 or more and the evidence shows no consistent "
            "failure, keep the parameters unchanged, or make at most one very small edit that is strongly justified.",
            "prefer no change at all",
        ),
    ],
)
def test_r2po_rule_wording_per_action_type(prompts, env_id: str, rule: str, other: str) -> None:
    for prompt in prompts("r2po", env_id, "critic"):
        assert rule in prompt
        assert other not in prompt.split("Points to consider")[1]


@pytest.mark.parametrize("env_id", ENVS)
@pytest.mark.parametrize("variant", ["rep_traj", "always_critic", "critic_only"])
def test_excerpt_critics_show_the_trace_with_rewards_and_excerpts_of_the_latest_entries(
    prompts, variant: str, env_id: str
) -> None:
    n = HISTORY_EXCERPTS[env_id]
    for i, prompt in enumerate(prompts(variant, env_id, "critic")):
        entries = WARMUP + i
        assert prompt.count("  excerpt of its representative episode: t=0: ") == min(n, entries)
        assert "Reward: mean" not in prompt and " or more" not in prompt  # no statistics, no rule
        trace = prompt.split("one line per step: observation s, then action a, then that step's reward r")[1]
        assert "(reward " in trace.split("\n")[1] or ", r=" in trace  # each step's reward (one line when constant)
        assert "Do not propose parameters that already appear in the previous attempts above." in prompt
    if env_id == "CartPole-v1":
        assert n == 5 < WARMUP  # only the latest entries


def test_critic_only_is_one_draft_critique_revise_prompt(prompts) -> None:
    for env_id in ENVS:
        for prompt in prompts("critic_only", env_id, "critic"):
            assert "in a single pass" in prompt and "Draft a first" in prompt and "Revise it once" in prompt
            assert "proposed" not in prompt and "Candidate" not in prompt and "## Proposal" not in prompt
            assert "## What happened in the latest test" in prompt and "Representative episode" in prompt
            assert prompt.index("## Previous attempts") < prompt.index("## What happened in the latest test")


@pytest.mark.parametrize("env_id", ENVS)
def test_three_traj_critic_shows_worst_median_best_and_the_labelled_history(prompts, env_id: str) -> None:
    for prompt in prompts("three_traj", env_id, "critic"):
        for title in ("Worst episode", "Median episode", "Best episode"):
            assert title in prompt
        assert "Warm-up trial: params[0]" in prompt and "a training trial comes from the optimization loop" in prompt
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
    row = ", ".join(f"params[{i}]: {v:.1f}" for i, v in enumerate(first)) + "; f(params) = "
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

    _PROPOSAL = re.compile(r"(?:proposed these parameters:\n|## Candidate under review\n)(params[^\n;]*)")

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
    assert critic.count("excerpt of its representative episode: ") == 1
    latest = critic.split("## Previous attempts")[1].split("## Your step")[0].strip().split("\n")
    assert latest[-1].startswith("  excerpt of its representative episode: t=0: ")  # the latest entry's
    assert model.history[3]["rollout_excerpt"] in latest[-1]
