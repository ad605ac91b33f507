"""A chat backend for OpenAI-compatible servers: vLLM, SGLang, llama.cpp server, Ollama (``/v1``), ``transformers serve``.

``llm="http://127.0.0.1:8000/v1"`` (or ``...#MODEL`` to name the model) builds an :class:`OpenAIBackend`.
Design:

- **The official ``openai`` client**, created lazily on the first call (so constructing, validating and
  pickling the backend touch no network). Its own retries are off; this module retries itself, so the
  policy and the final error are ours.
- **Retries** with exponential backoff (``backoff`` seconds, doubled per attempt, at most ``backoff_max``,
  honouring a ``Retry-After`` header) on connection errors (refused, dropped mid-response), timeouts, HTTP
  408, 429 and 5xx, and malformed bodies (a 200 that is not JSON or not a chat completion, e.g. ``{}`` or
  an ``{"error": ...}`` body without ``choices``, whose error message is kept for the final error); none on
  other 4xx (a bad request stays bad). After the last attempt :class:`LLMServerError` (an
  :class:`~sb3_r2po.llm.base.LLMBackendError`) says which URL, what happened and how many attempts were made.
- **The model name**: the ``model`` setting, else the ``#MODEL`` part of the URL, else the first model the
  server lists at ``/models`` (asked once).
- **API key**: only the *name* of an environment variable (``api_key_env``) is stored; the key is read when
  the client is created, and the client is dropped when the backend is pickled, so a saved R2PO model
  holds no secret. Without ``api_key_env`` a placeholder key is sent (local servers ignore it). A URL with
  credentials (``https://user:password@host/v1``) is refused, as the URL is stored, shown and recorded.
- **Reasoning effort** (``low``/``medium``/``high``) goes where the server looks for it, by
  ``reasoning_effort_via``: ``"field"`` sends the OpenAI ``reasoning_effort`` request field (what vLLM
  reads for gpt-oss, and Ollama); ``"chat_template_kwargs"`` sends ``extra_body={"chat_template_kwargs":
  {"reasoning_effort": ...}}`` (what servers that render the model's Jinja template read: llama.cpp server,
  SGLang, ``transformers serve``); ``"both"`` (the default) sends both, which these servers accept
  (``transformers serve`` ignores the field with a warning; a strict server may refuse the unknown field:
  then pick one).
- **Harmony.** Servers with a reasoning parser return the answer as ``content`` (and the reasoning apart);
  others return raw or flattened harmony text, whose final channel is taken
  (:func:`~sb3_r2po.llm.harmony.final_channel`). No answer (no choice, empty content, no final channel, or
  a reply cut off by the token limit, ``finish_reason == "length"``, whose last value may be cut short) is
  retried once with one step lower effort and, when ``max_tokens`` is set, a ``retry_budget_factor`` times
  larger budget; the retry is skipped when it would send the same request (no ``max_tokens`` and no effort
  to lower). If still unanswered, the text returned is harmony output without a final channel
  (:func:`~sb3_r2po.llm.harmony.without_answer`: what came before the answer, or the reasoning when the
  server gave it apart; empty when the server sent no choice), counted in ``stats["no_final"]``, so R2PO's
  parser counts a failed parse.
- **Batches**: :meth:`OpenAIBackend.chat_batch` sends the conversations concurrently from a thread pool
  (servers batch concurrent requests themselves).
- **Usage**: token counts from the response's ``usage``; latency measured around the request(s).
"""

from __future__ import annotations

import json
import math
import numbers
import os
import random
import threading
import time
import urllib.parse
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from sb3_r2po.llm.base import BatchResult, ChatReply, LLMBackendError, Message, TransientState, ask_each
from sb3_r2po.llm.harmony import REASONING_EFFORTS as REASONING_EFFORTS  # importable from here, as it was
from sb3_r2po.llm.harmony import (
    analysis_only,
    check_reasoning_effort,
    complete_answer,
    is_harmony,
    lower_effort,
    retry_budget,
    without_answer,
)

ReasoningVia = Literal["field", "chat_template_kwargs", "both"]
_RETRY_STATUS = frozenset({408, 429})


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


def split_model_url(url: str) -> tuple[str, str | None]:
    """Split ``"http://host:port/v1#model"`` into ``("http://host:port/v1", "model")`` (model ``None`` if absent)."""
    base, sep, model = url.strip().partition("#")
    return base.rstrip("/"), (model.strip() or None) if sep else None


