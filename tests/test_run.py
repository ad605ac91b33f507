import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
from helpers import UNTIL_BUDGET, BanditEnv, EndlessEnv, NaNEnv, ScriptedLLM, vector
from stable_baselines3.common.env_util import make_vec_env

from sb3_r2po import R2PO, ExampleLLM
from sb3_r2po.r2po import roles


@pytest.mark.parametrize(
    "env_id, policy",
    [
        ("CartPole-v1", "MlpLinear"),
        ("Pendulum-v1", "LinearPolicy"),
        ("FrozenLake-v1", "Tabular"),
        ("MountainCar-v0", "MlpLinear"),
    ],
)
def test_short_run(make_r2po, env_id: str, policy: str) -> None:
    model = make_r2po(
        env_id, policy=policy, llm=ExampleLLM(seed=0), n_eval_episodes=2, warmup_episodes=2, max_episodes=12, seed=0
    )
    model.learn(UNTIL_BUDGET)
    assert model.episodes_used == 12  # the budget is spent exactly
    # accounting: warm-up episodes + K per Search candidate + K per evaluated revision
    evaluated = [r for r in model.history if r["kind"] != "warmup"]
    assert model.episodes_used == 2 + sum(2 + 2 * (r["revision"]["mean_return"] is not None) for r in evaluated)
    assert model.iteration == len(evaluated) >= 3
    kinds = {record["kind"] for record in model.history}
    assert "warmup" in kinds and kinds <= {"warmup", "search", "critic", "fallback"}
    obs = model.env.reset()
    action, _ = model.predict(obs, deterministic=True)
    assert model.action_space.contains(action[0])


def test_cartpole_improves_over_warmup(make_r2po) -> None:
    model = make_r2po(llm=ExampleLLM(seed=1), n_eval_episodes=5, warmup_episodes=10, seed=1, max_episodes=None)
    model.learn(total_timesteps=30_000)
    warmup_best = max(r["mean_return"] for r in model.history if r["kind"] == "warmup")
    means = [r["mean_return"] if r["kind"] != "warmup" else -np.inf for r in model.history]
    best = model.history[int(np.argmax(means))]  # the first highest iteration mean, found here (not by best_record())
    assert best is not model.history[-1] and best["mean_return"] > model.history[-1]["mean_return"]  # not the last one
    assert best["mean_return"] >= 300 and best["mean_return"] > warmup_best + 100
    assert model.best_record() is best
    # the model's policy holds the best candidate
    np.testing.assert_array_equal(model.policy.get_flat(), np.array(best["params"]))


def test_multi_env_counts_episodes_exactly(make_r2po) -> None:
    env = make_vec_env("CartPole-v1", n_envs=3, seed=0)
    model = make_r2po(env, llm=ExampleLLM(seed=0), n_eval_episodes=4, warmup_episodes=2, seed=0, max_episodes=2 + 8 * 2)
    model.learn(UNTIL_BUDGET)
    assert model.episodes_used == 18
    assert sum(r["n_episodes"] for r in model.history if r["kind"] == "warmup") == 2
    assert all(r["n_episodes"] == 4 for r in model.history if r["kind"] != "warmup")


def test_keep_best_ties_go_to_the_revision(make_r2po) -> None:
    # return of (W, b) on the bandit is W + b: search 2.0, revision 2.0 (tie) -> the revision is kept
    llm = ScriptedLLM([vector(1.0, 1.0), vector(0.5, 1.5)])
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=3, warmup_episodes=0, max_episodes=6, seed=0)
    model.learn(UNTIL_BUDGET)
    record = model.history[-1]
    assert record["kind"] == "critic" and record["params"] == [0.5, 1.5]
    assert record["revision"]["status"] == "kept" and record["mean_return"] == pytest.approx(2.0)


def test_keep_best_rejects_a_worse_revision(make_r2po) -> None:
    llm = ScriptedLLM([vector(1.0, 1.0), vector(0.0, 1.0)])
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=3, warmup_episodes=0, max_episodes=6, seed=0)
    model.learn(UNTIL_BUDGET)
    record = model.history[-1]
    assert record["kind"] == "search" and record["params"] == [1.0, 1.0]
    assert record["revision"] == {
        "role": "critic",
        "status": "rejected",
        "unchanged": False,
        "params": [0.0, 1.0],
        "mean_return": 1.0,
        "failures": [],
        "adjusted": [],
        "n_episodes": 3,
        "returns": [1.0, 1.0, 1.0],
    }
    assert len(model.history) == 1  # only the kept candidate enters the history


