"""What the backends share: the seam R2PO calls, gpt-oss "harmony" handling, and masking credentials in text. A
request's identity (:func:`request_hash`) leaves out backend settings (model, reasoning effort, ...): a replay cannot
know them. Where a harmony reply's answer is, :mod:`sb3_r2po.common.parameters` reads."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sb3_r2po.common.parameters import as_cut_off, before_final, final_channel

if TYPE_CHECKING:
    from sb3_r2po.common.parameters import ParameterSpace

Message = dict[str, str]
"""An OpenAI-style chat message, ``{"role": "system" | "user" | "assistant", "content": "..."}``."""


@dataclass
class ChatReply:
    """One reply of a chat model.

    :param text: The answer text (for harmony models the final channel, or the raw text: R2PO's parser reads both).
    :param prompt_tokens: Prompt tokens, when the backend reports them.
    :param completion_tokens: Completion tokens, when the backend reports them.
    :param seconds: Wall-clock latency of the call.
    :param prompt_tokens_cached: Of ``prompt_tokens``, those a prefix cache served (``None``: not reported).
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
    """What a batch of conversations got: for each, in order, its reply (in ``replies``) or its error (in ``errors``),
    exactly one of the two (the other ``None``)."""

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
        if (error := self.first_error) is not None:
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
    """Mixin for backends holding what must never be pickled (models, clients holding API keys): the attributes named
    in ``_transient`` are pickled as ``None``; the lock ``_lock`` is recreated on unpickling."""

    _transient: tuple[str, ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, **dict.fromkeys((*self._transient, "_lock"))}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class LLMBackendError(RuntimeError):
    """A backend could not produce a reply (server unreachable after retries, model missing, ...)."""


class CallableBackend:
    """Adapt a plain callable ``(messages) -> str`` to :class:`ChatBackend`.

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
    results: list[tuple[ChatReply | None, BaseException | None]] = []
    for messages in conversations:
        try:
            results.append((backend.chat(messages, temperature=temperature), None))
        except Exception as exc:
            results.append((None, exc))
    return BatchResult(tuple(reply for reply, _ in results), tuple(error for _, error in results))


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
    """The replies to several independent conversations, asked as :func:`answer_batch` asks them; raise the first error."""
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


HARMONY_STOP_TOKENS = ("<|return|>", "<|call|>")
"""Tokens that end a harmony reply (``<|end|>`` only ends one message, e.g. the analysis, so it is not one)."""

REASONING_EFFORTS = ("low", "medium", "high")
"""gpt-oss's reasoning efforts, lowest first."""


def check_reasoning_effort(effort: str | None) -> None:
    """Raise ``ValueError`` unless ``effort`` is one of :data:`REASONING_EFFORTS` or ``None``."""
    if effort is not None and effort not in REASONING_EFFORTS:
        raise ValueError(f"reasoning_effort must be one of {REASONING_EFFORTS} or None, got {effort!r}")


def retry_request(
    effort: str | None, budget: int | None, factor: float, lower: bool = True
) -> tuple[str | None, int | None] | None:
    """The ``(effort, budget)`` of the one retry of an unanswered reply: the effort one step lower when ``lower``
    (``"low"`` stays), the budget ``factor`` times larger (at least +1; ``None`` kept); ``None`` when ``factor <= 0`` or
    the retry would ask the same."""
    if factor <= 0:
        return None
    retry_effort = effort
    if lower and effort in REASONING_EFFORTS:
        retry_effort = REASONING_EFFORTS[max(0, REASONING_EFFORTS.index(effort) - 1)]
    retry_budget = None if budget is None else max(budget + 1, int(budget * factor))
    return None if (retry_effort, retry_budget) == (effort, budget) else (retry_effort, retry_budget)


def analysis_only(reasoning: str) -> str:
    """Raw harmony text holding only an analysis message: a reply without an answer."""
    return f"<|channel|>analysis<|message|>{reasoning}"


def cut_off_reply(text: str) -> str:
    """Output the token limit cut off: a cut-off reply (:func:`as_cut_off`, whose complete lines R2PO's parser reads)
    when the answer had begun, else a reply without an answer (:func:`without_answer`)."""
    return as_cut_off(text) if final_channel(text) else without_answer(text)


def without_answer(text: str) -> str:
    """``text`` as a reply without an answer: what came before its final channel, or plain text in :func:`analysis_only`."""
    if final_channel(text) is None:
        return text
    kept = before_final(text)
    return kept if final_channel(kept) is None else analysis_only(kept)


REDACTED = "***"
"""What stands in for a credential in messages, logs and transcripts."""

_SECRET_NAME = (
    r"(?:[a-z0-9]+[_.\-])*(?:api[_.\-]?key|apikey|key|token|secret|password|passwd|pwd|pass|auth|authorization"
    r"|signature|sig|credentials?|session)"
)
_VALUE_END = r"\s&#;,\"'<>(){}\[\]"
_SCHEME = r"\b[a-z][a-z0-9+.\-]*://"
_SCHEME_RE = re.compile(r"(?i)\s*([a-z][a-z0-9+.\-]*://)(.*)", re.DOTALL)
KEY_LIKE_RE = re.compile(r"\b(?:sk|hf|gsk|xai|ghp|gho|ghs|ghu|github_pat|glpat)[-_][A-Za-z0-9_\-]{16,}|\bAKIA[0-9A-Z]{16}\b")
"""A token that looks like an API key: OpenAI's and Anthropic's ``sk-...``, Stripe's ``sk_live_...``, Hugging Face's
``hf_...``, Groq's, xAI's, GitHub's, GitLab's, AWS's access key ids."""


def _masked_value(match: re.Match[str]) -> str:
    value = match.group(2)
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match.group(1)}{quote}{REDACTED}{quote}"


