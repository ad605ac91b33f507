import gymnasium as gym
import pytest
from helpers import UNTIL_BUDGET
from stable_baselines3.common.callbacks import (
    BaseCallback,
    CheckpointCallback,
    EvalCallback,
    StopTrainingOnMaxEpisodes,
)
from stable_baselines3.common.env_util import make_vec_env

from sb3_r2po import R2PO, ExampleLLM


class CountingCallback(BaseCallback):
    def __init__(self) -> None:
        super().__init__()
        self.steps = 0
        self.episodes = 0
        self.rollouts = 0
        self.started = self.ended = False

    def _on_training_start(self) -> None:
        self.started = True

    def _on_rollout_start(self) -> None:
        self.rollouts += 1

    def _on_step(self) -> bool:
        self.steps += 1
        self.episodes += int(self.locals["dones"].sum())
        assert "infos" in self.locals
        return True

    def _on_training_end(self) -> None:
        self.ended = True


def test_callback_sees_every_step_and_episode(make_r2po) -> None:
    callback = CountingCallback()
    model = make_r2po(llm=ExampleLLM(seed=0), n_eval_episodes=3, warmup_episodes=2, max_episodes=None)
    model.learn(2000, callback=callback)
    assert callback.started and callback.ended
    assert callback.steps == model.num_timesteps  # one env: one on_step per env step
    assert callback.episodes == model.episodes_used
    evaluated = [1 + (r["revision"]["mean_return"] is not None) for r in model.history if r["kind"] != "warmup"]
    assert callback.rollouts == 2 + sum(evaluated)  # one per evaluated candidate: 2 warm-up, Search, revision


@pytest.mark.parametrize("n_envs", [1, 3])
def test_without_a_callback_the_run_counts_what_a_per_step_callback_sees(make_r2po, n_envs: int) -> None:
    """``learn(callback=None)`` skips the per-step hook and advances the counters once per rollout: the same steps,
    episodes, episode statistics and history as a run with a callback called after every step."""
    runs = []
    for callback in (None, CountingCallback()):
        env = make_vec_env("CartPole-v1", n_envs=n_envs)
        model = make_r2po(env, n_eval_episodes=4, warmup_episodes=3, max_episodes=19)
        model.learn(UNTIL_BUDGET, callback=callback)
        runs.append(model)
        if callback is not None:
            assert callback.episodes == model.episodes_used
            assert n_envs > 1 or callback.steps == model.num_timesteps  # one env: one on_step per env step
    plain, called = runs
    assert plain.num_timesteps == called.num_timesteps and plain.episodes_used == called.episodes_used == 19
    assert list(plain.ep_info_buffer) == list(called.ep_info_buffer)
    assert [r["params"] for r in plain.history] == [r["params"] for r in called.history]
    assert [r["mean_return"] for r in plain.history] == [r["mean_return"] for r in called.history]


def test_stop_training_on_max_episodes(make_r2po) -> None:
    model = make_r2po(llm=ExampleLLM(seed=0), n_eval_episodes=3, warmup_episodes=2, max_episodes=None)
    model.learn(UNTIL_BUDGET, callback=StopTrainingOnMaxEpisodes(max_episodes=9))
    assert model.episodes_used == 9  # stops at the step that ends the 9th episode
    # an iteration cut short is not half-applied: every record holds complete evaluations
    assert all(r["n_episodes"] == 3 for r in model.history if r["kind"] != "warmup")


def test_callback_returning_false_keeps_history_consistent(make_r2po) -> None:
    class StopAfter(BaseCallback):
        def _on_step(self) -> bool:
            return self.num_timesteps < 150

    model = make_r2po(llm=ExampleLLM(seed=0), n_eval_episodes=3, warmup_episodes=2, max_episodes=None)
    model.learn(UNTIL_BUDGET, callback=StopAfter())
    assert model.num_timesteps == 150
    assert all(
        r["revision"]["status"] in {"kept", "rejected", "declined", "failed", "interrupted"}
        for r in model.history
        if r["kind"] != "warmup"
    )


def test_eval_callback_and_its_mid_training_save(tmp_path, make_r2po) -> None:
    eval_env = gym.make("CartPole-v1")
    callback = EvalCallback(eval_env, eval_freq=200, n_eval_episodes=2, best_model_save_path=str(tmp_path), verbose=0)
    model = make_r2po(llm=ExampleLLM(seed=0), n_eval_episodes=3, warmup_episodes=2, max_episodes=None)
    model.learn(1500, callback=callback)
    assert callback.last_mean_reward > -float("inf")
    loaded = R2PO.load(tmp_path / "best_model.zip")
    assert loaded.policy.parameter_space.size == 10
    _assert_committed_state(loaded, model)


