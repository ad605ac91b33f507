"""A chat backend for OpenAI-compatible servers (``llm="http://HOST:PORT/v1[#MODEL]"``): retries, the request
deadline (:class:`RequestDeadline`), API keys and unanswered replies as the "Servers" section of
the LLM backends page describes them."""

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
from dataclasses import KW_ONLY, InitVar, dataclass
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
_MODEL_RE = re.compile(r"[A-Za-z0-9._:/@+\-]+")  # a model name after ``#`` (``org/name``, ``name:tag``)
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXCERPT = 2000  # characters of a body kept in a malformed-body message before masking and cutting
_FACTOR_NEED = "0 (no retry of an unanswered reply) or a number >= 1"


class LLMServerError(LLMBackendError):
    """An OpenAI-compatible server gave no usable reply.

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
    """The deadline of one HTTP request: ``seconds`` after the request reaches the transport, a watchdog shuts down every
    connection it opened (a blocked read ends at once) and sets :attr:`expired`. Active within its ``with`` block (a
    context variable: per thread), where :func:`attach_deadline` starts the timer and reports the connections."""

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
    """An httpx ``request`` hook: in a :class:`RequestDeadline` block, start it and trace the connections it opens."""
    if (deadline := _ACTIVE_DEADLINE.get()) is not None:
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


def parse_server_url(url: str, *, name: str = "base_url") -> tuple[str, str | None]:
    """Check ``"http://host:port/v1[#MODEL]"`` and split it into ``(base URL, model or None)`` (the scheme lower-cased);
    ``ValueError`` (never repeating a credential, calling the URL ``name``) for another scheme, user information, a query
    string or parameters, a key-like token, spaces, an unreadable host or port, or a model name of other characters
    than letters, digits and ``. _ : / @ + -``."""
    if not isinstance(url, str):
        raise TypeError(f"{name} must be a string, got {type(url).__name__}")
    text = url.strip()
    head, sep, model = text.partition("#")
    scheme, slashes, rest = head.partition("://")
    scheme = scheme.lower()
    decoded = f"{rest}\n{urllib.parse.unquote(rest)}"  # credentials are refused also percent-encoded
    for bad, why in (
        (not slashes or scheme not in ("http", "https"), "a server URL must start with http:// or https://"),
        (
            "@" in decoded,
            f"a server URL must not hold credentials (user:password@host): the URL is stored, shown and recorded. {_KEY_HINT}",
        ),
        (
            any(c in decoded for c in "?&;="),
            "a server URL must not have a query string or parameters (?api_key=..., &token=...): a key there would "
            f"be stored in model.zip and the run's transcript, and the openai client sends none. {_KEY_HINT}",
        ),
        (KEY_LIKE_RE.search(decoded) is not None, f"the URL holds what looks like an API key. {_KEY_HINT}"),
        (any(c.isspace() or not c.isprintable() for c in head), "a server URL must not contain spaces or control characters"),
    ):
        if bad:
            raise _refuse(name, redact_spec(text), why)
    authority = f"{scheme}://{REDACTED}"  # what messages about the host show of the URL
    try:
        parts = urllib.parse.urlsplit(head)
        host, _ = parts.hostname, parts.port
    except ValueError:
        why = f"the host and port could not be read (HOST[:PORT], IPv6 in brackets) {_KEY_NOTE}"
        raise _refuse(name, authority, why) from None
    if not host:
        raise _refuse(name, authority, "the URL has no host")
    if "%" in parts.netloc.rpartition("]")[2]:
        raise _refuse(name, authority, "the host must not be percent-encoded")
    model = model.strip()
    if model and (_MODEL_RE.fullmatch(model) is None or KEY_LIKE_RE.search(model)):
        why = f"the model name after '#' may only hold letters, digits and . _ : / @ + - {_KEY_NOTE}"
        raise _refuse(name, redact_spec(text), why)
    return f"{scheme}://{rest}".rstrip("/"), (model or None) if sep else None


@dataclass(eq=False, repr=False)
class OpenAIBackend(TransientState):
    """Chat with a model behind an OpenAI-compatible ``/v1`` API.

    :param base_url: The server's base URL, e.g. ``"http://127.0.0.1:8000/v1"`` (``"URL#MODEL"`` also names the model).
    :param model: The model to request; by default the ``#MODEL`` of ``base_url``, else the first one the server lists.
    :param timeout: Seconds one HTTP request may take, from connecting to the last byte (each retry has its own).
    :param max_retries: Further attempts after a failed one (connection errors, timeouts, 408, 429, 5xx).
    :param backoff: Seconds to wait before the first retry; doubled for each next one.
    :param backoff_max: The longest wait between two attempts (``>= 0``).
    :param api_key_env: The *name* of the environment variable holding the API key (read at first use; ``None``: a dummy).
    :param api_key: The API key itself (instead of ``api_key_env``): kept out of ``repr``, messages and pickles.
    :param reasoning_effort: ``"low"``, ``"medium"``, ``"high"``, or ``None`` to send none (server default).
    :param reasoning_effort_via: Where the effort goes: its own ``"field"``, ``"chat_template_kwargs"`` or ``"both"``.
    :param max_tokens: Completion budget per request (reasoning included); ``None``: the server's default.
    :param retry_budget_factor: Budget multiplier of the one retry of an unanswered reply (``>= 1``; ``0``: no retry).
    :param max_concurrency: Most requests in flight from one :meth:`chat_batch`.
    :param extra_body: Extra JSON fields for every request (e.g. ``{"top_k": 1}``).
    """

    _transient = ("_client", "_given_key", "_used_key")  # the client and these hold the API key

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str | None = None
    _: KW_ONLY
    timeout: float = 600.0
    max_retries: int = 4
    backoff: float = 1.0
    backoff_max: float = 30.0
    api_key_env: str | None = None
    api_key: InitVar[str | None] = None
    reasoning_effort: str | None = None
    reasoning_effort_via: ReasoningVia = "both"
    max_tokens: int | None = None
    retry_budget_factor: float = 2.0
    max_concurrency: int = 8
    extra_body: dict[str, Any] | None = None

    def __post_init__(self, api_key: str | None) -> None:
        self.base_url, url_model = parse_server_url(self.base_url)
        env, retries, workers = self.api_key_env, self.max_retries, self.max_concurrency
        if env is not None and api_key is not None:  # messages never repeat either: each may be the key itself
            raise ValueError("pass either api_key_env (the name of an environment variable) or api_key, not both")
        if env is not None and not (isinstance(env, str) and _ENV_NAME_RE.fullmatch(env)):
            raise ValueError(
                "api_key_env must be the *name* of an environment variable (letters, digits and _, not starting with a "
                "digit), e.g. api_key_env='OPENAI_API_KEY', not the key itself (the value given is not repeated here)"
            )
        if api_key is not None and not (isinstance(api_key, str) and api_key.strip()):
            raise ValueError(f"api_key must be a non-empty string, got {type(api_key).__name__} (not repeated here)")
        if isinstance(self.model, str) and KEY_LIKE_RE.search(self.model):
            raise ValueError("model holds what looks like an API key (not repeated here): a model name is shown and recorded")
        check_reasoning_effort(self.reasoning_effort)
        if self.reasoning_effort_via not in ("field", "chat_template_kwargs", "both"):
            raise ValueError(
                f"reasoning_effort_via must be 'field', 'chat_template_kwargs' or 'both', got {self.reasoning_effort_via!r}"
            )
        for name, ok, need in (
            ("timeout", lambda v: 0 < v < math.inf, "a positive number of seconds"),
            ("backoff", lambda v: 0 <= v < math.inf, "a number of seconds >= 0"),
            ("backoff_max", lambda v: 0 <= v < math.inf, "a number of seconds >= 0"),
            ("retry_budget_factor", lambda v: v == 0 or 1 <= v < math.inf, _FACTOR_NEED),
        ):
            value = getattr(self, name)
            if not (isinstance(value, numbers.Real) and not isinstance(value, bool) and ok(value)):
                raise ValueError(f"{name} must be {need}, got {value!r}")
            setattr(self, name, float(value))
        if retries < 0 or workers < 1:
            raise ValueError(f"max_retries >= 0 and max_concurrency >= 1 are required, got {retries}, {workers}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1 or None, got {self.max_tokens}")
        self.model = self.model or url_model
        self.max_retries, self.max_concurrency = int(retries), int(workers)
        self.extra_body = dict(self.extra_body or {})
        self.has_api_key = api_key is not None  # passed with ``api_key=`` (never pickled)
        self._given_key = api_key
        self._used_key: str | None = None  # the client's key, masked in what a server sends back
        # replies asked for, HTTP requests sent, answer retries, replies still without an answer
        self.stats: dict[str, int] = {"calls": 0, "requests": 0, "retries": 0, "no_final": 0}
        self._client: Any = None
        self._lock = threading.Lock()  # creates the client, counts

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

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
            retryable = status in (408, 429) or status >= 500
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
        status, retryable = failure.status_code, failure.retryable
        if retryable:
            message = f"{self.base_url}: {what} failed after {attempts} attempt(s): {failure.happened}"
        elif status is not None:
            message = f"{self.base_url} rejected {what}: {failure.happened}; not retried (attempt {attempts})"
        else:
            message = f"{self.base_url}: {what} failed: {failure.happened}"
        return LLMServerError(
            self._mask(message), url=self.base_url, attempts=attempts, status_code=status, retryable=retryable
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
                why = f"{self.base_url} lists no model at /models; name one with {self.base_url}#MODEL"
                raise LLMServerError(why, url=self.base_url, attempts=1, retryable=False)
            self.model = ids[0]
        return self.model

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        self._count("calls")
        msgs = [dict(m) for m in messages]
        start = time.perf_counter()
        answer, raw, usage = self._ask(msgs, temperature, self.reasoning_effort, self.max_tokens)
        retry = retry_request(self.reasoning_effort, self.max_tokens, self.retry_budget_factor)  # more budget, less effort
        if answer is None and retry is not None:
            self._count("retries")
            answer, raw, usage2 = self._ask(msgs, temperature, *retry)
            usage = _Usage(*(b if a is None else a if b is None else a + b for a, b in zip(usage, usage2, strict=True)))
        if answer is None:
            self._count("no_final")
        text, seconds = raw if answer is None else answer, time.perf_counter() - start
        return ChatReply(text, usage.prompt, usage.completion, seconds, prompt_tokens_cached=usage.cached)

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]:
        """Answer conversations concurrently (``max_concurrency`` at most); raise the first error once all have ended."""
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
        body = dict(self.extra_body or {})
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
    if hasattr(response, "data") and not hasattr(response, "choices"):  # a model listing
        return response
    choices = getattr(response, "choices", None)  # an empty list: an unanswered reply (see _ask)
    message = getattr(choices[0], "message", None) if isinstance(choices, list) and choices else None
    text = getattr(message, "content", None)
    for bad, problem in (
        # a 200 whose Content-Type is not JSON: the client hands back the text (cut after masking by the backend)
        (isinstance(response, (str, bytes)), lambda: f"not JSON: {str(response)[:_EXCERPT]!r}"),
        (not hasattr(response, "choices"), lambda: f"not a chat completion: {type(response).__name__}"),
        # missing or null: often an error body sent with status 200
        (choices is None, lambda: f"no 'choices' in the chat completion{_body_error(response)}"),
        (not isinstance(choices, list), lambda: f"'choices' is of type {type(choices).__name__}, not a list"),
        (bool(choices) and not hasattr(message, "content"), lambda: "the first choice has no message"),
        (not isinstance(text, str | None), lambda: f"the message content is of type {type(text).__name__}, not a string"),
    ):
        if bad:
            raise _MalformedResponse(problem())
    return response


def _body_error(response: Any) -> str:
    """``"; the server said: ..."`` from the ``error`` field of a response body, or ``""`` when it has none."""
    extra = getattr(response, "model_extra", None) or {}
    error = extra.get("error") if isinstance(extra, dict) else None
    if error and isinstance(error, dict):
        code = error.get("code") or error.get("type")
        message = error.get("message") or json.dumps(error, default=str)
        error = f"{message} (code {code})" if code is not None else message
    return f"; the server said: {str(error)[:_EXCERPT]}" if error else ""


class _Usage(NamedTuple):
    prompt: int | None
    completion: int | None
    cached: int | None


def _usage(usage: Any) -> _Usage:
    """A response's token counts (all ``None`` without ``usage``; ``cached`` from ``prompt_tokens_details``, else 0)."""
    details = getattr(usage, "prompt_tokens_details", None)  # a dict where the client's model does not declare it
    cached = details.get("cached_tokens") if isinstance(details, dict) else getattr(details, "cached_tokens", None)
    prompt, completion, cached = (  # a count as a server reported it: a non-negative integer, else None
        value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
        for value in (getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None), cached)
    )
    return _Usage(prompt, completion, None if usage is None else cached or 0)


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
        if (body := getattr(current, "body", None)) is not None:
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
