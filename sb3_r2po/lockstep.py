"""Train several R2PO models side by side, their LLM calls sent together as batches.

    models = [R2PO("MlpLinear", "CartPole-v1", llm=llm, seed=seed, max_episodes=200) for seed in range(4)]
    learn_in_lockstep(models, total_timesteps=100_000)

Each model learns in its own thread; one :class:`~sb3_r2po.llm.batching.BatchingBackend` holds every LLM call
until all models still training wait for the LLM, then sends the calls as one batch (one ``generate`` on a GPU,
concurrent requests to a server). Environment steps stay in the threads (they are cheap next to an LLM call), so
a run of N seeds costs about one seed's LLM time when the backend batches well. Results do not depend on the
batching: every model keeps its own env, random generator, history and checkpoint directory, and a seed trained
in lockstep gives the same history as the same seed trained alone with a deterministic LLM (tested).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback, ConvertCallback
from stable_baselines3.common.type_aliases import MaybeCallback

from sb3_r2po.llm.base import Constrainable
from sb3_r2po.llm.batching import BatchingBackend
from sb3_r2po.r2po.r2po import R2PO


class LockstepError(RuntimeError):
    """One or more models of a lockstep run raised; the others finished. ``errors`` maps model index to exception."""

    def __init__(self, errors: dict[int, BaseException]) -> None:
        self.errors = errors
        lines = "; ".join(f"model {i}: {type(e).__name__}: {e}" for i, e in sorted(errors.items()))
        super().__init__(f"{len(errors)} model(s) of the lockstep run failed ({lines})")


class _StopWhenSet(BaseCallback):
    """Stop training (return ``False``) once ``event`` is set: how the caller's Ctrl-C reaches the worker threads."""

    def __init__(self, event: threading.Event) -> None:
        super().__init__()
        self.event = event

    def _on_step(self) -> bool:
        return not self.event.is_set()


def _with_stop(callback: MaybeCallback, event: threading.Event) -> list[BaseCallback]:
    """``callback`` (``None``, a callback, a function as SB3 accepts it, or a list) followed by a :class:`_StopWhenSet`."""
    if callback is None:
        others: list = []
    elif isinstance(callback, list):
        others = list(callback)
    else:
        others = [callback]
    return [c if isinstance(c, BaseCallback) else ConvertCallback(c) for c in others] + [_StopWhenSet(event)]


def shared_llm(models: Sequence[R2PO]) -> Any:
    """The one ``llm`` of ``models``: equal strings, or the same object; a ``ValueError`` otherwise."""
    first = models[0].llm
    for i, model in enumerate(models[1:], start=1):
        same = model.llm == first if isinstance(first, str) else model.llm is first
        if not same:
            raise ValueError(f"learn_in_lockstep needs one llm for all models; model 0 has {first!r}, model {i} {model.llm!r}")
    if first is None:
        raise ValueError("the models have no llm (llm=None): give one, e.g. R2PO.load(path, env=env, llm=...)")
    return first


def _callbacks_for(models: Sequence[R2PO], callbacks: Sequence[MaybeCallback] | None) -> Sequence[MaybeCallback]:
    """One callback per model (``None``: none for any); a ``ValueError`` for a model given twice or a count that differs."""
    if len({id(m) for m in models}) != len(models):
        raise ValueError("learn_in_lockstep got the same model twice")
    if callbacks is None:
        callbacks = [None] * len(models)
    if len(callbacks) != len(models):
        raise ValueError(f"got {len(callbacks)} callbacks for {len(models)} models")
    return callbacks


def _batching_backend(models: Sequence[R2PO], max_batch: int | None) -> tuple[Any, BatchingBackend]:
    """
    The models' shared ``llm`` spec and the one :class:`BatchingBackend` built from it; a ``ValueError`` when the
    backend constrains its decoding to one parameter space and the models have several.
    """
    spaces = {str(m.policy.parameter_space) for m in models}
    llm = shared_llm(models)
    backend = BatchingBackend(llm, max_batch=max_batch)  # built once, here
    if len(spaces) > 1 and isinstance(backend.inner, Constrainable):
        raise ValueError(f"{backend.inner!r} constrains decoding to one parameter space; the models have {len(spaces)}")
    return llm, backend


