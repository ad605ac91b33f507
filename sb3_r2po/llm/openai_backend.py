"""A chat backend for OpenAI-compatible servers (vLLM, SGLang, llama.cpp server, Ollama, ``transformers serve``).

``llm="http://127.0.0.1:8000/v1"`` (or ``...#MODEL``) builds an :class:`OpenAIBackend`; its ``openai`` client is
created on the first request, its own retries off. ``timeout`` bounds each request from connecting to the last byte:
httpx's timeouts bound each connect, read and write, not a server that trickles bytes, so a watchdog
(:class:`RequestDeadline`) shuts the request's connection down at the deadline. Connection errors, timeouts, HTTP 408,
429, 5xx and malformed bodies are retried with exponential backoff (honouring ``Retry-After``), other 4xx not; then
:class:`LLMServerError`. Only the *name* of the key's environment variable is stored; a URL holding a credential is
refused (:func:`parse_server_url`) and what a server sends back is shown with the key and credentials masked. Harmony:
the answer is the content or its final channel; cut off after the answer began, a cut-off reply; no answer is retried
once with one step lower effort and a larger budget (when that changes the request), then returned without one
(``stats["no_final"]``). Usage includes the prompt tokens a server's prefix cache served (``cached_tokens``, else 0).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import numbers
import os
import random
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from sb3_r2po.common.parameters import complete_answer, final_channel, is_harmony
from sb3_r2po.llm.base import (
    KEY_LIKE_RE,
    REDACTED,
    BatchResult,
    ChatReply,
    LLMBackendError,
    Message,
    TransientState,
    analysis_only,
    ask_each,
    check_reasoning_effort,
    cut_off_reply,
    redact,
    redact_spec,
    retry_request,
    without_answer,
)

ReasoningVia = Literal["field", "chat_template_kwargs", "both"]
_RETRY_STATUS = frozenset({408, 429})
_MODEL_RE = re.compile(r"[A-Za-z0-9._:/@+\-]+")  # a model name after ``#`` (``org/name``, ``name:tag``)
_PARAMETER_CHARS = frozenset("?&;=")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXCERPT = 2000  # characters of a body kept in a malformed-body message before masking and cutting


class LLMServerError(LLMBackendError):
    """
    An OpenAI-compatible server gave no usable reply.

    :param message: What happened (the URL and the number of attempts included).
    :param url: The server's base URL.
    :param attempts: Requests made.
    :param status_code: The last HTTP status, when the server answered at all.
    :param retryable: Whether the failure was of a retried kind (connection, timeout, 408/429/5xx, malformed body).
    """

    def __init__(self, message: str, *, url: str, attempts: int, status_code: int | None = None, retryable: bool) -> None:
        super().__init__(message)
        self.url = url
        self.attempts = attempts
        self.status_code = status_code
        self.retryable = retryable


_ACTIVE_DEADLINE: contextvars.ContextVar[RequestDeadline | None] = contextvars.ContextVar("r2po_deadline", default=None)
_CONNECTED = (".connect_tcp.complete", ".connect_unix_socket.complete", ".start_tls.complete")  # httpcore trace events


class RequestDeadline:
    """
    The deadline of one HTTP request: ``seconds`` after the request reaches the transport, a watchdog shuts down every
    connection it opened (a blocked read ends at once) and sets :attr:`expired`. Active within its ``with`` block (a
    context variable: per thread), where :func:`attach_deadline` starts the timer and reports the connections.

    :param seconds: Seconds from handing the request to the transport to the deadline.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)
        self.expired = False
        self._streams: list[Any] = []
        self._done = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(self.seconds, self._expire)
        self._timer.daemon = True
        self._token: contextvars.Token[RequestDeadline | None] | None = None

    def __enter__(self) -> RequestDeadline:
        self._token = _ACTIVE_DEADLINE.set(self)
        return self

    def arm(self) -> None:
        """Start the timer (once: a redirected request keeps the deadline of the first)."""
        with self._lock:
            if not self._done and self._timer.ident is None:
                self._timer.start()

    def __exit__(self, *exc_info: object) -> None:
        self._timer.cancel()
        with self._lock:
            self._done = True
            self._streams.clear()
        if self._token is not None:
            _ACTIVE_DEADLINE.reset(self._token)

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's ``trace`` callback: keep each new connection's stream (shut it down if already expired)."""
        if not event.endswith(_CONNECTED):
            return
        stream = info.get("return_value")
        with self._lock:
            if self._done:
                return
            self._streams.append(stream)
            expired = self.expired
        if expired:
            _shut_down(stream)

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            streams = list(self._streams)
        for stream in streams:
            _shut_down(stream)


def _shut_down(stream: Any) -> None:
    """Shut a network stream's socket down for reading and writing: a read blocked on it returns at once."""
    get_extra_info = getattr(stream, "get_extra_info", None)
    sock = get_extra_info("socket") if callable(get_extra_info) else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):  # already closed (its descriptor is then -1: never another socket's)
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's, also for a TLS socket


