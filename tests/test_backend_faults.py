"""Backend faults against real processes on loopback: :class:`OpenAIBackend` and ``R2PO.learn()`` vs :mod:`fault_server`.

Every fault class (connection refused, a server that accepts and never answers, 429 / 5xx answers, a malformed
body, a connection dropped mid-response or closed without a byte, a server that dies and comes back) is
checked to be retried the configured number of times (counted at the server), with the backoff between
attempts (measured at the server), then reported as :class:`LLMServerError` naming the URL, the attempts and
what happened. Other 4xx answers are not retried. Through ``learn()``: the typed error propagates, every
iteration finished before the fault is in ``model.history``, in ``history.json`` and in the checkpoint's
``model.zip``, and a resumed run completes. A saved model never holds the API key.

Timeouts and backoffs are small (tenths of a second); the servers bind 127.0.0.1 and stop themselves after
``lifetime``; every test runs under an alarm.
"""

from __future__ import annotations

import base64
import itertools
import json
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from fault_server import (
    Action,
    FaultServer,
    close_immediately,
    die,
    drop_mid_response,
    hang,
    malformed_json,
    ok,
    raw_body,
    status,
)
from helpers import UNTIL_BUDGET

from sb3_r2po import R2PO
from sb3_r2po.llm.base import LLMBackendError
from sb3_r2po.llm.openai_backend import LLMServerError, OpenAIBackend

USER = [{"role": "user", "content": "Propose a parameter vector."}]
TEST_LIMIT_S = 60
"""Hard limit of one test (SIGALRM)."""

BACKOFF = 0.1
RETRIES = 2
"""Client settings of the backend tests: 3 attempts, waits of 0.1 s and 0.2 s."""

TIMEOUT = 0.4
"""The client's deadline per request where a test waits for it to pass (a server that hangs)."""

PATIENT = 5.0
"""The client's deadline per request everywhere else: far above what a loaded machine takes to answer on loopback,
so that only the injected fault fails a request (with 0.4 s, a CI run on 2 busy cores once saw a 503 test's third
request time out before the server had recorded it)."""

W, K = 2, 2
"""Warm-up episodes and episodes per evaluation of the R2PO runs."""


# ---------------------------------------------------------------------------------------------- fixtures


pytestmark = pytest.mark.usefixtures("time_limit")  # conftest.py: the alarm of TEST_LIMIT_S; serve() starts servers

HANDLER_LIMIT_S = 5.0
"""Default per-connection limit of this module's fault servers (``serve``, in conftest.py)."""


def backend(url: str, **kwargs: Any) -> OpenAIBackend:
    """A backend with the test's retries, backoff and patient deadline (the model named: no ``/models`` request)."""
    settings: dict[str, Any] = {"model": "fault-model", "timeout": PATIENT, "max_retries": RETRIES, "backoff": BACKOFF}
    return OpenAIBackend(url, **{**settings, **kwargs})


def deadline_for(fault: Action) -> float:
    """The client's deadline for a server answering with ``fault``: short only where the test waits for it to pass."""
    return TIMEOUT if fault.kind == "hang" else PATIENT


def min_waits(retries: int = RETRIES, base: float = BACKOFF, cap: float = 30.0) -> list[float]:
    """The least waits before each retry: ``base``, doubled per retry, at most ``cap`` (jitter only adds)."""
    return [min(cap, base * 2**k) for k in range(retries)]


def gaps(server: FaultServer) -> list[float]:
    """Seconds between the arrivals of successive chat requests."""
    times = [r.time for r in server.chat_requests]
    return [b - a for a, b in itertools.pairwise(times)]


def refused_url(serve: Callable[..., FaultServer]) -> str:
    """The URL of a port on 127.0.0.1 that nothing listens on (a server was there and has stopped)."""
    server = serve()
    server.stop()
    return server.url


# ---------------------------------------------------------------------------------------------- backend

