"""Train several R2PO models side by side, their LLM calls sent together as batches (:func:`learn_in_lockstep`;
the Scaling page)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from stable_baselines3.common.callbacks import ConvertCallback
from stable_baselines3.common.type_aliases import MaybeCallback

from sb3_r2po import R2PO
from sb3_r2po.llm.base import Constrainable
from sb3_r2po.llm.batching import BatchingBackend
from sb3_r2po.r2po.reporting import with_callback


class LockstepError(RuntimeError):
    """Some models of a lockstep run raised (``errors``: model index -> exception); the others finished."""

    def __init__(self, errors: dict[int, BaseException]) -> None:
        self.errors = errors
        lines = "; ".join(f"model {i}: {type(e).__name__}: {e}" for i, e in sorted(errors.items()))
        super().__init__(f"{len(errors)} model(s) of the lockstep run failed ({lines})")


def _batching_backend(models: Sequence[R2PO], max_batch: int | None) -> tuple[Any, BatchingBackend]:
    """The models' one ``llm`` (equal strings, or one object) and its :class:`BatchingBackend`, else ``ValueError``."""
    llm = models[0].llm
    for i, model in enumerate(models[1:], start=1):
        if not (model.llm == llm if isinstance(llm, str) else model.llm is llm):
            raise ValueError(f"learn_in_lockstep needs one llm for all models; model 0 has {llm!r}, model {i} {model.llm!r}")
    if llm is None:
        raise ValueError("the models have no llm (llm=None): give one, e.g. R2PO.load(path, env=env, llm=...)")
    backend = BatchingBackend(llm, max_batch=max_batch)
    spaces = {str(m.policy.parameter_space) for m in models}
    if len(spaces) > 1 and isinstance(backend.inner, Constrainable):
        raise ValueError(f"{backend.inner!r} constrains decoding to one parameter space; the models have {len(spaces)}")
    return llm, backend


def _run_threads(
    train: Callable[[int], None], finished: Sequence[threading.Event], stop: threading.Event, ready: threading.Barrier
) -> None:
    """Run ``train(i)`` in a daemon thread per ``finished`` event (a second Ctrl-C while they stop still ends the process;
    checkpoint_dir keeps every entry) and wait for the events (not ``Thread.join()``: a KeyboardInterrupt inside it marks
    a running thread stopped, CPython issue 90882). On an exception (Ctrl-C) set ``stop``, break ``ready``, wait for
    every running thread and raise it."""
    threads = [threading.Thread(target=train, args=(i,), name=f"r2po-lockstep-{i}", daemon=True) for i in range(len(finished))]
    try:
        for thread in threads:
            thread.start()
        for done in finished:
            done.wait()
    except BaseException:
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
    """Train ``models`` together, each in its own thread, batching their LLM calls through one backend built once.

    The models share one ``llm`` (equal strings, or one object) and, for a backend that constrains decoding, one
    parameter space. Afterwards each keeps its ``llm`` string (for ``save()``) and, until ``set_llm``, the backend.

    :param models: The models (distinct objects, each with its own env).
    :param total_timesteps: Passed to every ``learn()``.
    :param callbacks: One callback (or ``None``) per model.
    :param max_batch: The largest batch sent to the LLM at once (``None``: all waiting calls).
    :param learn_kwargs: Other ``learn()`` arguments (``log_interval``, ``reset_num_timesteps``, ...), for every model.
    :return: The trained models.
    :raises LockstepError: when some models raised (the others are trained; every finished iteration is kept).
        An exception in the calling thread (Ctrl-C) stops every model at its next step and waits for the threads.
    """
    models = list(models)
    if not models:
        return []
    if len({id(m) for m in models}) != len(models):
        raise ValueError("learn_in_lockstep got the same model twice")
    callbacks = [None] * len(models) if callbacks is None else callbacks
    if len(callbacks) != len(models):
        raise ValueError(f"got {len(callbacks)} callbacks for {len(models)} models")
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
                    stopper = ConvertCallback(lambda _locals, _globals: not stop.is_set())  # the caller's Ctrl-C
                    models[i].learn(total_timesteps, callback=with_callback(callbacks[i], stopper), **learn_kwargs)
                except threading.BrokenBarrierError:  # interrupted before every worker had started: nothing ran
                    pass
                except BaseException as exc:  # reported after every thread has finished
                    errors[i] = exc
        finally:
            finished[i].set()

    for model in models:
        model.set_llm(backend)
    try:
        _run_threads(train, finished, stop, ready)
    finally:
        for model in models:
            model.llm = llm  # the spec is what save() stores; the backend object is never saved
    if errors:
        raise LockstepError(errors)
    return models