def attach_deadline(request: Any) -> None:
    """An httpx ``request`` hook: within a :class:`RequestDeadline` block, start its timer and set its
    :meth:`~RequestDeadline.trace` as httpcore's ``trace`` extension."""
    deadline = _ACTIVE_DEADLINE.get()
    if deadline is not None:
        deadline.arm()
        request.extensions["trace"] = deadline.trace


@dataclass
class _Failure:
    exc: Exception
    happened: str
    status_code: int | None = None
    retryable: bool = True
    retry_after: float | None = None


_KEY_HINT = (
    "Put the API key in an environment variable and name it with OpenAIBackend(..., api_key_env='MY_KEY_VARIABLE') "
    "(or pass OpenAIBackend(..., api_key=...), which is never saved)"
)
_KEY_NOTE = "(an API key goes in api_key_env='MY_KEY_VARIABLE' or api_key=..., never in the URL)"


def _refuse(name: str, shown: str, why: str) -> ValueError:
    return ValueError(f"{name}={shown!r}: {why}")


def _check_credentials(name: str, rest: str, shown: str) -> None:
    """Refuse user information, parameters and key-like tokens in ``rest`` (after ``://``), also percent-encoded."""
    text = f"{rest}\n{urllib.parse.unquote(rest)}"
    if "@" in text:
        why = "a server URL must not hold credentials (user:password@host): the URL is stored, shown and recorded"
        raise _refuse(name, shown, f"{why}. {_KEY_HINT}")
    if _PARAMETER_CHARS.intersection(text):
        why = (
            "a server URL must not have a query string or parameters (?api_key=..., &token=...): a key there would "
            "be stored in model.zip and the run's transcript, and the openai client sends none"
        )
        raise _refuse(name, shown, f"{why}. {_KEY_HINT}")
    if KEY_LIKE_RE.search(text):
        raise _refuse(name, shown, f"the URL holds what looks like an API key. {_KEY_HINT}")


def _check_host(name: str, head: str, scheme: str) -> None:
    """Refuse a URL (``head``, no ``#MODEL``) whose host or port cannot be read (messages never show the authority)."""
    shown = f"{scheme}://{REDACTED}"
    try:
        parts = urllib.parse.urlsplit(head)
        host, _ = parts.hostname, parts.port
    except ValueError:
        why = f"the host and port could not be read (HOST[:PORT], IPv6 in brackets) {_KEY_NOTE}"
        raise _refuse(name, shown, why) from None
    if not host:
        raise _refuse(name, shown, "the URL has no host")
    if "%" in parts.netloc.rpartition("]")[2]:
        raise _refuse(name, shown, "the host must not be percent-encoded")


