"""Record every LLM call to a JSONL file (the run directory's transcript), and replay such a file as a backend.

- :class:`RecordingBackend` wraps any backend and appends one JSON line per reply: the request hash, the messages,
  the request settings, a description of the backend (credentials masked), the reply, token usage and latency. Each
  line is written and fsynced before the reply is returned (a crash loses at most the call in flight); a write that
  fails half-way is cut back, and a half-written last line a crash left is cut off, with a warning, before the next
  record is appended (:func:`~sb3_r2po.common.files.append_line`).
- :func:`read_records` skips, with a warning, a last line a crash cut short (no newline; anywhere, NUL bytes too);
  any other damaged line is an error naming it: leaving a record out would change a replay.
- A resumed run asks again the calls made after its last checkpoint: :meth:`RecordingBackend.rewind` appends a
  marker ``{"rewind": N}`` and readers keep only the first N calls before it (the others stay in the file).
- :class:`ReplayBackend` answers by the request hash (:mod:`sb3_r2po.llm.identity`: the messages and the
  temperature; backend settings are recorded, not hashed), repeated requests in their recorded order; a request
  not recorded, or asked more often, raises :class:`ReplayMissError` unless a ``fallback`` answers it.
- ``llm="replay:PATH"`` builds a :class:`ReplayBackend` (:data:`REPLAY_FORM`, registered into
  :data:`~sb3_r2po.llm.resolve.STRING_FORMS` by the :mod:`sb3_r2po.llm` package).
"""

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
from sb3_r2po.llm.base import BatchResult, ChatBackend, ChatReply, LLMBackendError, Message, TransientState, answer_batch
from sb3_r2po.llm.identity import canonical_messages
from sb3_r2po.llm.identity import request_hash as request_hash  # importable from here, as they were
from sb3_r2po.llm.identity import request_settings as request_settings
from sb3_r2po.llm.redaction import redact
from sb3_r2po.llm.resolve import StringForm, make_backend, reserved_prefix

RECORD_VERSION = 1


def _describe(backend: Any) -> dict[str, Any]:
    """What a record says of the backend: its class, ``repr`` and settings, whatever looks like a credential masked."""
    info: dict[str, Any] = {"class": type(backend).__name__, "repr": redact(repr(backend))}
    for name in ("model", "reasoning_effort", "max_new_tokens", "max_tokens", "base_url"):
        value = getattr(backend, name, None)
        if isinstance(value, (str, int, float, bool)):
            info[name] = redact(value) if isinstance(value, str) else value
    return info


class RecordingBackend(TransientState):
    """
    Pass calls to ``inner`` and append each call and its reply to a JSONL file (flushed and fsynced per call).

    :param inner: The backend to record: a :class:`~sb3_r2po.llm.base.ChatBackend`, a callable
        ``(messages) -> str``, or an ``llm`` string.
    :param path: The JSONL file (created with its folder; appended to when it exists).
    """

    def __init__(self, inner: ChatBackend | Callable[[list[Message]], str] | str, path: str | os.PathLike[str]) -> None:
        self.inner: ChatBackend = make_backend(inner)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.recorded = 0
        """Calls in the file as readers see them (rewound calls not counted), this backend's included."""
        self.refresh()

    def refresh(self) -> int:
        """
        Read the file again: cut off a half-written last line (a crash mid-write; with a warning) and count its calls.

        :return: The calls recorded in the file (:attr:`recorded`).
        :raises LLMBackendError: when a line inside the file is damaged (see :func:`read_records`).
        """
        with self._lock:
            self._warn_cut(cut_partial_line(self.path))
            self.recorded = len(read_records(self.path)) if self.path.is_file() else 0
            return self.recorded

    def _warn_cut(self, cut: bytes) -> None:
        if cut:
            warnings.warn(
                f"{self.path}: cut off a half-written last line ({len(cut)} bytes, starting {cut[:60]!r}): "
                "the call it was recording never returned",
                RuntimeWarning,
                stacklevel=4,
            )

    def rewind(self, calls: int) -> int:
        """
        Set aside the recorded calls after the first ``calls`` (they stay in the file, readers skip them): a resumed
        run asks again the calls made after its checkpoint, and a replay must follow the new answers.

        :param calls: The number of recorded calls to keep.
        :return: The number of calls set aside (0: nothing was written).
        """
        if calls < 0:
            raise ValueError(f"calls must be >= 0, got {calls}")
        extra = self.recorded - calls
        if extra <= 0:
            return 0
        self._append({"version": RECORD_VERSION, "rewind": int(calls), "set_aside": extra, "time": time.time()})
        self.recorded = calls
        warnings.warn(
            f"{self.path}: {extra} recorded call(s) after call {calls} set aside (a resumed run asks them again); "
            "they stay in the file, replay skips them",
            RuntimeWarning,
            stacklevel=2,
        )
        return extra

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        """
        Ask ``inner`` and record the call.

        :param messages: Chat messages.
        :param temperature: Sampling temperature.
        """
        reply = self.inner.chat(messages, temperature=temperature)
        self._record(messages, temperature, reply)
        return reply

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]:
        """
        Ask ``inner`` for several conversations (batched when it can) and record each call, in order. When the
        batch fails, the replies it did get are recorded before the error is raised.

        :param conversations: The conversations.
        :param temperature: Sampling temperature.
        """
        return self.answer_batch(conversations, temperature=temperature).unwrap()

    def answer_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> BatchResult:
        """
        As :meth:`chat_batch`, but return each conversation's reply or error (the replies are recorded, in order).

        :param conversations: The conversations.
        :param temperature: Sampling temperature.
        """
        result = answer_batch(self.inner, conversations, temperature=temperature)
        for messages, reply in zip(conversations, result.replies, strict=True):
            if reply is not None:
                self._record(messages, temperature, reply)
        return result

    def _record(self, messages: Sequence[Message], temperature: float, reply: ChatReply) -> None:
        settings = request_settings(temperature)
        line = {
            "version": RECORD_VERSION,
            "hash": request_hash(messages, settings),
            "time": time.time(),
            "messages": canonical_messages(messages),
            "settings": settings,
            "backend": _describe(self.inner),
            "reply": reply.to_dict(),
        }
        self._append(line)
        with self._lock:
            self.recorded += 1

    def _append(self, line: dict[str, Any]) -> None:
        data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:  # a failed write is cut back; a torn line left by a crash is cut off first
            self._warn_cut(append_line(self.path, data))

    def __repr__(self) -> str:
        return f"RecordingBackend({self.inner!r}, {str(self.path)!r})"