# fault, the phrase of the error message, the status code the error reports, seconds each attempt takes at least
FAULTS: dict[str, tuple[Action, str, int | None, float]] = {
    "hang": (hang(3.0), f"timed out after {TIMEOUT:g} s", None, TIMEOUT),
    "429": (status(429), "HTTP 429", 429, 0.0),
    "500": (status(500), "HTTP 500", 500, 0.0),
    "502": (status(502), "HTTP 502", 502, 0.0),
    "503": (status(503), "HTTP 503", 503, 0.0),
    "408": (status(408), "HTTP 408", 408, 0.0),
    "malformed_json": (malformed_json(), "malformed response body (JSONDecodeError", 200, 0.0),
    "not_json_content_type": (malformed_json("text/html"), "malformed response body (not JSON", 200, 0.0),
    "drop_mid_response": (drop_mid_response(), "connection failed (RemoteProtocolError", None, 0.0),
    "close_immediately": (close_immediately(), "connection failed (RemoteProtocolError", None, 0.0),
}


@pytest.mark.parametrize("name", list(FAULTS))
def test_fault_is_retried_with_backoff_then_a_typed_error(serve: Callable[..., FaultServer], name: str) -> None:
    fault, phrase, code, per_attempt = FAULTS[name]
    server = serve(default=fault)
    llm = backend(server.url, timeout=deadline_for(fault))
    start = time.monotonic()
    with pytest.raises(LLMServerError) as info:
        llm.chat(USER)
    elapsed = time.monotonic() - start

    err = info.value
    assert isinstance(err, LLMBackendError)
    assert len(server.chat_requests) == RETRIES + 1 == err.attempts == llm.stats["requests"]
    assert err.retryable and err.status_code == code and err.url == server.url
    message = str(err)
    assert server.url in message and f"after {RETRIES + 1} attempt(s)" in message and phrase in message, message
    waits = min_waits()
    for gap, wait in zip(gaps(server), waits, strict=True):  # backoff between attempts, measured at the server
        assert gap >= wait + per_attempt, (gaps(server), waits)
    assert elapsed >= sum(waits) + (RETRIES + 1) * per_attempt


def test_connection_refused_is_retried_with_backoff_then_a_typed_error(serve: Callable[..., FaultServer]) -> None:
    url = refused_url(serve)
    llm = backend(url, max_retries=3)
    start = time.monotonic()
    with pytest.raises(LLMServerError) as info:
        llm.chat(USER)
    elapsed = time.monotonic() - start
    err = info.value
    assert err.attempts == 4 == llm.stats["requests"] and err.retryable and err.status_code is None
    assert url in str(err) and "after 4 attempt(s)" in str(err) and "connection failed" in str(err), str(err)
    assert "refused" in str(err).lower()
    assert elapsed >= sum(min_waits(3))


@pytest.mark.parametrize("code", [400, 401, 403, 404, 422])
def test_other_4xx_is_not_retried(serve: Callable[..., FaultServer], code: int) -> None:
    server = serve(default=status(code))
    llm = backend(server.url, backoff=5.0)  # a retry would wait 5 s
    start = time.monotonic()
    with pytest.raises(LLMServerError) as info:
        llm.chat(USER)
    err = info.value
    assert len(server.chat_requests) == 1 == err.attempts and not err.retryable and err.status_code == code
    assert f"HTTP {code}" in str(err) and "not retried" in str(err) and server.url in str(err), str(err)
    assert (code == 404) == ("/v1" in str(err).replace(server.url, ""))  # 404: a hint about the URL
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize("name", list(FAULTS))
def test_faults_then_success_within_the_retry_budget(serve: Callable[..., FaultServer], name: str) -> None:
    fault = FAULTS[name][0]
    server = serve([fault] * RETRIES, default=ok("params: [1, 2]"))
    llm = backend(server.url, timeout=deadline_for(fault))
    reply = llm.chat(USER)
    assert reply.text == "params: [1, 2]" and reply.prompt_tokens == 10 and reply.completion_tokens == 5
    assert [r.action for r in server.chat_requests] == [fault.kind] * RETRIES + ["ok"]
    assert reply.seconds >= sum(min_waits())


def test_one_fault_more_than_the_budget_fails(serve: Callable[..., FaultServer]) -> None:
    server = serve([status(503)] * (RETRIES + 1), default=ok("fine"))
    with pytest.raises(LLMServerError, match=r"after 3 attempt\(s\): HTTP 503"):
        backend(server.url).chat(USER)
    assert len(server.chat_requests) == RETRIES + 1