def parse_server_url(url: str, *, name: str = "base_url") -> tuple[str, str | None]:
    """
    Check ``"http://host:port/v1[#MODEL]"`` and split it into ``(base URL, model or None)`` (the scheme lower-cased).
    ``ValueError`` (never repeating a credential) for another scheme, user information, a query string or
    parameters, a key-like token, spaces, an unreadable host or port, or a model name of other characters than
    letters, digits and ``. _ : / @ + -``.

    :param url: The URL.
    :param name: What to call it in messages (``"base_url"``, ``"llm"``).
    """
    if not isinstance(url, str):
        raise TypeError(f"{name} must be a string, got {type(url).__name__}")
    text = url.strip()
    shown = redact_spec(text)
    head, sep, model = text.partition("#")
    scheme, slashes, rest = head.partition("://")
    if not slashes or scheme.lower() not in ("http", "https"):
        raise _refuse(name, shown, "a server URL must start with http:// or https://")
    _check_credentials(name, rest, shown)
    if any(c.isspace() or not c.isprintable() for c in head):
        raise _refuse(name, shown, "a server URL must not contain spaces or control characters")
    _check_host(name, head, scheme.lower())
    model = model.strip()
    if model and (_MODEL_RE.fullmatch(model) is None or KEY_LIKE_RE.search(model)):
        why = f"the model name after '#' may only hold letters, digits and . _ : / @ + - {_KEY_NOTE}"
        raise _refuse(name, shown, why)
    return f"{scheme.lower()}://{rest}".rstrip("/"), (model or None) if sep else None


