"""A fault-injecting, OpenAI-compatible HTTP server for the reliability tests.

A real server on ``127.0.0.1`` (raw sockets, one thread per connection) that answers ``GET /v1/models`` and
``POST /v1/chat/completions`` in the OpenAI wire format. What it does with each chat request is scripted:
:class:`FaultServer` pops the next :class:`Action` off its ``script`` (then uses ``default``), so a test says
e.g. ``[status(503), hang(1.0), ok("params: [...]")]``. Actions:

- :func:`ok`: a chat completion whose content is a fixed text or ``text(index, body)``.
- :func:`status`: an HTTP error (429, 500, 503, 400, ...) in OpenAI's error format, optionally with ``Retry-After``.
- :func:`hang`: read the request, then send nothing for ``seconds`` (the client times out), then close.
- :func:`malformed_json`: a 200 answer whose body is not JSON (``Content-Type`` of your choice).
- :func:`raw_body`: a 200 answer with the given bytes (e.g. valid JSON that is not a chat completion).
- :func:`drop_mid_response`: the status line, headers and half the body, then the connection is closed.
- :func:`close_immediately`: read the request and close the connection without a byte.
- :func:`die`: close the connection without answering, stop listening (connections are refused), and come back
  on the same port after ``down_for`` seconds: a server that dies mid-run and restarts.
- :func:`trickle`: answer a few bytes at a time, each gap well under a client's timeout, so that no single read
  times out: the status line and headers (``"headers"``), the body (``"body"``), the chunks of a
  ``Transfer-Encoding: chunked`` body (``"chunked"``), a body that never ends (``"endless_body"``) or headers
  that never end (``"endless_headers"``). :data:`TRICKLES` names one of each.

Every request is logged (:attr:`FaultServer.requests`) with its arrival time, so tests count attempts and
measure the backoff between them. Bounded in time: each connection has a hard limit (``handler_limit``:
socket timeouts, and a hang or a downtime never lasts longer), the whole server stops itself after
``lifetime`` seconds, and :meth:`FaultServer.stop` (the fixtures always call it) ends hangs at once and joins
every thread. Responses say ``Connection: close``, so no client keeps a pooled connection across a restart,
unless ``keep_alive`` is set (then an ``ok`` answer keeps its connection for the next request, unless the client
said ``Connection: close``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

HOST = "127.0.0.1"
MODEL_ID = "fault-model"

ReplyText = str | Callable[[int, dict[str, Any]], str]
"""A reply: a fixed text, or ``text(index, body)`` from the 0-based index of the chat request and its JSON body."""

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 408: "Request Timeout", 422: "Unprocessable"}
_REASONS.update({429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"})


@dataclass(frozen=True)
class Action:
    """
    What the server does with one chat request (build one with the helper functions of this module).

    :param kind: ``"ok"``, ``"status"``, ``"hang"``, ``"malformed_json"``, ``"raw_body"``, ``"drop_mid_response"``,
        ``"close_immediately"``, ``"die"`` or ``"trickle"``.
    :param text: The reply text of ``ok``.
    :param code: The HTTP status of ``status``.
    :param retry_after: The ``Retry-After`` header of ``status`` (seconds), if any.
    :param seconds: How long ``hang`` stays silent, or how long ``die`` stays down.
    :param content_type: The ``Content-Type`` of ``malformed_json`` and ``raw_body``.
    :param data: The body of ``raw_body`` and ``malformed_json``.
    :param part: What ``trickle`` sends slowly (see :func:`trickle`).
    :param chunk: Bytes ``trickle`` sends at a time.
    :param gap: Seconds ``trickle`` waits between two sends.
    """

    kind: str
    text: ReplyText | None = None
    code: int = 200
    retry_after: float | None = None
    seconds: float = 0.0
    content_type: str = "application/json"
    data: bytes = b""
    part: str = ""
    chunk: int = 1
    gap: float = 0.0


def ok(text: ReplyText = "params: [0, 0, 0, 0, 0, 1, 0, 1, 0, 0]") -> Action:
    """A well-formed chat completion with ``text`` as the assistant's content."""
    return Action("ok", text=text)


def status(code: int, retry_after: float | None = None, body: bytes = b"") -> Action:
    """
    An HTTP ``code`` answer with an OpenAI-style error body (and a ``Retry-After`` header when given).

    :param code: The HTTP status.
    :param retry_after: The ``Retry-After`` header (seconds), if any.
    :param body: The JSON body to send instead of the standard error (e.g. one that echoes the request's key).
    """
    return Action("status", code=code, retry_after=retry_after, data=body)