def test_unchanged_revision_is_evaluated_again_as_the_reference_does(make_r2po) -> None:
    llm = ScriptedLLM([vector(1.0, 1.0), vector(1.0, 1.0)])
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=3, warmup_episodes=0, max_episodes=6, seed=0)
    model.learn(1)
    assert model.episodes_used == 6 and model.iteration == 1
    revision = model.history[-1]["revision"]
    assert revision["unchanged"] and revision["status"] in ("kept", "rejected") and revision["n_episodes"] == 3
    assert model.history[-1]["mean_return"] == max(revision["mean_return"], model.history[-1]["search"]["mean_return"])


def test_skip_unchanged_revisions_declines_without_evaluating(make_r2po) -> None:
    llm = ScriptedLLM([vector(1.0, 1.0), vector(1.0, 1.0)])
    model = make_r2po(
        BanditEnv(),
        llm=llm,
        n_eval_episodes=3,
        warmup_episodes=0,
        max_episodes=6,
        seed=0,
        skip_unchanged_revisions=True,
    )
    model.learn(1)
    assert model.episodes_used == 3
    assert model.history[-1]["revision"]["status"] == "declined" and model.history[-1]["revision"]["unchanged"]


def test_budget_too_small_for_the_revision_skips_the_critic(make_r2po) -> None:
    llm = ScriptedLLM([vector(1.0, 1.0), vector(2.0, 2.0)])
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=3, warmup_episodes=0, max_episodes=5, seed=0)
    model.learn(UNTIL_BUDGET)
    assert model.episodes_used == 3 and len(llm.calls) == 1
    assert model.history[-1]["revision"]["status"] == "skipped"


def test_episode_cap_for_envs_without_time_limit(make_r2po) -> None:
    model = make_r2po(
        EndlessEnv(),
        llm=ExampleLLM(),
        n_eval_episodes=2,
        warmup_episodes=1,
        max_episode_steps=25,
        seed=0,
        max_episodes=3,
    )
    model.learn(26)
    assert model.num_timesteps == 3 * 25
    assert all(r["mean_return"] == 25 for r in model.history)


def test_total_timesteps_is_a_lower_bound_and_the_iteration_completes(make_r2po) -> None:
    model = make_r2po(llm=ExampleLLM(), n_eval_episodes=3, warmup_episodes=2, seed=0, max_episodes=None)
    with pytest.warns(UserWarning, match="before the first LLM iteration"):
        model.learn(total_timesteps=1)  # the running warm-up episode completes, then the step budget is spent
        assert model.iteration == 0 and model.episodes_used == 1
        model.learn(total_timesteps=1, reset_num_timesteps=False)  # the warm-up goes on: its second episode
    assert model.iteration == 0 and model.episodes_used == 2
    steps = model.num_timesteps
    model.learn(total_timesteps=1, reset_num_timesteps=False)  # one more step: one whole iteration
    assert model.iteration == 1 and model.num_timesteps > steps + 1
    assert model.episodes_used in (2 + 3, 2 + 6)


def test_learn_returns_the_model(make_r2po) -> None:
    model = make_r2po(llm=ExampleLLM(), n_eval_episodes=1, warmup_episodes=1, seed=0, max_episodes=None)
    assert model.learn(1) is model


def test_seeded_runs_are_identical(make_r2po) -> None:
    def run() -> list:
        model = make_r2po(llm=ExampleLLM(seed=3), n_eval_episodes=3, warmup_episodes=3, seed=7, max_episodes=None)
        model.learn(3000)
        return model.history

    assert run() == run()


