"""Record every LLM call to a JSONL file (the run directory's transcript, one fsynced line per call; a marker
``{"rewind": N}`` keeps only the first N calls before it), and replay such a file as a backend (``llm="replay:PATH"``)."""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sb3_r2po.common.files import append_line, cut_partial_line
from sb3_r2po.llm.base import (
    BatchResult,
    ChatBackend,
    ChatReply,
    LLMBackendError,
    Message,
    TransientState,
    answer_batch,
    canonical_messages,
    redact,
    request_hash,
    request_settings,
)
from sb3_r2po.llm.resolve import StringForm, make_backend, reserved_prefix

RECORD_VERSION = 1


def _describe(backend: Any) -> dict[str, Any]:
    """The backend's class, ``repr`` and settings, credentials masked."""
    info: dict[str, Any] = {"class": type(backend).__name__, "repr": redact(repr(backend))}
    for name in ("model", "reasoning_effort", "max_new_tokens", "max_tokens", "base_url"):
        value = getattr(backend, name, None)
        if isinstance(value, (str, int, float, bool)):
            info[name] = redact(value) if isinstance(value, str) else value
    return info


class RecordingBackend(TransientState):
    """Pass calls to ``inner`` and append each with its reply to a JSONL file (fsynced; a torn last line is cut off, warned).

    :param inner: The backend to record (a backend, a callable ``(messages) -> str`` or an ``llm`` string).
    :param path: The JSONL file (created with its folder; appended to when it exists).
    """

    def __init__(self, inner: ChatBackend | Callable[[list[Message]], str] | str, path: str | os.PathLike[str]) -> None:
        self.inner: ChatBackend = make_backend(inner)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.recorded = 0  # calls in the file as readers see them (rewound calls not counted)
        self.refresh()

    def refresh(self) -> int:
        """Read the file again: cut off a half-written last line (with a warning) and return its calls."""
        with self._lock:
            self._warn_cut(cut_partial_line(self.path))
            self.recorded = len(read_records(self.path)) if self.path.is_file() else 0
            return self.recorded

    def _warn_cut(self, cut: bytes) -> None:
        if cut:
            _warn_torn(f"{self.path}: cut off a half-written last line ({len(cut)} bytes, starting {cut[:60]!r})", 5)

    def rewind(self, calls: int) -> int:
        """Set aside the recorded calls after the first ``calls`` (readers skip them) and return how many."""
        if calls < 0:
            raise ValueError(f"calls must be >= 0, got {calls}")
        extra = self.recorded - calls
        if extra <= 0:
            return 0
        self._append(version=RECORD_VERSION, rewind=int(calls), set_aside=extra, time=time.time())
        self.recorded = calls
        why = f"{self.path}: {extra} recorded call(s) after call {calls} set aside (a resumed run asks them again)"
        warnings.warn(f"{why}; they stay in the file, replay skips them", RuntimeWarning, stacklevel=2)
        return extra

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        """Ask ``inner`` and record the call."""
        reply = self.inner.chat(messages, temperature=temperature)
        self._record(messages, temperature, reply)
        return reply

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]:
        """As :meth:`answer_batch`, raising the first error once every reply that came is recorded."""
        return self.answer_batch(conversations, temperature=temperature).unwrap()

    def answer_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> BatchResult:
        """Ask ``inner`` for several conversations, record each reply that came, in order; return each reply or error."""
        result = answer_batch(self.inner, conversations, temperature=temperature)
        for messages, reply in zip(conversations, result.replies, strict=True):
            if reply is not None:
                self._record(messages, temperature, reply)
        return result

    def _record(self, messages: Sequence[Message], temperature: float, reply: ChatReply) -> None:
        settings = request_settings(temperature)
        self._append(
            version=RECORD_VERSION,
            hash=request_hash(messages, settings),
            time=time.time(),
            messages=canonical_messages(messages),
            settings=settings,
            backend=_describe(self.inner),
            reply=reply.to_dict(),
        )
        with self._lock:
            self.recorded += 1

    def _append(self, **line: Any) -> None:
        data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:  # a failed write is cut back; a torn line left by a crash is cut off first
            self._warn_cut(append_line(self.path, data))

    def __repr__(self) -> str:
        return f"RecordingBackend({self.inner!r}, {str(self.path)!r})"


def _warn_torn(what: str, stacklevel: int) -> None:
    warnings.warn(f"{what}: the call it was recording never returned", RuntimeWarning, stacklevel=stacklevel)


class ReplayMissError(LLMBackendError):
    """A replayed request has no recorded reply left (``request_hash``: the request's hash)."""

    def __init__(self, message: str, *, request_hash: str) -> None:
        super().__init__(message)
        self.request_hash = request_hash


