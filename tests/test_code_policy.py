"""The "Code" policy and variant="promptpo": PromptPO's rounds through the sandbox, repairs, feedback, reflection, the
final policy, and the SB3 surface (save, load, predict, pickling, TensorBoard text)."""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import numpy as np
import pytest
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import KVWriter, Logger

from sb3_r2po import R2PO
from sb3_r2po.r2po.policies import CodePolicy

SOLVER = "class CartPolePolicy:\n    def act(self, obs):\n        return int(obs[2] + 0.5 * obs[3] + 0.1 * obs[1] > 0)\n"
LEFT = "class CartPolePolicy:\n    def act(self, obs):\n        return 0\n"
CRASH = "class CartPolePolicy:\n    def act(self, obs):\n        return obs[7]\n"
LOOP = "class CartPolePolicy:\n    def act(self, obs):\n        while True:\n            pass\n"
FLOAT_ACTION = "class CartPolePolicy:\n    def act(self, obs):\n        return 0.5\n"
SYNTAX = "class CartPolePolicy:\n    def act(self, obs)\n        return 0\n"
FEEDBACK = "class Feedback:\n    def summarize_trajectory(self, traj):\n        return f'{len(traj)} steps'\n"
BROKEN_FEEDBACK = "class Feedback:\n    def summarize_trajectory(self, traj):\n        return traj[0][99]\n"
REFLECTION = "This policy did as well as attempt 1; keep the angle term."


def fenced(source: str) -> str:
    return f"Here is the class.\n```python\n{source}```\n"


def kind_of(prompt: str) -> str:
    """Which of PromptPO's six prompts ``prompt`` is."""
    for phrase, kind in [
        ("raised an error when summarize_trajectory", "feedback_repair"),
        ("Write a class named Feedback", "feedback"),
        ("This policy code raised an error", "repair"),
        ("3 or 4 sentences", "reflection"),
        ("Attempt 1, the policy written", "refine"),
    ]:
        if phrase in prompt:
            return kind
    return "policy"


class CodeLLM:
    """Replies by prompt kind: each kind's list in turn, its last reply repeated; records (kind, prompt) of each call."""

    def __init__(self, **replies: list[str]) -> None:
        self.replies = {"feedback": [fenced(FEEDBACK)], "reflection": [REFLECTION], **replies}
        self.calls: list[tuple[str, str]] = []

    def __call__(self, messages: list[dict[str, str]]) -> str:
        prompt = messages[-1]["content"]
        kind = kind_of(prompt)
        asked = sum(k == kind or (kind == "refine" and k == "policy") for k, _ in self.calls)
        self.calls.append((kind, prompt))
        replies = self.replies.get(kind) or self.replies["policy"]
        return replies[min(asked, len(replies) - 1)]

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.calls]


def promptpo(llm: CodeLLM, **kwargs: Any) -> R2PO:
    settings: dict[str, Any] = dict(variant="promptpo", code_candidates=2, max_iterations=2, n_eval_episodes=2, seed=0)
    return R2PO("Code", "CartPole-v1", llm=llm, **{**settings, **kwargs})


def test_a_scripted_policy_solves_cartpole_through_the_sandbox(tmp_path) -> None:
    llm = CodeLLM(policy=[fenced(LEFT), fenced(SOLVER)])
    model = promptpo(llm, code_keep_best=True).learn(10**6)
    assert [r["mean_return"] for r in model.history] == [500.0, 500.0]
    assert model.history[0]["source"] == SOLVER.strip() and model.history[0]["policy_class"] == "CartPolePolicy"
    assert [c["mean_return"] < 50 for c in model.history[0]["candidates"]] == [True, False]  # always left: ~9
    mean, _ = evaluate_policy(model, model.get_env(), n_eval_episodes=3)
    assert mean == 500.0
    model.save(tmp_path / "code.zip")
    loaded = R2PO.load(tmp_path / "code.zip")
    assert isinstance(loaded.policy, CodePolicy) and loaded.policy.code == (SOLVER.strip(), "CartPolePolicy")
    assert loaded.policy._worker is None  # load() runs nothing
    mean, _ = evaluate_policy(loaded, model.get_env(), n_eval_episodes=2)
    assert mean == 500.0
    copied = pickle.loads(pickle.dumps(loaded.policy))  # the worker is not pickled
    assert loaded.policy._worker is not None and copied._worker is None
    assert copied.predict(np.zeros(4, dtype=np.float32))[0] in (0, 1)