def test_target_and_tau_c_from_reward_threshold() -> None:
    model = R2PO("MlpLinear", "Acrobot-v1", llm=ExampleLLM())  # an env the settings table lacks
    assert model.settings.target == gym.spec("Acrobot-v1").reward_threshold == -100.0
    assert model.settings.revision_threshold == pytest.approx(-100.0 - 0.05 * 100.0)
    model = R2PO("MlpLinear", "CartPole-v1", llm=ExampleLLM())  # the table's: the reference's optimum and tau_c
    assert (
        (model.settings.target, model.settings.revision_threshold)
        == (500, 480)
        != (gym.spec("CartPole-v1").reward_threshold, 451.25)
    )
    model = R2PO("MlpLinear", "CartPole-v1", llm=ExampleLLM(), target_return=475, tau_c=470)
    assert (model.settings.target, model.settings.revision_threshold) == (475, 470)
    model = R2PO("MlpLinear", "Pendulum-v1", llm=ExampleLLM())
    assert model.settings.target is None and model.settings.revision_threshold is None


def test_no_llm_work_at_construction(monkeypatch) -> None:
    # the default llm is gpt-oss-20b: constructing must not load or contact anything
    def no_backend(spec):
        raise AssertionError(f"a backend was made for {spec!r}")

    monkeypatch.setattr(roles, "make_backend", no_backend)
    model = R2PO("MlpLinear", "CartPole-v1")
    assert model.llm == "openai/gpt-oss-20b"
    with pytest.raises(AssertionError, match="a backend was made"):  # the first learn() makes it
        model.learn(1)


@pytest.mark.parametrize("bias, length, total", [(vector(0, 0, 0, 0, 0, 1), 3, 3.0), (vector(0, 0, 0, 0, 1, 0), 5, 4.0)])
def test_non_finite_env_values_are_cut_and_never_reach_a_prompt(make_r2po, bias: str, length: int, total: float) -> None:
    llm = ScriptedLLM([bias, bias])
    model = make_r2po(NaNEnv(), llm=llm, n_eval_episodes=2, warmup_episodes=0, max_episodes=4, seed=0)
    model.learn(1)
    record = model.history[-1]
    assert record["non_finite_episodes"] == 2 and record["mean_return"] == total and record["mean_length"] == length
    critic = llm.calls[1][-1]["content"]
    assert "nan" not in critic.lower().replace("non_finite", "") and "->[NON_FINITE]" in critic


TOWARD_3 = [vector(1.0, 2.0), vector(1.0, 2.0), vector(2.0, 2.0)]
"""Replies toward target 3 on a bandit (return = W + b): the first Search candidate scores 3 in every episode."""


def test_stop_at_target_ends_once_every_episode_reaches_it(make_r2po) -> None:
    settings = dict(n_eval_episodes=3, warmup_episodes=0, target_return=3, seed=0)
    model = make_r2po(BanditEnv(), llm=ScriptedLLM(TOWARD_3), max_episodes=None, stop_at_target=True, **settings)
    model.learn(UNTIL_BUDGET)
    assert model.iteration == 1 and model.target_confirmed()
    model = make_r2po(BanditEnv(), llm=ScriptedLLM(TOWARD_3), max_episodes=12, **settings)
    assert model.learn(UNTIL_BUDGET).iteration > 1  # off by default


@pytest.mark.parametrize(
    "values, expected",
    [
        # every revision differs from its Search candidate: 4 episodes an iteration, 12 after the warm-up
        ([0.5, 1.0, 1.5, 2.0, 2.5, 3.0], ["1 of 3", "2 of 3", "3 of 3"]),
        # the first Critic keeps the candidate, evaluated again as the reference does: the same plan
        ([0.5, 0.5, 1.5, 2.0, 2.5, 3.0], ["1 of 3", "2 of 3", "3 of 3"]),
    ],
)
def test_search_prompt_counts_the_iterations_the_budget_leaves(make_r2po, values: list[float], expected: list[str]) -> None:
    llm = ScriptedLLM([vector(v, v) for v in values])
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=2, warmup_episodes=2, seed=0, max_episodes=14)
    model.learn(UNTIL_BUDGET)
    counted = [re.search(r"This is iteration (\d+ of \d+)\.", prompt) for prompt in llm.prompts()]
    assert [m.group(1) for m in counted if m] == expected and model.episodes_used == 14


