"""The LLM seam: what R2PO needs from a language model, and nothing more.

A request's identity (:func:`request_hash`: what a recording is keyed by, what a seeded backend derives its seed from)
leaves out backend settings (model, reasoning effort, ...): a replay cannot know them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sb3_r2po.common.parameters import ParameterSpace

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
    :param prompt_tokens_cached: Of ``prompt_tokens``, those the backend did not have to process because it had them
        from an earlier call (a prefix cache), when the backend reports them (``None``: unknown).
    """

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0
    prompt_tokens_cached: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The reply as a JSON-ready dict; ``prompt_tokens_cached`` only when the backend reported it."""
        values = asdict(self)
        if values["prompt_tokens_cached"] is None:  # a backend that does not know writes what it always wrote
            del values["prompt_tokens_cached"]
        return values


@runtime_checkable
class ChatBackend(Protocol):
    """A chat model R2PO can call, stateless between calls (every prompt is complete). Optional capabilities:
    :class:`Preparable`, :class:`ChecksResources`, :class:`Constrainable`, :class:`BatchChat`, :class:`AnswersBatch`."""

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply: ...


@runtime_checkable
class Preparable(Protocol):
    """A backend with a slow first step (loading a model): R2PO calls ``prepare`` at the start of the first ``learn()``."""

    def prepare(self) -> None: ...


@runtime_checkable
class ChecksResources(Protocol):
    """A backend that can tell cheaply, before anything is loaded, that it cannot run here: ``check_resources`` raises
    :class:`LLMBackendError` saying what to install or free (R2PO calls it before the first ``learn()``)."""

    def check_resources(self) -> None: ...


@runtime_checkable
class Constrainable(Protocol):
    """A backend that can constrain its decoding to well-formed replies for a
    :class:`~sb3_r2po.common.parameters.ParameterSpace` (R2PO calls ``constrain`` first); ``constrain(None)`` lifts it."""

    def constrain(self, space: ParameterSpace | None) -> None: ...


@runtime_checkable
class BatchChat(Protocol):
    """A backend that answers several independent conversations at once (see :func:`chat_batch`)."""

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]: ...


@runtime_checkable
class AnswersBatch(Protocol):
    """A backend whose batch returns each conversation's reply or error (see :func:`answer_batch`)."""

    def answer_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> BatchResult: ...


@dataclass(frozen=True)
class BatchResult:
    """
    What a batch of conversations got: for each, in order, its reply or its error (exactly one of the two).

    :param replies: The replies (``None`` where the conversation failed).
    :param errors: The errors (``None`` where a reply came).
    """

    replies: tuple[ChatReply | None, ...]
    errors: tuple[BaseException | None, ...]

    def __post_init__(self) -> None:
        if len(self.replies) != len(self.errors):
            raise ValueError(f"{len(self.replies)} replies for {len(self.errors)} errors")
        if any((reply is None) == (error is None) for reply, error in zip(self.replies, self.errors, strict=True)):
            raise ValueError("each conversation of a batch has either a reply or an error")

    @classmethod
    def answered(cls, replies: Sequence[ChatReply]) -> BatchResult:
        """Every conversation answered."""
        return cls(tuple(replies), (None,) * len(replies))

    @classmethod
    def failed(cls, error: BaseException, count: int) -> BatchResult:
        """A batch of ``count`` conversations that failed as a whole, with ``error``."""
        return cls((None,) * count, (error,) * count)

    @property
    def first_error(self) -> BaseException | None:
        """The error of the first conversation that failed, or ``None``."""
        return next((error for error in self.errors if error is not None), None)

    def unwrap(self) -> list[ChatReply]:
        """The replies, in order; raise the first error when a conversation failed."""
        error = self.first_error
        if error is not None:
            raise error
        return [reply for reply in self.replies if reply is not None]  # all of them: no conversation failed


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
    """Mixin for backends holding what must never be pickled (models, clients holding API keys, locks): the attributes
    named in ``_transient`` are pickled as ``None``, the locks named in ``_locks`` are recreated on unpickling."""

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


def ask_each(backend: ChatBackend, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> BatchResult:
    """Ask ``conversations`` one after another; a failing one does not stop the others (an exception that is not an
    ``Exception``, e.g. ``KeyboardInterrupt``, does)."""
    replies: list[ChatReply | None] = []
    errors: list[BaseException | None] = []
    for messages in conversations:  # independent conversations: one failing does not stop the others
        try:
            replies.append(backend.chat(messages, temperature=temperature))
            errors.append(None)
        except Exception as exc:
            replies.append(None)
            errors.append(exc)
    return BatchResult(tuple(replies), tuple(errors))


def answer_batch(backend: ChatBackend, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> BatchResult:
    """What each of several independent conversations got: from the backend's own ``answer_batch``, else its
    ``chat_batch`` (whose error is every conversation's), else asked one after another (:func:`ask_each`)."""
    if isinstance(backend, AnswersBatch):
        return backend.answer_batch(conversations, temperature=temperature)
    if isinstance(backend, BatchChat):
        try:
            replies = backend.chat_batch(conversations, temperature=temperature)
        except Exception as exc:  # the batch failed as a whole
            return BatchResult.failed(exc, len(conversations))
        return BatchResult.answered(replies)
    return ask_each(backend, conversations, temperature=temperature)


def chat_batch(
    backend: ChatBackend, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0
) -> list[ChatReply]:
    """The replies to several independent conversations: one batch when the backend has ``chat_batch``, else as
    :func:`answer_batch` asks them, raising the first error after all were asked."""
    if isinstance(backend, BatchChat):
        return list(backend.chat_batch(conversations, temperature=temperature))
    return answer_batch(backend, conversations, temperature=temperature).unwrap()


def request_settings(temperature: float) -> dict[str, Any]:
    """The request settings that are part of a request's identity."""
    return {"temperature": float(temperature)}


def canonical_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """The messages as they count for a request's identity: ``role`` and ``content`` only, as strings."""
    return [{"role": str(m.get("role", "")), "content": str(m.get("content", ""))} for m in messages]


def request_hash(messages: Sequence[Message], settings: dict[str, Any]) -> str:
    """The SHA-256 (hex) identifying a request: its messages' ``role`` and ``content``, and :func:`request_settings`."""
    payload = {"messages": canonical_messages(messages), "settings": settings}
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
