import pytest
from helpers import UNTIL_BUDGET, BanditEnv, ScriptedLLM, vector

from sb3_r2po import R2PO
from sb3_r2po.experiments.report import salience_summary, salience_table
from sb3_r2po.r2po.arguments import VARIANTS

GOOD_CARTPOLE = vector(0, 0, 0, 0, 0, 1, 0, 1, 0, 0)  # push towards where the pole falls: long episodes
EDITED_CARTPOLE = vector(0, 0, 0, 0, 0, 1, 0, 1.2, 0, 0)


def roles(llm: ScriptedLLM) -> list[str]:
    """Every Critic prompt opens with its role ("You are an optimization agent"), every Search prompt with another."""
    return ["critic" if call[0]["content"].startswith("You are an optimization agent") else "search" for call in llm.calls]


@pytest.mark.parametrize(
    "variant, pattern, episodes_per_iteration",
    [
        ("r2po", ["search", "critic"], 8),
        ("props", ["search"], 4),
        ("props_plus", ["search"], 4),
        ("pure_search", ["search", "search"], 8),
        ("actor_second_pass", ["search", "search"], 8),
        ("critic_only", ["critic"], 4),
        ("rep_traj", ["search", "critic"], 8),
        ("always_critic", ["search", "critic"], 8),
        ("three_traj", ["search", "critic"], 8),
    ],
)
def test_call_pattern_and_budget(make_r2po, variant: str, pattern: list[str], episodes_per_iteration: int) -> None:
    llm = ScriptedLLM([vector(0, 0, 0, 0, 0, 1, 0, 1, 0, i / 10) for i in range(1, 40)])
    model = make_r2po(llm=llm, variant=variant, n_eval_episodes=4, warmup_episodes=1, max_episodes=1 + 16)
    model.learn(UNTIL_BUDGET)
    assert model.episodes_used == 17  # every variant gets the same episode budget
    n_iterations = 16 // episodes_per_iteration
    assert model.iteration == n_iterations
    assert roles(llm) == pattern * n_iterations
    assert model.settings.candidates_per_iteration == len(pattern)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_task_description_presence(make_r2po, variant: str) -> None:
    """The Search is a black box except in props_plus; every Critic sees the task."""
    llm = ScriptedLLM([GOOD_CARTPOLE, EDITED_CARTPOLE, vector(*[0.1] * 10)])
    make_r2po(llm=llm, variant=variant, n_eval_episodes=4, warmup_episodes=1, max_episodes=1 + 8).learn(UNTIL_BUDGET)
    for role, call in zip(roles(llm), llm.calls, strict=True):
        shown = "## Task\n" in call[0]["content"] and "Observation:" in call[0]["content"]
        assert shown is (role == "critic" or variant == "props_plus"), (variant, role)


@pytest.mark.parametrize(
    "variant, statistics, titles, rule",
    [
        ("r2po", True, ["Median rollout ("], True),
        ("rep_traj", False, ["Trajectory 0 ("], False),
        ("always_critic", False, ["Trajectory 0 ("], False),
        ("three_traj", False, ["Worst rollout (", "Median rollout (", "Best rollout ("], False),
        ("critic_only", False, ["Trajectory 0 ("], False),
    ],
)
def test_critic_evidence(make_r2po, variant: str, statistics: bool, titles: list[str], rule: bool) -> None:
    llm = ScriptedLLM([GOOD_CARTPOLE, EDITED_CARTPOLE, vector(*[0.1] * 10)])
    model = make_r2po(
        llm=llm, variant=variant, n_eval_episodes=4, warmup_episodes=1, max_episodes=1 + 8, target_return=500, tau_c=480
    )
    model.learn(UNTIL_BUDGET)
    critic = next(call[0]["content"] for role, call in zip(roles(llm), llm.calls, strict=True) if role == "critic")
    assert ("Reward: mean" in critic) is statistics
    assert ("480 or more" in critic) is rule
    for title in titles:
        assert title in critic
    for title in {"Median rollout (", "Worst rollout (", "Best rollout (", "Trajectory 0 ("} - set(titles):
        assert title not in critic


def test_three_traj_truncates_head_and_tail_at_25_steps(make_r2po) -> None:
    llm = ScriptedLLM([GOOD_CARTPOLE, EDITED_CARTPOLE])
    model = make_r2po(
        llm=llm, variant="three_traj", n_eval_episodes=4, warmup_episodes=1, max_episodes=1 + 8, max_trajectory_steps=1000
    )
    model.learn(UNTIL_BUDGET)
    critic = llm.calls[1][0]["content"]
    for title in ("Worst", "Median", "Best"):  # the reference's 25 first and 25 last steps, whatever the step budget
        steps = critic.split(f"{title} rollout (")[1].split("\n")[1].split(" | ")
        assert len(steps) == 51 and steps[25].endswith(" omitted steps ...")
    assert critic.count(" omitted steps ...") == 3


