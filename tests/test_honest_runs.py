"""Runs that tell the truth (issue 36): independent seeds, budgets that hold in the warm-up, a progress bar in the
unit that binds, warm starts from ``set_parameters()``, and models that pickle and deep-copy."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import pickle
import warnings
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from helpers import UNTIL_BUDGET
from stable_baselines3.common.env_util import make_vec_env

from sb3_r2po import R2PO
from sb3_r2po.r2po.run_state import evaluation_seed

TEST_LIMIT_S = 120


class ResetSeeds(gym.Wrapper):
    """Records the ``seed`` of every ``reset()`` call that passes one."""

    def __init__(self, env: gym.Env, seeds: list[int]) -> None:
        super().__init__(env)
        self.seeds = seeds

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed is not None:
            self.seeds.append(seed)
        return self.env.reset(seed=seed, options=options)


def _first_warning(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "before the first LLM iteration" in str(w.message)]


# -- 1. independent seeds --------------------------------------------------------------------------------------------


def _reset_seeds(seed: int, n_envs: int = 1, episodes: int = 200) -> tuple[list[int], R2PO]:
    """The seeds of the resets of a run's first ``episodes`` evaluation episodes, and the run."""
    seeds: list[int] = []
    vec = make_vec_env(lambda: ResetSeeds(gym.make("CartPole-v1"), seeds), n_envs=n_envs)
    model = R2PO("MlpLinear", vec, llm="example", seed=seed, n_eval_episodes=2, warmup_episodes=20, max_episodes=episodes)
    seeds.clear()
    model.learn(UNTIL_BUDGET)
    assert model.episodes_used == episodes
    setup = [seed + i for i in range(n_envs)]  # SB3's reset in _setup_learn (set_random_seed): no episode starts there
    assert seeds[:n_envs] == setup
    return seeds[n_envs:], model


@pytest.mark.parametrize("n_envs", [1, 3])
def test_runs_of_seeds_0_to_9_share_no_reset_seed(n_envs: int) -> None:
    """The first 40 evaluation episodes of seeds 0-9 (the 20 warm-up episodes and five iterations): every seed an env
    was reset with belongs to one run only (the old scheme, seed + evaluation index, gave seed s + 1's evaluation j the
    seed of seed s's evaluation j + 1: a collision from a run's 2nd evaluation on, well inside 40 episodes)."""
    runs = {seed: _reset_seeds(seed, n_envs, episodes=40)[0] for seed in range(10)}
    for seeds in runs.values():
        assert len(seeds) >= 20 + 10 * 1  # one seeded reset per sub-environment and evaluation, at least
    for (a, seeds_a), (b, seeds_b) in itertools.combinations(runs.items(), 2):
        assert not set(seeds_a) & set(seeds_b), (a, b)


def test_a_seed_reproduces_its_reset_seeds_and_history() -> None:
    first, model = _reset_seeds(3, episodes=40)  # the warm-up and five iterations
    again, twin = _reset_seeds(3, episodes=40)
    assert first == again and model.history == twin.history
    assert first[0] == evaluation_seed(3, 0)  # the stream starts at evaluation 0 (the first warm-up episode)


def test_evaluation_seeds_are_the_children_of_the_runs_seed_sequence() -> None:
    child = np.random.SeedSequence(7).spawn(5)[4]
    assert evaluation_seed(7, 4) == int(child.generate_state(1)[0] >> 1)
    assert all(0 <= evaluation_seed(seed, j) < 2**31 for seed in range(10) for j in range(100))


def test_a_run_continued_by_learn_draws_the_seeds_of_the_uninterrupted_run() -> None:
    whole, _ = _reset_seeds(5, episodes=40)  # the warm-up and five iterations
    seeds: list[int] = []
    env = ResetSeeds(gym.make("CartPole-v1"), seeds)
    model = R2PO("MlpLinear", env, llm="example", seed=5, n_eval_episodes=2, warmup_episodes=20, max_episodes=40)
    seeds.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.learn(300)  # ends inside the warm-up
    assert 0 < len(model.history) < 20
    model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert seeds[1:] == whole  # after SB3's setup reset (seed 5)


# -- 2. budgets that hold --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reset_num_timesteps", [True, False])
def test_learn_0_runs_nothing(reset_num_timesteps: bool) -> None:
    model = R2PO("MlpLinear", "MountainCarContinuous-v0", llm="example", seed=0)
    with pytest.warns(UserWarning, match="before the first LLM iteration"):
        model.learn(0, reset_num_timesteps=reset_num_timesteps)
    assert model.num_timesteps == 0 and model.episodes_used == 0 and model.history == []