def test_promptpo_defaults_are_the_published_ones() -> None:
    model = R2PO("Code", "CartPole-v1", llm=CodeLLM(policy=[fenced(SOLVER)]), variant="promptpo")
    s = model.settings
    assert (s.n_eval_episodes, s.warmup_episodes, s.max_iterations, s.temperature) == (5, 0, 10, 1.0)
    assert (s.code_candidates, s.code_reflection, s.code_repairs, s.code_keep_best) == (10, True, 10, False)
    given = R2PO("Code", "CartPole-v1", llm=CodeLLM(), variant="promptpo", n_eval_episodes=3, max_iterations=4)
    assert (given.settings.n_eval_episodes, given.settings.max_iterations) == (3, 4)
    plain = R2PO("MlpLinear", "CartPole-v1", llm="example").settings
    assert (plain.n_eval_episodes, plain.temperature) == (20, 0.0)


@pytest.mark.parametrize(
    ("policy", "kwargs", "message"),
    [
        ("Code", {}, "cannot train the 'Code' policy"),
        ("MlpLinear", {"variant": "promptpo"}, "needs the 'Code' policy"),
        ("Code", {"variant": "promptpo", "warmup_episodes": 3}, "has no warm-up"),
        ("Code", {"variant": "promptpo", "code_candidates": 0}, "code_candidates must be an integer >= 1"),
    ],
)
def test_bad_pairings_are_refused(policy: str, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        R2PO(policy, "CartPole-v1", llm=CodeLLM(), **kwargs)


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        ("no code here", "the reply has no ```python code block"),
        (fenced(SYNTAX), "SyntaxError"),
        (fenced(CRASH), "IndexError"),
        (fenced(LOOP), "SandboxTimeout"),
        (fenced(FLOAT_ACTION), "not Discrete(2)"),
    ],
)
def test_a_failing_candidate_gets_the_repair_prompt(broken: str, reason: str) -> None:
    llm = CodeLLM(policy=[broken, fenced(SOLVER)], repair=[fenced(SOLVER)])
    model = promptpo(llm, code_candidates=1, max_iterations=1, policy_kwargs={"call_timeout": 0.3})
    model.learn(10**6)
    assert llm.kinds() == ["feedback", "policy", "repair"]
    repair = llm.calls[-1][1]
    assert reason in repair and "Fix the policy" in repair
    record = model.history[0]
    assert record["mean_return"] == 500.0 and reason in record["candidates"][0]["failures"][0]


def test_a_candidate_past_its_repairs_fails_and_the_round_goes_on() -> None:
    llm = CodeLLM(policy=[fenced(CRASH), fenced(SOLVER)], repair=[fenced(CRASH)])
    model = promptpo(llm, code_candidates=2, max_iterations=1, code_repairs=2).learn(10**6)
    assert llm.kinds() == ["feedback", "policy", "repair", "repair", "policy"]
    first, second = model.history[0]["candidates"]
    assert first["mean_return"] is None and len(first["failures"]) == 3 and second == {"mean_return": 500.0, "failures": []}


def test_a_round_without_a_working_candidate_is_run_again_then_training_stops() -> None:
    llm = CodeLLM(policy=["no code"], repair=["still no code"])
    model = promptpo(llm, code_candidates=1, code_repairs=1, max_iteration_attempts=2)
    with pytest.warns(RuntimeWarning, match="2 attempts of iteration 1 ended in an unusable reply"):
        model.learn(10**6)
    assert model.history == [] and model.llm_stats["discarded_attempts"] == 2


def test_ties_keep_the_earlier_candidate_and_the_last_round_is_the_policy() -> None:
    other = SOLVER.replace("0.1 * obs[1]", "0.1 * obs[1] + 0.0")
    llm = CodeLLM(policy=[fenced(SOLVER), fenced(other), fenced(LEFT), fenced(LEFT)])
    model = promptpo(llm).learn(10**6)
    assert model.history[0]["source"] == SOLVER.strip()  # both 500: the earlier
    assert model.history[1]["mean_return"] < 50
    assert model.policy.code[0] == LEFT.strip()  # PromptPO keeps the last round's policy
    assert promptpo(CodeLLM(policy=llm.replies["policy"]), code_keep_best=True).learn(10**6).policy.code[0] == SOLVER.strip()


def test_feedback_and_reflection_reach_the_next_round() -> None:
    llm = CodeLLM(policy=[fenced(SOLVER)])
    model = promptpo(llm, code_candidates=1).learn(10**6)
    assert llm.kinds() == ["feedback", "policy", "reflection", "refine"]
    assert model.history[0]["feedback"] == [f"Episode {i}: 500 steps" for i in range(1, 3)]
    assert model.history[0]["feedback_source"] == FEEDBACK.strip()
    assert model.history[1]["reflection"] == REFLECTION
    refine = llm.calls[-1][1]
    assert REFLECTION in refine and "Episode 2: 500 steps" in refine and SOLVER.strip() in refine
    quiet = CodeLLM(policy=[fenced(SOLVER)])
    promptpo(quiet, code_candidates=1, code_reflection=False).learn(10**6)
    assert quiet.kinds() == ["feedback", "policy", "refine"]


