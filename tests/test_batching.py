"""chat_batch, answer_batch and BatchingBackend: each caller gets its own reply, at its own temperature, in order."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from sb3_r2po.llm.base import BatchResult, ChatReply, LLMBackendError, Message, answer_batch, chat_batch
from sb3_r2po.llm.batching import BatchingBackend


def conv(text: str) -> list[Message]:
    return [{"role": "user", "content": text}]


def echo(messages: list[Message]) -> str:
    if messages[-1]["content"] == "bad":
        raise LLMBackendError("refused")
    return "echo " + messages[-1]["content"]


class Batched:
    """A batching backend that echoes the question and the temperature, recording every batch."""

    def __init__(self) -> None:
        self.batches: list[tuple[float, list[str]]] = []
        self.lock = threading.Lock()

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        return self.chat_batch([messages], temperature=temperature)[0]

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]:
        with self.lock:
            self.batches.append((temperature, [c[-1]["content"] for c in conversations]))
        return [ChatReply(f"{c[-1]['content']} at {temperature}") for c in conversations]


def test_chat_batch_one_by_one_keeps_the_order() -> None:
    from sb3_r2po.llm.resolve import make_backend

    backend = make_backend(echo)  # no chat_batch: asked one after another
    assert [r.text for r in chat_batch(backend, [conv("a"), conv("b"), conv("c")])] == ["echo a", "echo b", "echo c"]
    with pytest.raises(LLMBackendError, match="refused"):
        chat_batch(backend, [conv("a"), conv("bad"), conv("c")])
    result = answer_batch(backend, [conv("a"), conv("bad"), conv("c")])  # the replies that came, as a value
    assert [r and r.text for r in result.replies] == ["echo a", None, "echo c"]
    assert [str(e) if e else None for e in result.errors] == [None, "refused", None]
    assert result.first_error is result.errors[1]


def test_one_callers_conversations_go_out_as_one_batch_in_order() -> None:
    inner = Batched()
    backend = BatchingBackend(inner)  # no worker registered
    replies = backend.chat_batch([conv("a"), conv("b"), conv("c")], temperature=0.5)
    assert [r.text for r in replies] == ["a at 0.5", "b at 0.5", "c at 0.5"]
    assert inner.batches == [(0.5, ["a", "b", "c"])] and backend.batch_sizes == [3]


def test_a_failed_conversation_of_a_callers_batch_keeps_the_others_replies() -> None:
    backend = BatchingBackend(echo)
    with pytest.raises(LLMBackendError, match="refused"):
        backend.chat_batch([conv("a"), conv("bad"), conv("c")])
    result = backend.answer_batch([conv("a"), conv("bad"), conv("c")])
    assert [r and r.text for r in result.replies] == ["echo a", None, "echo c"]
    assert answer_batch(backend, [conv("a"), conv("bad")]).replies[0] is not None  # BatchingBackend answers batches


def test_callers_with_different_temperatures_each_get_their_own() -> None:
    inner = Batched()
    backend = BatchingBackend(inner)
    results: dict[str, str] = {}
    ready = threading.Barrier(3)

    def ask(name: str, temperature: float) -> None:
        with backend.worker():
            ready.wait(timeout=10)
            results[name] = backend.chat(conv(name), temperature=temperature).text

    threads = [threading.Thread(target=ask, args=(f"q{i}", t)) for i, t in enumerate((0.0, 0.7, 0.0))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert results == {"q0": "q0 at 0.0", "q1": "q1 at 0.7", "q2": "q2 at 0.0"}
    assert sorted((t, sorted(qs)) for t, qs in inner.batches) == [(0.0, ["q0", "q2"]), (0.7, ["q1"])]  # one per temperature


def test_a_failed_batch_reports_only_the_callers_own_replies() -> None:
    """Two callers share an inner batch; one conversation of the first caller fails: its result holds that
    caller's replies, in its order, not the whole inner batch's."""
    backend = BatchingBackend(echo)
    ready = threading.Barrier(2)
    outcome: dict[str, object] = {}

    def first() -> None:
        with backend.worker():
            ready.wait(timeout=10)
            outcome["first"] = [r and r.text for r in backend.answer_batch([conv("a"), conv("bad")]).replies]

    def second() -> None:
        with backend.worker():
            ready.wait(timeout=10)
            outcome["second"] = backend.chat(conv("c")).text

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert backend.batch_sizes == [3]  # the case under test: one inner batch for both callers
    assert outcome == {"first": ["echo a", None], "second": "echo c"}


def refuse_bad(messages: list[Message]) -> str:
    """Echo, refusing every question that starts with "bad" (its own message names it)."""
    if messages[-1]["content"].startswith("bad"):
        raise LLMBackendError("refused " + messages[-1]["content"])
    return "echo " + messages[-1]["content"]


class RefusingBatches:
    """A batching backend whose batch fails as a whole when one question starts with "bad"."""

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        return self.chat_batch([messages], temperature=temperature)[0]

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]:
        if any(c[-1]["content"].startswith("bad") for c in conversations):
            raise LLMBackendError("batch refused")
        return [ChatReply("echo " + c[-1]["content"]) for c in conversations]


@pytest.mark.parametrize("inner", ["one_by_one", "batched"])
def test_two_callers_failing_in_one_batch_each_get_their_own_error(inner: str) -> None:
    """Both callers of one inner batch have a failing conversation: each gets its own replies and its own error
    object (raising one object from two threads would mix their tracebacks). An inner backend that answers one by
    one gives each conversation's own error message."""
    backend = BatchingBackend(refuse_bad if inner == "one_by_one" else RefusingBatches())
    ready = threading.Barrier(3)
    done = threading.Event()
    outcome: dict[str, tuple[BaseException, list[str | None]]] = {}

    def caller(name: str, texts: list[str]) -> None:
        with backend.worker():
            ready.wait(timeout=10)
            result = backend.answer_batch([conv(text) for text in texts])
            assert isinstance(result.first_error, LLMBackendError)
            outcome[name] = (result.first_error, [r and r.text for r in result.replies])

    def idle() -> None:  # a third worker: the batch waits for 3 requests, so both callers' 4 go out together
        with backend.worker():
            ready.wait(timeout=10)
            done.wait(timeout=10)

    threads = [
        threading.Thread(target=caller, args=("A", ["a", "badA"])),
        threading.Thread(target=caller, args=("B", ["badB", "b"])),
    ]
    helper = threading.Thread(target=idle)
    for thread in [*threads, helper]:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    done.set()
    helper.join(timeout=20)
    assert backend.batch_sizes == [4]  # the case under test: one inner batch for both callers
    (error_a, replies_a), (error_b, replies_b) = outcome["A"], outcome["B"]
    assert error_a is not error_b
    if inner == "one_by_one":
        assert (replies_a, replies_b) == (["echo a", None], [None, "echo b"])
        assert str(error_a) == "refused badA" and str(error_b) == "refused badB"
    else:  # a real batch fails as a whole: no replies, one message
        assert (replies_a, replies_b) == ([None, None], [None, None]) and str(error_a) == str(error_b) == "batch refused"


