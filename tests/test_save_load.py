import json
import zipfile

import gymnasium as gym
import numpy as np
import pytest
from helpers import UNTIL_BUDGET, ScriptedLLM

from sb3_r2po import R2PO, ExampleLLM


@pytest.mark.parametrize(
    "env_id, policy", [("CartPole-v1", "MlpLinear"), ("Pendulum-v1", "MlpLinear"), ("FrozenLake-v1", "Tabular")]
)
def test_save_load_round_trip(tmp_path, make_r2po, env_id: str, policy: str) -> None:
    model = make_r2po(env_id, policy=policy, llm="example:0", n_eval_episodes=2, warmup_episodes=3, seed=0, max_episodes=None)
    model.learn(300)
    path = tmp_path / "model.zip"
    model.save(path)

    loaded = R2PO.load(path, env=gym.make(env_id))
    assert loaded.history == model.history
    assert loaded.iteration == model.iteration and loaded.llm == "example:0"
    np.testing.assert_array_equal(loaded.policy.get_flat(), model.policy.get_flat())
    obs = np.stack([model.observation_space.sample() for _ in range(32)])
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
    for name in ("llm_stats", "episodes_used", "num_timesteps"):  # the counters a resume continues
        assert getattr(loaded, name) == getattr(model, name), name
    # the random state and the evaluation counter (the env seeds) too: both continue with the same iterations
    model.learn(150, reset_num_timesteps=False)
    loaded.learn(150, reset_num_timesteps=False)
    assert loaded.history == model.history and loaded.episodes_used == model.episodes_used


def test_learning_continues_after_load(tmp_path, make_r2po) -> None:
    model = make_r2po(llm="example:1", n_eval_episodes=2, warmup_episodes=2, seed=0, max_episodes=None)
    model.learn(200)
    n_history, iteration, episodes = len(model.history), model.iteration, model.episodes_used
    model.save(tmp_path / "m")
    loaded = R2PO.load(tmp_path / "m", env=gym.make("CartPole-v1"))
    loaded.learn(200, reset_num_timesteps=False)
    assert loaded.iteration > iteration and len(loaded.history) > n_history
    assert loaded.history[:n_history] == model.history  # the full history is continued, not restarted
    assert sum(r["kind"] == "warmup" for r in loaded.history) == 2  # no second warm-up
    assert loaded.episodes_used > episodes


def test_llm_object_is_never_saved(tmp_path, make_r2po) -> None:
    llm = ScriptedLLM(["params: [1, 2, 3, 4, 5, 6, 7, 8, 9, 0]"])
    llm.secret = "sk-should-never-be-saved"  # type: ignore[attr-defined]
    model = make_r2po(llm=llm, n_eval_episodes=1, warmup_episodes=1, seed=0, max_episodes=2)
    model.learn(10)
    model.save(tmp_path / "m.zip")
    with zipfile.ZipFile(tmp_path / "m.zip") as archive:
        blob = b"".join(archive.read(name) for name in archive.namelist())
        data = json.loads(archive.read("data"))
    assert b"sk-should-never-be-saved" not in blob and b"ScriptedLLM" not in blob
    assert data["llm"] is None and "_llm" not in data and "_run" not in data
    assert isinstance(data["history"], list)  # plain JSON, readable without sb3_r2po

    loaded = R2PO.load(tmp_path / "m.zip", env=gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="Pass one again"):
        loaded.learn(10)
    loaded = R2PO.load(tmp_path / "m.zip", env=gym.make("CartPole-v1"), llm=ExampleLLM())
    loaded.learn(10, reset_num_timesteps=False)


def test_history_is_json_serialisable(make_r2po) -> None:
    model = make_r2po(llm=ExampleLLM(), n_eval_episodes=2, warmup_episodes=2, seed=0, max_episodes=None)
    model.learn(100)
    assert json.loads(json.dumps(model.history)) == model.history
    record = model.history[-1]
    assert {"params", "mean_return", "kind", "iteration", "search", "revision", "episodes", "timesteps"} <= set(record)


def test_policy_save_load(tmp_path, make_r2po) -> None:
    model = make_r2po(
        "FrozenLake-v1", policy="Tabular", llm=ExampleLLM(), n_eval_episodes=2, warmup_episodes=2, seed=0, max_episodes=None
    )
    model.learn(50)
    model.policy.save(tmp_path / "policy.pth")
    policy = type(model.policy).load(tmp_path / "policy.pth")
    np.testing.assert_array_equal(policy.get_flat(), model.policy.get_flat())


def test_critic_only_resumes_with_the_last_candidates_episodes(tmp_path, make_r2po) -> None:
    """``critic_only`` revises the last candidate from its episodes: they are saved with the model, so a loaded
    model shows the Critic the same evidence (the same prompts) as the uninterrupted run."""
    example = ExampleLLM(0)
    prompts: list[str] = []

    def llm(messages: list[dict[str, str]]) -> str:
        prompts.append(messages[-1]["content"])
        return example.chat(messages).text

    kwargs = dict(n_eval_episodes=3, warmup_episodes=4, seed=5, variant="critic_only", max_episodes=40)
    reference = make_r2po(llm=llm, **kwargs).learn(UNTIL_BUDGET)
    expected, prompts[:] = list(prompts), []
    first = make_r2po(llm=llm, **kwargs).learn(150)
    first.save(tmp_path / "half.zip")
    resumed = R2PO.load(tmp_path / "half.zip", env=gym.make("CartPole-v1"), llm=llm)
    resumed.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert "  step 0: state=" in expected[len(prompts) - (resumed.iteration - first.iteration)]  # the Critic sees a trajectory
    assert prompts == expected and resumed.history == reference.history


def test_a_save_from_another_thread_does_not_disturb_training(make_r2po) -> None:
    """``save()`` writes a copy: a thread saving in a loop while ``learn()`` runs changes nothing in the run."""
    import io
    import threading

    kwargs = dict(llm="example", n_eval_episodes=3, warmup_episodes=4, max_episodes=4 + 6 * 5, seed=0)
    reference = make_r2po(**kwargs).learn(UNTIL_BUDGET)
    model = make_r2po(**kwargs)
    stop, saves = threading.Event(), []

    def saver() -> None:
        while not stop.is_set():
            model.save(io.BytesIO())
            saves.append(1)

    thread = threading.Thread(target=saver)
    thread.start()
    try:
        model.learn(UNTIL_BUDGET)
    finally:
        stop.set()
        thread.join()
    assert len(saves) > 5
    assert model.history == reference.history and model.episodes_used == reference.episodes_used == 4 + 6 * 5