def test_a_crashing_feedback_class_is_repaired() -> None:
    llm = CodeLLM(policy=[fenced(SOLVER)], feedback=[fenced(BROKEN_FEEDBACK)], feedback_repair=[fenced(FEEDBACK)])
    model = promptpo(llm, code_candidates=1, max_iterations=1).learn(10**6)
    assert llm.kinds() == ["feedback", "policy", "feedback_repair"]
    assert "IndexError" in llm.calls[-1][1]
    assert model.history[0]["feedback"][0] == "Episode 1: 500 steps"


def test_users_descriptions_replace_the_generated_ones() -> None:
    llm = CodeLLM(policy=[fenced(SOLVER)])
    kwargs = {"descriptions": {"reward": "+1 for every step the pole stays up."}}
    promptpo(llm, code_candidates=1, max_iterations=1, policy_kwargs=kwargs).learn(10**6)
    assert "CartPoleRewardFunction:\n+1 for every step the pole stays up." in llm.calls[1][1]


class Captured(KVWriter):
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        self.values.update({k: v for k, v in key_values.items() if "tensorboard" not in (key_excluded.get(k) or ())})


def test_tensorboard_gets_the_kept_source_as_text() -> None:
    model = promptpo(CodeLLM(policy=[fenced(SOLVER)]), code_candidates=1, max_iterations=1)
    captured = Captured()
    model.set_logger(Logger(None, [captured]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.learn(10**6)
    assert captured.values["code/source"] == SOLVER.strip()
    assert "r2po/theta" not in captured.values


def test_the_code_policies_page_runs_as_written(tmp_path, monkeypatch) -> None:
    """Every ```python block of docs/code_policies.md runs, each on its own, and what it prints is what it says."""
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[1] / "docs" / "code_policies.md").read_text(encoding="utf-8").splitlines()
    blocks, block = [], None
    for line in lines:
        if block is None and line == "```python":
            block = []
        elif block is not None and line == "```":
            blocks.append("\n".join(block))
            block = None
        elif block is not None:
            block.append(line)
    assert len(blocks) == 3
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, "code_policies.md", "exec"), {"__name__": "docs"})


def test_a_run_directory_resumes_with_its_feedback_class(tmp_path) -> None:
    import json
    import zipfile

    llm = CodeLLM(policy=[fenced(SOLVER)])
    first = promptpo(llm, code_candidates=1, max_iterations=1, checkpoint_dir=str(tmp_path / "run")).learn(10**6)
    with zipfile.ZipFile(tmp_path / "run" / "model.zip") as archive:  # the source is text in the zip's JSON data
        assert json.loads(archive.read("data"))["history"][0]["source"] == SOLVER.strip()
    resumed = R2PO.load(tmp_path / "run" / "model.zip", env=first.get_env(), llm=llm, max_iterations=2)
    resumed.learn(10**6, reset_num_timesteps=False)
    assert llm.kinds() == ["feedback", "policy", "reflection", "refine"]  # the Feedback class is not asked again
    assert [r["iteration"] for r in resumed.history] == [1, 2] and resumed.history[1]["feedback"][0] == "Episode 1: 500 steps"


def test_several_sub_environments_step_through_one_worker_call(monkeypatch) -> None:
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_r2po.common.sandbox import CodeSandbox

    batches: list[int] = []
    act = CodeSandbox.act
    monkeypatch.setattr(CodeSandbox, "act", lambda self, obs: batches.append(len(obs)) or act(self, obs))
    env = make_vec_env("CartPole-v1", n_envs=3, seed=0)
    llm = CodeLLM(policy=[fenced(SOLVER)])
    model = R2PO("Code", env, llm=llm, variant="promptpo", code_candidates=1, max_iterations=1, seed=0).learn(10**6)
    assert model.history[0]["mean_return"] == 500.0 and model.history[0]["n_episodes"] == 5
    assert set(batches) == {3}  # every vector step: one round trip with the three observations
    actions, _ = model.predict(env.reset())
    assert actions.shape == (3,) and batches[-1] == 3


def test_a_slow_policy_fails_at_its_episode_timeout_and_is_repaired() -> None:
    slow = "import time\n\nclass CartPolePolicy:\n    def act(self, obs):\n        time.sleep(0.3)\n        return 0\n"
    llm = CodeLLM(policy=[fenced(slow)], repair=[fenced(SOLVER)])
    model = promptpo(llm, code_candidates=1, max_iterations=1, policy_kwargs={"episode_timeout": 1.0})
    model.learn(10**6)  # each step is within its call_timeout (1 s); the episode (about 9 steps) is not
    assert llm.kinds() == ["feedback", "policy", "repair"]
    assert "TimeoutError: episode 0 ran past its 1 s timeout" in llm.calls[-1][1]
    assert model.history[0]["mean_return"] == 500.0
