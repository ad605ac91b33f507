"""Gather the LLM calls that several training threads make at the same time into one batch (:class:`BatchingBackend`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.llm.base import BatchResult, ChatBackend, ChatReply, ChecksResources, Constrainable, Message, answer_batch
from sb3_r2po.llm.resolve import make_backend


@dataclass
class _Request:
    messages: Sequence[Message]
    temperature: float
    reply: ChatReply | None = None
    error: BaseException | None = None
    done: bool = False


class BatchingBackend:
    """A backend shared by threads: a call waits until every registered :meth:`worker` waits for the LLM (or has finished),
    then the waiting conversations go to ``inner`` together (:func:`~sb3_r2po.llm.base.answer_batch`), each caller
    getting its own replies and errors; a call from an unregistered thread joins the next batch.

    :param inner: The backend (or ``llm`` string, or callable) that answers.
    :param max_batch: The largest batch sent at once (``None``: every waiting call).
    """

    def __init__(self, inner: ChatBackend | Callable[[list[Message]], str] | str, max_batch: int | None = None) -> None:
        if max_batch is not None and max_batch < 1:
            raise ValueError(f"max_batch must be >= 1 or None, got {max_batch}")
        self.inner: ChatBackend = make_backend(inner)
        self.max_batch = max_batch
        self.batch_sizes: list[int] = []  # every batch sent, in order
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._workers = 0
        self._in_flight = False
        self._setup_lock = threading.Lock()

    @contextmanager
    def worker(self) -> Iterator[None]:
        """Register the calling thread for as long as the block runs: batches wait for its call."""
        with self._cond:
            self._workers += 1
        try:
            yield
        finally:
            with self._cond:
                self._workers -= 1
                self._cond.notify_all()  # the others may now be a full batch

    def check_resources(self) -> None:
        """Forwarded to ``inner`` when it has it."""
        if isinstance(self.inner, ChecksResources):
            with self._setup_lock:
                self.inner.check_resources()

    def constrain(self, space: ParameterSpace | None) -> None:
        """Forwarded to ``inner`` when it has it: every model sharing this backend must have the same parameter space."""
        if isinstance(self.inner, Constrainable):
            with self._setup_lock:
                self.inner.constrain(space)

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        """Answer one conversation, as part of the next batch."""
        return self.answer_batch([messages], temperature=temperature).unwrap()[0]

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]:
        """Answer several conversations of one caller in the next batch; raise the first error after all were asked."""
        return self.answer_batch(conversations, temperature=temperature).unwrap()

    def answer_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> BatchResult:
        """As :meth:`chat_batch`, but return each conversation's reply or error (the caller's own copies)."""
        requests = [_Request(messages, temperature) for messages in conversations]
        self._wait_for(requests)
        copies = {id(r.error): _own_copy(r.error) for r in requests if r.error is not None}
        errors = tuple(None if r.error is None else copies[id(r.error)] for r in requests)
        return BatchResult(tuple(r.reply for r in requests), errors)

    def _wait_for(self, requests: list[_Request]) -> None:
        with self._cond:
            self._pending.extend(requests)
            self._cond.notify_all()
            while not all(request.done for request in requests):
                if batch := self._take_batch():
                    self._send(batch)  # releases the lock while the inner backend works
                else:
                    self._cond.wait()

    def _take_batch(self) -> list[_Request]:
        """The next batch (without ``max_batch``: all waiting calls) when complete and nothing is in flight, else ``[]``."""
        wanted = max(1, self._workers) if self.max_batch is None else min(max(1, self._workers), self.max_batch)
        if self._in_flight or len(self._pending) < wanted:
            return []
        size = len(self._pending) if self.max_batch is None else wanted
        batch, self._pending = self._pending[:size], self._pending[size:]
        return batch

    def _send(self, batch: list[_Request]) -> None:
        self._in_flight = True
        self._cond.release()
        try:
            groups: dict[float, list[_Request]] = {}
            for request in batch:
                groups.setdefault(request.temperature, []).append(request)
            for temperature, group in groups.items():
                try:
                    result = answer_batch(self.inner, [r.messages for r in group], temperature=temperature)
                except BaseException as exc:  # e.g. an interrupt: every caller of the group sees it
                    result = BatchResult.failed(exc, len(group))
                for request, reply, error in zip(group, result.replies, result.errors, strict=True):
                    request.reply, request.error = reply, error
        finally:
            self._cond.acquire()
            self.batch_sizes.append(len(batch))
            for request in batch:
                request.done = True
            self._in_flight = False
            self._cond.notify_all()

    def __repr__(self) -> str:
        return f"BatchingBackend({self.inner!r}, max_batch={self.max_batch})"


def _own_copy(exc: BaseException) -> BaseException:
    """A copy of ``exc`` made without its ``__init__``: one object raised from several threads would mix tracebacks."""
    copied = type(exc).__new__(type(exc))
    copied.args = exc.args
    copied.__dict__.update(exc.__dict__)
    copied.__cause__, copied.__context__ = exc.__cause__, exc.__context__
    return copied.with_traceback(exc.__traceback__)