class OpenAIBackend(TransientState):
    """
    Chat with a model behind an OpenAI-compatible ``/v1`` API.

    :param base_url: The server's base URL, e.g. ``"http://127.0.0.1:8000/v1"``; ``"URL#MODEL"`` also names
        the model.
    :param model: The model name to request; by default the ``#MODEL`` part of ``base_url``, else the first
        model the server lists.
    :param timeout: Seconds one HTTP request may take, from connecting to the last byte (each retry has its own).
    :param max_retries: Further attempts after a failed one (connection errors, timeouts, 408, 429, 5xx).
    :param backoff: Seconds to wait before the first retry; doubled for each next one.
    :param backoff_max: The longest wait between two attempts (``>= 0``).
    :param api_key_env: The *name* of the environment variable holding the API key (read when the client is
        created); ``None`` sends a placeholder key.
    :param api_key: The API key itself (instead of ``api_key_env``): kept out of ``repr``, messages and pickles.
    :param reasoning_effort: ``"low"``, ``"medium"``, ``"high"``, or ``None`` to send none (server default).
    :param reasoning_effort_via: Where the effort goes: the ``"field"`` ``reasoning_effort``, the
        ``"chat_template_kwargs"``, or ``"both"``.
    :param max_tokens: Completion budget per request (reasoning included); ``None``: the server's default.
    :param retry_budget_factor: Budget multiplier of the one retry of an unanswered reply (``>= 1``); ``0``
        disables the retry.
    :param max_concurrency: Most requests in flight from one :meth:`chat_batch`.
    :param extra_body: Extra JSON fields for every request (e.g. ``{"top_k": 1}``).
    """

    _transient = ("_client", "_given_key", "_used_key")  # the client and these hold the API key
    _locks = ("_lock", "_stats_lock")

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000/v1",
        model: str | None = None,
        *,
        timeout: float = 600.0,
        max_retries: int = 4,
        backoff: float = 1.0,
        backoff_max: float = 30.0,
        api_key_env: str | None = None,
        api_key: str | None = None,
        reasoning_effort: str | None = None,
        reasoning_effort_via: ReasoningVia = "both",
        max_tokens: int | None = None,
        retry_budget_factor: float = 2.0,
        max_concurrency: int = 8,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        url, url_model = parse_server_url(base_url)
        _check_key_settings(api_key_env, api_key)
        if isinstance(model, str) and KEY_LIKE_RE.search(model):
            raise ValueError("model holds what looks like an API key (not repeated here): a model name is shown and recorded")
        check_reasoning_effort(reasoning_effort)
        if reasoning_effort_via not in ("field", "chat_template_kwargs", "both"):
            raise ValueError(
                f"reasoning_effort_via must be 'field', 'chat_template_kwargs' or 'both', got {reasoning_effort_via!r}"
            )
        if not _is_number(timeout) or not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        for name, value in (("backoff", backoff), ("backoff_max", backoff_max)):
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
        if not _is_number(retry_budget_factor) or not (retry_budget_factor == 0 or 1 <= retry_budget_factor < math.inf):
            raise ValueError(
                f"retry_budget_factor must be 0 (no retry of an unanswered reply) or a number >= 1, "
                f"got {retry_budget_factor!r}"
            )
        if max_retries < 0 or max_concurrency < 1:
            raise ValueError(f"max_retries >= 0 and max_concurrency >= 1 are required, got {max_retries}, {max_concurrency}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1 or None, got {max_tokens}")
        self.base_url = url
        self.model = model or url_model
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.backoff_max = float(backoff_max)
        self.api_key_env = api_key_env
        self.has_api_key = api_key is not None  # passed with ``api_key=`` (never pickled)
        self._given_key = api_key
        self._used_key: str | None = None  # the client's key, masked in what a server sends back
        self.reasoning_effort = reasoning_effort
        self.reasoning_effort_via: ReasoningVia = reasoning_effort_via
        self.max_tokens = max_tokens
        self.retry_budget_factor = float(retry_budget_factor)
        self.max_concurrency = int(max_concurrency)
        self.extra_body = dict(extra_body or {})
        # replies asked for, HTTP requests sent, answer retries, replies still without an answer
        self.stats: dict[str, int] = {"calls": 0, "requests": 0, "retries": 0, "no_final": 0}
        self._client: Any = None
        self._lock = threading.Lock()
        self._stats_lock = threading.Lock()

    def _count(self, key: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[key] += n

    def _api_key(self) -> str:
        if self._given_key is not None:
            return self._given_key
        if self.has_api_key:
            raise LLMBackendError(
                f"{self.base_url}: the API key passed with api_key= is never pickled or saved, and this backend was "
                "unpickled: build it again with the key, or name an environment variable holding it with api_key_env"
            )
        if self.api_key_env is None:
            return "EMPTY"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise LLMBackendError(
                f"api_key_env={self.api_key_env!r}: the environment variable is not set (or empty); "
                f"set it to the API key of {self.base_url}"
            )
        return key

    @property
    def client_created(self) -> bool:
        """Whether the ``openai`` client exists (not before the first request, nor after unpickling)."""
        return self._client is not None

    @property
    def client(self) -> Any:
        """The ``openai.OpenAI`` client (created on first use; its own retries are off)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    import openai

                    key = self._api_key()
                    self._used_key = None if key == "EMPTY" else key
                    self._client = openai.OpenAI(
                        base_url=self.base_url,
                        api_key=key,
                        timeout=self.timeout,
                        max_retries=0,
                        default_headers={"Connection": "close"},  # a new connection per request: its watchdog knows it
                        http_client=openai.DefaultHttpxClient(event_hooks={"request": [attach_deadline]}),
                    )
        return self._client

    def _with_retries(self, what: str, request: Callable[[], Any]) -> Any:
        """Run ``request()``; retry connection errors, timeouts, 408, 429, 5xx and malformed bodies, with backoff."""
        attempts = 0
        delay = self.backoff
        while True:
            attempts += 1
            self._count("requests")
            response, failure = self._attempt(request)
            if failure is None:
                return response
            if not failure.retryable or attempts > self.max_retries:
                chain = _chain_text(failure.exc)  # chained only when it holds nothing to mask (an echoed key)
                raise self._error(what, failure, attempts) from (failure.exc if self._mask(chain) == chain else None)
            wait = min(self.backoff_max, failure.retry_after if failure.retry_after is not None else delay)
            time.sleep(wait + random.uniform(0.0, 0.1 * wait))
            delay = min(self.backoff_max, delay * 2 if delay > 0 else 0.0)

    def _attempt(self, request: Callable[[], Any]) -> tuple[Any, _Failure | None]:
        """One request within its deadline: ``(response, None)``, or ``(None, what went wrong)``."""
        import openai

        deadline = RequestDeadline(self.timeout)
        try:
            with deadline:
                return _well_formed(request()), None
        except (_MalformedResponse, json.JSONDecodeError, openai.APIResponseValidationError) as exc:
            # a 200 whose body is not JSON, or not of the expected shape (a truncating proxy, a broken server)
            detail = str(exc) if isinstance(exc, _MalformedResponse) else f"{type(exc).__name__}: {_text(exc)}"
            return None, _Failure(exc, f"malformed response body ({self._detail(detail)})", 200)
        except openai.APIStatusError as exc:
            status = exc.status_code
            retryable = status in _RETRY_STATUS or status >= 500
            hint = " (does the URL end with /v1?)" if status == 404 else ""
            happened = f"HTTP {status}{hint}: {self._detail(_text(exc))}"
            return None, _Failure(exc, happened, status, retryable, _retry_after(exc))
        except openai.APIConnectionError as exc:  # timeouts included (openai.APITimeoutError)
            if deadline.expired or isinstance(exc, openai.APITimeoutError):  # the watchdog ended the request
                return None, _Failure(exc, f"timed out after {self.timeout:g} s")
            cause = exc.__cause__ or exc
            return None, _Failure(exc, f"connection failed ({type(cause).__name__}: {self._detail(str(cause))})")
        except openai.OpenAIError as exc:
            return None, _Failure(exc, f"{type(exc).__name__}: {self._detail(str(exc))}", retryable=False)

    def _error(self, what: str, failure: _Failure, attempts: int) -> LLMServerError:
        """The error after the last attempt, with the key and whatever looks like a credential masked."""
        if failure.retryable:
            message = f"{self.base_url}: {what} failed after {attempts} attempt(s): {failure.happened}"
        elif failure.status_code is not None:
            message = f"{self.base_url} rejected {what}: {failure.happened}; not retried (attempt {attempts})"
        else:
            message = f"{self.base_url}: {what} failed: {failure.happened}"
        return LLMServerError(
            self._mask(message),
            url=self.base_url,
            attempts=attempts,
            status_code=failure.status_code,
            retryable=failure.retryable,
        )

    def _mask(self, text: str) -> str:
        """``text`` (which may hold what a server sent back) with the key in use and any credential masked."""
        return redact(_without_key(text, self._used_key or self._given_key))

    def _detail(self, text: str, limit: int = 300) -> str:
        """What a server or the client said, masked, then cut to ``limit`` characters (a key is never cut in two)."""
        text = self._mask(text[: 16 * limit])
        return text if len(text) <= limit else text[:limit] + "..."

    def resolved_model(self) -> str:
        """The model name requests use (asks the server's ``/models`` once when none was given)."""
        if self.model is None:
            listing = self._with_retries("the model list (GET /models)", lambda: self.client.models.list())
            ids = [m.id for m in getattr(listing, "data", [])]
            if not ids:
                raise LLMServerError(
                    f"{self.base_url} lists no model at /models; name one with {self.base_url}#MODEL",
                    url=self.base_url,
                    attempts=1,
                    retryable=False,
                )
            self.model = ids[0]
        return self.model

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        self._count("calls")
        msgs = [dict(m) for m in messages]
        start = time.perf_counter()
        effort, budget = self.reasoning_effort, self.max_tokens
        answer, raw, usage = self._ask(msgs, temperature, effort, budget)
        retry = retry_request(effort, budget, self.retry_budget_factor)  # more budget, less effort, or none
        if answer is None and retry is not None:
            self._count("retries")
            answer, raw, usage2 = self._ask(msgs, temperature, *retry)
            usage = _Usage(*(b if a is None else a if b is None else a + b for a, b in zip(usage, usage2, strict=True)))
        if answer is None:
            self._count("no_final")
        text, seconds = raw if answer is None else answer, time.perf_counter() - start
        return ChatReply(text, usage.prompt, usage.completion, seconds, prompt_tokens_cached=usage.cached)

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]:
        """Answer several conversations concurrently (at most ``max_concurrency`` in flight); raise the first error after
        every request has ended (:meth:`answer_batch` gives the replies that came as well)."""
        return self.answer_batch(conversations, temperature=temperature).unwrap()

    def answer_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> BatchResult:
        """As :meth:`chat_batch`, but return each conversation's reply or error."""
        convs = list(conversations)
        if len(convs) <= 1:
            return ask_each(self, convs, temperature=temperature)
        try:
            self.resolved_model()  # once, before the threads
        except Exception as exc:  # no request can be sent
            return BatchResult.failed(exc, len(convs))
        with ThreadPoolExecutor(max_workers=min(len(convs), self.max_concurrency), thread_name_prefix="r2po-llm") as pool:
            futures = [pool.submit(self.chat, c, temperature=temperature) for c in convs]
        errors = tuple(f.exception() for f in futures)  # every request has ended
        return BatchResult(tuple(None if e is not None else f.result() for f, e in zip(futures, errors, strict=True)), errors)

    def _ask(
        self, msgs: list[dict[str, str]], temperature: float, effort: str | None, max_tokens: int | None
    ) -> tuple[str | None, str, _Usage]:
        """One request: ``(answer or None, the text of an unanswered reply, token usage)``."""
        kwargs: dict[str, Any] = {"model": self.resolved_model(), "messages": msgs, "temperature": float(temperature)}
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        body = dict(self.extra_body)
        if effort is not None:
            if self.reasoning_effort_via in ("field", "both"):
                kwargs["reasoning_effort"] = effort
            if self.reasoning_effort_via in ("chat_template_kwargs", "both"):
                body["chat_template_kwargs"] = {**body.get("chat_template_kwargs", {}), "reasoning_effort": effort}
        if body:
            kwargs["extra_body"] = body
        response = self._with_retries("a chat completion", lambda: self.client.chat.completions.create(**kwargs))
        usage = _usage(getattr(response, "usage", None))
        if not response.choices:
            return None, "", usage
        choice = response.choices[0]
        content = choice.message.content or ""
        extra = choice.message.model_extra or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning") or ""
        truncated = choice.finish_reason == "length"
        final = complete_answer(content) if content.strip() else None
        if final is not None and not truncated:
            return (final if is_harmony(content) else content.strip()), content, usage
        if truncated and content.strip() and final_channel(content):  # an answer begun, then cut: a cut-off reply
            return cut_off_reply(content), content, usage
        if content.strip() and (is_harmony(content) or not reasoning):  # the analysis before a missing final channel
            return None, without_answer(content), usage
        return None, analysis_only(str(reasoning)) if reasoning else "", usage

    def __repr__(self) -> str:
        return f"OpenAIBackend({self.base_url!r}, model={self.model!r}, reasoning_effort={self.reasoning_effort!r})"


class _MalformedResponse(ValueError):
    """A parsed response of the wrong shape (retried like a transient fault)."""


def _well_formed(response: Any) -> Any:
    """``response`` if it has the shape the backend reads (a model listing, or a chat completion), else raise."""
    if isinstance(response, (str, bytes)):  # a 200 whose Content-Type is not JSON: the client hands back the text
        raise _MalformedResponse(f"not JSON: {str(response)[:_EXCERPT]!r}")  # cut (after masking) by the backend
    if not hasattr(response, "choices"):
        if hasattr(response, "data"):  # a model listing
            return response
        raise _MalformedResponse(f"not a chat completion: {type(response).__name__}")
    choices = response.choices
    if choices is None:  # missing or null: not a chat completion (often an error body sent with status 200)
        raise _MalformedResponse(f"no 'choices' in the chat completion{_body_error(response)}")
    if isinstance(choices, list) and not choices:
        return response  # an empty list of choices: an unanswered reply (see _ask)
    if not isinstance(choices, list):
        raise _MalformedResponse(f"'choices' is of type {type(choices).__name__}, not a list")
    message = getattr(choices[0], "message", None)
    if message is None or not hasattr(message, "content"):
        raise _MalformedResponse("the first choice has no message")
    if message.content is not None and not isinstance(message.content, str):
        raise _MalformedResponse(f"the message content is of type {type(message.content).__name__}, not a string")
    return response


def _body_error(response: Any) -> str:
    """``"; the server said: ..."`` from the ``error`` field of a response body, or ``""`` when it has none."""
    extra = getattr(response, "model_extra", None) or {}
    error = extra.get("error") if isinstance(extra, dict) else None
    if not error:
        return ""
    if isinstance(error, dict):
        message = error.get("message") or json.dumps(error, default=str)
        code = error.get("code") or error.get("type")
        text = f"{message} (code {code})" if code is not None else str(message)
    else:
        text = str(error)
    return "; the server said: " + text[:_EXCERPT]


def _check_key_settings(api_key_env: str | None, api_key: str | None) -> None:
    """Refuse a bad ``api_key_env`` or ``api_key`` without repeating either (each may be the key itself)."""
    if api_key_env is not None and api_key is not None:
        raise ValueError("pass either api_key_env (the name of an environment variable) or api_key, not both")
    if api_key_env is not None and not (isinstance(api_key_env, str) and _ENV_NAME_RE.fullmatch(api_key_env)):
        raise ValueError(
            "api_key_env must be the *name* of an environment variable (letters, digits and _, not starting with a "
            "digit), e.g. api_key_env='OPENAI_API_KEY', not the key itself (the value given is not repeated here)"
        )
    if api_key is not None and not (isinstance(api_key, str) and api_key.strip()):
        raise ValueError(f"api_key must be a non-empty string, got {type(api_key).__name__} (not repeated here)")


def _is_number(value: Any) -> bool:
    """Whether ``value`` is a real number (numpy scalars included), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class _Usage(NamedTuple):
    prompt: int | None
    completion: int | None
    cached: int | None


def _count_of(value: Any) -> int | None:
    """A token count as a server reported it: a non-negative integer, else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usage(usage: Any) -> _Usage:
    """The token counts of a response's ``usage`` (all ``None`` without one); ``cached`` is
    ``usage.prompt_tokens_details.cached_tokens``, 0 when usage comes without it."""
    if usage is None:
        return _Usage(None, None, None)
    details = getattr(usage, "prompt_tokens_details", None)  # a dict where the client's model does not declare it
    cached = _count_of(details.get("cached_tokens") if isinstance(details, dict) else getattr(details, "cached_tokens", None))
    prompt = _count_of(getattr(usage, "prompt_tokens", None))
    return _Usage(prompt, _count_of(getattr(usage, "completion_tokens", None)), 0 if cached is None else cached)


def _text(exc: Exception) -> str:
    return str(getattr(exc, "message", None) or exc)


def _chain_text(exc: BaseException) -> str:
    """The text of ``exc`` and of every exception chained to it (as a traceback would print them)."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        body = getattr(current, "body", None)
        if body is not None:
            parts.append(repr(body))
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def _without_key(text: str, key: str | None) -> str:
    """``text`` with every word holding the key, or 8 characters of it in a row, replaced by ``***``."""
    if not key:
        return text
    size = min(8, len(key))
    pieces = {key[i : i + size] for i in range(len(key) - size + 1)}

    def mask(match: re.Match[str]) -> str:
        word = match.group(0)
        has_piece = any(word[i : i + size] in pieces for i in range(len(word) - size + 1))
        return REDACTED if has_piece else word

    return re.sub(r"[^\s\"'`,;()<>\[\]{}]+", mask, text)


def _retry_after(exc: Any) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    value = headers.get("retry-after") if headers else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