class OpenAIBackend(TransientState):
    """
    Chat with a model behind an OpenAI-compatible ``/v1`` API.

    :param base_url: The server's base URL, e.g. ``"http://127.0.0.1:8000/v1"``; ``"URL#MODEL"`` also names
        the model.
    :param model: The model name to request; by default the ``#MODEL`` part of ``base_url``, else the first
        model the server lists.
    :param timeout: Seconds one request may take (gpt-oss reasoning on a busy server can take minutes); a
        positive number.
    :param max_retries: Further attempts after a failed one (connection errors, timeouts, 408, 429, 5xx).
    :param backoff: Seconds to wait before the first retry; doubled for each next one.
    :param backoff_max: The longest wait between two attempts (``>= 0``).
    :param api_key_env: The *name* of the environment variable holding the API key (read when the client is
        created, never stored); ``None`` sends a placeholder key. Credentials in ``base_url`` are refused.
    :param reasoning_effort: ``"low"``, ``"medium"``, ``"high"``, or ``None`` to send none (server default).
    :param reasoning_effort_via: ``"field"``, ``"chat_template_kwargs"`` or ``"both"`` (see the module notes).
    :param max_tokens: Completion budget per request (reasoning included); ``None``: the server's default.
    :param retry_budget_factor: Budget multiplier of the one retry of an unanswered reply (``>= 1``); ``0``
        disables the retry.
    :param max_concurrency: Most requests in flight from one :meth:`chat_batch`.
    :param extra_body: Extra JSON fields for every request (e.g. ``{"top_k": 1}``).
    """

    _transient = ("_client",)  # the client holds the API key
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
        reasoning_effort: str | None = None,
        reasoning_effort_via: ReasoningVia = "both",
        max_tokens: int | None = None,
        retry_budget_factor: float = 2.0,
        max_concurrency: int = 8,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        url, url_model = split_model_url(base_url)
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        check_no_credentials(url)
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
        self.reasoning_effort = reasoning_effort
        self.reasoning_effort_via: ReasoningVia = reasoning_effort_via
        self.max_tokens = max_tokens
        self.retry_budget_factor = float(retry_budget_factor)
        self.max_concurrency = int(max_concurrency)
        self.extra_body = dict(extra_body or {})
        self.stats: dict[str, int] = {"calls": 0, "requests": 0, "retries": 0, "no_final": 0}
        """Counters: replies asked for, HTTP requests sent, answer retries, replies still without an answer."""
        self._client: Any = None
        self._lock = threading.Lock()
        self._stats_lock = threading.Lock()

    def _count(self, key: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[key] += n

    # ------------------------------------------------------------------ client

    def _api_key(self) -> str:
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
        """
        Whether the ``openai`` client exists: ``False`` until the first request (or the first read of
        :attr:`client`), and again after unpickling. Reading it creates nothing.
        """
        return self._client is not None

    @property
    def client(self) -> Any:
        """The ``openai.OpenAI`` client (created on first use; its own retries are off)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    import openai

                    self._client = openai.OpenAI(
                        base_url=self.base_url, api_key=self._api_key(), timeout=self.timeout, max_retries=0
                    )
        return self._client

    def _with_retries(self, what: str, request: Any) -> Any:
        """Run ``request()``; retry connection errors, timeouts, 408, 429, 5xx and malformed bodies, with backoff."""
        import openai

        attempts = 0
        delay = self.backoff
        last: Exception
        status_code: int | None
        while True:
            attempts += 1
            self._count("requests")
            retry_after: float | None = None
            try:
                return _well_formed(request())
            except (_MalformedResponse, json.JSONDecodeError, openai.APIResponseValidationError) as exc:
                # a 200 whose body is not JSON, or not of the expected shape (a truncating proxy, a broken server)
                detail = str(exc) if isinstance(exc, _MalformedResponse) else f"{type(exc).__name__}: {_short(exc)}"
                last, happened, status_code = exc, f"malformed response body ({detail})", 200
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status not in _RETRY_STATUS and status < 500:
                    hint = " (does the URL end with /v1?)" if status == 404 else ""
                    raise LLMServerError(
                        f"{self.base_url} rejected {what}: HTTP {status}{hint}: {_short(exc)}; "
                        f"not retried (attempt {attempts})",
                        url=self.base_url,
                        attempts=attempts,
                        status_code=status,
                        retryable=False,
                    ) from exc
                last = exc
                happened = f"HTTP {status}: {_short(exc)}"
                status_code = status
                retry_after = _retry_after(exc)
            except openai.APITimeoutError as exc:
                last, happened, status_code = exc, f"timed out after {self.timeout:g} s", None
            except openai.APIConnectionError as exc:
                cause = exc.__cause__ or exc
                last, happened, status_code = exc, f"connection failed ({type(cause).__name__}: {cause})", None
            except openai.OpenAIError as exc:
                raise LLMServerError(
                    f"{self.base_url}: {what} failed: {type(exc).__name__}: {exc}",
                    url=self.base_url,
                    attempts=attempts,
                    retryable=False,
                ) from exc
            if attempts > self.max_retries:
                raise LLMServerError(
                    f"{self.base_url}: {what} failed after {attempts} attempt(s): {happened}",
                    url=self.base_url,
                    attempts=attempts,
                    status_code=status_code,
                    retryable=True,
                ) from last
            wait = min(self.backoff_max, retry_after if retry_after is not None else delay)
            time.sleep(wait + random.uniform(0.0, 0.1 * wait))
            delay = min(self.backoff_max, delay * 2 if delay > 0 else 0.0)

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

    # ------------------------------------------------------------------ chat

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        """
        Answer one conversation.

        :param messages: Chat messages (``role``/``content`` dicts).
        :param temperature: Sampling temperature (0: greedy, as in the paper).
        """
        self._count("calls")
        msgs = [dict(m) for m in messages]
        start = time.perf_counter()
        effort, budget = self.reasoning_effort, self.max_tokens
        answer, raw, p_tok, c_tok = self._ask(msgs, temperature, effort, budget)
        effort2 = lower_effort(effort)
        budget2 = None if budget is None else retry_budget(budget, self.retry_budget_factor)
        # the retry changes the request (more budget, less effort), or it is not sent
        if answer is None and self.retry_budget_factor > 0 and (effort2, budget2) != (effort, budget):
            self._count("retries")
            answer, raw, p_tok2, c_tok2 = self._ask(msgs, temperature, effort2, budget2)
            p_tok, c_tok = _add(p_tok, p_tok2), _add(c_tok, c_tok2)
        if answer is None:
            self._count("no_final")
        text = raw if answer is None else answer
        return ChatReply(text=text, prompt_tokens=p_tok, completion_tokens=c_tok, seconds=time.perf_counter() - start)

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]:
        """
        Answer several conversations, sending them concurrently (at most ``max_concurrency`` in flight).

        :param conversations: The conversations.
        :param temperature: Sampling temperature.
        :raises LLMBackendError: the first conversation's error, after every request has ended
            (:meth:`answer_batch` gives the replies that came as well).
        """
        return self.answer_batch(conversations, temperature=temperature).unwrap()

    def answer_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> BatchResult:
        """
        As :meth:`chat_batch`, but return each conversation's reply or error: one conversation that fails (a request
        the server refuses) does not lose the others' replies.

        :param conversations: The conversations.
        :param temperature: Sampling temperature.
        """
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
    ) -> tuple[str | None, str, int | None, int | None]:
        """
        One request: ``(answer or None, text for an unanswered reply, prompt tokens, completion tokens)``.

        The text for an unanswered reply has no final channel (:func:`~sb3_r2po.llm.harmony.without_answer`),
        or is empty when the server sent no choice.
        """
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
        usage = getattr(response, "usage", None)
        p_tok = getattr(usage, "prompt_tokens", None)
        c_tok = getattr(usage, "completion_tokens", None)
        if not response.choices:
            return None, "", p_tok, c_tok
        choice = response.choices[0]
        message = choice.message
        content = message.content or ""
        extra = message.model_extra or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning") or ""
        truncated = choice.finish_reason == "length"
        final = complete_answer(content) if content.strip() else None
        if final is not None and not truncated:
            return (final if is_harmony(content) else content.strip()), content, p_tok, c_tok
        if content.strip() and is_harmony(content):
            raw = without_answer(content)  # the analysis before a missing or cut-off final channel
        elif reasoning:
            raw = analysis_only(str(reasoning))
        else:
            raw = without_answer(content) if content.strip() else ""  # plain text cut off by the token limit
        return None, raw, p_tok, c_tok

    # ------------------------------------------------------------------ pickling

    def __repr__(self) -> str:
        return f"OpenAIBackend({self.base_url!r}, model={self.model!r}, reasoning_effort={self.reasoning_effort!r})"


class _MalformedResponse(ValueError):
    """A response the client parsed, but that is not what the request returns (retried like a transient fault)."""


def _well_formed(response: Any) -> Any:
    """``response`` if it has the shape the backend reads (a model listing, or a chat completion), else raise."""
    if isinstance(response, (str, bytes)):  # a 200 whose Content-Type is not JSON: the client hands back the text
        raise _MalformedResponse(f"not JSON: {str(response)[:100]!r}")
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
    return "; the server said: " + (text if len(text) <= 300 else text[:300] + "...")


def _is_number(value: Any) -> bool:
    """Whether ``value`` is a real number (numpy scalars included), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_no_credentials(url: str) -> None:
    """
    Raise ``ValueError`` for a URL with a user name or password in it (the message does not repeat them).

    :param url: A server URL (without the ``#MODEL`` part).
    """
    netloc = urllib.parse.urlsplit(url).netloc
    if "@" in netloc:
        host = netloc.rpartition("@")[2]
        raise ValueError(
            f"base_url must not hold credentials (user:password@{host}): the URL is stored, shown and recorded. "
            "Put the API key in an environment variable and name it with api_key_env='MY_KEY_VARIABLE'"
        )


def _add(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


def _short(exc: Exception, limit: int = 300) -> str:
    text = str(getattr(exc, "message", None) or exc)
    return text if len(text) <= limit else text[:limit] + "..."


def _retry_after(exc: Any) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