def test_the_warm_up_stops_at_the_step_budget_and_the_next_learn_continues_it() -> None:
    model = R2PO("MlpLinear", "Pendulum-v1", llm="example", seed=0, warmup_episodes=20, n_eval_episodes=2)
    with pytest.warns(UserWarning, match="before the first LLM iteration") as caught:
        model.learn(1000)  # Pendulum's episodes are 200 steps: 5 warm-up episodes
    assert model.num_timesteps == 1000 and [r["kind"] for r in model.history] == ["warmup"] * 5
    (message,) = _first_warning(list(caught))
    assert "ran 5 of 20 episodes (1000 steps)" in message
    assert "about 3800 more steps (15 warm-up episodes, then 4 episodes of about 200 steps)" in message
    with pytest.warns(UserWarning, match="before the first LLM iteration"):
        model.learn(1, reset_num_timesteps=False)  # the running episode completes: one more
    assert model.num_timesteps == 1200 and len(model.history) == 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an iteration completes: no warning
        model.learn(3800, reset_num_timesteps=False)
    assert model.iteration >= 1 and model.llm_stats["calls"] >= 1
    assert sum(r["kind"] == "warmup" for r in model.history) == 20


def test_the_warning_names_a_max_episodes_too_small() -> None:
    with pytest.warns(RuntimeWarning, match="cannot pay for one iteration"):  # said at construction already
        model = R2PO("MlpLinear", "Pendulum-v1", llm="example", seed=0, warmup_episodes=3, n_eval_episodes=5, max_episodes=6)
    with pytest.warns(UserWarning, match="max_episodes=6 leaves 3 episodes, too few"):
        model.learn(UNTIL_BUDGET)
    assert model.llm_stats["calls"] == 0


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "MountainCarContinuous-v0", "Acrobot-v1", "MountainCar-v0"])
def test_the_readme_budget_makes_llm_calls_or_says_why_not(env_id: str) -> None:
    """``R2PO("MlpLinear", env_id, llm=...).learn(4000)`` (the README's and docs/usage.md's example budget) on the
    paper's envs, with the reference's settings: LLM calls, or the warning, never a silent zero-iteration run."""
    model = R2PO("MlpLinear", env_id, llm="example", seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.learn(4000)
    said = _first_warning(caught)
    assert (model.llm_stats["calls"] > 0) != bool(said), (model.llm_stats["calls"], said)
    assert model.num_timesteps >= 4000
    if said:
        assert len(said) == 1 and "the first iteration needs about" in said[0]


# -- 5. progress bar in the unit that binds ---------------------------------------------------------------------------


class FakeBar:
    """Stands in for tqdm.rich's bar: records its total and position."""

    made: ClassVar[list[FakeBar]] = []

    def __init__(self, total: int | None = None, **kwargs: Any) -> None:
        self.total, self.n, self.kwargs, self.closed = total, 0, kwargs, False
        FakeBar.made.append(self)

    def update(self, n: int = 1) -> None:
        self.n += n

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_bar(monkeypatch: pytest.MonkeyPatch) -> type[FakeBar]:
    pytest.importorskip("tqdm")
    pytest.importorskip("rich")
    import stable_baselines3.common.callbacks as sb3_callbacks
    import tqdm.rich

    FakeBar.made = []
    monkeypatch.setattr(tqdm.rich, "tqdm", FakeBar)
    monkeypatch.setattr(sb3_callbacks, "tqdm", FakeBar)
    return FakeBar


def test_with_max_episodes_the_bar_counts_episodes_and_is_full_at_the_end(make_r2po, fake_bar) -> None:
    model = make_r2po(n_eval_episodes=3, warmup_episodes=2, max_episodes=2 + 2 * 6 + 2)  # 2 episodes left unused
    seen: list[tuple[int, int]] = []  # episodes run and the bar's position, one step late (the bar is called after)
    model.learn(
        10**9, progress_bar=True, callback=lambda _l, _g: seen.append((model.episodes_used, fake_bar.made[0].n)) or True
    )
    (bar,) = fake_bar.made
    assert bar.total == 16 and bar.kwargs["unit"] == "episodes" and bar.closed
    assert model.episodes_used == 14 and bar.n == 16  # the 2 left cannot pay for an evaluation: training is over
    assert [n for _, n in seen[1:]] == [episodes for episodes, _ in seen[:-1]]  # episodes, not the 10**9 steps


def test_with_max_iterations_the_bar_counts_the_planned_episodes(make_r2po, fake_bar) -> None:
    model = make_r2po(n_eval_episodes=3, warmup_episodes=2, max_episodes=None, max_iterations=2)
    model.learn(10**9, progress_bar=True)
    (bar,) = fake_bar.made
    assert bar.total == 2 + 2 * 2 * 3 == model.episodes_used and bar.n == bar.total


def test_when_steps_bind_the_bar_follows_them(make_r2po, fake_bar) -> None:
    model = make_r2po("CartPole-v0", n_eval_episodes=3, warmup_episodes=2, max_episodes=1000)  # no planned iterations
    seen: list[tuple[int, int]] = []  # steps run and the bar's position, one step late (the bar is called after)
    model.learn(300, progress_bar=True, callback=lambda _l, _g: seen.append((model.num_timesteps, fake_bar.made[0].n)) or True)
    (bar,) = fake_bar.made
    assert bar.total == 1000 and bar.n == 1000 and model.episodes_used < 100
    assert [n for _, n in seen[1:]] == [int(min(1.0, steps / 300) * 1000) for steps, _ in seen[:-1]]  # by the steps


def test_without_an_episode_budget_the_bar_is_sb3s(make_r2po, fake_bar) -> None:
    model = make_r2po("CartPole-v0", n_eval_episodes=3, warmup_episodes=2, max_episodes=None)  # no planned iterations
    model.learn(300, progress_bar=True)
    (bar,) = fake_bar.made
    assert bar.total == 300 and bar.n == model.num_timesteps


# -- 6. warm starts ---------------------------------------------------------------------------------------------------


def _given(model: R2PO, value: float) -> np.ndarray:
    vector = np.full(model.policy.parameter_space.size, value)
    model.set_parameters({"policy": {"theta": th.as_tensor(vector)}}, exact_match=False)
    return vector


def test_set_parameters_then_learn_starts_from_the_given_vector(make_r2po) -> None:
    model = make_r2po(n_eval_episodes=3, warmup_episodes=2, max_episodes=2 + 6)
    model.learn(UNTIL_BUDGET)
    before = len(model.history)
    vector = _given(model, 0.5)
    model.learn(0, reset_num_timesteps=False)  # runs nothing: the given vector waits for a learn() with a budget
    assert len(model.history) == before
    model.settings = dataclasses.replace(model.settings, max_episodes=model.settings.max_episodes + 3 + 6)
    model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    given = model.history[before]
    assert given["kind"] == "given" and given["params"] == vector.tolist() and given["n_episodes"] == 3
    assert model.history[before + 1]["kind"] != "given"  # then the iterations go on, keep-best deciding
    assert np.array_equal(model.policy.get_flat(), np.asarray(model.best_record()["params"]))


def test_a_fresh_model_starts_from_a_given_vector_before_its_warm_up(make_r2po, capsys) -> None:
    model = make_r2po(n_eval_episodes=3, warmup_episodes=2, max_episodes=3 + 2 + 6, verbose=1)
    vector = _given(model, 1.0)
    model.learn(UNTIL_BUDGET)
    assert [r["kind"] for r in model.history][:3] == ["given", "warmup", "warmup"]
    assert model.history[0]["params"] == vector.tolist()
    assert "R2PO given vector (set_parameters): mean return" in capsys.readouterr().out


def test_without_set_parameters_nothing_is_given(make_r2po, tmp_path) -> None:
    model = make_r2po(n_eval_episodes=3, warmup_episodes=2, max_episodes=2 + 6)
    model.learn(UNTIL_BUDGET)
    model.save(tmp_path / "m.zip")
    loaded = R2PO.load(tmp_path / "m.zip", env=gym.make("CartPole-v1"), llm="example")
    loaded.settings = dataclasses.replace(loaded.settings, max_episodes=loaded.settings.max_episodes + 6)
    loaded.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert "given" not in [r["kind"] for r in loaded.history]
    after_load = R2PO.load(tmp_path / "m.zip", env=gym.make("CartPole-v1"), llm="example")
    _given(after_load, -0.5)
    after_load.settings = dataclasses.replace(after_load.settings, max_episodes=after_load.settings.max_episodes + 3)
    after_load.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert after_load.history[len(model.history)]["kind"] == "given"


# -- 7. pickle and deepcopy -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("copy_model", [lambda m: pickle.loads(pickle.dumps(m)), copy.deepcopy], ids=["pickle", "deepcopy"])
@pytest.mark.parametrize("checkpoint", [False, True])
def test_fresh_and_trained_models_pickle_and_deep_copy(make_r2po, copy_model, checkpoint: bool, tmp_path) -> None:
    """A fresh and a trained model, copied, predict what the model predicts; without a run directory (a copy of a
    run continues that run's directory), the copy trains on exactly like the model."""
    run = str(tmp_path / "run") if checkpoint else None
    model = make_r2po(n_eval_episodes=2, warmup_episodes=2, max_episodes=10, checkpoint_dir=run)  # (TensorBoard: as PPO)
    observations = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    for trained in (False, True):
        if trained:
            model.learn(UNTIL_BUDGET)
        clone = copy_model(model)
        assert np.array_equal(
            clone.predict(observations, deterministic=True)[0], model.predict(observations, deterministic=True)[0]
        )
        assert clone.history == model.history and clone is not model
    if checkpoint:
        return
    clone.settings = dataclasses.replace(clone.settings, max_episodes=clone.settings.max_episodes + 4)
    model.settings = dataclasses.replace(model.settings, max_episodes=model.settings.max_episodes + 4)
    model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    clone.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert clone.history == model.history and len(model.history) == 5
