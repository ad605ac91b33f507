"""Record every LLM call to a JSONL file, and replay such a file as a backend.

Runs with a real model are slow and not exactly repeatable; a recording makes them both cheap to re-run and
auditable. Design:

- :class:`RecordingBackend` wraps any backend. After each reply it appends one JSON line: the request hash,
  the messages, the request settings, a description of the backend, the reply text, token usage (with the prompt
  tokens served from a prefix cache, when the backend reports them) and latency. Each line is written and fsynced
  before the reply is returned, so a crash loses at most the call in flight. A record is whole when its newline is
  on disk: a write that fails half-way (a full disk) is cut back before its error is raised, and a half-written
  last line (a crash) is cut off, with a warning, before the next record is appended
  (:func:`~sb3_r2po.common.files.append_line`), so a record never joins a torn one.
- **Reading** (:func:`read_records`, replay) is by bytes: a last line cut anywhere (inside a multi-byte character
  too), or a tail of NUL bytes, is skipped with a warning; CRLF line ends and a UTF-8 byte order mark are read as
  usual; a line that a failed write of an older version joined to the next record keeps that record (with a
  warning). Any other damaged line (one with lines after it, or a last line that is whole JSON but no record) is an
  error naming the line: skipping a record inside the file would change a replay.
- **Resuming** a checkpointed run repeats the calls made after its last checkpoint. :meth:`RecordingBackend.rewind`
  appends a marker line ``{"rewind": N}``: readers (:func:`read_records`, replay) then keep only the first N
  calls before it, so a replay follows the resumed run. The calls set aside stay in the file.
- The **request hash** (:mod:`sb3_r2po.llm.identity`) is the SHA-256 of the canonical JSON of the messages (role
  and content) and the request settings that the :class:`~sb3_r2po.llm.base.ChatBackend` protocol carries (the
  temperature). Backend settings (model, reasoning effort, ...) are recorded for the record but not hashed: a
  replay cannot know them, and a recording is replayed in place of the backend that made it.
- :class:`ReplayBackend` answers by that hash. When the same request was recorded several times, the
  recorded replies are given in their order (R2PO at temperature 0 can ask the same prompt twice and the
  model may still have answered differently). A request that was not recorded, or asked more often than
  recorded, is a miss: it raises :class:`ReplayMissError` naming the request (its hash and the start of its
  last message), unless a ``fallback`` backend answers it.
- ``llm="replay:PATH"`` builds a :class:`ReplayBackend` (:data:`REPLAY_FORM`). A replay's fallback is itself an
  ``llm`` argument, which may name another replay: the form is registered into
  :data:`~sb3_r2po.llm.resolve.STRING_FORMS` by the :mod:`sb3_r2po.llm` package, so that
  :mod:`~sb3_r2po.llm.resolve` need not import this module.
"""

from __future__ import annotations

import codecs
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
)
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
        Read the file again: cut off a half-written last line (a crash mid-write; with a warning), so that the next
        record starts on its own line, and count the calls it holds (:attr:`recorded`).

        :return: The calls recorded in the file.
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
        Set aside the recorded calls after the first ``calls`` (they stay in the file, readers skip them).

        A resumed run calls this with the number of calls its checkpoint had made: the calls recorded after the
        checkpoint are asked again, and a replay must follow the new answers, not the old ones.

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
    """
    A replayed request has no recorded reply (left).

    :param message: The explanation.
    :param request_hash: The hash of the request.
    """

    def __init__(self, message: str, *, request_hash: str) -> None:
        super().__init__(message)
        self.request_hash = request_hash


RECORD_START = b'{"version": '
"""How every line :class:`RecordingBackend` writes begins (a key's quotes inside a string value are escaped)."""


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