_MASKS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (  # applied in this order
    (re.compile(rf"(?i)({_SCHEME})\S*@"), rf"\1{REDACTED}@"),  # user information
    (re.compile(rf"(?i)({_SCHEME})[^\s/]*%40"), rf"\1{REDACTED}%40"),  # percent-encoded user information
    (re.compile(rf"(?i)({_SCHEME})[^\s/?#@\[\]:]*:(?=\d*[^\d:/?#{_VALUE_END}])[^:/?#{_VALUE_END}]+"), rf"\1{REDACTED}"),
    (re.compile(rf"(?i)({_SCHEME}(?:(?!%3f)[^\s?])*)(?:\?|%3f)\S*"), rf"\1?{REDACTED}"),  # a query string
    (re.compile(r"[^\s:/@'\"]+:[^\s@/'\"]+@"), f"{REDACTED}@"),  # user information without a scheme
    (re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=\-]{6,}"), rf"\1\2{REDACTED}"),
    (re.compile(rf"(?i)(?<![a-z0-9])({_SECRET_NAME}\s*(?:=|%3d)\s*)(\"[^\"]*\"|'[^']*'|[^{_VALUE_END}]+)"), _masked_value),
    (re.compile(rf"(?i)([\"']{_SECRET_NAME}[\"']\s*:\s*[\"'])[^\"']*"), rf"\1{REDACTED}"),  # "name": "value"
    (KEY_LIKE_RE, REDACTED),
)


def redact(text: str) -> str:
    """``text`` (of unknown origin: an error a server sent, a backend's ``repr``) with what looks like a credential
    masked as :data:`REDACTED`: URLs' user information (also percent-encoded or without a scheme), an authority whose
    port is not a number, query strings, ``Bearer``/``Basic`` credentials, ``name=value`` and ``"name": "value"`` of
    secret-sounding names (``api_key``, ``token``, ``password``, ...) and tokens that look like API keys."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def redact_spec(spec: str) -> str:
    """An ``llm`` string (or a server URL) as messages may show it: :func:`redact` of it percent-decoded, also masking
    everything after ``scheme://`` up to the last ``@`` (a password may hold spaces, ``/`` or ``#``), everything from
    the first ``?``, and an authority whose port is not a number."""
    match = _SCHEME_RE.fullmatch(spec)
    scheme, rest = ("", spec) if match is None else match.groups()  # "user:password@host" without a scheme too
    rest = urllib.parse.unquote(rest)  # shown decoded: a percent-encoded credential is masked like a plain one
    if "@" in rest:
        rest = f"{REDACTED}@{rest.rpartition('@')[2]}"
    rest, query, _ = rest.partition("?")
    authority = re.split("[/#]", rest, maxsplit=1)[0]
    _, colon, port = authority.rpartition("]")[2].rpartition(":")
    if scheme and colon and port and not port.isdigit():
        rest = REDACTED + rest[len(authority) :]
    return redact(scheme + rest + (f"?{REDACTED}" if query else ""))


def shown(spec: str) -> str:
    """``repr`` of :func:`redact_spec` of ``spec``: how an error message names an ``llm`` string."""
    return repr(redact_spec(spec))