def test_retry_after_header_sets_the_wait(serve: Callable[..., FaultServer]) -> None:
    server = serve([status(429, retry_after=0.5), status(503, retry_after=0.3)], default=ok("fine"))
    assert backend(server.url, backoff=0.01).chat(USER).text == "fine"
    first, second = gaps(server)
    assert first >= 0.5 and second >= 0.3


def test_backoff_is_capped_at_backoff_max(serve: Callable[..., FaultServer]) -> None:
    server = serve(default=status(500))
    llm = backend(server.url, max_retries=3, backoff=0.2, backoff_max=0.2)  # uncapped: 0.2 + 0.4 + 0.8 = 1.4 s
    start = time.monotonic()
    with pytest.raises(LLMServerError):
        llm.chat(USER)
    assert time.monotonic() - start >= 0.6
    assert all(0.2 <= gap < 0.8 for gap in gaps(server)), gaps(server)  # uncapped, the third wait alone is 0.8 s


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"[]", "not a chat completion"),
        (b"null", "not a chat completion"),
        (b'"text"', "not JSON"),
        (b'{"choices": "x"}', "'choices' is of type str"),
        (b'{"choices": [{}]}', "the first choice has no message"),
        (b'{"choices": [{"message": null}]}', "the first choice has no message"),
        (b'{"choices": [{"message": {"content": 5}}]}', "the message content is of type int"),
        (b"{}", "no 'choices' in the chat completion"),
        (b'{"id": "x", "choices": null}', "no 'choices' in the chat completion"),
        (
            b'{"error": {"message": "Rate limit exceeded", "code": 429}}',
            "no 'choices' in the chat completion; the server said: Rate limit exceeded (code 429)",
        ),
        (b'{"error": "upstream model unavailable"}', "the server said: upstream model unavailable"),
    ],
)
def test_json_of_the_wrong_shape_is_a_malformed_body(serve: Callable[..., FaultServer], raw: bytes, reason: str) -> None:
    """Valid JSON that is not a chat completion is retried like a malformed body, never an AttributeError."""
    server = serve(default=raw_body(raw))
    with pytest.raises(LLMServerError) as info:
        backend(server.url, backoff=0.01).chat(USER)
    assert "malformed response body" in str(info.value) and reason in str(info.value), str(info.value)
    assert len(server.chat_requests) == RETRIES + 1 and info.value.status_code == 200


def test_error_body_with_status_200_is_retried_with_backoff(serve: Callable[..., FaultServer]) -> None:
    """An ``{"error": ...}`` body sent with status 200 is a transient fault, not an empty answer."""
    server = serve([raw_body(b'{"error": {"message": "overloaded"}}')], default=ok("fine"))
    llm = backend(server.url)
    assert llm.chat(USER).text == "fine"
    assert len(server.chat_requests) == 2 and gaps(server)[0] >= BACKOFF
    assert llm.stats["retries"] == 0 and llm.stats["no_final"] == 0  # not an unanswered reply


def test_model_listing_is_retried_too(serve: Callable[..., FaultServer]) -> None:
    server = serve(models_script=[status(503), close_immediately()], default=ok("fine"))
    llm = backend(server.url, model=None)
    assert llm.chat(USER).text == "fine" and llm.model == "fault-model"
    assert [r.action for r in server.requests] == ["status", "close_immediately", "models", "ok"]


def test_chat_batch_retries_each_conversation(serve: Callable[..., FaultServer]) -> None:
    server = serve([status(503), drop_mid_response()], default=ok(lambda i, body: body["messages"][-1]["content"]))
    conversations = [[{"role": "user", "content": f"question {n}"}] for n in range(3)]
    replies = backend(server.url).chat_batch(conversations)
    assert [r.text for r in replies] == ["question 0", "question 1", "question 2"]
    assert len(server.chat_requests) == 5


def test_server_that_dies_and_comes_back_within_the_retry_window(serve: Callable[..., FaultServer]) -> None:
    server = serve([die(down_for=0.5)], default=ok("back"))
    llm = backend(server.url, max_retries=4, backoff=0.2)  # attempts at ~0, 0.2 (refused), 0.6 s (answered)
    assert llm.chat(USER).text == "back"
    assert server.restarts == 1 and [r.action for r in server.chat_requests] == ["die", "ok"]
    assert llm.stats["requests"] >= 3  # at least one attempt was refused while the server was down


