"""Hostile servers: ``OpenAIBackend(timeout=...)`` is a deadline for the whole request, however the server paces it.

A server that trickles its reply a few bytes at a time, each gap far under the timeout, never trips a per-read
timeout: before the deadline (``RequestDeadline``), such a server held a call for as long as it liked (6 s and more
with ``timeout=0.5`` in these patterns, up to the server's own limit for the endless ones). Every pattern of
:data:`HOSTILE_SERVERS` (slow status line and headers, slow body, slow chunks of a chunked body, one byte at a time,
a body or headers that never end, a gap just under the timeout, silence) must now end the call within ``TIMEOUT +
MARGIN`` as a timeout, retried like any other, then reported as :class:`LLMServerError`; a slow reply that ends
before the deadline is still a reply. The servers are real sockets on 127.0.0.1 (:mod:`fault_server`); every test
runs under an alarm.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from fault_server import TRICKLES, Action, FaultServer, hang, ok, trickle

from sb3_r2po.llm.openai_backend import LLMServerError, OpenAIBackend, RequestDeadline, attach_deadline

USER = [{"role": "user", "content": "Propose a parameter vector."}]
TIMEOUT = 0.5
"""The client's timeout (its deadline per request), seconds."""
MARGIN = 0.9
"""How far past the deadline a call may end (the watchdog's wake-up, the client unwinding): under 0.05 s on an idle
machine, 0.54 s once on a loaded 2-core one (1.04 s for ``silence``), and well under what every pattern takes without a
deadline (``test_the_patterns_are_hostile``), so a call that ignores the deadline still fails."""
SLOWEST_GAP = 0.3
"""The longest gap between two sends of any pattern: every one is well under ``TIMEOUT``."""
TEST_LIMIT_S = 60

HOSTILE_SERVERS: dict[str, Action] = {
    **TRICKLES,  # slow headers, slow body, slow chunks, one byte at a time, endless body, endless headers
    "one_byte_headers": trickle("headers", chunk=1, gap=0.03),
    "one_byte_chunks": trickle("chunked", chunk=1, gap=0.02),
    "endless_body_fast": trickle("endless_body", chunk=64, gap=0.005),
    "gap_just_under_the_timeout": trickle("body", chunk=40, gap=SLOWEST_GAP),
    "headers_gap_just_under_the_timeout": trickle("headers", chunk=16, gap=SLOWEST_GAP),
    "silence": hang(10.0),
}
"""Server fault cases of the deadline tests (their count is the figure docs/reliability.md gives)."""

SLOW_BUT_IN_TIME: dict[str, Action] = {
    "body": trickle("body", chunk=64, gap=0.01),
    "headers": trickle("headers", chunk=32, gap=0.01),
    "chunks": trickle("chunked", chunk=64, gap=0.01),
}
"""Trickles that end well within ``2 * TIMEOUT``: replies, not timeouts."""


pytestmark = pytest.mark.usefixtures("time_limit")  # conftest.py: the alarm of TEST_LIMIT_S; serve() starts servers

HANDLER_LIMIT_S = 12.0
"""Default per-connection limit of this module's fault servers (``serve``, in conftest.py)."""


def backend(url: str, **kwargs: Any) -> OpenAIBackend:
    """A backend with the test's timeout and no retries, its client created (creating it is no part of a request)."""
    settings: dict[str, Any] = {"model": "fault-model", "timeout": TIMEOUT, "max_retries": 0, "backoff": 0.05}
    llm = OpenAIBackend(url, **{**settings, **kwargs})
    assert llm.client is not None
    return llm