def _assert_committed_state(loaded: R2PO, model: R2PO) -> None:
    """A model saved in the middle of training holds a prefix of the run's history and the counters of its last
    entry (not the live counters of the evaluation in flight)."""
    last = loaded.history[-1]
    assert (loaded.episodes_used, loaded.num_timesteps) == (last["episodes"], last["timesteps"])
    assert loaded.history == model.history[: len(loaded.history)]


def test_checkpoint_callback(tmp_path, make_r2po) -> None:
    model = make_r2po(llm=ExampleLLM(seed=0), n_eval_episodes=3, warmup_episodes=2, max_episodes=None)
    model.learn(1000, callback=CheckpointCallback(save_freq=250, save_path=str(tmp_path), name_prefix="r2po"))
    saved = sorted(tmp_path.glob("r2po_*_steps.zip"))
    assert saved
    for path in saved:
        _assert_committed_state(R2PO.load(path, env=gym.make("CartPole-v1")), model)


def test_progress_bar(make_r2po) -> None:
    pytest.importorskip("tqdm")
    pytest.importorskip("rich")
    model = make_r2po(llm=ExampleLLM(seed=0), n_eval_episodes=3, warmup_episodes=2, max_episodes=None)
    model.learn(300, progress_bar=True)
    assert model.num_timesteps >= 300


def test_max_episodes_is_exact(make_r2po) -> None:
    # warm-up, two full iterations, then a search without revision
    model = make_r2po(llm=ExampleLLM(seed=0), n_eval_episodes=3, warmup_episodes=2, max_episodes=2 + 2 * 6 + 3)
    model.learn(UNTIL_BUDGET)
    assert model.episodes_used == 17
    assert model.iteration == 3 and model.history[-1]["revision"]["status"] == "skipped"


def test_a_stop_in_the_step_that_ends_an_evaluation_keeps_it(make_r2po) -> None:
    """The step ending the Search candidate's 3rd episode stops training: the candidate is complete, so it enters
    the history (its episodes were charged), and its revision is skipped."""
    model = make_r2po(llm=ExampleLLM(seed=0), n_eval_episodes=3, warmup_episodes=4, max_episodes=None)
    model.learn(UNTIL_BUDGET, callback=StopTrainingOnMaxEpisodes(max_episodes=7))
    assert model.episodes_used == 7
    assert [r["kind"] for r in model.history][:4] == ["warmup"] * 4 and len(model.history) == 5
    assert model.history[-1]["n_episodes"] == 3 and model.history[-1]["revision"]["status"] == "skipped"
    assert sum(r["n_episodes"] for r in model.history) == model.episodes_used  # no episode charged without a record


@pytest.mark.parametrize("save_freq", [45, 70])
def test_a_checkpoint_saved_mid_iteration_resumes_like_the_uninterrupted_run(tmp_path, make_r2po, save_freq: int) -> None:
    """``CheckpointCallback`` saves in the middle of evaluations; a model loaded from any of its files repeats the
    running iteration and ends with the uninterrupted run's history (no episode charged twice)."""
    reference = make_r2po(llm="example", n_eval_episodes=3, warmup_episodes=4, seed=11, max_episodes=4 + 6 * 4)
    reference.learn(UNTIL_BUDGET, callback=CheckpointCallback(save_freq=save_freq, save_path=str(tmp_path)))
    saved = sorted(tmp_path.glob("rl_model_*_steps.zip"), key=lambda p: int(p.stem.split("_")[2]))
    assert len(saved) >= 3
    for path in saved[:4]:
        model = R2PO.load(path, env=gym.make("CartPole-v1"), llm="example")
        last = model.history[-1]
        assert (model.episodes_used, model.num_timesteps) == (last["episodes"], last["timesteps"])
        model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
        assert model.history == reference.history


def test_callbacks_see_terminal_observations_as_with_any_vec_env(make_r2po) -> None:
    """The plain DummyVecEnv path steps the sub-environments itself; an ended episode's info still carries
    ``terminal_observation`` and ``TimeLimit.truncated``, as SB3's auto-reset gives them."""

    class Ends(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.infos: list[dict] = []

        def _on_step(self) -> bool:
            self.infos += [info for info, done in zip(self.locals["infos"], self.locals["dones"], strict=True) if done]
            return True

    callback = Ends()
    model = make_r2po(llm=ExampleLLM(seed=0), n_eval_episodes=3, warmup_episodes=2, max_episodes=2 + 3 * 2)
    model.learn(UNTIL_BUDGET, callback=callback)
    assert len(callback.infos) == model.episodes_used
    assert all(info["terminal_observation"].shape == (4,) and info["TimeLimit.truncated"] is False for info in callback.infos)