def test_server_that_stays_down_past_the_retry_window(serve: Callable[..., FaultServer]) -> None:
    server = serve([die(down_for=3.0)], default=ok("back"))
    with pytest.raises(LLMServerError) as info:
        backend(server.url).chat(USER)
    assert "after 3 attempt(s): connection failed" in str(info.value) and len(server.chat_requests) == 1


# ---------------------------------------------------------------------------------------------- through learn()


def cartpole_reply(index: int, body: dict[str, Any]) -> str:
    """A valid, never repeated reply for the 10-parameter CartPole policy (``b[1]`` = index / 10)."""
    return f"After looking at the history: params: [0, 0, 0, 0, 0, 1, 0, 1, 0, {index / 10:.1f}]"


def iteration_records(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in history if r["kind"] != "warmup"]


@pytest.mark.parametrize(
    "good, fault",
    [(0, status(503)), (1, close_immediately()), (4, status(500)), (5, hang(3.0))],
    ids=["503_after_0", "closed_after_1", "500_after_4", "hang_after_5"],
)
def test_learn_raises_the_typed_error_and_keeps_every_finished_iteration(
    serve: Callable[..., FaultServer],
    tmp_path: Path,
    good: int,
    fault: Action,
    make_r2po,
) -> None:
    """The server answers ``good`` calls, then fails for good: the iterations finished before are saved."""
    server = serve([ok(cartpole_reply)] * good, default=fault)
    run_dir = tmp_path / "run"
    model = make_r2po(
        llm=backend(server.url, timeout=deadline_for(fault)),
        n_eval_episodes=K,
        warmup_episodes=W,
        max_episodes=W + 4 * 2 * K,
        seed=0,
        checkpoint_dir=str(run_dir),
    )
    with pytest.raises(LLMServerError) as info:
        model.learn(total_timesteps=UNTIL_BUDGET)
    assert str(server.url) in str(info.value) and "after 3 attempt(s)" in str(info.value)

    finished = good // 2  # 2 calls per iteration (no revision is declined: every reply is new)
    assert len(model.history) == W + finished
    assert [r["kind"] for r in model.history[:W]] == ["warmup"] * W
    records = iteration_records(model.history)
    assert [r["iteration"] for r in records] == list(range(1, finished + 1)) and model.iteration == finished
    assert all(r["revision"]["status"] in ("kept", "rejected") for r in records)
    # the model is left as of its last history entry: the cut iteration's calls and episodes are not charged
    assert model.llm_stats["calls"] == 2 * finished and model.llm_stats["fallbacks"] == 0
    assert len(server.chat_requests) == good + RETRIES + 1
    assert model.episodes_used == W + finished * 2 * K == model.history[-1]["episodes"]

    # the same history on disk: history.json and the checkpoint's model.zip
    assert json.loads((run_dir / "history.json").read_text()) == model.history
    loaded = R2PO.load(run_dir / "model.zip", env=gym.make("CartPole-v1"))
    assert loaded.history == model.history and loaded.iteration == finished

    # the server comes back: the resumed run continues from the checkpoint and completes
    server.default = ok(cartpole_reply)
    resumed = R2PO.load(run_dir / "model.zip", env=gym.make("CartPole-v1"), llm=backend(server.url))
    resumed.learn(total_timesteps=UNTIL_BUDGET, reset_num_timesteps=False)
    assert resumed.history[: len(model.history)] == model.history
    assert len(resumed.history) == W + 4 and resumed.iteration == 4
    assert [r["iteration"] for r in iteration_records(resumed.history)] == [1, 2, 3, 4]
    assert resumed.episodes_used == W + 4 * 2 * K
    assert json.loads((run_dir / "history.json").read_text()) == resumed.history


def test_learn_survives_a_server_that_dies_and_comes_back(serve: Callable[..., FaultServer], make_r2po) -> None:
    server = serve([ok(cartpole_reply)] * 3 + [die(down_for=0.4)], default=ok(cartpole_reply))
    model = make_r2po(
        llm=backend(server.url, max_retries=4, backoff=0.2),
        n_eval_episodes=K,
        warmup_episodes=W,
        max_episodes=W + 3 * 2 * K,
        seed=0,
    )
    model.learn(total_timesteps=UNTIL_BUDGET)
    assert server.restarts == 1
    assert len(model.history) == W + 3 and model.iteration == 3
    assert all(r["kind"] in ("search", "critic") for r in iteration_records(model.history))
    assert model.llm_stats["calls"] == 6 and model.llm_stats["fallbacks"] == 0