def _problem(record: Any, count: int) -> str | None:
    if not isinstance(record, dict):
        return "not a recorded LLM call (not a JSON object)"
    if "rewind" in record and "hash" not in record:
        rewind = record["rewind"]
        if isinstance(rewind, bool) or not isinstance(rewind, int) or not 0 <= rewind <= count:
            return f"a rewind marker with an invalid call count ({rewind!r}; {count} calls precede it)"
        return None
    if not isinstance(record.get("hash"), str) or not isinstance(record.get("reply"), dict):
        return "not a recorded LLM call (no request hash or no reply)"
    return None


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a :class:`RecordingBackend` file, in order, without the calls a ``rewind`` marker set aside; a
    torn last line is skipped with a warning, any other line that is not a record raises :class:`LLMBackendError`."""
    records: list[dict[str, Any]] = []
    lines = Path(path).read_bytes().split(b"\n")  # only a newline ends a line (not U+2028 inside a reply)
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8-sig"))  # -sig: an editor's byte order mark
        except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            problem: str | None = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else "not JSON"
            if number == len(lines):  # the last line, without its newline: the call it recorded never returned
                _warn_torn(f"{path}: skipping a half-written last line {number} ({len(raw)} bytes, {problem})", 3)
                continue
        else:
            problem = _problem(record, len(records))
        if problem is not None:
            raise LLMBackendError(
                f"{path}: line {number} is {problem}: the recording is damaged (a crash only cuts its last line short), "
                "and leaving the line out would change a replay. Restore the file from a copy; to keep only the calls "
                f"before the damage, keep its first {number - 1} line(s) (e.g. head -n {number - 1} FILE > FIXED), or "
                "move it aside to start a new recording"
            )
        if "hash" in record:
            records.append(record)
        else:  # a rewind marker
            del records[record["rewind"] :]
    return records


class ReplayBackend(TransientState):
    """Answer from a recording made by :class:`RecordingBackend`, by request hash (repeated requests in recorded order).

    :param path: The JSONL recording (read on the first call).
    :param fallback: A backend, callable or ``llm`` string answering what the recording lacks (else ReplayMissError).
    """

    def __init__(
        self, path: str | os.PathLike[str], fallback: ChatBackend | Callable[[list[Message]], str] | str | None = None
    ) -> None:
        self.path = Path(path).expanduser()
        self.fallback: ChatBackend | None = None if fallback is None else make_backend(fallback)
        self.stats: dict[str, int] = {"hits": 0, "misses": 0}
        self._queues: dict[str, deque[dict[str, Any]]] | None = None
        self._recorded: dict[str, int] = {}
        self._asked: dict[str, int] = {}
        self._lock = threading.Lock()

    def _load(self) -> dict[str, deque[dict[str, Any]]]:
        if self._queues is None:
            if not self.path.is_file():
                raise LLMBackendError(f"Replay recording {str(self.path)!r} does not exist")
            queues: dict[str, deque[dict[str, Any]]] = {}
            for record in read_records(self.path):
                queues.setdefault(record["hash"], deque()).append(record["reply"])
            self._recorded = {h: len(q) for h, q in queues.items()}
            self._queues = queues
        return self._queues

    def __len__(self) -> int:
        """Recorded replies not yet replayed."""
        with self._lock:
            return sum(len(q) for q in self._load().values())

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        """The next recorded reply to this request (:class:`ReplayMissError` when none is left and there is no fallback)."""
        key = request_hash(messages, request_settings(temperature))
        with self._lock:
            queue = self._load().get(key)
            self._asked[key] = self._asked.get(key, 0) + 1
            reply = queue.popleft() if queue else None
        if reply is not None:
            self.stats["hits"] += 1
            tokens = (reply.get("prompt_tokens"), reply.get("completion_tokens"))
            seconds, cached = float(reply.get("seconds") or 0.0), reply.get("prompt_tokens_cached")  # cached: None if absent
            return ChatReply(str(reply.get("text", "")), *tokens, seconds, prompt_tokens_cached=cached)
        self.stats["misses"] += 1
        if self.fallback is not None:
            return self.fallback.chat(messages, temperature=temperature)
        start = " ".join(str(messages[-1].get("content", "")).split())[:80] if messages else ""
        recorded = self._recorded.get(key, 0)
        why = f"it was recorded {recorded} time(s) and is now asked for time {self._asked[key]}" if recorded else ""
        raise ReplayMissError(
            f"No recorded reply in {str(self.path)!r} for request {key[:12]} "
            f"(temperature {float(temperature):g}, last message starts {start!r}): {why or 'it was never recorded'}. "
            "Pass ReplayBackend(path, fallback=...) to answer misses with another backend.",
            request_hash=key,
        )

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]:
        """Replay several requests, in order."""
        return [self.chat(c, temperature=temperature) for c in conversations]

    def __repr__(self) -> str:
        return f"ReplayBackend({str(self.path)!r}, fallback={self.fallback!r})"


def _check_replay(spec: str) -> None:
    if not spec.partition(":")[2].strip():
        raise ValueError(
            f"llm={spec!r}: 'replay:' needs the path of a recorded JSONL file, e.g. 'replay:runs/llm_calls.jsonl'"
        )


REPLAY_FORM = StringForm(
    "replay:PATH (answer from a RecordingBackend JSONL file)",
    "replay:runs/llm_calls.jsonl",
    reserved_prefix("replay"),
    lambda spec: ReplayBackend(spec.partition(":")[2].strip()),
    _check_replay,
)
"""The ``llm`` string form ``replay:PATH``: a :class:`ReplayBackend` of the recording at ``PATH``."""