def hang(seconds: float) -> Action:
    """Accept and read the request, then stay silent for ``seconds`` (at most the handler limit) and close."""
    return Action("hang", seconds=seconds)


_MALFORMED = b'{"id": "chatcmpl-fault", "choices": [{"message": {"content": "par'


def malformed_json(content_type: str = "application/json") -> Action:
    """A 200 answer whose body is not valid JSON, labelled ``content_type``."""
    return Action("malformed_json", content_type=content_type, data=_MALFORMED)


def raw_body(data: bytes, content_type: str = "application/json") -> Action:
    """A 200 answer whose body is ``data``, labelled ``content_type``."""
    return Action("raw_body", content_type=content_type, data=data)


def drop_mid_response() -> Action:
    """Send the headers and half of a valid body (``Content-Length`` announces all of it), then close."""
    return Action("drop_mid_response")


def close_immediately() -> Action:
    """Read the request and close the connection without answering."""
    return Action("close_immediately")


def die(down_for: float) -> Action:
    """Drop this request, stop listening, and listen again on the same port after ``down_for`` seconds."""
    return Action("die", seconds=down_for)


TRICKLE_PARTS = ("headers", "body", "chunked", "endless_body", "endless_headers")
"""What :func:`trickle` can send slowly."""


def trickle(part: str, *, chunk: int = 4, gap: float = 0.05, text: str = "params: [0, 0, 0, 0, 0, 1, 0, 1, 0, 0]") -> Action:
    """
    A chat completion sent ``chunk`` bytes at a time, ``gap`` seconds apart (each gap under a client's timeout).

    :param part: ``"headers"`` (the status line and headers slowly, then the body at once), ``"body"`` (the
        headers at once, then the body slowly), ``"chunked"`` (a ``Transfer-Encoding: chunked`` body of
        ``chunk``-byte chunks, framing included sent slowly too), ``"endless_body"`` (a chunked body of JSON
        whitespace that never ends) or ``"endless_headers"`` (header lines that never end). The endless ones stop at
        the handler limit.
    :param chunk: Bytes per send.
    :param gap: Seconds between two sends.
    :param text: The assistant's content of the completion.
    """
    if part not in TRICKLE_PARTS:
        raise ValueError(f"part must be one of {TRICKLE_PARTS}, got {part!r}")
    return Action("trickle", text=text, part=part, chunk=max(1, int(chunk)), gap=float(gap))


TRICKLES: dict[str, Action] = {
    "slow_headers": trickle("headers", chunk=2, gap=0.05),
    "slow_body": trickle("body", chunk=4, gap=0.05),
    "slow_chunks": trickle("chunked", chunk=4, gap=0.05),
    "one_byte_body": trickle("body", chunk=1, gap=0.02),
    "endless_body": trickle("endless_body", chunk=1, gap=0.05),
    "endless_headers": trickle("endless_headers", chunk=3, gap=0.05),
}
"""One trickling server per pattern: each takes seconds in all, though no gap is longer than a twentieth of one."""


@dataclass
class Request:
    """
    One request the server received.

    :param method: ``GET`` or ``POST``.
    :param path: The request path.
    :param time: ``time.monotonic()`` when the request was read.
    :param action: The kind of the action taken.
    :param headers: The request headers (lower-case names).
    :param body: The JSON body (``None`` for GET or a body that is not JSON).
    """

    method: str
    path: str
    time: float
    action: str
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None