def test_pure_search_second_proposal_must_differ(make_r2po) -> None:
    # reject_duplicates (ours): the same prompt at temperature 0 gives the same reply: the second is re-asked with the reason
    llm = ScriptedLLM([GOOD_CARTPOLE, GOOD_CARTPOLE, EDITED_CARTPOLE])
    model = make_r2po(
        llm=llm,
        variant="pure_search",
        n_eval_episodes=4,
        warmup_episodes=1,
        max_episodes=1 + 8,
        reject_duplicates=True,
        on_unusable_reply="reask",
    )
    model.learn(UNTIL_BUDGET)
    assert "already proposed in this iteration" in llm.calls[2][-1]["content"]
    assert model.history[-1]["revision"]["params"] is not None


def test_actor_second_pass_shows_the_first_candidate(make_r2po) -> None:
    llm = ScriptedLLM([GOOD_CARTPOLE, EDITED_CARTPOLE])
    model = make_r2po(llm=llm, variant="actor_second_pass", n_eval_episodes=4, warmup_episodes=1, max_episodes=1 + 8)
    model.learn(UNTIL_BUDGET)
    assert "params[5]: 1; params[6]: 0; params[7]: 1; " in llm.calls[1][0]["content"]
    assert "params[5]: 1; params[6]: 0; params[7]: 1; " not in llm.calls[0][0]["content"]


def test_always_critic_commits_a_worse_revision_and_r2po_never_does(make_r2po) -> None:
    # bandit: return = W + b. The search scores 2, the revision 1.
    for variant, expected in [("always_critic", [0.0, 1.0]), ("r2po", [1.0, 1.0]), ("rep_traj", [1.0, 1.0])]:
        llm = ScriptedLLM([vector(1.0, 1.0), vector(0.0, 1.0)])
        model = make_r2po(BanditEnv(), llm=llm, variant=variant, n_eval_episodes=4, warmup_episodes=0, max_episodes=8)
        model.learn(UNTIL_BUDGET)
        assert model.history[-1]["params"] == expected, variant
        assert model.history[-1]["diagnostics"]["regression"] is True
        assert model.history[-1]["diagnostics"]["accepted"] is (variant == "always_critic")


def test_diagnostics_and_salience_summary(make_r2po) -> None:
    replies = [
        vector(1.0, 1.0),
        "The worst rollout failed, so I lower the bias.\n" + vector(1.0, 0.5),
        vector(2.0, 2.0),
        "Looks fine.\n" + vector(2.0, 2.5),
    ]
    model = make_r2po(
        BanditEnv(),
        llm=ScriptedLLM(replies),
        variant="r2po",
        n_eval_episodes=4,
        warmup_episodes=0,
        max_episodes=16,
        target_return=4,
        tau_c=3.5,
    )
    model.learn(UNTIL_BUDGET)
    first, second = (r["diagnostics"] for r in model.history)
    assert first == {
        "accepted": False,
        "regression": True,
        "n_changed": 1,
        "max_change": 0.5,
        "l1": 0.5,
        "worst_fixation": True,
        "above_tau_c": False,
    }
    assert second["accepted"] and not second["regression"] and not second["worst_fixation"] and second["above_tau_c"]
    summary = salience_summary(model.history)
    assert summary["revisions"] == 2 and summary["regressions"] == 1 and summary["regression_rate"] == 0.5
    assert summary["fixation_share_of_regressions"] == 1.0 and summary["mean_l1_above_tau_c"] == 0.5
    assert "| r2po | 2 | 1 | 50.0 % | 1 (100.0 %) |" in salience_table({"r2po": summary})


def test_unknown_variant() -> None:
    with pytest.raises(ValueError, match="Unknown variant"):
        R2PO("MlpLinear", "CartPole-v1", llm=ScriptedLLM(["x"]), variant="nope")


def test_pure_search_asks_one_proposal_when_the_budget_pays_for_one_evaluation(make_r2po) -> None:
    # 12 episodes after the warm-up: a pair (8), then 4 left: one proposal, not a pair whose second is never run
    llm = ScriptedLLM([vector(0, 0, 0, 0, 0, 1, 0, 1, 0, i / 10) for i in range(1, 40)])
    model = make_r2po(llm=llm, variant="pure_search", n_eval_episodes=4, warmup_episodes=1, max_episodes=1 + 12)
    model.learn(UNTIL_BUDGET)
    assert model.iteration == 2 and model.episodes_used == 13
    assert len(llm.calls) == 3
    assert model.history[-1]["revision"]["status"] == "skipped"