def timed(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    start = time.monotonic()
    try:
        call()
    except Exception as exc:
        return time.monotonic() - start, exc
    return time.monotonic() - start, None


def test_the_patterns_are_hostile() -> None:
    """Each pattern's gaps are under the timeout, and each takes longer than the timeout in all (or never ends)."""
    for name, action in HOSTILE_SERVERS.items():
        if action.kind == "hang":
            assert action.seconds > 4 * TIMEOUT, name
            continue
        assert 0 < action.gap <= SLOWEST_GAP < TIMEOUT, name
        if not action.part.startswith("endless"):
            sent = 80 if action.part == "headers" else 300  # at least: the status line and headers, or the body
            assert sent / action.chunk * action.gap > TIMEOUT + MARGIN, name
    assert len(HOSTILE_SERVERS) >= 10


@pytest.mark.parametrize("name", list(HOSTILE_SERVERS))
def test_a_hostile_server_is_cut_off_at_the_deadline(serve: Callable[..., FaultServer], name: str) -> None:
    server = serve(default=HOSTILE_SERVERS[name])
    llm = backend(server.url)
    elapsed, exc = timed(lambda: llm.chat(USER))
    assert isinstance(exc, LLMServerError), (name, exc)
    assert f"timed out after {TIMEOUT:g} s" in str(exc) and exc.retryable and exc.attempts == 1, str(exc)
    assert exc.status_code is None and exc.url == server.url
    assert TIMEOUT - 0.05 <= elapsed <= TIMEOUT + MARGIN, (name, elapsed)
    assert len(server.chat_requests) == 1


@pytest.mark.parametrize("name", ["slow_headers", "one_byte_body", "endless_body", "endless_headers", "silence"])
def test_a_request_past_its_deadline_is_retried_then_a_typed_error(serve: Callable[..., FaultServer], name: str) -> None:
    server = serve(default=HOSTILE_SERVERS[name])
    llm = backend(server.url, max_retries=2, backoff=0.05, backoff_max=0.05)
    elapsed, exc = timed(lambda: llm.chat(USER))
    assert isinstance(exc, LLMServerError) and exc.attempts == 3 and len(server.chat_requests) == 3, exc
    assert f"failed after 3 attempt(s): timed out after {TIMEOUT:g} s" in str(exc), str(exc)
    waits = 2 * 0.05 * 1.1  # two backoffs, jitter included
    assert 3 * TIMEOUT <= elapsed + 0.15 and elapsed <= 3 * TIMEOUT + waits + MARGIN, elapsed


@pytest.mark.parametrize("name", ["slow_body", "slow_chunks", "endless_headers"])
def test_a_trickle_then_a_reply_within_the_retry_budget(serve: Callable[..., FaultServer], name: str) -> None:
    server = serve([HOSTILE_SERVERS[name]], default=ok("params: [1, 2]"))
    llm = backend(server.url, max_retries=1)
    assert llm.chat(USER).text == "params: [1, 2]"
    assert [r.action for r in server.chat_requests] == ["trickle", "ok"]


@pytest.mark.parametrize("name", list(SLOW_BUT_IN_TIME))
def test_a_slow_reply_that_ends_before_the_deadline_is_a_reply(serve: Callable[..., FaultServer], name: str) -> None:
    server = serve(default=SLOW_BUT_IN_TIME[name])
    llm = backend(server.url, timeout=4 * TIMEOUT)
    for _ in range(2):  # the second request too: a deadline is per request
        assert llm.chat(USER).text == "params: [0, 0, 0, 0, 0, 1, 0, 1, 0, 0]"
    assert len(server.chat_requests) == 2


def test_each_request_has_its_own_connection_and_deadline(serve: Callable[..., FaultServer]) -> None:
    """``Connection: close``: no request reuses a connection the watchdog of an earlier one does not know."""
    server = serve([ok("first"), HOSTILE_SERVERS["endless_body"]], default=ok("third"))
    llm = backend(server.url)
    assert llm.chat(USER).text == "first"
    elapsed, exc = timed(lambda: llm.chat(USER))
    assert isinstance(exc, LLMServerError) and elapsed <= TIMEOUT + MARGIN
    assert llm.chat(USER).text == "third"
    assert all(r.headers.get("connection") == "close" for r in server.chat_requests)


def test_a_keep_alive_server_gets_no_second_request_on_one_connection(serve: Callable[..., FaultServer]) -> None:
    """A server that would keep the connection open trickles the second request: it is still cut off in time."""
    server = serve([ok("first"), HOSTILE_SERVERS["endless_body"]], default=ok("third"), keep_alive=True)
    llm = backend(server.url)
    assert llm.chat(USER).text == "first"
    elapsed, exc = timed(lambda: llm.chat(USER))
    assert isinstance(exc, LLMServerError) and "timed out" in str(exc) and elapsed <= TIMEOUT + MARGIN, (elapsed, exc)
    assert llm.chat(USER).text == "third"


def test_each_conversation_of_a_batch_has_its_own_deadline(serve: Callable[..., FaultServer]) -> None:
    server = serve(default=HOSTILE_SERVERS["endless_body"])
    llm = backend(server.url, max_concurrency=4)
    convs = [[{"role": "user", "content": f"question {i}"}] for i in range(4)]
    start = time.monotonic()
    result = llm.answer_batch(convs)
    elapsed = time.monotonic() - start
    assert all(isinstance(e, LLMServerError) and "timed out" in str(e) for e in result.errors), result.errors
    assert elapsed <= TIMEOUT + MARGIN + 0.2 and len(server.chat_requests) == 4  # concurrent, not one after another


def test_the_model_listing_has_a_deadline_too(serve: Callable[..., FaultServer]) -> None:
    server = serve(models_script=[HOSTILE_SERVERS["slow_body"]])
    llm = backend(server.url, model=None)
    elapsed, exc = timed(llm.resolved_model)
    assert isinstance(exc, LLMServerError) and "the model list" in str(exc) and "timed out" in str(exc), exc
    assert elapsed <= TIMEOUT + MARGIN


def test_a_deadline_shuts_a_connection_reported_after_it_expired() -> None:
    """The watchdog shuts down the connections reported before the deadline at the deadline, later ones at once."""
    left, right = socket.socketpair()
    late_left, late_right = socket.socketpair()

    class Stream:
        def __init__(self, sock: socket.socket) -> None:
            self.sock = sock

        def get_extra_info(self, name: str) -> Any:
            return self.sock if name == "socket" else None

    try:
        with RequestDeadline(0.2) as deadline:
            request = type("Request", (), {"extensions": {}})()
            attach_deadline(request)  # arms the timer, sets the trace extension
            request.extensions["trace"]("connection.connect_tcp.complete", {"return_value": Stream(left)})
            request.extensions["trace"]("http11.send_request_headers.started", {"request": request})  # ignored
            got: list[bytes] = []
            reader = threading.Thread(target=lambda: got.append(left.recv(10)))
            start = time.monotonic()
            reader.start()
            reader.join(timeout=5)
            assert got == [b""] and 0.15 <= time.monotonic() - start <= 0.2 + MARGIN  # a blocked read ended
            assert deadline.expired
            request.extensions["trace"]("connection.connect_tcp.complete", {"return_value": Stream(late_left)})
            assert late_left.recv(10) == b""  # shut down as soon as it was reported
    finally:
        for sock in (left, right, late_left, late_right):
            sock.close()


def test_no_deadline_outside_a_request() -> None:
    """Without an active deadline the hook leaves the request alone; a deadline never started never expires."""
    request = type("Request", (), {"extensions": {}})()
    attach_deadline(request)
    assert request.extensions == {}
    with RequestDeadline(0.05) as deadline:
        time.sleep(0.15)  # no request sent: the timer never started
    assert not deadline.expired
