"""OpenAIBackend against real HTTP servers on 127.0.0.1.

- ``real_server``: ``transformers serve`` of the tiny gpt-oss model when its server dependencies (fastapi,
  uvicorn, accelerate) are importable, otherwise an OpenAI-compatible ``http.server`` that runs the same
  tiny model with ``transformers``. ``R2PO_TEST_SERVE_PYTHONPATH`` adds a folder to the server's
  ``PYTHONPATH`` (a place where those dependencies are installed apart from the project's environment).
- ``scripted``: a small ``http.server`` that answers from a script (faults included) and records every
  request, for the retry, error, key and reasoning-effort tests.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import itertools
import pickle
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from servers import SCRIPTED_MODEL, RealServer, Response, ScriptedServer, completion, error, free_port, real_tiny_server
from tiny_gptoss import DEFAULT_FINAL, harmony_reply, tiny_model

import sb3_r2po
from sb3_r2po.common.parameters import ParameterSpace, final_channel, final_is_truncated, parse_params
from sb3_r2po.llm.base import LLMBackendError
from sb3_r2po.llm.openai_backend import LLMServerError, OpenAIBackend, parse_server_url
from sb3_r2po.llm.resolve import make_backend

USER = [{"role": "user", "content": "Propose a parameter vector."}]


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    server = ScriptedServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def real_server() -> Iterator[RealServer]:
    with real_tiny_server(tiny_model("trained")) as server:
        yield server


# ---------------------------------------------------------------------------------------------- real server


def test_reply_from_a_real_server(real_server: RealServer) -> None:
    b = OpenAIBackend(real_server.url, model=real_server.model_id, max_tokens=96, reasoning_effort="low", max_retries=0)
    reply = b.chat(USER)
    assert reply.text == DEFAULT_FINAL, real_server.kind
    assert reply.prompt_tokens and reply.prompt_tokens > 10
    assert reply.completion_tokens and reply.completion_tokens >= 30
    assert reply.seconds > 0


def test_url_fragment_names_the_model_and_models_lists_it(real_server: RealServer) -> None:
    b = make_backend(f"{real_server.url}#{real_server.model_id}")
    assert isinstance(b, OpenAIBackend) and b.model == real_server.model_id and b.base_url == real_server.url
    b.max_tokens = 96
    assert b.chat(USER).text == DEFAULT_FINAL
    assert OpenAIBackend(real_server.url).resolved_model() == real_server.model_id


# ---------------------------------------------------------------------------------------------- scripted server


def fast(url: str, **kwargs: Any) -> OpenAIBackend:
    kwargs.setdefault("model", SCRIPTED_MODEL)
    kwargs.setdefault("backoff", 0.01)
    kwargs.setdefault("backoff_max", 0.05)
    kwargs.setdefault("timeout", 10.0)
    return OpenAIBackend(url, **kwargs)


def test_split_model_url() -> None:
    assert parse_server_url("http://h:1/v1#org/model") == ("http://h:1/v1", "org/model")
    assert parse_server_url("http://h:1/v1/") == ("http://h:1/v1", None)


def test_usage_and_harmony_content(scripted: ScriptedServer) -> None:
    scripted.script = [completion(harmony_reply(DEFAULT_FINAL), prompt_tokens=40, completion_tokens=9)]
    reply = fast(scripted.url).chat(USER)
    assert (reply.text, reply.prompt_tokens, reply.completion_tokens) == (DEFAULT_FINAL, 40, 9)
    assert scripted.chat_requests[0]["body"]["messages"] == USER


def with_cached(response: Response, details: Any) -> Response:
    """A scripted completion whose ``usage`` carries ``prompt_tokens_details`` (as vLLM, SGLang and OpenAI send it)."""
    status, body, headers = response
    return status, {**body, "usage": {**body["usage"], "prompt_tokens_details": details}}, headers


@pytest.mark.parametrize(
    "details, cached",
    [
        ({"cached_tokens": 32}, 32),  # a server's prefix cache served 32 of the 40 prompt tokens
        ({"cached_tokens": 0}, 0),
        (None, 0),  # a server that reports no details: nothing known to be cached
        ({"audio_tokens": 0}, 0),
        ({"cached_tokens": None}, 0),
        ({"cached_tokens": -1}, 0),
    ],
)
def test_cached_prompt_tokens_are_read_from_usage(scripted: ScriptedServer, details: Any, cached: int) -> None:
    scripted.script = [with_cached(completion(prompt_tokens=40), details)]
    reply = fast(scripted.url).chat(USER)
    assert (reply.prompt_tokens, reply.prompt_tokens_cached) == (40, cached)


def test_cached_prompt_tokens_are_0_when_usage_has_none(scripted: ScriptedServer) -> None:
    scripted.script = [completion(prompt_tokens=40)]  # usage without prompt_tokens_details
    assert fast(scripted.url).chat(USER).prompt_tokens_cached == 0


def test_cached_prompt_tokens_of_a_retried_request_are_summed(scripted: ScriptedServer) -> None:
    scripted.script = [
        with_cached(completion(None, reasoning="thinking...", finish_reason="length", prompt_tokens=40), {"cached_tokens": 8}),
        with_cached(completion(prompt_tokens=40), {"cached_tokens": 40}),
    ]
    reply = fast(scripted.url, reasoning_effort="medium", max_tokens=64).chat(USER)
    assert len(scripted.chat_requests) == 2 and (reply.prompt_tokens, reply.prompt_tokens_cached) == (80, 48)


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_retries_on_5xx_and_429(scripted: ScriptedServer, status: int) -> None:
    scripted.script = [error(status), error(status)]
    b = fast(scripted.url, max_retries=3)
    assert b.chat(USER).text == DEFAULT_FINAL
    assert len(scripted.chat_requests) == 3


def test_retry_after_header_is_honoured(scripted: ScriptedServer) -> None:
    scripted.script = [error(429, {"Retry-After": "0"})]
    assert fast(scripted.url, backoff=5.0, backoff_max=5.0).chat(USER).text == DEFAULT_FINAL
    assert len(scripted.chat_requests) == 2


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_no_retry_on_other_4xx(scripted: ScriptedServer, status: int) -> None:
    scripted.script = [error(status)]
    with pytest.raises(LLMServerError) as info:
        fast(scripted.url, max_retries=3).chat(USER)
    assert len(scripted.chat_requests) == 1
    assert info.value.status_code == status and not info.value.retryable and info.value.attempts == 1
    assert scripted.url in str(info.value) and f"HTTP {status}" in str(info.value)


def test_retries_exhausted_give_a_typed_error(scripted: ScriptedServer) -> None:
    scripted.default = error(503)
    with pytest.raises(LLMServerError) as info:
        fast(scripted.url, max_retries=2).chat(USER)
    assert isinstance(info.value, LLMBackendError)
    assert info.value.attempts == 3 and info.value.retryable and info.value.status_code == 503
    assert len(scripted.chat_requests) == 3
    assert "after 3 attempt(s)" in str(info.value) and "HTTP 503" in str(info.value)


def test_connection_refused_gives_a_typed_error_after_bounded_retries() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    b = fast(url, max_retries=2)
    start = time.perf_counter()
    with pytest.raises(LLMServerError) as info:
        b.chat(USER)
    assert time.perf_counter() - start < 10
    assert info.value.attempts == 3 and info.value.status_code is None and info.value.retryable
    message = str(info.value)
    assert url in message and "connection failed" in message and "3 attempt" in message


def test_timeout_is_retried_then_reported(scripted: ScriptedServer) -> None:
    scripted.delay = 1.0
    with pytest.raises(LLMServerError, match="timed out") as info:
        fast(scripted.url, timeout=0.2, max_retries=1).chat(USER)
    assert info.value.attempts == 2


def test_model_is_asked_from_the_server_when_not_given(scripted: ScriptedServer) -> None:
    b = OpenAIBackend(scripted.url, backoff=0.01)
    assert b.chat(USER).text == DEFAULT_FINAL
    assert b.model == SCRIPTED_MODEL
    assert scripted.chat_requests[0]["body"]["model"] == SCRIPTED_MODEL


def test_api_key_is_read_from_the_named_env_var_and_never_pickled(
    scripted: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-0123456789-secret"
    monkeypatch.setenv("R2PO_TEST_API_KEY", secret)
    b = fast(scripted.url, api_key_env="R2PO_TEST_API_KEY")
    assert b.chat(USER).text == DEFAULT_FINAL
    assert scripted.chat_requests[0]["headers"]["authorization"] == f"Bearer {secret}"
    data = pickle.dumps(b)
    assert secret.encode() not in data and b"R2PO_TEST_API_KEY" in data
    clone = pickle.loads(data)
    assert clone.chat(USER).text == DEFAULT_FINAL  # reads the key again


def test_missing_api_key_env_var_is_a_clear_error(scripted: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("R2PO_TEST_NO_KEY", raising=False)
    with pytest.raises(LLMBackendError, match="R2PO_TEST_NO_KEY"):
        fast(scripted.url, api_key_env="R2PO_TEST_NO_KEY").chat(USER)


@pytest.mark.parametrize(
    ("via", "field_sent", "kwargs_sent"),
    [("both", True, True), ("field", True, False), ("chat_template_kwargs", False, True)],
)
def test_reasoning_effort_placement(scripted: ScriptedServer, via: str, field_sent: bool, kwargs_sent: bool) -> None:
    fast(scripted.url, reasoning_effort="high", reasoning_effort_via=via).chat(USER)  # type: ignore[arg-type]
    body = scripted.chat_requests[0]["body"]
    assert (body.get("reasoning_effort") == "high") is field_sent
    assert (body.get("chat_template_kwargs") == {"reasoning_effort": "high"}) is kwargs_sent


def test_no_reasoning_effort_sends_nothing(scripted: ScriptedServer) -> None:
    fast(scripted.url).chat(USER)
    body = scripted.chat_requests[0]["body"]
    assert "reasoning_effort" not in body and "chat_template_kwargs" not in body


def test_reasoning_without_answer_is_retried_with_more_budget_and_less_effort(scripted: ScriptedServer) -> None:
    scripted.script = [completion(None, reasoning="thinking...", finish_reason="length", completion_tokens=64)]
    b = fast(scripted.url, reasoning_effort="medium", max_tokens=64)
    reply = b.chat(USER)
    assert reply.text == DEFAULT_FINAL
    first, second = (r["body"] for r in scripted.chat_requests)
    assert (first["max_tokens"], first["reasoning_effort"]) == (64, "medium")
    assert (second["max_tokens"], second["reasoning_effort"]) == (128, "low")
    assert reply.completion_tokens == 64 + 7
    assert b.stats["retries"] == 1 and b.stats["no_final"] == 0


def test_still_no_final_channel_returns_unanswered_harmony_text(scripted: ScriptedServer) -> None:
    scripted.default = completion("<|channel|>analysis<|message|>still thinking", finish_reason="length")
    b = fast(scripted.url, max_tokens=16)
    reply = b.chat(USER)
    assert final_channel(reply.text) is None
    assert len(scripted.chat_requests) == 2 and b.stats["no_final"] == 1
    scripted.default = completion(None, reasoning="only reasoning", finish_reason="length")
    assert final_channel(b.chat(USER).text) is None


CUT_ANALYSIS = "<|channel|>analysis<|message|>think<|end|><|start|>assistant"
CUT_ANSWER = "params[0]: 0.50, params[1]: 2.25, params[2]: -1"  # meant: params[2]: -1.75


@pytest.mark.parametrize(
    ("content", "kept"),
    [
        (f"{CUT_ANALYSIS}<|channel|>final<|message|>{CUT_ANSWER}", CUT_ANALYSIS),
        (f"analysisthinkassistantfinal{CUT_ANSWER}", "analysisthink"),
        (CUT_ANSWER, None),
    ],
    ids=["raw harmony", "flattened harmony", "plain text"],
)
def test_reply_cut_off_by_the_token_limit_is_a_cut_off_reply(scripted: ScriptedServer, content: str, kept: str | None) -> None:
    """A reply cut at ``max_tokens`` after its answer began is passed on as a cut-off reply, not retried (the reference
    reads a cut reply): its unfinished line may end inside its last value, so it never gives -1; with a line break
    after the vector, the vector is read; with ``reject_cut_off`` it is unusable."""
    space = ParameterSpace(3, -6, 6, 2)
    scripted.default = completion(content, finish_reason="length")
    b = fast(scripted.url, max_tokens=50)
    reply = b.chat(USER)
    assert len(scripted.chat_requests) == 1 and b.stats["retries"] == 0 and b.stats["no_final"] == 0
    assert final_is_truncated(reply.text) and final_channel(reply.text) == CUT_ANSWER
    if kept is not None:
        assert reply.text.startswith(kept.rpartition("<|end|>")[0])  # what came before the answer
    result = parse_params(reply.text, space)
    assert not result.ok and "cut off at the token limit before its first line ended" in result.error
    scripted.default = completion(
        content.replace(CUT_ANSWER, CUT_ANSWER + ".75\nBecause params[2]: -1"), finish_reason="length"
    )
    read = parse_params(b.chat(USER).text, space)
    np.testing.assert_array_equal(read.params, [0.5, 2.25, -1.75])
    assert not parse_params(b.chat(USER).text, space, reject_cut_off=True).ok


def test_cut_reply_then_a_complete_one_is_the_answer(scripted: ScriptedServer) -> None:
    cut = completion("<|channel|>analysis<|message|>think", finish_reason="length")  # cut before the answer began
    scripted.script = [cut, completion("params: [0.5, 2.25, -1.75]")]
    b = fast(scripted.url, max_tokens=50)
    assert b.chat(USER).text == "params: [0.5, 2.25, -1.75]"
    assert b.stats["retries"] == 1 and b.stats["no_final"] == 0


@pytest.mark.parametrize(
    ("settings", "requests"),
    [
        ({}, 1),  # no budget, no effort: the retry would be the same request
        ({"reasoning_effort": "low"}, 1),  # the lowest effort already
        ({"reasoning_effort": "medium"}, 2),
        ({"max_tokens": 32}, 2),
        ({"reasoning_effort": "low", "max_tokens": 32}, 2),
    ],
)
def test_the_answer_retry_is_skipped_when_it_would_send_the_same_request(
    scripted: ScriptedServer, settings: dict[str, Any], requests: int
) -> None:
    scripted.default = completion("<|channel|>analysis<|message|>think", finish_reason="length")
    b = fast(scripted.url, **settings)
    assert final_channel(b.chat(USER).text) is None
    assert len(scripted.chat_requests) == requests
    assert b.stats["retries"] == requests - 1 and b.stats["no_final"] == 1
    bodies = [r["body"] for r in scripted.chat_requests]
    assert all(a != b for a, b in itertools.pairwise(bodies))


def test_empty_choices_is_unanswered_but_missing_choices_is_a_malformed_body(scripted: ScriptedServer) -> None:
    empty = completion()
    empty[1]["choices"] = []
    scripted.default = empty
    b = fast(scripted.url, max_retries=2)
    assert b.chat(USER).text == "" and b.stats["no_final"] == 1 and len(scripted.chat_requests) == 1
    scripted.requests.clear()
    scripted.default = (200, {"error": {"message": "Rate limit exceeded", "code": 429}}, {})
    with pytest.raises(LLMServerError) as info:
        fast(scripted.url, max_retries=2).chat(USER)
    message = str(info.value)
    assert "malformed response body" in message and "Rate limit exceeded" in message and "after 3 attempt(s)" in message
    assert len(scripted.chat_requests) == 3 and info.value.retryable


@pytest.mark.parametrize(
    ("settings", "phrase"),
    [
        ({"timeout": None}, "timeout"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"backoff": -1}, "backoff"),
        ({"backoff_max": -1}, "backoff_max"),
        ({"backoff_max": None}, "backoff_max"),
        ({"retry_budget_factor": -1}, "retry_budget_factor"),
        ({"retry_budget_factor": 0.5}, "retry_budget_factor"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)
def test_bad_settings_are_refused_at_construction(settings: dict[str, Any], phrase: str) -> None:
    with pytest.raises(ValueError, match=phrase):
        OpenAIBackend("http://127.0.0.1:9/v1", **settings)


def test_good_edge_settings_are_accepted() -> None:
    b = OpenAIBackend("http://127.0.0.1:9/v1", backoff=0, backoff_max=0, retry_budget_factor=0, timeout=1)
    assert (b.backoff_max, b.retry_budget_factor) == (0.0, 0.0)
    assert OpenAIBackend("http://127.0.0.1:9/v1", retry_budget_factor=1).retry_budget_factor == 1.0


@pytest.mark.parametrize("url", ["https://user:secret-pw@llm.example.org/v1", "http://token@127.0.0.1:8000/v1#m"])
def test_credentials_in_the_url_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="api_key_env") as info:
        OpenAIBackend(url)
    assert "secret-pw" not in str(info.value) and "token" not in str(info.value)
    with pytest.raises(ValueError, match="api_key_env"):
        make_backend(url)
    assert OpenAIBackend("http://127.0.0.1:8000/v1#org/model@rev").model == "org/model@rev"  # '@' in the model is fine


def test_flattened_harmony_content(scripted: ScriptedServer) -> None:
    scripted.script = [completion(f"analysisshort thoughtassistantfinal{DEFAULT_FINAL}")]
    assert fast(scripted.url).chat(USER).text == DEFAULT_FINAL


def test_chat_batch_sends_concurrently(scripted: ScriptedServer) -> None:
    scripted.delay = 0.3
    b = fast(scripted.url)
    convs = [[{"role": "user", "content": f"question {i}"}] for i in range(3)]
    replies = b.chat_batch(convs)
    assert [r.text for r in replies] == [DEFAULT_FINAL] * 3
    assert scripted.max_in_flight >= 2  # the requests overlapped on the server
    assert sorted(r["body"]["messages"][0]["content"] for r in scripted.chat_requests) == [c[0]["content"] for c in convs]


def test_a_failed_batch_keeps_each_reply_with_its_conversation(scripted: ScriptedServer) -> None:
    """One conversation of a concurrent batch is refused (HTTP 400, not retried): answer_batch gives the replies the
    other conversations got, each at its conversation's place (RecordingBackend and BatchingBackend use them), and
    chat_batch raises the refusal after every request has ended."""

    def answer(body: dict[str, Any]) -> Response:
        question = body["messages"][0]["content"]
        return error(400) if question == "bad" else completion(f"answer to {question}")

    scripted.default = answer
    convs = [[{"role": "user", "content": q}] for q in ("q0", "bad", "q2", "q3")]
    with pytest.raises(LLMServerError, match="HTTP 400"):
        fast(scripted.url).chat_batch(convs)
    result = fast(scripted.url).answer_batch(convs)
    assert [r and r.text for r in result.replies] == ["answer to q0", None, "answer to q2", "answer to q3"]
    assert isinstance(result.errors[1], LLMServerError) and result.errors[1].status_code == 400
    replies = fast(scripted.url).chat_batch([c for c in convs if c[0]["content"] != "bad"])
    assert [r.text for r in replies] == ["answer to q0", "answer to q2", "answer to q3"]


def test_construction_is_offline_and_validated() -> None:
    b = OpenAIBackend("http://127.0.0.1:9/v1#m")  # nothing listens there; nothing is contacted
    assert b.model == "m" and not b.client_created
    assert b.client is not None and b.client_created  # created on first use, still offline
    assert not pickle.loads(pickle.dumps(b)).client_created  # the client (and its API key) is not pickled
    with pytest.raises(ValueError):
        OpenAIBackend("ftp://example/v1")
    with pytest.raises(ValueError):
        OpenAIBackend("http://127.0.0.1:9/v1", reasoning_effort="max")
    with pytest.raises(ValueError):
        OpenAIBackend("http://127.0.0.1:9/v1", reasoning_effort_via="header")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- with R2PO


@pytest.mark.skipif(not hasattr(sb3_r2po, "R2PO"), reason="needs the R2PO algorithm core")
def test_server_stopped_mid_run_keeps_finished_iterations(scripted: ScriptedServer) -> None:
    from sb3_r2po import R2PO
    from sb3_r2po.llm.example import ExampleLLM

    example = ExampleLLM(seed=0)
    answered = {"n": 0}

    def respond(body: dict[str, Any]) -> Response:
        answered["n"] += 1
        if answered["n"] == 2:  # the first iteration's Critic call: stop the server after answering it
            threading.Thread(target=scripted.stop, daemon=True).start()
        return completion(example.chat(body["messages"]).text)

    scripted.default = respond
    model = R2PO(
        "MlpLinear",
        "CartPole-v1",
        llm=fast(scripted.url, max_retries=1),
        n_eval_episodes=2,
        warmup_episodes=2,
        seed=0,
        max_episodes=20,
    )
    with pytest.raises(LLMServerError):
        model.learn(total_timesteps=100_000)
    kinds = [entry["kind"] for entry in model.history]
    assert kinds[:2] == ["warmup", "warmup"]
    assert len(kinds) == 3 and kinds[2] in ("search", "critic") and model.history[2]["iteration"] == 1
