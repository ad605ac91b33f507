"""Gather the LLM calls that several training threads make at the same time into one batch.

Several R2PO models trained side by side (seeds of a comparison, variants of an ablation) reach their LLM calls
at about the same moments. :class:`BatchingBackend` holds each call until every registered worker thread is
waiting for the LLM (or has finished), then sends the waiting conversations to the inner backend together: one
padded ``generate`` for :class:`~sb3_r2po.llm.transformers_backend.TransformersBackend`, concurrent requests for
:class:`~sb3_r2po.llm.openai_backend.OpenAIBackend`, one after another for backends without ``chat_batch``.

When no worker is registered, a call is sent as soon as nothing else is in flight, so a model keeps working with
this backend after its lockstep run. A call from an unregistered thread while workers are registered joins their
next batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sb3_r2po.llm.base import (
    ChatBackend,
    ChatReply,
    Message,
    batch_errors,
    batch_replies,
    chat_batch,
    keep_batch_replies,
    own_copy,
)


@dataclass
class _Request:
    messages: Sequence[Message]
    temperature: float
    reply: ChatReply | None = None
    error: BaseException | None = None
    done: bool = False


class BatchingBackend:
    """
    A :class:`~sb3_r2po.llm.base.ChatBackend` shared by several threads that sends their concurrent calls as
    batches of ``inner``.

    Which calls share a batch depends on timing; the replies of a deterministic (greedy) ``inner`` do not, except
    for the small numerical effect of padding in a batched ``generate`` (see ``docs/scaling.md``).

    :param inner: The backend (or ``llm`` string, or callable) that answers.
    :param max_batch: The largest batch sent at once (``None``: every waiting call).
    """

    def __init__(self, inner: ChatBackend | Callable[[list[Message]], str] | str, max_batch: int | None = None) -> None:
        from sb3_r2po.llm.resolve import make_backend

        if max_batch is not None and max_batch < 1:
            raise ValueError(f"max_batch must be >= 1 or None, got {max_batch}")
        self.inner: ChatBackend = make_backend(inner)
        self.max_batch = max_batch
        self.batch_sizes: list[int] = []
        """The size of every batch sent, in order (for tests and benchmarks)."""
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._workers = 0
        self._in_flight = False
        self._setup_lock = threading.Lock()

    # ------------------------------------------------------------------ workers

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

    # ------------------------------------------------------------------ the backend seam

    def check_resources(self) -> None:
        """Forwarded to ``inner`` (once at a time)."""
        self._forward("check_resources")

    def constrain(self, space: Any) -> None:
        """Forwarded to ``inner``: every model sharing this backend must have the same parameter space."""
        self._forward("constrain", space)

    def _forward(self, name: str, *args: Any) -> None:
        method = getattr(self.inner, name, None)
        if callable(method):
            with self._setup_lock:
                method(*args)

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        """
        Answer one conversation, as part of the next batch.

        :param messages: Chat messages.
        :param temperature: Sampling temperature.
        """
        return self._answer([_Request(messages, temperature)])[0]

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]:
        """
        Answer several conversations of one caller (e.g. ``pure_search``'s two proposals) in the next batch, with
        the other threads' calls: the inner backend is never called from two threads at once.

        :param conversations: The conversations.
        :param temperature: Sampling temperature.
        """
        return self._answer([_Request(messages, temperature) for messages in conversations])

    def _answer(self, requests: list[_Request]) -> list[ChatReply]:
        """Queue ``requests``, take part in sending batches until they are answered, and return their replies."""
        with self._cond:
            self._pending.extend(requests)
            self._cond.notify_all()
            while not all(request.done for request in requests):
                batch = self._take_batch()
                if batch:
                    self._send(batch)  # releases the lock while the inner backend works
                else:
                    self._cond.wait()
        failed = [request for request in requests if request.error is not None]
        if failed:
            error = own_copy(failed[0].error)  # type: ignore[arg-type]  # the inner error may be other callers' too
            keep_batch_replies(error, [request.reply for request in requests], [request.error for request in requests])
            raise error
        return [request.reply for request in requests]  # type: ignore[misc]

    # ------------------------------------------------------------------ batching (called with the lock held)

    def _take_batch(self) -> list[_Request]:
        """The next batch when it is complete and nothing is in flight, else ``[]``."""
        if self._in_flight or not self._pending:
            return []
        wanted = max(1, self._workers)
        if self.max_batch is not None:
            wanted = min(wanted, self.max_batch)
        if len(self._pending) < wanted:
            return []
        batch, self._pending = self._pending[:wanted], self._pending[wanted:]
        if self.max_batch is None:  # everything waiting goes (calls from unregistered threads included)
            batch, self._pending = batch + self._pending, []
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
                    replies = chat_batch(self.inner, [r.messages for r in group], temperature=temperature)
                except BaseException as exc:  # a caller whose conversation got no reply sees the failure
                    partial = batch_replies(exc) or [None] * len(group)
                    own = batch_errors(exc) or [exc] * len(group)  # each conversation's own error, when known
                    for request, reply, error in zip(group, partial, own, strict=True):
                        if reply is None:
                            request.error = error or exc
                        else:
                            request.reply = reply
                else:
                    for request, reply in zip(group, replies, strict=True):
                        request.reply = reply
        finally:
            self._cond.acquire()
            self.batch_sizes.append(len(batch))
            for request in batch:
                request.done = True
            self._in_flight = False
            self._cond.notify_all()

    def __repr__(self) -> str:
        return f"BatchingBackend({self.inner!r}, max_batch={self.max_batch})"