def test_actor_second_pass_second_proposal_must_differ_from_the_first(make_r2po) -> None:
    # reject_duplicates (ours): the second Search repeats the first (not yet in the history): it is re-asked
    llm = ScriptedLLM([GOOD_CARTPOLE, GOOD_CARTPOLE, EDITED_CARTPOLE])
    model = make_r2po(
        llm=llm,
        variant="actor_second_pass",
        n_eval_episodes=4,
        warmup_episodes=1,
        max_episodes=1 + 8,
        reject_duplicates=True,
        on_unusable_reply="reask",
    )
    model.learn(UNTIL_BUDGET)
    assert "already proposed in this iteration" in llm.calls[2][-1]["content"]
    assert model.history[-1]["revision"]["status"] in ("kept", "rejected")
    assert model.history[-1]["revision"]["params"] == [0, 0, 0, 0, 0, 1, 0, 1.2, 0, 0]


def test_critic_only_revises_the_last_entry_with_its_own_episode_count_and_diagnostics(make_r2po) -> None:
    # bandit, return W + b; the last entry is the 1-episode warm-up, then a K = 4 candidate
    llm = ScriptedLLM([vector(1.0, 1.0), "The worst episode is low.\n" + vector(1.5, 1.0), vector(2.0, 1.0)])
    model = make_r2po(
        BanditEnv(),
        llm=llm,
        variant="critic_only",
        n_eval_episodes=4,
        warmup_episodes=1,
        max_episodes=1 + 8,
        target_return=4,
        tau_c=2.0,
    )
    model.learn(UNTIL_BUDGET)
    first, second = llm.prompts()
    assert "proposed" not in first and "Candidate" not in first  # no candidate under review: the latest trace instead
    latest = "## What happened in the latest test\n"
    assert "Trajectory 0 (length=1):" in first.split(latest)[1] and "Trial 1: params=[1, 1] mean_reward=2.00" in second
    first, second = (r["diagnostics"] for r in model.history[1:])
    assert first["accepted"]
    # the candidate revised second returned exactly tau_c: at the threshold counts as above it
    assert model.history[1]["mean_return"] == 2.0 and second["above_tau_c"] and second["worst_fixation"]
    assert second["l1"] == 0.5 and second["n_changed"] == 1


def test_critic_only_counts_its_fallbacks_and_keeps_adjusted_notes(make_r2po) -> None:
    model = make_r2po(
        BanditEnv(),
        llm=ScriptedLLM(["no numbers here"]),
        variant="critic_only",
        n_eval_episodes=4,
        warmup_episodes=1,
        max_episodes=1 + 8,
        max_llm_retries=0,
        on_unusable_reply="reask",
    )
    model.learn(UNTIL_BUDGET)
    assert [r["kind"] for r in model.history] == ["warmup", "fallback", "fallback"]
    assert model.llm_stats["fallbacks"] == 2
    llm = ScriptedLLM([vector(1.0, 99.0)])
    model = make_r2po(BanditEnv(), llm=llm, variant="critic_only", n_eval_episodes=4, warmup_episodes=1, max_episodes=1 + 4)
    model.learn(UNTIL_BUDGET)
    revision = model.history[-1]["revision"]
    assert model.history[-1]["kind"] == "critic" and revision["params"] == [1.0, 6.0]
    assert len(revision["adjusted"]) == 1 and "params[1]" in revision["adjusted"][0]


@pytest.mark.parametrize("variant, expected", [("props", "1 of 4"), ("pure_search", "1 of 2"), ("r2po", "1 of 2")])
def test_planned_iterations_count_the_candidates_of_the_variant(make_r2po, variant: str, expected: str) -> None:
    # 16 episodes after the warm-up, K = 4: a one-candidate variant plans four iterations, a two-candidate one two
    llm = ScriptedLLM([vector(0, 0, 0, 0, 0, 1, 0, 1, 0, i / 10) for i in range(1, 40)])
    make_r2po(llm=llm, variant=variant, n_eval_episodes=4, warmup_episodes=1, max_episodes=1 + 16).learn(UNTIL_BUDGET)
    assert f"This is iteration {expected}." in llm.calls[0][0]["content"]


def test_r2po_candidate_at_tau_c_counts_as_above_it(make_r2po) -> None:
    # the Search candidate returns exactly tau_c = 2: the revision rule applies to it (critic_selection_hints says so)
    llm = ScriptedLLM([vector(1.0, 1.0), vector(1.0, 1.5)])
    model = make_r2po(
        BanditEnv(),
        llm=llm,
        variant="r2po",
        n_eval_episodes=4,
        warmup_episodes=1,
        max_episodes=1 + 8,
        target_return=4,
        tau_c=2,
        critic_selection_hints=True,
    )
    model.learn(UNTIL_BUDGET)
    assert model.history[1]["search"]["mean_return"] == 2.0 and model.history[1]["diagnostics"]["above_tau_c"] is True
    assert "The proposal's mean reward 2 is at or above the threshold 2." in llm.calls[1][0]["content"]