def test_a_declined_revision_leaves_budget_for_one_more_iteration(make_r2po) -> None:
    # skip_unchanged_revisions: the first Critic keeps the candidate (declined, not evaluated): 2 episodes saved
    values = [0.5, 0.5, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
    expected = ["1 of 3", "2 of 4", "3 of 4", "4 of 4"]
    llm = ScriptedLLM([vector(v, v) for v in values])
    model = make_r2po(
        BanditEnv(),
        llm=llm,
        n_eval_episodes=2,
        warmup_episodes=2,
        seed=0,
        max_episodes=14,
        skip_unchanged_revisions=True,
    )
    model.learn(UNTIL_BUDGET)
    counted = [re.search(r"This is iteration (\d+ of \d+)\.", prompt) for prompt in llm.prompts()]
    assert [m.group(1) for m in counted if m] == expected and model.episodes_used == 14


class AlternatingBandit(BanditEnv):
    """The bandit with 2 taken off the reward of every second episode: a candidate's K returns differ."""

    episodes = -1

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.episodes += 1
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward - 2.0 * (self.episodes % 2), terminated, truncated, info


def test_stop_at_target_needs_the_minimum_of_k_episodes_at_the_target(make_r2po) -> None:
    """(2, 2) on the alternating bandit returns 2, 4, 2: the mean (2.67) and the best episode reach the target 2.5, the
    worst does not, so training goes on; a warm-up record (one episode) never confirms the target."""
    model = make_r2po(
        AlternatingBandit(),
        llm=ScriptedLLM([vector(2.0, 2.0)]),
        n_eval_episodes=3,
        warmup_episodes=0,
        target_return=2.5,
        seed=0,
        max_episodes=12,
        stop_at_target=True,
    )
    model.learn(UNTIL_BUDGET)
    assert [r["returns"] for r in model.history] == [[2.0, 4.0, 2.0]] * 2
    assert all(r["mean_return"] >= 2.5 > r["min_return"] for r in model.history)
    assert not model.target_confirmed() and model.iteration == 2 and model.episodes_used == 12
    model.history = [{"kind": "warmup", "n_episodes": 1, "min_return": 10.0, "mean_return": 10.0}]
    assert not model.target_confirmed()


def test_example_llm_reads_and_answers_list_style_prompts(make_r2po) -> None:
    replies: list[str] = []

    class Capturing(ExampleLLM):
        def chat(self, messages, *, temperature=0.0):  # type: ignore[no-untyped-def]
            reply = super().chat(messages, temperature=temperature)
            replies.append(reply.text)
            return reply

    model = make_r2po(
        llm=Capturing(seed=1), n_eval_episodes=5, warmup_episodes=10, seed=1, max_episodes=None, reply_style="list"
    )
    model.learn(total_timesteps=30_000)
    assert any("Refining the best vector" in reply for reply in replies)  # it read the history back from the prompt
    assert all("params: [" in reply and "params[0]" not in reply for reply in replies)  # the shape the prompt asked for
    assert model.llm_stats["parse_failures"] == 0


def test_clipped_or_rounded_reply_values_are_kept_in_the_history_and_reported(capsys, make_r2po) -> None:
    """A Search reply out of the bounds is clipped (the method's rule); what was changed is recorded and printed."""
    search, critic = "params: [9.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.26]", "params: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"
    llm = ScriptedLLM([search, critic])
    model = make_r2po(llm=llm, n_eval_episodes=2, warmup_episodes=2, seed=0, verbose=1, max_episodes=6)
    model.learn(UNTIL_BUDGET)  # the warm-up, then one iteration
    search = model.history[2]["search"]
    assert search["kind"] == "search" and search["params"][0] == 6.0 and search["params"][9] == 1.3
    assert len(search["adjusted"]) == 2 and "params[0]" in search["adjusted"][0]
    assert model.history[2]["revision"]["adjusted"] == []
    assert "search reply adjusted" in capsys.readouterr().err


def test_warmup_repeats_vectors_when_the_space_has_no_new_one(make_r2po) -> None:
    """Bounds (-0.5, 0.5) at 0 decimals hold one vector: the warm-up draws it every time, as the reference's warm-up
    draws without looking at the history, and runs all its episodes (no warning, no loop)."""
    model = make_r2po(
        BanditEnv(),
        llm=ScriptedLLM(["params: [0, 0]"]),
        n_eval_episodes=2,
        warmup_episodes=3,
        param_bounds=(-0.5, 0.5),
        param_decimals=0,
        max_episodes=1 + 2 * 2,
        seed=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.learn(UNTIL_BUDGET)
    warmup = [r for r in model.history if r["kind"] == "warmup"]
    assert len(warmup) == 3 and all(r["params"] == [0.0, 0.0] for r in warmup) and model.iteration >= 1


@pytest.mark.parametrize("wrap", ["normalize", "frame_stack"])
def test_vec_env_wrappers_that_change_observations_or_rewards_are_refused(wrap: str) -> None:
    """VecNormalize would score candidates in normalized, drifting units: a clear error, at construction and in set_env."""
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecMonitor, VecNormalize

    def make():
        venv = DummyVecEnv([lambda: gym.make("CartPole-v1")])
        return VecNormalize(venv) if wrap == "normalize" else VecFrameStack(venv, 2)

    with pytest.raises(ValueError, match=r"R2PO cannot train through Vec.*VecMonitor"):
        R2PO("MlpLinear", make(), llm="example")
    model = R2PO("MlpLinear", VecMonitor(DummyVecEnv([lambda: gym.make("CartPole-v1")])), llm="example", max_episodes=25)
    if wrap == "normalize":  # (a frame stack already fails SB3's own observation-space check in set_env)
        with pytest.raises(ValueError, match="R2PO cannot train through VecNormalize"):
            model.set_env(make())
    model.learn(UNTIL_BUDGET)  # the pass-through VecMonitor trains
    assert model.episodes_used == 20  # the warm-up; another evaluation of K = 20 does not fit in 25


def test_tabular_policy_refuses_observations_outside_its_space() -> None:
    model = R2PO("Tabular", "FrozenLake-v1", llm="example")
    assert model.predict(15)[0] in range(4)
    for bad in (-1, 16):
        with pytest.raises(ValueError, match=f"observation {bad} is outside the observation space Discrete\\(16\\)"):
            model.predict(bad)


def test_an_unusable_reply_reruns_the_iteration_as_the_reference_does(make_r2po) -> None:
    # iteration 1: the Search is usable, the Critic's reply is not: the attempt is discarded (its 2 episodes stay
    # spent) and the iteration runs again from its Search call
    llm = ScriptedLLM([vector(1.0, 1.0), "no vector here", vector(0.5, 0.5), vector(1.0, 1.5)])
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=2, warmup_episodes=0, max_episodes=6, seed=0)
    model.learn(UNTIL_BUDGET)
    assert model.iteration == 1 and len(model.history) == 1 and model.episodes_used == 6
    record = model.history[0]
    assert record["search"]["params"] == [0.5, 0.5] and record["revision"]["params"] == [1.0, 1.5]
    assert record["discarded_attempts"] == [
        {"role": "critic", "reason": record["discarded_attempts"][0]["reason"], "episodes": 2}
    ]
    assert model.llm_stats["calls"] == 4 and model.llm_stats["parse_failures"] == 1
    assert model.llm_stats["discarded_attempts"] == 1 and model.llm_stats["fallbacks"] == 0
    assert len(llm.calls[2]) == 1  # the new Search call is a fresh single prompt, not a re-ask


def test_training_stops_after_max_iteration_attempts(make_r2po) -> None:
    llm = ScriptedLLM(["no vector here"])
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=2, warmup_episodes=1, max_episodes=100, seed=0)
    with pytest.warns(RuntimeWarning, match="5 attempts of iteration 1"):
        model.learn(UNTIL_BUDGET)
    assert model.iteration == 0 and [r["kind"] for r in model.history] == ["warmup"]
    assert model.llm_stats["calls"] == 5 and model.llm_stats["discarded_attempts"] == 5