def test_chat_raises_its_callers_own_copy_of_a_shared_error() -> None:
    """A batch failing as a whole gives every caller the same error: each raises its own copy of it."""
    backend = BatchingBackend(RefusingBatches())
    with pytest.raises(LLMBackendError, match="batch refused") as first:
        backend.chat(conv("bad"))
    with pytest.raises(LLMBackendError, match="batch refused") as second:
        backend.chat_batch([conv("bad"), conv("b")])
    assert first.value is not second.value and type(first.value) is LLMBackendError


def test_batch_results_are_values() -> None:
    reply, error = ChatReply("r"), LLMBackendError("e")
    result = BatchResult((reply, None), (None, error))
    assert result.first_error is error
    with pytest.raises(LLMBackendError) as info:
        result.unwrap()
    assert info.value is error and not hasattr(error, "batch_replies")  # nothing is stuck onto the error
    assert BatchResult.answered([reply]).unwrap() == [reply]
    assert BatchResult.failed(error, 2).errors == (error, error)
    with pytest.raises(ValueError, match="either a reply or an error"):
        BatchResult((reply,), (error,))
    with pytest.raises(ValueError, match="replies for"):
        BatchResult((reply,), ())


def test_answer_batch_of_a_batching_backend_without_partial_results() -> None:
    """A backend whose chat_batch fails as a whole: every conversation gets its error; the batch was asked once."""
    result = answer_batch(RefusingBatches(), [conv("a"), conv("bad")])
    assert result.replies == (None, None) and result.errors[0] is result.errors[1]
    assert [r.text for r in answer_batch(RefusingBatches(), [conv("a")]).unwrap()] == ["echo a"]


def test_setup_calls_are_forwarded_to_an_inner_backend_that_has_them() -> None:
    from sb3_r2po.common.parameters import ParameterSpace
    from sb3_r2po.llm.base import BatchChat, ChecksResources, Constrainable

    class Setup(Batched):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[object] = []

        def check_resources(self) -> None:
            self.calls.append("check")

        def constrain(self, space: ParameterSpace | None) -> None:
            self.calls.append(space)

    inner = Setup()
    assert isinstance(inner, ChecksResources) and isinstance(inner, Constrainable) and isinstance(inner, BatchChat)
    backend = BatchingBackend(inner)
    space = ParameterSpace(2)
    backend.check_resources()
    backend.constrain(space)
    assert inner.calls == ["check", space]
    plain = BatchingBackend(echo)  # a callable: nothing to forward, nothing fails
    assert not isinstance(plain.inner, (Constrainable, ChecksResources, BatchChat))
    plain.check_resources()
    plain.constrain(space)
