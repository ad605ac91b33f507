"""PromptPO's prompts for code policies (:mod:`sb3_r2po.prompts.code`): the parts in PromptPO's order, the generated
contexts, code extraction and the policy class found without running anything."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import gymnasium as gym
import pytest

from sb3_r2po.common.sandbox import shorten_traceback
from sb3_r2po.prompts.code import CodeTask, env_title, extract_code, find_policy_class, reward_source
from sb3_r2po.prompts.tasks import describe_task

POLICY = "class CartPolePolicy:\n    def act(self, obs):\n        return int(obs[2] > 0)\n"


def in_order(text: str, parts: list[str]) -> None:
    position = -1
    for part in parts:
        found = text.find(part, position + 1)
        assert found > position, f"{part!r} missing or out of order"
        position = found


def attempt(mean: float, reflection: str = "", feedback: str = "") -> dict[str, Any]:
    return {"source": POLICY, "returns": [mean] * 5, "feedback": feedback, "reflection": reflection}


@pytest.fixture(scope="module")
def cartpole() -> CodeTask:
    return CodeTask.for_env(gym.make("CartPole-v1"))


@pytest.mark.parametrize(
    ("env_id", "title", "horizon", "observation", "action"),
    [
        ("CartPole-v1", "CartPole", 500, "obs[2]: pole angle", "integer in 0..1"),
        ("MountainCarContinuous-v0", "MountainCarContinuous", 999, "obs[1]: velocity", "every entry in [-1, 1]"),
    ],
)
def test_policy_prompt_has_promptpo_parts_in_order(
    env_id: str, title: str, horizon: int, observation: str, action: str
) -> None:
    task = CodeTask.for_env(gym.make(env_id))
    assert (task.title, task.horizon) == (title, horizon)
    in_order(
        task.policy(),
        [
            "Observation Context: ",
            "a numpy array of shape (",
            observation,
            "Implementation Details: act(obs) returns one action: ",
            action,
            f"at most {horizon} timesteps",
            f"{title}RewardFunction:\n```python\ndef step(self, action",
            "reward",
            "Starter code (",
            "import numpy as np",
            f"class {title}Policy:\n    def act(self, obs):\n        pass\n```",
            f"maximise the expected sum of rewards under the {title}RewardFunction over {horizon} timesteps.",
            "step by step",
            f"class named {title}Policy whose method act(obs)",
            "single code block that opens with ```python and closes with ```",
        ],
    )


def test_refine_prompt_is_the_policy_prompt_then_reflection_history_and_tail(cartpole: CodeTask) -> None:
    history = [attempt(9.5, "first reflection", "Episode 1: fell early"), attempt(41.0, "latest reflection")]
    prompt = cartpole.refine(history)
    assert prompt.startswith(cartpole.policy().strip())
    in_order(
        prompt,
        [
            "Reflection on the previous policy (use it to do better):\nlatest reflection",
            "Attempt 1, the policy written:\n```python\n" + POLICY,
            "Attempt 1, its returns over 5 episodes:\n[9.5, 9.5, 9.5, 9.5, 9.5]",
            "Attempt 1, trajectory feedback (Feedback.summarize_trajectory, a line per episode):\nEpisode 1: fell early",
            "Attempt 1, reflection (the LLM's comparison, written after this attempt):\nfirst reflection",
            "Attempt 2, the policy written:",
            "[41.0, 41.0, 41.0, 41.0, 41.0]",
            "Write a new CartPolePolicy that reaches higher episode returns.",
            "over 500 timesteps.",
            "class named CartPolePolicy",
            "opens with ```python",
        ],
    )
    assert prompt.count("latest reflection") == 1  # the block, not again in attempt 2
    assert "Attempt 2, trajectory feedback" not in prompt and "Attempt 2, reflection" not in prompt
    assert prompt.count("step by step") == 1  # the tail has no step-by-step line


def test_reflection_block_appears_only_when_the_latest_attempt_has_one(cartpole: CodeTask) -> None:
    prompt = cartpole.refine([attempt(9.5, "old reflection"), attempt(41.0)])
    assert "Reflection on the previous policy" not in prompt
    assert "Attempt 1, reflection (the LLM's comparison, written after this attempt):\nold reflection" in prompt


def test_best_attempt_hint_only_from_ten_attempts(cartpole: CodeTask) -> None:
    means = [1.0, 7.0, 3.0, 7.0, 2.0, 0.0, 5.0, 4.0, 6.0]
    assert "Hint:" not in cartpole.refine([attempt(m) for m in means])
    prompt = cartpole.refine([attempt(m) for m in [*means, 6.5]])
    assert prompt.count("Hint:") == 1
    # the first of the equal best means (attempt 2), not attempt 4
    assert "Attempt 2, the policy written:\nHint: of all your policies so far, this one scored best.\n\n```python" in prompt


def test_reflection_prompt_compares_the_latest_attempt_with_earlier_ones(cartpole: CodeTask) -> None:
    first = cartpole.reflection([attempt(9.5, feedback="Episode 1: fell")])
    assert "The earlier attempts of this run: none" in first
    prompt = cartpole.reflection([attempt(9.5), attempt(41.25, feedback="Episode 1: upright")])
    in_order(
        prompt,
        [
            "CartPoleRewardFunction:\n```python\ndef step",
            "Trajectory feedback of the latest policy (Feedback.summarize_trajectory, a short line per episode):\n"
            "Episode 1: upright",
            "The latest policy (attempt 2), the one to assess:\n```python\n" + POLICY,
            "[41.25, 41.25, 41.25, 41.25, 41.25], mean return 41.250000.",
            "  Attempt 1: episode returns [9.5, 9.5, 9.5, 9.5, 9.5], mean return 9.500000",
            "3 or 4 sentences",
            "did poorly",
            "over 500 timesteps",
            "no code.",
        ],
    )
    assert "Observation Context" not in prompt and "Starter code" not in prompt


def test_repair_prompts_show_the_crashed_code_and_shortened_traceback(cartpole: CodeTask) -> None:
    traceback = (
        "Traceback (most recent call last):\n" + "".join(f'  File "x", line {i}\n' for i in range(40)) + "ValueError: bad"
    )
    prompt = cartpole.repair(POLICY, traceback)
    in_order(
        prompt,
        [
            "Observation Context: ",
            "Implementation Details: ",
            "CartPoleRewardFunction:",
            "Starter code (the fixed policy must keep working with these imports)",
            "raised an error during a 500-timestep rollout (5 episodes):\n\n```python\n" + POLICY,
            "Traceback:\n```\nTraceback (most recent call last):\n... (23 lines left out)",
            "ValueError: bad\n```",
            "Keep the class name CartPolePolicy",
            "the whole fixed class only",
        ],
    )
    assert "line 22\n" not in prompt and "line 23\n" in prompt
    feedback = cartpole.feedback_repair("class Feedback:\n    pass", "AttributeError: no summarize_trajectory")
    in_order(
        feedback,
        [
            "Starter code (the fixed Feedback",
            "class Feedback:\n    def summarize_trajectory(self, traj):",
            "each a numpy array",
            "class Feedback:\n    pass",
            "AttributeError",
            "Keep the class name Feedback.",
        ],
    )


def test_feedback_prompt(cartpole: CodeTask) -> None:
    in_order(
        cartpole.feedback(),
        [
            "Observation Context: ",
            "CartPoleRewardFunction:",
            "class Feedback:\n    def summarize_trajectory(self, traj):\n        pass",
            "each a numpy array",
            "over 500 timesteps",
            "as short as possible",
            "opens with ```python",
        ],
    )
    frozen = CodeTask.for_env(gym.make("FrozenLake-v1"))
    assert "each an integer" in frozen.feedback()
    assert "act(obs) receives one observation: an integer in 0..15." in frozen.observation


def test_user_texts_replace_the_generated_ones_and_values_are_data() -> None:
    generated = CodeTask.for_env(gym.make("CartPole-v1"), horizon=200)
    task = replace(generated, observation="OBS {{ x }}", implementation="IMPL", reward="+1 a step")
    prompt = task.policy()
    assert "Observation Context: OBS {{ x }}\n\nImplementation Details: IMPL\n\nCartPoleRewardFunction:\n+1 a step\n" in prompt
    assert "over 200 timesteps" in prompt and "def step" not in prompt
    with pytest.raises(ValueError, match="horizon"):
        CodeTask.for_env(gym.make("CartPole-v1", max_episode_steps=None).unwrapped)
    with pytest.raises(ValueError, match="history is empty"):
        task.refine([])


@pytest.mark.parametrize(
    ("env_id", "title"),
    [("CartPole-v1", "CartPole"), ("R2PO/Maze3x3-v0", "Maze3x3"), ("my_env-v2", "MyEnv"), ("3d-grid", "Env3dGrid")],
)
def test_env_title_is_an_identifier(env_id: str, title: str) -> None:
    assert env_title(env_id) == title and title.isidentifier()


def test_reward_source() -> None:
    source = reward_source(gym.make("CartPole-v1"))
    assert source is not None and source.startswith("def step(self, action):")
    assert "reward = " in source and "terminated" in source
    namespace: dict[str, Any] = {}
    exec("def step(self, action):\n    return None, 0.0, False, False, {}", namespace)  # no source file
    spaces = {"observation_space": gym.spaces.Box(-1, 1, (3,)), "action_space": gym.spaces.Discrete(2)}
    env = type("Sourceless", (gym.Env,), {"step": namespace["step"], **spaces})()
    assert reward_source(env) is None
    task = CodeTask.for_env(env, horizon=10)
    assert task.reward == describe_task(None, env.observation_space, env.action_space).reward
    assert task.title == "Sourceless" and "every entry in [-1, 1]" in task.observation


@pytest.mark.parametrize(
    ("reply", "code", "reason"),
    [
        ("Here:\n```python\nclass A:\n    pass\n```\nand ```python\nclass B: pass\n```", "class A:\n    pass", ""),
        ("class A:\n    def act(self, obs):\n        return 0", None, "no ```python code block"),
        ("```python\nclass A:\n    pass\n", None, "not closed"),
        ("```python\n  \n```", None, "is empty"),
        (
            "<|channel|>analysis<|message|>```python\nx = 1\n```<|end|><|start|>assistant<|channel|>final<|message|>"
            "```python\ny = 2\n```<|return|>",
            "y = 2",
            "",
        ),
        ("<|channel|>analysis<|message|>thinking ```python\nx = 1\n```", None, "no final answer"),
    ],
)
def test_extract_code(reply: str, code: str | None, reason: str) -> None:
    found, why = extract_code(reply)
    assert found == code and reason in why and bool(why) == bool(reason)


@pytest.mark.parametrize(
    ("source", "name", "reason"),
    [
        ("class cartpolepolicy:\n    pass\nclass Other:\n    def act(self, obs): return 0", "cartpolepolicy", ""),
        ("import numpy as np\nclass Mine:\n    def act(self, obs):\n        return 0", "Mine", ""),
        ("class Base:\n    def act(self, obs): return 0\nclass Child(Base):\n    pass", None, "found 2: Base, Child"),
        ("class A:\n    act = staticmethod(lambda obs: 0)\nclass CartObservation:\n    def act(self): pass", "A", ""),
        ("class Helper:\n    pass", None, "found none"),
        ("class A:\n    def act(self, obs)\n        return 0", None, "SyntaxError: expected ':' (line 2: def act(self, obs))"),
        ("return 0", None, "SyntaxError: 'return' outside function (line 1"),
    ],
)
def test_find_policy_class(source: str, name: str | None, reason: str) -> None:
    found, why = find_policy_class(source, "CartPolePolicy")
    assert found == name and reason in why and bool(why) == bool(reason)


def test_shorten_traceback_keeps_short_ones() -> None:
    assert shorten_traceback("  a\nb\n") == "a\nb"
    lines = shorten_traceback("\n".join(str(i) for i in range(50)), max_lines=5).splitlines()
    assert lines == ["0", "... (46 lines left out)", "47", "48", "49"]