def _parse(raw: bytes) -> tuple[Any, str | None]:
    """The JSON value of a line, or why it has none (``"not UTF-8 text"``, ``"not JSON"``)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    try:
        return json.loads(text), None
    except json.JSONDecodeError:
        return None, "not JSON"


def _salvage(raw: bytes, count: int) -> tuple[dict[str, Any], int] | None:
    """A whole record appended to a half-written one on the same line (by a version that did not cut torn lines):
    the record and the length of the torn part before it; ``None`` when the line is not that."""
    start = raw.rfind(RECORD_START)
    while start > 0:
        record, problem = _parse(raw[start:])
        if problem is None and _problem(record, count) is None:
            return record, start
        start = raw.rfind(RECORD_START, 0, start)
    return None


def _numbered_lines(data: bytes) -> list[tuple[int, bytes]]:
    """The non-blank lines of ``data`` and their numbers (1-based); only a newline ends a line, as in the writer."""
    if data.startswith(codecs.BOM_UTF8):  # an editor's byte order mark
        data = data[len(codecs.BOM_UTF8) :]
    # str.splitlines() would also split at U+2028, U+0085, ... inside a reply: split the bytes at b"\n" only
    return [(number, line) for number, line in enumerate(data.split(b"\n"), start=1) if line.strip()]


def _damaged(path: str | os.PathLike[str], number: int, problem: str, after: int) -> LLMBackendError:
    return LLMBackendError(
        f"{path}: line {number} is {problem}, and {after} line(s) follow it: the recording is damaged (a crash "
        "only cuts its last line short), and leaving the line out would change a replay. Restore the file from a "
        f"copy; to keep only the calls before the damage, keep its first {number - 1} line(s) "
        f"(e.g. head -n {number - 1} FILE > FIXED), or move it aside to start a new recording"
    )


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """
    The records of a recording, in order; calls set aside by a ``rewind`` marker (see
    :meth:`RecordingBackend.rewind`) are left out.

    A last line cut short (a crash: cut anywhere, inside a multi-byte character too, or NUL bytes) is skipped with a
    warning, and so is the torn part of a line that holds a whole record after it; any other damaged line raises.

    :param path: The JSONL file written by :class:`RecordingBackend`.
    :raises LLMBackendError: naming the line, when a line inside the file (or a last line that is whole JSON) is not
        a record.
    """
    records: list[dict[str, Any]] = []
    lines = _numbered_lines(Path(path).read_bytes())
    for index, (number, raw) in enumerate(lines):
        record, problem = _parse(raw)
        if problem is None:
            problem = _problem(record, len(records))
            if problem is not None:  # whole JSON, but not a record: not a crash's doing, wherever it is
                raise _damaged(path, number, problem, len(lines) - index - 1)
        else:
            salvaged = _salvage(raw, len(records))
            if salvaged is None and index < len(lines) - 1:
                raise _damaged(path, number, problem, len(lines) - index - 1)
            if salvaged is None:
                warnings.warn(
                    f"{path}: skipping a half-written last line {number} ({len(raw)} bytes, {problem}): "
                    "the call it was recording never returned",
                    RuntimeWarning,
                    stacklevel=2,
                )
                continue
            record, torn = salvaged
            warnings.warn(
                f"{path}: line {number} starts with a half-written record ({torn} bytes, skipped) that a failed "
                "write left, followed by a whole one (kept)",
                RuntimeWarning,
                stacklevel=2,
            )
        if "hash" not in record:  # a rewind marker
            del records[record["rewind"] :]
            continue
        records.append(record)
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
        last = str(messages[-1].get("content", "")) if messages else ""
        start = " ".join(last.split())[:80]
        recorded = self._recorded.get(key, 0)
        why = (
            "it was never recorded"
            if recorded == 0
            else f"it was recorded {recorded} time(s) and is now asked for time {self._asked[key]}"
        )
        raise ReplayMissError(
            f"No recorded reply in {str(self.path)!r} for request {key[:12]} "
            f"(temperature {float(temperature):g}, last message starts {start!r}): {why}. "
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


def _build_replay(spec: str) -> ChatBackend:
    return ReplayBackend(spec.partition(":")[2].strip())


REPLAY_FORM = StringForm(
    "replay:PATH (answer from a RecordingBackend JSONL file)",
    "replay:runs/llm_calls.jsonl",
    reserved_prefix("replay"),
    _build_replay,
    _check_replay,
)
"""The ``llm`` string form ``replay:PATH``: a :class:`ReplayBackend` of the recording at ``PATH``."""