def _run_threads(
    threads: Sequence[threading.Thread], finished: Sequence[threading.Event], stop: threading.Event, ready: threading.Barrier
) -> None:
    """
    Start ``threads`` and wait until each has set its ``finished`` event. An exception meanwhile (Ctrl-C) sets ``stop``
    and breaks ``ready``, so every model stops at its next step, waits for every thread that runs, then propagates.

    The waits are on events, never ``Thread.join()``: a KeyboardInterrupt that lands in ``join()`` while the thread
    still runs marks it stopped (its ``is_alive()`` turns False and later joins return at once; CPython issue 90882,
    seen here on Python 3.11), so the caller was told every model had stopped while one still trained.
    """
    try:
        for thread in threads:
            thread.start()
        for done in finished:
            done.wait()
    except BaseException:  # Ctrl-C here: stop the models at their next step, then let it propagate
        stop.set()
        ready.abort()  # threads started before the interrupt may still wait for the others
        for thread, done in zip(threads, finished, strict=True):
            # a thread not alive without its event never ran train(), or will find the barrier broken and return
            while not done.wait(0.05) and thread.is_alive():
                pass
        raise


def learn_in_lockstep(
    models: Sequence[R2PO],
    total_timesteps: int,
    callbacks: Sequence[MaybeCallback] | None = None,
    max_batch: int | None = None,
    **learn_kwargs: Any,
) -> list[R2PO]:
    """
    Train ``models`` together, each in its own thread, batching their LLM calls.

    The models must share one ``llm`` (equal strings, or one backend object) and, when the backend constrains its
    decoding (the embedded model's grammar), one parameter space. The backend is built once. Afterwards each
    model keeps its ``llm`` string (for ``save()``) and, until ``set_llm``, the shared backend.

    :param models: The models (distinct objects, each with its own env).
    :param total_timesteps: Passed to every ``learn()``.
    :param callbacks: One callback (or ``None``) per model.
    :param max_batch: The largest batch sent to the LLM at once (``None``: all waiting calls).
    :param learn_kwargs: Other ``learn()`` arguments (``log_interval``, ``reset_num_timesteps``, ...), for every model.
    :return: The trained models.
    :raises LockstepError: when some models raised (the others are trained; every finished iteration is kept).

    An exception in the calling thread (Ctrl-C) stops every model at its next environment step (a candidate cut
    short never enters a history) and waits for the threads before it propagates, so no model trains on in the
    background.
    """
    models = list(models)
    if not models:
        return []
    callbacks = _callbacks_for(models, callbacks)
    llm, backend = _batching_backend(models, max_batch)

    errors: dict[int, BaseException] = {}
    ready = threading.Barrier(len(models))  # every worker registered before the first call: full first batch
    stop = threading.Event()
    finished = [threading.Event() for _ in models]  # set by each thread as its last act

    def train(i: int) -> None:
        try:
            with backend.worker():
                try:
                    ready.wait()
                    models[i].learn(total_timesteps, callback=_with_stop(callbacks[i], stop), **learn_kwargs)
                except threading.BrokenBarrierError:  # interrupted before every worker had started: nothing ran
                    pass
                except BaseException as exc:  # reported after every thread has finished
                    errors[i] = exc
        finally:
            finished[i].set()

    for model in models:
        model.set_llm(backend)
    try:
        # daemon threads: a second Ctrl-C while they stop still ends the process (checkpoint_dir keeps every entry)
        threads = [
            threading.Thread(target=train, args=(i,), name=f"r2po-lockstep-{i}", daemon=True) for i in range(len(models))
        ]
        _run_threads(threads, finished, stop, ready)
    finally:
        for model in models:
            model.llm = llm  # the spec is what save() stores; the backend object is never saved
    if errors:
        raise LockstepError(errors)
    return models