def test_a_repeated_vector_is_evaluated_again_unless_duplicates_are_rejected(make_r2po) -> None:
    replies = [vector(1.0, 1.0), vector(0.5, 0.5), vector(1.0, 1.0), vector(0.0, 0.0), vector(2.0, 2.0)]  # [1, 1] kept
    model = make_r2po(BanditEnv(), llm=ScriptedLLM(replies), n_eval_episodes=1, warmup_episodes=0, max_episodes=4, seed=0)
    model.learn(UNTIL_BUDGET)
    assert model.history[1]["search"]["params"] == [1.0, 1.0] and model.history[1]["search"]["failures"] == []
    strict = make_r2po(
        BanditEnv(),
        llm=ScriptedLLM(replies),
        n_eval_episodes=1,
        warmup_episodes=0,
        max_episodes=4,
        seed=0,
        reject_duplicates=True,
        on_unusable_reply="reask",
    )
    strict.learn(UNTIL_BUDGET)
    assert "already evaluated" in strict.history[1]["search"]["failures"][0]
    assert strict.history[1]["search"]["params"] == [0.0, 0.0]


def test_critic_only_without_warm_up_asks_the_llm_with_an_empty_history(make_r2po) -> None:
    llm = ScriptedLLM([vector(1.0, 0.5), vector(1.5, 0.5)])
    model = make_r2po(
        BanditEnv(), llm=llm, variant="critic_only", n_eval_episodes=1, warmup_episodes=0, max_episodes=2, seed=0
    )
    model.learn(UNTIL_BUDGET)
    assert [r["kind"] for r in model.history] == ["critic", "critic"] and model.llm_stats["fallbacks"] == 0
    assert model.history[0]["params"] == [1.0, 0.5] and len(llm.calls) == 2