def completion_body(text: str, model: str = MODEL_ID) -> dict[str, Any]:
    """A chat completion in the OpenAI wire format."""
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class FaultServer:
    """
    An OpenAI-compatible server on 127.0.0.1 that answers chat requests from a script of :class:`Action`.

    :param script: Actions for the first chat requests, in order.
    :param default: The action once the script is used up.
    :param models_script: Actions for the first ``GET /v1/models`` requests (then the model listing).
    :param model_id: The model the server lists and answers as.
    :param port: The port (0: a free one, kept across restarts).
    :param handler_limit: Hard limit in seconds of one connection (socket timeouts, hangs, downtimes).
    :param lifetime: Seconds after :meth:`start` at which the server stops itself for good.
    :param keep_alive: Keep a connection open after an ``ok`` answer (or a model listing) for the next request,
        unless the request said ``Connection: close`` (by default every answer closes its connection).
    """

    def __init__(
        self,
        script: Iterable[Action] = (),
        *,
        default: Action | None = None,
        models_script: Iterable[Action] = (),
        model_id: str = MODEL_ID,
        port: int = 0,
        handler_limit: float = 10.0,
        lifetime: float = 120.0,
        keep_alive: bool = False,
    ) -> None:
        self.script: list[Action] = list(script)
        self.default: Action = default or ok()
        self.models_script: list[Action] = list(models_script)
        self.model_id = model_id
        self.port = port
        self.handler_limit = float(handler_limit)
        self.lifetime = float(lifetime)
        self.keep_alive = keep_alive
        self.requests: list[Request] = []
        self.restarts = 0
        self._n_chat = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._listening = threading.Event()  # set while the listening socket is open
        self._down = threading.Event()  # set by stop(): ends hangs, downtimes and the accept loop
        self._closed = False  # stop() was called: a pending restart must not happen
        self._threads: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()
        self._watchdog: threading.Timer | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"http://{HOST}:{self.port}/v1"

    @property
    def chat_requests(self) -> list[Request]:
        """The chat-completion requests received so far."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def is_listening(self) -> bool:
        """Whether the server accepts connections now."""
        return self._listening.is_set()

    def start(self) -> FaultServer:
        """Listen on 127.0.0.1 (the same port after the first start) and serve in background threads."""
        with self._lock:
            self._closed = False
            if self._listener is not None:
                return self
            self._down.clear()
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((HOST, self.port))
            listener.listen(16)
            listener.settimeout(0.05)
            self.port = int(listener.getsockname()[1])
            self._listener = listener
            self._listening.set()
            self._accept_thread = threading.Thread(target=self._accept_loop, args=(listener,), daemon=True)
            self._accept_thread.start()
            if self._watchdog is None:
                self._watchdog = threading.Timer(self.lifetime, self.stop)
                self._watchdog.daemon = True
                self._watchdog.start()
        return self

    def _close_listener(self) -> None:
        """Stop accepting (new connections are refused); connections being served finish on their own."""
        with self._lock:
            listener, self._listener = self._listener, None
            self._listening.clear()
        if listener is not None:
            listener.close()

    def stop(self) -> None:
        """Stop for good: refuse connections, end hangs, cancel a pending restart, join every thread."""
        with self._lock:
            self._closed = True
            watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.cancel()
        self._down.set()
        self._close_listener()
        me = threading.current_thread()
        with self._lock:
            for conn in self._conns:  # unblock handlers waiting on a client
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            threads = [t for t in self._threads if t is not me]
            if self._accept_thread is not None and self._accept_thread is not me:
                threads.append(self._accept_thread)
        for thread in threads:
            thread.join(timeout=self.handler_limit + 1.0)

    def restart(self, after: float = 0.0) -> None:
        """Stop listening now and listen again on the same port after ``after`` seconds (in the background)."""
        self._close_listener()
        delay = min(max(0.0, after), self.handler_limit)

        def back() -> None:
            if self._down.wait(delay):  # stop() was called meanwhile: stay down
                return
            with self._lock:
                closed = self._closed
            if not closed:
                self.start()
                with self._lock:
                    self.restarts += 1

        self._spawn(back)

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._down.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if self._listener is not listener:  # closed by a restart: this loop's socket is gone
                    return
                continue
            except OSError:  # the listening socket was closed
                return
            self._spawn(self._serve, conn)

    # ------------------------------------------------------------------ one connection

    def _serve(self, conn: socket.socket) -> None:
        deadline = time.monotonic() + self.handler_limit
        with self._lock:
            self._conns.add(conn)
        try:
            conn.settimeout(self.handler_limit)
            while self._serve_one(conn, deadline):  # more than one request only with keep_alive
                pass
        except OSError:
            pass  # the client went away
        finally:
            with self._lock:
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def _serve_one(self, conn: socket.socket, deadline: float) -> bool:
        """Read and answer one request; whether to read another on the same connection."""
        request = _read_request(conn, deadline)
        if request is None:
            return False
        method, path, headers, raw = request
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        action, index = self._next_action(method, path)
        with self._lock:
            self.requests.append(Request(method, path, time.monotonic(), action.kind, headers, body))
        keep = self.keep_alive and headers.get("connection", "").lower() != "close" and action.kind in ("ok", "models")
        self._act(conn, action, index, body, deadline, {"Connection": "keep-alive"} if keep else {})
        return keep

    def _next_action(self, method: str, path: str) -> tuple[Action, int]:
        with self._lock:
            if method == "GET" and path.rstrip("/").endswith("/models"):
                return (self.models_script.pop(0) if self.models_script else Action("models")), -1
            if method == "POST" and path.rstrip("/").endswith("/chat/completions"):
                index = self._n_chat
                self._n_chat += 1
                return (self.script.pop(0) if self.script else self.default), index
            return status(404), -1

    def _act(self, conn: socket.socket, action: Action, index: int, body: Any, deadline: float, extra: dict[str, str]) -> None:
        kind = action.kind
        if kind == "models":
            listing = {"object": "list", "data": [{"id": self.model_id, "object": "model", "owned_by": "tests"}]}
            _send(conn, 200, listing, extra)
        elif kind == "ok":
            text = action.text(index, body if isinstance(body, dict) else {}) if callable(action.text) else action.text
            _send(conn, 200, completion_body(str(text), self.model_id), extra)
        elif kind == "status":
            error = {"error": {"message": f"injected HTTP {action.code}", "type": "fault_injection", "code": action.code}}
            extra = {} if action.retry_after is None else {"Retry-After": f"{action.retry_after:g}"}
            _send_raw(conn, action.code, action.data or json.dumps(error).encode(), "application/json", extra)
        elif kind == "hang":
            self._down.wait(max(0.0, min(action.seconds, deadline - time.monotonic())))
        elif kind in ("malformed_json", "raw_body"):
            _send_raw(conn, 200, action.data, action.content_type)
        elif kind == "drop_mid_response":
            data = json.dumps(completion_body("params: [0, 0, 0, 0, 0, 1, 0, 1, 0, 0]", self.model_id)).encode()
            head = _head(200, "application/json", len(data))
            conn.sendall(head + data[: len(data) // 2])
        elif kind == "close_immediately":
            pass  # the finally clause closes the connection
        elif kind == "die":
            conn.close()
            self.restart(after=action.seconds)
        elif kind == "trickle":
            self._trickle(conn, action, completion_body(str(action.text), self.model_id), deadline)
        else:
            raise ValueError(f"unknown action {kind!r}")

    def _trickle(self, conn: socket.socket, action: Action, body: dict[str, Any], deadline: float) -> None:
        """Send ``body`` as :func:`trickle` says: ``action.chunk`` bytes at a time, ``action.gap`` seconds apart."""
        data = json.dumps(body).encode()
        part = action.part
        if part == "endless_headers":
            head, tail = _head(200, "application/json", len(data)).removesuffix(b"\r\n"), b""
            pieces: Iterable[bytes] = itertools.chain([head], itertools.repeat(b"X-Padding: slow\r\n"))
        elif part in ("chunked", "endless_body"):
            head = _head(200, "application/json", None, {"Transfer-Encoding": "chunked"})
            conn.sendall(head)
            content = itertools.repeat(b" ") if part == "endless_body" else _pieces(data, action.chunk)
            pieces, tail = (b"%x\r\n%s\r\n" % (len(p), p) for p in content), b"0\r\n\r\n"
        elif part == "headers":
            pieces, tail = [_head(200, "application/json", len(data))], data
        else:  # body
            conn.sendall(_head(200, "application/json", len(data)))
            pieces, tail = [data], b""
        for piece in pieces:
            for small in _pieces(piece, action.chunk):
                if self._down.wait(action.gap) or time.monotonic() > deadline:
                    return
                conn.sendall(small)
        conn.sendall(tail)


# ---------------------------------------------------------------------------------------------- HTTP


def _read_request(conn: socket.socket, deadline: float) -> tuple[str, str, dict[str, str], bytes] | None:
    """Read one HTTP/1.1 request: ``(method, path, headers, body)``, or ``None`` if the client left first."""
    data = b""
    while b"\r\n\r\n" not in data:
        if time.monotonic() > deadline or len(data) > 1 << 20:
            return None
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) < 2:
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    while len(rest) < length:
        if time.monotonic() > deadline:
            return None
        chunk = conn.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return parts[0], parts[1], headers, rest[:length]


def _head(code: int, content_type: str, length: int | None, extra: dict[str, str] | None = None) -> bytes:
    extra = extra or {}
    lines = [
        f"HTTP/1.1 {code} {_REASONS.get(code, 'Status')}",
        f"Content-Type: {content_type}",
        *([] if length is None else [f"Content-Length: {length}"]),
        *([] if "Connection" in extra else ["Connection: close"]),
        *(f"{k}: {v}" for k, v in extra.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _pieces(data: bytes, size: int) -> Iterator[bytes]:
    """``data`` cut into pieces of ``size`` bytes (the last one shorter)."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _send_raw(conn: socket.socket, code: int, data: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
    conn.sendall(_head(code, content_type, len(data), extra) + data)


def _send(conn: socket.socket, code: int, body: Any, extra: dict[str, str] | None = None) -> None:
    _send_raw(conn, code, json.dumps(body).encode(), "application/json", extra)