class ReplayMissError(LLMBackendError):
    """A replayed request has no recorded reply (left); ``request_hash`` is the request's hash."""

    def __init__(self, message: str, *, request_hash: str) -> None:
        super().__init__(message)
        self.request_hash = request_hash


def _problem(record: Any, count: int) -> str | None:
    """Why a parsed line is neither a recorded call nor a rewind marker (``None``: it is one)."""
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
    """
    The records of a recording, in order; calls set aside by a ``rewind`` marker (see
    :meth:`RecordingBackend.rewind`) are left out. A last line without its newline that is not JSON (a crash cut it
    short, anywhere, or left NUL bytes) is skipped with a warning; any other damaged line raises.

    :param path: The JSONL file written by :class:`RecordingBackend`.
    :raises LLMBackendError: naming the line, when a line is not a record and is not such a last line.
    """
    records: list[dict[str, Any]] = []
    lines = Path(path).read_bytes().split(b"\n")  # only a newline ends a line (not U+2028 inside a reply)
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        problem: str | None
        try:
            record = json.loads(raw.decode("utf-8-sig"))  # -sig: an editor's byte order mark
        except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            problem = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else "not JSON"
            if number == len(lines):  # the last line, without its newline: the call it recorded never returned
                warnings.warn(
                    f"{path}: skipping a half-written last line {number} ({len(raw)} bytes, {problem}): "
                    "the call it was recording never returned",
                    RuntimeWarning,
                    stacklevel=2,
                )
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
    """
    Answer from a recording made by :class:`RecordingBackend`, by request hash.

    :param path: The JSONL recording (read on the first call).
    :param fallback: A backend (or callable, or ``llm`` string) that answers requests the recording lacks;
        without one, a miss raises :class:`ReplayMissError`.
    """

    def __init__(
        self, path: str | os.PathLike[str], fallback: ChatBackend | Callable[[list[Message]], str] | str | None = None
    ) -> None:
        self.path = Path(path).expanduser()
        self.fallback: ChatBackend | None = None if fallback is None else make_backend(fallback)
        self.stats: dict[str, int] = {"hits": 0, "misses": 0}
        """Counters: requests answered from the recording, and misses (answered by the fallback)."""
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
        """
        The next recorded reply to this request.

        :param messages: Chat messages.
        :param temperature: Sampling temperature (part of the request's identity).
        :raises ReplayMissError: when the request has no recorded reply left and there is no fallback.
        """
        key = request_hash(messages, request_settings(temperature))
        with self._lock:
            queue = self._load().get(key)
            self._asked[key] = self._asked.get(key, 0) + 1
            reply = queue.popleft() if queue else None
        if reply is not None:
            self.stats["hits"] += 1
            return ChatReply(
                text=str(reply.get("text", "")),
                prompt_tokens=reply.get("prompt_tokens"),
                completion_tokens=reply.get("completion_tokens"),
                seconds=float(reply.get("seconds") or 0.0),
                prompt_tokens_cached=reply.get("prompt_tokens_cached"),  # absent from older recordings: unknown
            )
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
        """
        Replay several requests, in order.

        :param conversations: The conversations.
        :param temperature: Sampling temperature.
        """
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
