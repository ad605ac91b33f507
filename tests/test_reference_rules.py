"""The reference's rules that are not prompt text: the action rule per variant, how a reply is read (cut-off replies
included), pure_search's order of LLM calls and rollouts, and warm-up draws that are never redrawn.

The expected returns are computed from the env's reward definition (gymnasium's MountainCarContinuous-v0), not from
our code.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import UNTIL_BUDGET, BanditEnv, ScriptedLLM
from stable_baselines3.common.callbacks import BaseCallback

from sb3_r2po import R2PO
from sb3_r2po.common.parameters import (
    ParameterSpace,
    as_cut_off,
    before_final,
    cut_off_lines,
    final_channel,
    final_is_truncated,
    parse_params,
)
from sb3_r2po.r2po.arguments import VARIANTS

ABLATIONS = ("pure_search", "actor_second_pass", "critic_only", "rep_traj", "always_critic", "three_traj")
VECTOR = "params[0]: 0.0, params[1]: 0.0, params[2]: -2.0"  # W = 0, b = -2: the action is -2.0 in every state


def mountain_car_return(action: float, clipped: bool) -> float:
    """MountainCarContinuous-v0's return when the policy pushes ``action`` in every step and never reaches the goal:
    the reward is ``-0.1 * a**2`` per step (``a`` the action as given: gymnasium clips only the force), 100 at the
    goal, and the time limit is 999 steps. Pushing left, the car stays against the left wall."""
    a = float(np.clip(action, -1.0, 1.0)) if clipped else action
    return 999 * (-0.1 * a**2)


class Actions(BaseCallback):
    """Records the actions the env was stepped with."""

    def __init__(self) -> None:
        super().__init__()
        self.actions: list[float] = []

    def _on_step(self) -> bool:
        self.actions.extend(np.asarray(self.locals["actions"]).reshape(-1).tolist())
        return True


def one_episode(variant: str, **settings: Any) -> tuple[R2PO, Actions]:
    """An iteration of ``variant`` with K = 1 whose every reply is :data:`VECTOR`."""
    model = R2PO(
        "MlpLinear",
        "MountainCarContinuous-v0",
        llm=lambda messages: VECTOR,
        variant=variant,
        n_eval_episodes=1,
        warmup_episodes=0,
        max_episodes=2,
        seed=0,
        **settings,
    )
    actions = Actions()
    model.learn(UNTIL_BUDGET, callback=actions)
    return model, actions


def test_variants_carry_the_reference_action_rule() -> None:
    """r2po, props and props_plus clip (``np.clip`` before ``world.step``); the six ablations step the raw output."""
    assert {name for name, v in VARIANTS.items() if not v.clip_actions} == set(ABLATIONS)


@pytest.mark.parametrize(
    ("variant", "clipped"), [("r2po", True), ("rep_traj", False), ("three_traj", False), ("always_critic", False)]
)
def test_mountain_car_control_cost_on_the_raw_or_clipped_action(variant: str, clipped: bool) -> None:
    """The issue's pair: -99.9 in the reference's r2po, -399.6 in its rep_traj, three_traj and always_critic."""
    model, actions = one_episode(variant)
    expected = mountain_car_return(-2.0, clipped)
    assert expected == pytest.approx(-99.9 if clipped else -399.6)
    first = model.history[0]["search"]
    assert first["params"] == [0.0, 0.0, -2.0] and first["mean_return"] == pytest.approx(expected, abs=1e-3)
    assert set(actions.actions) == {-1.0 if clipped else -2.0}  # what the env was stepped with (and traces show)
    assert model.settings.actions_clipped is clipped
    observations = np.array([[-1.2, -0.07], [0.6, 0.07], [-0.5, 0.0]], dtype=np.float32)
    predicted, _ = model.predict(observations, deterministic=True)
    assert np.all(predicted >= -1.0) and np.all(predicted <= 1.0)  # predict() stays inside the action space


@pytest.mark.parametrize(("variant", "clip"), [("rep_traj", True), ("r2po", False)])
def test_clip_actions_sets_the_rule_either_way(variant: str, clip: bool) -> None:
    model, actions = one_episode(variant, clip_actions=clip)
    assert model.settings.actions_clipped is clip
    assert model.history[0]["search"]["mean_return"] == pytest.approx(mountain_car_return(-2.0, clip), abs=1e-3)
    assert set(actions.actions) == {-1.0 if clip else -2.0}


@pytest.mark.parametrize(
    ("variant", "clip", "words"),
    [
        ("r2po", None, "clipped to the action bounds"),
        ("rep_traj", None, "not clipped"),
        ("rep_traj", True, "clipped to the action bounds"),
    ],
)
def test_the_critic_is_told_the_action_rule_in_force(variant: str, clip: bool | None, words: str) -> None:
    """The Critic's policy section states the rule the env gets: the ablations' raw output is "not clipped" (the
    reference's descriptions write the action as the linear formula itself)."""
    prompts: list[str] = []

    def llm(messages: list[dict[str, str]]) -> str:
        prompts.append(messages[-1]["content"])
        return "params[0]: 0.0, params[1]: 0.0, params[2]: 0.5\nA constant push."

    model = R2PO("MlpLinear", "MountainCarContinuous-v0", llm=llm, variant=variant, clip_actions=clip, seed=0,
                 warmup_episodes=0, n_eval_episodes=1, max_episodes=2)  # fmt: skip
    model.learn(UNTIL_BUDGET)
    critic = prompts[1]
    assert words in critic and ("not clipped" in critic) is (words == "not clipped")


def test_clip_actions_is_checked() -> None:
    with pytest.raises(ValueError, match="clip_actions must be True or False"):
        R2PO("MlpLinear", BanditEnv(), llm="example", clip_actions="yes")  # type: ignore[arg-type]


SPACE = ParameterSpace(3, low=-6, high=6, decimals=1)
ACTIONS = ParameterSpace(3, values=(0, 1, 2, 3))
REVISED = "params[0]: 1.5, params[1]: 2.0, params[2]: -2.0"
QUOTING = f"{REVISED}\nI raised params[0] from the original params[0]: 0.5, params[1]: 2.0, params[2]: -2.0 because ..."


def test_variants_carry_the_reference_readings() -> None:
    """The ``parse_parameters`` of each variant's linear and tabular agent in the reference."""
    readings = {name: v.reading for name, v in VARIANTS.items()}
    assert readings == {
        "r2po": ("first", "last"),
        "props": ("first_line", "last"),
        "props_plus": ("first_line", "last"),
        "pure_search": ("first", "first"),
        "actor_second_pass": ("first", "first"),
        "critic_only": ("first", "first"),
        "rep_traj": ("first", "last"),
        "always_critic": ("first", "last"),
        "three_traj": ("first", "last"),
    }


@pytest.mark.parametrize(
    ("reading", "expected"),
    [
        ("first", [1.5, 2.0, -2.0]),
        ("first_line", [1.5, 2.0, -2.0]),
        ("last", [0.5, 2.0, -2.0]),
        ("last_vector", [0.5, 2.0, -2.0]),
    ],
)
def test_a_reply_quoting_the_original_after_its_revision(reading: str, expected: list[float]) -> None:
    np.testing.assert_array_equal(parse_params(QUOTING, SPACE, reading).params, expected)  # type: ignore[arg-type]


def test_first_occurrence_ignores_later_mentions_and_words() -> None:
    reply = "params[0]: the cart weight matters.\nparams[0]: 1, params[2]: 3, params[1]: 2, params[7]: 9\nparams[1]: 5"
    np.testing.assert_array_equal(parse_params(reply, SPACE, "first").params, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(parse_params(reply, SPACE, "last").params, [1.0, 5.0, 3.0])
    missing = parse_params("params[0]: 1, params[1]: 2", SPACE, "first")
    assert not missing.ok and "missing params[2]" in missing.error


def test_the_first_line_reading_reads_only_the_first_line() -> None:
    later = parse_params(f"I would move the bias down.\n{REVISED}", SPACE, "first_line")
    assert not later.ok and "first line" in later.error
    np.testing.assert_array_equal(
        parse_params(f"\n\n{REVISED}\nparams: [0, 0, 0]", SPACE, "first_line").params, [1.5, 2.0, -2.0]
    )
    np.testing.assert_array_equal(parse_params("params: [1, 2, 3]\nparams: [0, 0, 0]", SPACE, "first_line").params, [1, 2, 3])


def test_tabular_last_occurrence() -> None:
    reply = "params[0]: 1, params[1]: 2, params[2]: 3\nOn second thought params[1]: 0"
    np.testing.assert_array_equal(parse_params(reply, ACTIONS, "last").params, [1, 0, 3])
    np.testing.assert_array_equal(parse_params(reply, ACTIONS, "first").params, [1, 2, 3])


@pytest.mark.parametrize(
    ("cut", "expected"),
    [
        (f"{REVISED}\nBecause params[0]: 0.", [1.5, 2.0, -2.0]),  # the first line is complete
        (f"{REVISED}\n", [1.5, 2.0, -2.0]),
        ("params[0]: 1.5, params[1]: 2.0, params[2]: -2", None),  # the cut may have ended inside -2.5
    ],
)
def test_a_cut_off_reply_is_read_by_its_complete_lines(cut: str, expected: list[float] | None) -> None:
    reply = as_cut_off(cut)
    result = parse_params(reply, SPACE)
    if expected is None:
        assert not result.ok and "cut off" in result.error
    else:
        np.testing.assert_array_equal(result.params, expected)
    rejected = parse_params(reply, SPACE, reject_cut_off=True)  # ours, an option
    assert not rejected.ok and "cut off" in rejected.error


@pytest.mark.parametrize(
    "cut",
    [
        f"<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>{REVISED}\nBecau",
        f"analysisthinkassistantfinal{REVISED}\nBecau",
        f"{REVISED}\nBecau",
    ],
    ids=["raw harmony", "flattened harmony", "plain text"],
)
def test_what_backends_return_for_a_cut_off_reply(cut: str) -> None:
    """Backends mark a cut reply as a final channel without its end: the parser then reads its complete lines."""
    reply = as_cut_off(cut)
    assert final_is_truncated(reply) and final_channel(reply) == f"{REVISED}\nBecau"
    assert cut_off_lines(reply) == REVISED and as_cut_off(reply) == reply
    assert "think" in before_final(reply) or "think" not in cut
    np.testing.assert_array_equal(parse_params(reply, SPACE).params, [1.5, 2.0, -2.0])
    analysis_only = "<|channel|>analysis<|message|>cut before the answer"
    assert as_cut_off(analysis_only) == analysis_only and not parse_params(analysis_only, SPACE).ok


def test_a_critic_revision_first_then_the_original_quoted_is_the_revision() -> None:
    """The issue's case through a run: the Critic gives its revision on line 1 and quotes the original vector in
    its explanation; the reference's reading (the default) takes the revision, ours (``last_vector``) the quote."""
    search = "params[0]: 0.5, params[1]: 0.0"
    critic = "params[0]: 1.5, params[1]: 0.0\nI raised params[0] from the proposal's params[0]: 0.5, params[1]: 0.0."
    for reading, expected in (("reference", [1.5, 0.0]), ("last_vector", [0.5, 0.0])):
        model = R2PO(
            "MlpLinear",
            BanditEnv(),
            llm=ScriptedLLM([search, critic]),
            n_eval_episodes=1,
            warmup_episodes=0,
            max_episodes=2,
            seed=0,
            reply_reading=reading,
        )
        model.learn(UNTIL_BUDGET)
        revision = model.history[0]["revision"]
        assert revision["params"] == expected and revision["unchanged"] is (reading == "last_vector")


def test_reply_reading_is_checked() -> None:
    with pytest.raises(ValueError, match="reply_reading must be one of"):
        R2PO("MlpLinear", BanditEnv(), llm="example", reply_reading="first")


class Order(BaseCallback):
    """Appends ``rollout`` to a shared event list at every rollout."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events

    def _on_rollout_start(self) -> None:
        self.events.append("rollout")

    def _on_step(self) -> bool:
        return True


def pure_search(replies: list[str], events: list[str], **settings: Any) -> R2PO:
    calls = iter(replies)

    def llm(messages: list[dict[str, str]]) -> str:
        events.append("llm")
        return next(calls)

    model = R2PO(
        "MlpLinear", BanditEnv(), llm=llm, variant="pure_search", n_eval_episodes=2, warmup_episodes=0, seed=0, **settings
    )
    model.learn(UNTIL_BUDGET, callback=Order(events))
    return model


def test_pure_search_asks_both_proposals_before_any_rollout() -> None:
    events: list[str] = []
    model = pure_search(["params[0]: 1, params[1]: 0", "params[0]: 2, params[1]: 0"], events, max_episodes=4)
    assert events == ["llm", "llm", "rollout", "rollout"]
    assert model.history[0]["params"] == [2.0, 0.0]


def test_an_unusable_second_proposal_costs_no_episode() -> None:
    """With the reference's rerun, the iteration is discarded before its first K episodes run."""
    events: list[str] = []
    replies = ["params[0]: 1, params[1]: 0", "no vector", "params[0]: 1, params[1]: 0", "params[0]: 3, params[1]: 0"]
    model = pure_search(replies, events, max_episodes=4)
    assert events == ["llm", "llm", "llm", "llm", "rollout", "rollout"]
    (discarded,) = model.history[0]["discarded_attempts"]
    assert discarded["role"] == "search" and discarded["episodes"] == 0
    assert model.episodes_used == 4 and model.history[0]["params"] == [3.0, 0.0]


def test_warm_up_draws_are_never_redrawn() -> None:
    """The warm-up draws ``parameter_space.sample`` once per episode, whatever the history holds:
    a one-vector space gives repeats, as the reference's warm-up does."""
    one_vector = {"param_bounds": (-0.5, 0.5), "param_decimals": 0}  # every parameter 0: the space holds one vector
    model = R2PO("MlpLinear", BanditEnv(), llm="example", warmup_episodes=4, max_episodes=4, seed=3, **one_vector)
    model.learn(UNTIL_BUDGET)
    assert [r["params"] for r in model.history] == [[0.0, 0.0]] * 4
    rng = np.random.default_rng(7)
    space = R2PO("MlpLinear", BanditEnv(), llm="example", seed=7).policy.parameter_space
    expected = [space.sample(rng).tolist() for _ in range(5)]
    model = R2PO("MlpLinear", BanditEnv(), llm="example", warmup_episodes=5, max_episodes=5, seed=7)
    model.learn(UNTIL_BUDGET)
    assert [r["params"] for r in model.history] == expected