# the budget as the reference counts it: a plan of completed iterations, discarded attempts on top

DISCARDING = [vector(1.0, 1.0), "no vector here", vector(0.5, 0.5), vector(1.0, 1.5)]
"""Iteration 1: the Search is usable, the Critic is not (the attempt and its K episodes are discarded), then a usable
attempt; every later call answers [1.0, 1.5]."""


def test_discarded_attempts_come_on_top_of_the_planned_iterations(make_r2po, tmp_path) -> None:
    from stable_baselines3.common.logger import configure

    llm = ScriptedLLM(DISCARDING)
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=2, warmup_episodes=0, max_episodes=None, max_iterations=3)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(UNTIL_BUDGET)
    assert model.iteration == 3  # the plan, whole: the discarded attempt did not shorten it
    assert model.episodes_used == 3 * 2 * 2 + 2  # 3 iterations of 2K, plus the discarded attempt's K on top
    assert model.llm_stats["discarded_attempts"] == 1 and model.llm_stats["discarded_episodes"] == 2
    assert model.history[0]["discarded_attempts"][0]["episodes"] == 2  # reported in the history
    counted = [re.search(r"This is iteration (\d+ of \d+)\.", prompt) for prompt in llm.prompts()]
    assert [m.group(1) for m in counted if m] == ["1 of 3", "1 of 3", "2 of 3", "3 of 3"]  # the plan in every Search
    rows = (tmp_path / "progress.csv").read_text().splitlines()
    header, last = rows[0].split(","), rows[-1].split(",")
    assert (
        float(last[header.index("llm/discarded_episodes")]) == 2 and float(last[header.index("llm/discarded_attempts")]) == 1
    )
    model.learn(UNTIL_BUDGET, reset_num_timesteps=False)  # the plan is complete: nothing more runs
    assert model.iteration == 3 and model.episodes_used == 14


def test_max_episodes_stays_a_hard_cap_on_episodes(make_r2po) -> None:
    # the discarded attempt's 2 episodes count against max_episodes=7: after iteration 1 (6 episodes) one is left
    llm = ScriptedLLM(DISCARDING)
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=2, warmup_episodes=0, max_episodes=7, max_iterations=3)
    model.learn(UNTIL_BUDGET)
    assert model.iteration == 1 and model.episodes_used == 6  # not the 3 planned


def test_total_timesteps_stops_before_the_plan(make_r2po) -> None:
    llm = ScriptedLLM([vector(1.0, 1.0)])
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=2, warmup_episodes=1, max_episodes=None, max_iterations=100)
    model.learn(1 + 4 * 2)  # BanditEnv: one step an episode; the warm-up, then 2 iterations of 4 episodes
    assert model.iteration == 2 and model.num_timesteps == 9
