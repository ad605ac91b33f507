import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections import deque
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import UNTIL_BUDGET
from stable_baselines3.common.callbacks import CheckpointCallback

from sb3_r2po import R2PO, ExampleLLM
from sb3_r2po.llm.base import LLMBackendError
from sb3_r2po.llm.recording import read_records
from sb3_r2po.r2po.run_state import RunDirectoryInUseError, RunState

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback
    from sb3_r2po import R2PO

    run_dir, crash_at, llm = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    class Crash(BaseCallback):
        def _on_step(self):
            if crash_at and self.model.num_timesteps >= crash_at:
                os.kill(os.getpid(), signal.SIGKILL)  # a hard crash: no cleanup, no exception handler
            return True

    path = os.path.join(run_dir, "model.zip")
    if os.path.exists(path):
        model = R2PO.load(path, env=gym.make("CartPole-v1"), llm=llm)
        model.learn(10**9, callback=Crash(), reset_num_timesteps=False)
    else:
        model = R2PO("MlpLinear", "CartPole-v1", llm=llm, n_eval_episodes=3, warmup_episodes=4, seed=11,
                     max_episodes=4 + 6 * 5, checkpoint_dir=run_dir)
        model.learn(10**9, callback=Crash())
    """
)


def run(run_dir, crash_at: int, llm: str = "example:3") -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run([sys.executable, "-c", SCRIPT, str(run_dir), str(crash_at), llm], env=env, timeout=120).returncode


def finish(run_dir, llm: str) -> None:
    """:data:`SCRIPT` with no crash, run to its end in this process (the same code without an interpreter's start): it
    resumes the run in ``run_dir`` and raises on any failure."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["-c", str(run_dir), "0", llm])
        exec(compile(SCRIPT, "<resume script>", "exec"), {"__name__": "__main__"})


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run's directory (run once; the tests only read it)."""
    directory = tmp_path_factory.mktemp("reference") / "run"
    assert run(directory, 0) == 0
    return directory


@pytest.mark.parametrize("crash_fractions", [[0.01], [0.05, 0.5], [0.2, 0.55, 0.9]])
@pytest.mark.slow
def test_killed_and_resumed_run_matches_an_uninterrupted_run(tmp_path, reference: Path, crash_fractions: list[float]) -> None:
    expected = json.loads((reference / "history.json").read_text())
    total_steps = expected[-1]["timesteps"]

    # the interrupted run answers from the reference run's recorded LLM replies
    replay = f"replay:{reference / 'llm_calls.jsonl'}"
    resumed = tmp_path / "resumed"
    for fraction in crash_fractions:  # crash points spread over warm-up, Search and Critic evaluations
        crash_at = max(1, int(fraction * total_steps))
        assert run(resumed, crash_at, replay) == -9  # killed by SIGKILL
        # the run directory is valid after every crash
        if (resumed / "model.zip").exists():
            R2PO.load(resumed / "model.zip", env=gym.make("CartPole-v1"))
    finish(resumed, replay)  # the resumed run to its end, after the last kill
    assert json.loads((resumed / "history.json").read_text()) == expected
    assert not list(resumed.glob("*.tmp"))
    # the resumed run's own transcript reads as the uninterrupted run's: the calls a crash cut short were set aside
    transcript = read_records(resumed / "llm_calls.jsonl")
    assert [r["hash"] for r in transcript] == [r["hash"] for r in read_records(reference / "llm_calls.jsonl")]


def test_a_new_run_refuses_a_directory_that_holds_a_run(tmp_path, make_r2po) -> None:
    """A fresh model pointed at another run's directory would overwrite it: refused, with the resume recipe."""
    kwargs = dict(llm="example", n_eval_episodes=2, warmup_episodes=2, max_episodes=4, checkpoint_dir=str(tmp_path))
    first = make_r2po(seed=1, **kwargs).learn(UNTIL_BUDGET)
    saved = (tmp_path / "history.json").read_text()
    with pytest.raises(ValueError, match=r"already holds another run.*R2PO\.load"):
        make_r2po(seed=2, **kwargs).learn(UNTIL_BUDGET)
    assert (tmp_path / "history.json").read_text() == saved
    resumed = R2PO.load(tmp_path / "model.zip", env=gym.make("CartPole-v1"), llm="example")
    resumed.learn(UNTIL_BUDGET, reset_num_timesteps=False)  # resuming the same directory is what it is for
    assert resumed.history == first.history


OUTAGE = dict(n_eval_episodes=2, warmup_episodes=2, seed=3, max_episodes=2 + 2 * 2 * 4)
"""Settings of the runs cut by an LLM outage: 4 iterations of 2 + 2 episodes after 2 warm-up episodes."""


def _cut_by_an_outage(make_r2po, tmp_path, fifth: Callable[[ExampleLLM, list[dict[str, str]]], str]) -> R2PO:
    """A run with ``checkpoint_dir`` whose 5th LLM call is answered by ``fifth`` and whose 6th fails ("server down");
    the caller catches the error, and the server answers again from then on."""
    example = ExampleLLM(0)
    state = {"calls": 0, "down": True}

    def flaky(messages: list[dict[str, str]]) -> str:
        state["calls"] += 1
        if state["down"] and state["calls"] == 5:
            return fifth(example, messages)
        if state["down"] and state["calls"] == 6:
            raise LLMBackendError("server down")
        return example.chat(messages).text

    model = make_r2po(llm=flaky, checkpoint_dir=str(tmp_path), **OUTAGE)
    with pytest.raises(LLMBackendError, match="server down"):
        model.learn(UNTIL_BUDGET)
    state["down"] = False
    return model


def test_a_run_continued_after_an_llm_error_replays_from_its_transcript(tmp_path, make_r2po) -> None:
    """The server fails on a re-ask (the unusable first reply is recorded, never counted); the caller catches the
    error and calls learn() again. The transcript sets the orphan aside, so replaying it reproduces the run."""
    model = _cut_by_an_outage(make_r2po, tmp_path, lambda example, messages: "no vector in this reply")  # recorded, re-asked
    with pytest.warns(RuntimeWarning, match="1 recorded call"):
        model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    replayed = make_r2po(llm=f"replay:{tmp_path / 'llm_calls.jsonl'}", **OUTAGE).learn(UNTIL_BUDGET)
    assert replayed.history == model.history and model.iteration == 4


def test_a_counted_call_of_an_iteration_cut_short_by_an_llm_error_is_set_aside(tmp_path, make_r2po) -> None:
    """The Search reply of an iteration is recorded, then the iteration's Critic call fails; the caller catches the
    error and calls learn() again. The model is rolled back to its last history entry (counters, random state, LLM
    statistics) and the transcript rewound to the same point, so the orphan Search reply is set aside, the continued
    run is the uninterrupted one, and its transcript replays it."""
    # the 5th reply is usable
    model = _cut_by_an_outage(make_r2po, tmp_path, lambda example, messages: "ORPHAN " + example.chat(messages).text)
    assert len(read_records(tmp_path / "llm_calls.jsonl")) == 5  # the orphan was recorded: the case under test
    last = model.history[-1]
    assert model.llm_stats["calls"] == 4  # rolled back to the last history entry
    assert (model.episodes_used, model.num_timesteps) == (last["episodes"], last["timesteps"])
    with pytest.warns(RuntimeWarning, match="1 recorded call"):
        model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    path = tmp_path / "llm_calls.jsonl"
    assert not any(r["reply"]["text"].startswith("ORPHAN") for r in read_records(path))
    assert "ORPHAN" in path.read_text(encoding="utf-8")  # set aside, still in the file
    uninterrupted = make_r2po(llm=ExampleLLM(0), **OUTAGE).learn(UNTIL_BUDGET)
    assert model.history == uninterrupted.history and model.iteration == 4
    replayed = make_r2po(llm=f"replay:{path}", **OUTAGE).learn(UNTIL_BUDGET)
    assert replayed.history == model.history


def _search_unusable(critic_failing: int | None) -> Callable[[list[dict[str, str]]], str]:
    """An LLM whose Search replies hold no vector and whose Critic answers as ``ExampleLLM(0)``, except that its
    ``critic_failing``-th call fails once ("server down")."""
    example, critic_calls = ExampleLLM(0), [0]

    def chat(messages: list[dict[str, str]]) -> str:
        if "The optimizer proposed these parameters:" not in messages[-1]["content"]:
            return "no vector in this reply"
        critic_calls[0] += 1
        if critic_calls[0] == critic_failing:
            raise LLMBackendError("server down")
        return example.chat(messages).text

    return chat


def test_a_fallback_drawn_in_an_iteration_cut_short_is_drawn_again_from_the_same_random_state(make_r2po) -> None:
    """Every Search reply is unusable, so each iteration draws a fallback step from the run's random generator
    (``on_unusable_reply="reask"`` without re-asks); the second iteration's Critic call fails after its draw. The
    roll-back restores the generator too, so the repeated iteration draws the same fallback: the uninterrupted run."""
    settings = dict(on_unusable_reply="reask", max_llm_retries=0, **OUTAGE)
    uninterrupted = make_r2po(llm=_search_unusable(None), **settings).learn(UNTIL_BUDGET)
    model = make_r2po(llm=_search_unusable(2), **settings)
    with pytest.raises(LLMBackendError, match="server down"):
        model.learn(UNTIL_BUDGET)
    assert len(model.history) == 3 and model.llm_stats["fallbacks"] == 1  # rolled back to the first iteration's entry
    model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert uninterrupted.llm_stats["fallbacks"] == model.llm_stats["fallbacks"] == 4
    assert model.history == uninterrupted.history


def test_a_checkpoint_saved_inside_the_warm_up_resumes_with_the_random_state_of_the_last_entry(tmp_path, make_r2po) -> None:
    """SB3's ``CheckpointCallback`` saves during the first warm-up episode, after the run drew its random vector: the
    file holds the state as of the last entry (the start), random generator included, so the run loaded from it draws
    the same warm-up vectors and is the uninterrupted run."""
    settings = dict(llm="example", n_eval_episodes=2, warmup_episodes=3, seed=5, max_episodes=3 + 2 * 2 * 2)
    checkpoints = CheckpointCallback(save_freq=5, save_path=str(tmp_path))
    uninterrupted = make_r2po(**settings).learn(UNTIL_BUDGET, callback=checkpoints)
    assert uninterrupted.history[0]["timesteps"] > 5  # the first checkpoint was saved inside the first warm-up episode
    resumed = R2PO.load(tmp_path / "rl_model_5_steps.zip", env=gym.make("CartPole-v1"), llm="example")
    assert resumed.history == [] and resumed.num_timesteps == 0
    resumed.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert resumed.history == uninterrupted.history


def test_a_loaded_model_refuses_another_runs_directory(tmp_path, make_r2po) -> None:
    kwargs = dict(llm="example", n_eval_episodes=2, warmup_episodes=2, max_episodes=4)
    make_r2po(seed=1, checkpoint_dir=str(tmp_path / "a"), **kwargs).learn(UNTIL_BUDGET)
    make_r2po(seed=2, checkpoint_dir=str(tmp_path / "b"), **kwargs).learn(UNTIL_BUDGET)
    other = (tmp_path / "b" / "history.json").read_text()
    model = R2PO.load(tmp_path / "a" / "model.zip", env=gym.make("CartPole-v1"), llm="example")
    model.settings = dataclasses.replace(model.settings, checkpoint_dir=str(tmp_path / "b"))
    with pytest.raises(ValueError, match="already holds another run"):
        model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert (tmp_path / "b" / "history.json").read_text() == other


def test_an_interrupt_between_a_history_entry_and_its_snapshot_takes_the_entry_back(monkeypatch, make_r2po) -> None:
    """Ctrl-C can land inside ``_commit``, after the history append and before the snapshot of the counters: the
    roll-back removes that entry too, so the history and the counters agree and learn() again is the uninterrupted run."""
    kwargs = dict(llm="example", n_eval_episodes=2, warmup_episodes=2, seed=4, max_episodes=2 + 2 * 2 * 3)
    uninterrupted = make_r2po(**kwargs).learn(UNTIL_BUDGET)
    model = make_r2po(**kwargs)
    snapshot = RunState.snapshot
    state = {"calls": 0}

    def cut_at_the_fourth(*args) -> None:
        state["calls"] += 1
        if state["calls"] == 4:  # learn()'s own snapshot, two warm-up entries, then the first iteration's entry
            raise KeyboardInterrupt
        snapshot(*args)

    monkeypatch.setattr(RunState, "snapshot", cut_at_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        model.learn(UNTIL_BUDGET)
    assert len(model.history) == 2 and model.episodes_used == model.history[-1]["episodes"] == 2
    assert np.array_equal(model.policy.get_flat(), model.best_record()["params"])
    monkeypatch.setattr(RunState, "snapshot", snapshot)
    model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert model.history == uninterrupted.history


def test_the_run_directory_is_locked_while_learn_runs_and_free_when_it_ends_or_fails(tmp_path, make_r2po) -> None:
    """learn() holds the run directory's inter-process lock: another run opening it meanwhile is refused; when learn()
    returns, or raises, the directory is free for the next run (or for this one, resumed elsewhere)."""
    from stable_baselines3.common.callbacks import BaseCallback

    seen: list[BaseException | None] = []

    class Probe(BaseCallback):
        def _on_step(self) -> bool:
            if not seen:
                state = RunState()
                try:
                    state.open(lambda messages: "x", tmp_path / "run", self.model.history)
                    seen.append(None)
                except RunDirectoryInUseError as error:
                    seen.append(error)
                state.close()
            return True

    kwargs = dict(llm="example", n_eval_episodes=2, warmup_episodes=2, max_episodes=6, checkpoint_dir=str(tmp_path / "run"))
    model = make_r2po(seed=1, **kwargs)
    model.learn(UNTIL_BUDGET, callback=Probe())
    assert len(seen) == 1 and isinstance(seen[0], RunDirectoryInUseError)
    assert str(tmp_path / "run") in str(seen[0]) and "another checkpoint_dir" in str(seen[0])
    free = RunState()
    free.open(lambda messages: "x", tmp_path / "run", model.history)  # free after learn()
    free.close()
    failed = _cut_by_an_outage(make_r2po, tmp_path / "outage", lambda example, messages: "no vector in this reply")
    free.open(lambda messages: "x", tmp_path / "outage", failed.history)  # free after a learn() that raised
    free.close()


def test_an_explicit_checkpoint_dir_given_to_load_wins(tmp_path, make_r2po) -> None:
    """A copied run directory continues in the copy, unless load() is told another directory."""
    make_r2po(checkpoint_dir=str(tmp_path / "a"), max_episodes=4).learn(UNTIL_BUDGET)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    with pytest.warns(RuntimeWarning, match="not the one its run was started in"):
        copied = R2PO.load(tmp_path / "b" / "model.zip", env=gym.make("CartPole-v1"))
    assert copied.settings.checkpoint_dir == str(tmp_path / "b")
    told = R2PO.load(tmp_path / "b" / "model.zip", env=gym.make("CartPole-v1"), checkpoint_dir=str(tmp_path / "c"))
    assert told.settings.checkpoint_dir == str(tmp_path / "c")


def test_the_snapshot_copies_the_generator_and_the_episode_buffers_independently() -> None:
    rng = np.random.default_rng(7)
    rng.random(3)
    buffer = deque([{"r": 1.0, "l": 2}], maxlen=5)
    run = RunState()
    run.snapshot({"_rng": rng, "ep_info_buffer": buffer}, history_length=0)
    expected = copy.deepcopy(rng).random(4)
    np.testing.assert_array_equal(rng.random(4), expected)  # the original moves on ...
    buffer[0]["r"] = 9.0
    for _ in range(2):  # ... and every committed copy starts where the snapshot was taken
        committed = run.committed()
        assert committed["_rng"] is not rng and committed["_rng"].bit_generator.seed_seq.entropy == 7
        np.testing.assert_array_equal(committed["_rng"].random(4), expected)
        assert committed["ep_info_buffer"] == deque([{"r": 1.0, "l": 2}]) and committed["ep_info_buffer"].maxlen == 5
