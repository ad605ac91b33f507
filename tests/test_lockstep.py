"""Batched LLM calls: the BatchingBackend and several seeds trained in lockstep (issue 7, section 4)."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from collections.abc import Iterator, Sequence

import gymnasium as gym
import numpy as np
import pytest
from helpers import UNTIL_BUDGET
from stable_baselines3.common.callbacks import BaseCallback

from sb3_r2po import R2PO, ExampleLLM
from sb3_r2po.llm.base import ChatReply, Message
from sb3_r2po.llm.batching import BatchingBackend
from sb3_r2po.lockstep import LockstepError, learn_in_lockstep

BUDGET = 3 + 3 * 6  # warm-up 3, then six 3-episode evaluations
SETTINGS = dict(n_eval_episodes=3, warmup_episodes=3, max_episodes=BUDGET)
"""The runs of this module, on CartPole: K = 3, 3 warm-up episodes and the budget above."""


@contextlib.contextmanager
def sigalrm_is_ctrl_c() -> Iterator[None]:
    """Within the block, SIGALRM raises KeyboardInterrupt in the main thread, as Ctrl-C does; the handler before is
    restored after it, and an interval timer left running is cancelled."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class BatchCounter:
    """ExampleLLM answers; every ``chat_batch`` call's size is recorded (a backend that batches)."""

    def __init__(self) -> None:
        self.inner = ExampleLLM(seed=1)
        self.batches: list[int] = []
        self.threads: set[str] = set()

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        return self.chat_batch([messages], temperature=temperature)[0]

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]:
        self.batches.append(len(conversations))
        self.threads.add(threading.current_thread().name)
        return [self.inner.chat(c, temperature=temperature) for c in conversations]


def test_lockstep_histories_equal_separate_runs_and_calls_are_batched(make_r2po) -> None:
    seeds = [0, 1, 2]
    alone = [make_r2po(seed=seed, llm=ExampleLLM(seed=1), **SETTINGS).learn(UNTIL_BUDGET) for seed in seeds]
    counter = BatchCounter()
    together = learn_in_lockstep([make_r2po(seed=seed, llm=counter, **SETTINGS) for seed in seeds], UNTIL_BUDGET)
    for a, b in zip(alone, together, strict=True):
        assert b.history == a.history
        np.testing.assert_array_equal(b.policy.get_flat(), a.policy.get_flat())
        assert b.llm is counter  # the spec is given back (save() stores strings, never objects)
    calls = sum(m.llm_stats["calls"] for m in together)
    assert sum(counter.batches) == calls
    assert counter.batches[0] == len(seeds)  # the first Search calls of all seeds form one batch
    assert len(counter.batches) < calls  # calls were batched, not sent one by one
    assert max(counter.batches) <= len(seeds)


def test_a_string_llm_is_built_once_and_kept_for_save(tmp_path, make_r2po) -> None:
    models = learn_in_lockstep([make_r2po(seed=seed, llm="example:3", **SETTINGS) for seed in (0, 1)], UNTIL_BUDGET)
    assert all(m.llm == "example:3" for m in models)
    models[1].save(tmp_path / "m.zip")
    loaded = R2PO.load(tmp_path / "m.zip", env=gym.make("CartPole-v1"))
    assert loaded.llm == "example:3" and loaded.history == models[1].history
    # the shared backend keeps serving a model trained on alone afterwards
    models[0].learn(UNTIL_BUDGET, reset_num_timesteps=False)


def test_max_batch_limits_the_batch_size(make_r2po) -> None:
    counter = BatchCounter()
    learn_in_lockstep([make_r2po(seed=seed, llm=counter, **SETTINGS) for seed in (0, 1, 2)], UNTIL_BUDGET, max_batch=2)
    assert max(counter.batches) == 2