def test_learn_survives_transient_faults_of_every_class(serve: Callable[..., FaultServer], make_r2po) -> None:
    faults = [FAULTS[name][0] for name in FAULTS]
    script: list[Action] = []
    for fault in faults:  # one fault before each good reply
        script += [fault, ok(cartpole_reply)]
    server = serve(script, default=ok(cartpole_reply))
    iterations = (len(faults) + 1) // 2
    model = make_r2po(
        llm=backend(server.url, backoff=0.02, timeout=1.5),  # the hang passes after 1.5 s, the others answer at once
        n_eval_episodes=K,
        warmup_episodes=W,
        max_episodes=W + iterations * 2 * K,
        seed=0,
    )
    model.learn(total_timesteps=UNTIL_BUDGET)
    assert model.iteration == iterations and model.llm_stats["fallbacks"] == 0
    assert sum(r.action != "ok" for r in server.chat_requests) == len(faults)


# ---------------------------------------------------------------------------------------------- secrets


def _blobs(path: Path) -> Iterator[tuple[str, bytes]]:
    """Every file of an SB3 zip, and the base64-decoded pickles inside its ``data`` JSON."""
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            raw = archive.read(name)
            yield name, raw
            if name == "data":
                stack: list[Any] = [json.loads(raw)]
                while stack:
                    item = stack.pop()
                    if isinstance(item, dict):
                        if isinstance(item.get(":serialized:"), str):
                            yield f"data:{item.get(':type:')}", base64.b64decode(item[":serialized:"])
                        stack.extend(item.values())
                    elif isinstance(item, list):
                        stack.extend(item)


def test_saved_model_and_run_directory_never_hold_the_api_key(
    serve: Callable[..., FaultServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make_r2po,
) -> None:
    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("MY_TEST_KEY", secret)
    server = serve(default=ok(cartpole_reply))
    run_dir = tmp_path / "run"
    model = make_r2po(
        llm=backend(server.url, api_key_env="MY_TEST_KEY"),
        n_eval_episodes=K,
        warmup_episodes=W,
        max_episodes=W + 2 * 2 * K,
        seed=0,
        checkpoint_dir=str(run_dir),
    )
    model.learn(total_timesteps=UNTIL_BUDGET)
    assert model.iteration == 2
    assert all(r.headers.get("authorization") == f"Bearer {secret}" for r in server.chat_requests)  # the key was used
    model.save(tmp_path / "model.zip")

    for zipped in (tmp_path / "model.zip", run_dir / "model.zip"):
        data = json.loads(zipfile.ZipFile(zipped).read("data"))
        assert data["llm"] is None and "_backend" not in data
        for name, blob in _blobs(zipped):
            assert secret.encode() not in blob, (zipped, name)
            assert b"OpenAIBackend" not in blob and b"MY_TEST_KEY" not in blob, (zipped, name)
    files = sorted(p for p in run_dir.rglob("*") if p.is_file())
    assert {p.name for p in files} - {".lock"} == {"model.zip", "history.json", "llm_calls.jsonl"}  # .lock: empty
    for path in files:
        assert secret.encode() not in path.read_bytes(), path
    assert b"OpenAIBackend" not in (run_dir / "history.json").read_bytes()
    # the LLM transcript names the backend by design (class, URL, model), never the key or its variable
    transcript = [json.loads(line) for line in (run_dir / "llm_calls.jsonl").read_text().splitlines()]
    assert len(transcript) == 4 and all(entry["backend"]["class"] == "OpenAIBackend" for entry in transcript)
    assert all("MY_TEST_KEY" not in json.dumps(entry) for entry in transcript)

    # an error answer does not echo the key either
    server.default = status(401)
    with pytest.raises(LLMServerError) as info:
        backend(server.url, api_key_env="MY_TEST_KEY").chat(USER)
    assert secret not in str(info.value) and secret not in repr(info.value.__cause__)
