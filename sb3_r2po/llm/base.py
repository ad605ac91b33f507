"""The LLM seam: what R2PO needs from a language model, and nothing more."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

Message = dict[str, str]
"""An OpenAI-style chat message, ``{"role": "system" | "user" | "assistant", "content": "..."}``."""


@dataclass
class ChatReply:
    """
    One reply of a chat model.

    :param text: The answer text (for harmony models, the final channel when the backend extracted it,
        otherwise the raw text; R2PO's parser handles both).
    :param prompt_tokens: Prompt tokens, when the backend reports them.
    :param completion_tokens: Completion tokens, when the backend reports them.
    :param seconds: Wall-clock latency of the call.
    """

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class ChatBackend(Protocol):
    """
    A chat model R2PO can call. Implement ``chat``; ``chat_batch`` is optional (see :func:`chat_batch`).

    Backends must be stateless between calls: R2PO re-renders the whole context in every prompt.
    """

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply: ...


@runtime_checkable
class Preparable(Protocol):
    """
    A backend with a slow first step (joining or loading a model): R2PO calls ``prepare`` once, at the start of the
    first ``learn()``, so that the step is reported there (``verbose >= 1``) instead of hiding in the first call.
    """

    def prepare(self) -> None: ...


@contextlib.contextmanager
def log_progress(enabled: bool) -> Iterator[None]:
    """While active (and ``enabled``), print the ``sb3_r2po`` loggers' INFO records (a backend's progress) to stdout."""
    log = logging.getLogger("sb3_r2po")
    if not enabled or (log.isEnabledFor(logging.INFO) and log.hasHandlers()):
        yield  # the user's own logging configuration already shows them
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("R2PO: %(message)s"))
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


class TransientState:
    """
    Mixin for backends that hold things which must never be pickled or saved (models, HTTP clients holding API
    keys, locks): the attributes named in ``_transient`` are pickled as ``None``, the locks named in ``_locks``
    are recreated on unpickling.
    """

    _transient: tuple[str, ...] = ()
    _locks: tuple[str, ...] = ("_lock",)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in (*self._transient, *self._locks):
            state[name] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for name in self._locks:
            setattr(self, name, threading.Lock())


class LLMBackendError(RuntimeError):
    """A backend could not produce a reply (server unreachable after retries, model missing, ...)."""


class CallableBackend:
    """
    Adapt a plain callable ``(messages) -> str`` to :class:`ChatBackend`.

    :param fn: The callable. It receives a list of chat messages and returns the reply text.
    """

    def __init__(self, fn: Callable[[list[Message]], str]) -> None:
        if not callable(fn):
            raise TypeError(f"Expected a callable (messages) -> str, got {type(fn).__name__}")
        self.fn = fn

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        start = time.perf_counter()
        text = self.fn([dict(m) for m in messages])
        if not isinstance(text, str):
            raise TypeError(f"The llm callable must return a str, got {type(text).__name__}")
        return ChatReply(text=text, seconds=time.perf_counter() - start)

    def __repr__(self) -> str:
        return f"CallableBackend({getattr(self.fn, '__name__', type(self.fn).__name__)})"


def chat_batch(
    backend: ChatBackend, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0
) -> list[ChatReply]:
    """
    Ask several independent conversations at once: one batch when the backend implements
    ``chat_batch``, otherwise one call after another. In the latter case a conversation that fails does not stop
    the others: the first error is raised after all were asked, with the replies that came attached
    (:func:`batch_replies`).
    """
    batched = getattr(backend, "chat_batch", None)
    if callable(batched):
        return list(batched(conversations, temperature=temperature))
    replies: list[ChatReply | None] = []
    errors: list[Exception | None] = []
    for messages in conversations:  # independent conversations: one failing does not stop the others
        try:
            replies.append(backend.chat(messages, temperature=temperature))
            errors.append(None)
        except Exception as exc:
            replies.append(None)
            errors.append(exc)
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        keep_batch_replies(first, replies, errors)
        raise first
    return replies  # type: ignore[return-value]


def keep_batch_replies(
    exc: BaseException, replies: Sequence[ChatReply | None], errors: Sequence[BaseException | None] | None = None
) -> None:
    """
    Attach to ``exc``, the error that ended a batch, the replies the batch did get (``None`` for the others), so
    that a caller can still use them (:class:`~sb3_r2po.llm.recording.RecordingBackend` records them), and, when
    known, each conversation's own error (``None`` where a reply came). ``chat_batch`` implementations call it
    before raising.
    """
    exc.batch_replies = list(replies)  # type: ignore[attr-defined]
    if errors is not None:
        exc.batch_errors = list(errors)  # type: ignore[attr-defined]


def batch_replies(exc: BaseException) -> list[ChatReply | None]:
    """The replies a failed batch did get, per conversation (``None`` where none came; ``[]`` when not known)."""
    return list(getattr(exc, "batch_replies", []))


def batch_errors(exc: BaseException) -> list[BaseException | None]:
    """Each conversation's own error in a failed batch (``None`` where a reply came; ``[]`` when not known)."""
    return list(getattr(exc, "batch_errors", []))


def own_copy(exc: BaseException) -> BaseException:
    """
    A copy of ``exc`` (same class, arguments, attributes, cause and traceback) made without calling its
    ``__init__``: one error shared by several callers of a batch, each of which attaches its own replies.
    """
    copied = type(exc).__new__(type(exc))
    copied.args = exc.args
    copied.__dict__.update(exc.__dict__)
    copied.__cause__, copied.__context__ = exc.__cause__, exc.__context__
    return copied.with_traceback(exc.__traceback__)