class FailingEnv(gym.Wrapper):
    """CartPole that raises on its 30th step."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == 30:
            raise RuntimeError("simulator crashed")
        return self.env.step(action)


def test_a_failing_model_does_not_stall_the_others(make_r2po) -> None:
    counter = BatchCounter()
    models = [
        make_r2po(seed=0, llm=counter, **SETTINGS),
        make_r2po(FailingEnv(), seed=1, llm=counter, **SETTINGS),
        make_r2po(seed=2, llm=counter, **SETTINGS),
    ]
    with pytest.raises(LockstepError, match="model 1: RuntimeError: simulator crashed") as info:
        learn_in_lockstep(models, UNTIL_BUDGET)
    assert list(info.value.errors) == [1]
    for model in (models[0], models[2]):  # the others trained to the end of their budget
        assert model.episodes_used == BUDGET and model.iteration > 0


def test_models_must_share_one_llm(make_r2po) -> None:
    with pytest.raises(ValueError, match="one llm for all models"):
        learn_in_lockstep([make_r2po(seed=0, llm="example:1", **SETTINGS), make_r2po(seed=1, llm="example:2", **SETTINGS)], 10)
    model = make_r2po(seed=0, llm="example:1", **SETTINGS)
    with pytest.raises(ValueError, match="same model twice"):
        learn_in_lockstep([model, model], 10)
    with pytest.raises(ValueError, match="2 callbacks for 1 models"):
        learn_in_lockstep([model], 10, callbacks=[None, None])


def test_batching_backend_without_workers_answers_at_once_and_forwards_errors() -> None:
    backend = BatchingBackend(ExampleLLM(seed=0))
    messages = [{"role": "user", "content": "Parameter space: 2 parameters in [-6.0, 6.0]"}]
    reply = backend.chat(messages)
    assert reply.text == ExampleLLM(seed=0).chat(messages).text
    assert backend.batch_sizes == [1]

    def broken(messages):
        raise ConnectionError("server gone")

    failing = BatchingBackend(broken)
    results: list[BaseException] = []

    def ask() -> None:
        with failing.worker():
            try:
                failing.chat(messages)
            except ConnectionError as exc:
                results.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(results) == 3 and all("server gone" in str(e) for e in results)
    with pytest.raises(ValueError, match="max_batch"):
        BatchingBackend(broken, max_batch=0)


@pytest.mark.parametrize("reject_duplicates", [False, True])
def test_pure_search_asks_its_two_proposals_as_one_batch(make_r2po, reject_duplicates: bool) -> None:
    counter = BatchCounter()
    options = {"reject_duplicates": True, "on_unusable_reply": "reask"} if reject_duplicates else {}
    model = make_r2po(seed=0, llm=counter, variant="pure_search", **SETTINGS, **options).learn(UNTIL_BUDGET)
    iterations = [r for r in model.history if r["kind"] != "warmup"]
    assert iterations and counter.batches[0] == 2  # warm-up needs no LLM: the first call is the first pair
    assert counter.batches.count(2) == len(iterations)  # one pair per iteration (re-asks go one by one)
    for record in iterations:
        second = record["revision"]
        assert second["role"] == "search" and second["mean_return"] is not None  # both proposals evaluated
        if reject_duplicates:  # ours: a second proposal equal to the first is re-asked
            assert second["params"] != record["search"]["params"]


def test_set_llm_validates_and_takes_effect_at_the_next_learn(make_r2po) -> None:
    first = BatchCounter()
    model = make_r2po(seed=0, llm=first, **SETTINGS)
    with pytest.raises(TypeError, match="llm must be a string"):
        model.set_llm(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="matches no accepted form"):
        model.set_llm("no such thing here")
    assert model.llm is first  # a rejected llm changes nothing
    model.learn(UNTIL_BUDGET)
    other = BatchCounter()
    model.set_llm(other)
    model.settings = dataclasses.replace(model.settings, max_episodes=model.settings.max_episodes + 6)
    model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert other.batches and model.llm is other


def test_an_interrupt_in_the_caller_stops_every_model(make_r2po) -> None:
    """Ctrl-C while the models train: they stop at their next step and no thread trains on in the background."""
    example = ExampleLLM(seed=0)

    def slow(messages: list[dict[str, str]]) -> str:
        time.sleep(0.02)
        return example.chat(messages).text

    # a budget the runs would spend by themselves in seconds: a stop that is ignored fails the test, it cannot hang it
    budget = 600
    models = [make_r2po(llm=slow, n_eval_episodes=3, warmup_episodes=2, seed=s, max_episodes=budget) for s in range(2)]

    with sigalrm_is_ctrl_c(), pytest.raises(KeyboardInterrupt):
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        learn_in_lockstep(models, UNTIL_BUDGET)
    assert not [t for t in threading.enumerate() if t.name.startswith("r2po-lockstep") and t.is_alive()]
    lengths = [len(m.history) for m in models]
    time.sleep(0.3)
    assert [len(m.history) for m in models] == lengths and all(m.llm is slow for m in models)
    assert all(m.history[-1]["episodes"] < budget // 2 for m in models)  # stopped at the interrupt, not at the budget


def test_an_interrupt_returns_only_once_a_model_inside_an_llm_call_has_stopped(make_r2po) -> None:
    """Ctrl-C lands while the caller waits and a model waits for its Critic: learn_in_lockstep propagates it only once
    that model has finished the iteration (the revision cut at its first step) and stopped. Waiting with Thread.join()
    failed this: an interrupted join() marks the running thread stopped (CPython issue 90882), so it returned at once
    and the model committed its iteration afterwards."""
    example, calls = ExampleLLM(seed=0), 0

    def critic_interrupted(messages: list[dict[str, str]]) -> str:
        nonlocal calls
        calls += 1
        if calls == 4:  # iteration 2's Critic: Ctrl-C reaches the caller, and the reply comes 0.3 s later
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)
            time.sleep(0.3)
        return example.chat(messages).text

    model = make_r2po(llm=critic_interrupted, n_eval_episodes=3, warmup_episodes=2, seed=0, max_episodes=600)

    with sigalrm_is_ctrl_c(), pytest.raises(KeyboardInterrupt):
        learn_in_lockstep([model], UNTIL_BUDGET)
    assert [r["iteration"] for r in model.history] == [0, 0, 1, 2] and calls == 4
    assert model.history[-1]["revision"]["status"] == "interrupted"
    time.sleep(0.3)
    assert len(model.history) == 4 and calls == 4


def test_a_function_callback_works_as_in_learn(make_r2po) -> None:
    """SB3 accepts a plain function ``(locals, globals) -> bool`` as a callback; so does the lockstep run."""
    seen = []

    def on_step(_locals: dict, _globals: dict) -> bool:
        seen.append(1)
        return True

    models = [make_r2po(seed=seed, llm="example", **SETTINGS) for seed in range(2)]
    learn_in_lockstep(models, UNTIL_BUDGET, callbacks=[on_step, None])
    assert len(seen) == models[0].num_timesteps and models[1].history


def test_one_models_failing_call_does_not_fail_the_others_in_its_batch() -> None:
    """An inner backend without chat_batch answers a batch one by one: a prompt it rejects fails only its caller."""

    class OneByOne:
        def __init__(self) -> None:
            self.example = ExampleLLM(seed=1)

        def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
            if "poison" in messages[-1]["content"]:
                raise ValueError("prompt does not fit n_ctx")
            return self.example.chat(messages, temperature=temperature)

    backend = BatchingBackend(OneByOne())
    results: dict[int, str] = {}
    barrier = threading.Barrier(3)

    def ask(i: int) -> None:
        with backend.worker():
            barrier.wait()
            try:
                backend.chat([{"role": "user", "content": "poison" if i == 0 else f"hello {i}"}])
                results[i] = "ok"
            except ValueError as exc:
                results[i] = str(exc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert backend.batch_sizes == [3] and results == {0: "prompt does not fit n_ctx", 1: "ok", 2: "ok"}


def test_pure_search_in_lockstep_never_calls_the_inner_backend_from_two_threads(make_r2po) -> None:
    """pure_search asks its two proposals with chat_batch: they join the shared batches (one inner call at a time)."""

    class Guard(BatchCounter):
        def __init__(self) -> None:
            super().__init__()
            self.active = 0
            self.most = 0
            self.lock = threading.Lock()

        def chat_batch(self, conversations, *, temperature: float = 0.0):  # type: ignore[no-untyped-def]
            with self.lock:
                self.active += 1
                self.most = max(self.most, self.active)
            try:
                time.sleep(0.01)  # long enough for another thread's call to overlap, if one could
                return super().chat_batch(conversations, temperature=temperature)
            finally:
                with self.lock:
                    self.active -= 1

    inner = Guard()
    models = [make_r2po(seed=seed, llm=inner, variant="pure_search", **SETTINGS) for seed in range(3)]
    learn_in_lockstep(models, UNTIL_BUDGET)
    assert inner.most == 1 and sum(inner.batches) >= 2 * 3 and max(inner.batches) > 2


def test_lockstep_edge_arguments_and_forwarded_learn_options(make_r2po) -> None:
    assert learn_in_lockstep([], 10) == []
    with pytest.raises(ValueError, match="have no llm"):
        learn_in_lockstep([make_r2po(seed=0, llm=None, **SETTINGS), make_r2po(seed=1, llm=None, **SETTINGS)], 10)
    counter = BatchCounter()
    models = learn_in_lockstep([make_r2po(seed=seed, llm=counter, **SETTINGS) for seed in (0, 1)], UNTIL_BUDGET)
    lengths = [len(m.history) for m in models]
    # reset_num_timesteps=False reaches every learn(): the spent budget stays spent, nothing trains again
    learn_in_lockstep(models, UNTIL_BUDGET, reset_num_timesteps=False)
    assert [len(m.history) for m in models] == lengths and all(m.episodes_used == BUDGET for m in models)


def test_a_list_of_callbacks_for_one_model(make_r2po) -> None:
    seen: list[str] = []

    class Named(BaseCallback):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def _on_step(self) -> bool:
            seen.append(self.name)
            return True

    learn_in_lockstep([make_r2po(seed=0, llm=BatchCounter(), **SETTINGS)], UNTIL_BUDGET, callbacks=[[Named("a"), Named("b")]])
    assert seen.count("a") == seen.count("b") > 0
