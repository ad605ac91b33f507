"""RecordingBackend and ReplayBackend: record calls to JSONL, answer them again by request hash."""

from __future__ import annotations

import json
import pickle
import threading
from pathlib import Path

import pytest

from sb3_r2po.llm.base import CallableBackend, ChatReply, LLMBackendError, answer_batch, chat_batch
from sb3_r2po.llm.recording import (
    RecordingBackend,
    ReplayBackend,
    ReplayMissError,
    read_records,
    request_hash,
    request_settings,
)
from sb3_r2po.llm.resolve import make_backend


class Counter:
    """A deterministic backend whose replies depend on the prompt and on how often it was called."""

    def __init__(self) -> None:
        self.calls = 0
        self.batches = 0

    def chat(self, messages, *, temperature: float = 0.0) -> ChatReply:  # type: ignore[no-untyped-def]
        self.calls += 1
        return ChatReply(
            text=f"reply {self.calls} to {messages[-1]['content']} at {temperature}",
            prompt_tokens=len(messages[-1]["content"]),
            completion_tokens=self.calls,
            seconds=0.01,
        )

    def chat_batch(self, conversations, *, temperature: float = 0.0) -> list[ChatReply]:  # type: ignore[no-untyped-def]
        self.batches += 1
        return [self.chat(c, temperature=temperature) for c in conversations]


def conv(text: str, system: str | None = None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": text}]


def record_session(path: Path) -> list[ChatReply]:
    rec = RecordingBackend(Counter(), path)
    replies = [rec.chat(conv("a")), rec.chat(conv("b", "sys")), rec.chat(conv("a")), rec.chat(conv("a"), temperature=0.7)]
    replies += chat_batch(rec, [conv("c"), conv("d")])
    return replies


def test_recording_writes_one_flushed_line_per_call(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "calls.jsonl"
    inner = Counter()
    rec = RecordingBackend(inner, path)
    reply = rec.chat(conv("hello", "be brief"), temperature=0.0)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1  # on disk before chat() returned
    record = json.loads(lines[0])
    assert record["messages"] == conv("hello", "be brief")
    assert record["settings"] == {"temperature": 0.0}
    assert record["reply"] == reply.to_dict()
    assert record["hash"] == request_hash(conv("hello", "be brief"), request_settings(0.0))
    assert record["backend"]["class"] == "Counter"
    chat_batch(rec, [conv("x"), conv("y")])
    assert inner.batches == 1  # the inner backend's batch is used
    assert [r["messages"][-1]["content"] for r in read_records(path)] == ["hello", "x", "y"]


def test_replay_gives_the_recorded_replies(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    recorded = record_session(path)
    replay = ReplayBackend(path)
    assert len(replay) == 6
    again = [
        replay.chat(conv("a")),
        replay.chat(conv("b", "sys")),
        replay.chat(conv("a")),  # the same request twice: the recorded replies in order
        replay.chat(conv("a"), temperature=0.7),  # the temperature is part of the request
    ]
    again += chat_batch(replay, [conv("c"), conv("d")])
    assert again == recorded
    assert replay.stats == {"hits": 6, "misses": 0}


def test_replay_in_another_order_still_matches_by_hash(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    recorded = record_session(path)
    replay = ReplayBackend(path)
    assert replay.chat(conv("d")) == recorded[5]
    assert replay.chat(conv("a")) == recorded[0]


def test_a_miss_names_the_request(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    record_session(path)
    replay = ReplayBackend(path)
    with pytest.raises(ReplayMissError) as info:
        replay.chat(conv("a question that was never asked, with a long tail " * 5))
    message = str(info.value)
    assert "never recorded" in message and "a question that was never asked" in message and str(path) in message
    assert info.value.request_hash in request_hash(
        conv("a question that was never asked, with a long tail " * 5), {"temperature": 0.0}
    )
    assert isinstance(info.value, LLMBackendError)
    replay.chat(conv("b", "sys"))
    with pytest.raises(ReplayMissError, match="recorded 1 time"):
        replay.chat(conv("b", "sys"))  # asked more often than recorded


def test_fallback_answers_misses(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    recorded = record_session(path)
    replay = ReplayBackend(path, fallback=lambda messages: "from the fallback")
    assert replay.chat(conv("a")) == recorded[0]
    assert replay.chat(conv("new")).text == "from the fallback"
    assert replay.stats == {"hits": 1, "misses": 1}
    replay = ReplayBackend(path, fallback=Counter())
    assert replay.chat(conv("new"), temperature=0.7).text == "reply 1 to new at 0.7"  # the request's temperature


def test_a_replayed_batch_keeps_its_temperature(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    rec = RecordingBackend(Counter(), path)
    recorded = chat_batch(rec, [conv("c"), conv("d")], temperature=0.7)
    assert [r["settings"] for r in read_records(path)] == [{"temperature": 0.7}] * 2
    assert chat_batch(ReplayBackend(path), [conv("c"), conv("d")], temperature=0.7) == recorded


def test_replay_of_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    replay = ReplayBackend(tmp_path / "nope.jsonl")  # nothing is read before the first call
    with pytest.raises(LLMBackendError, match="does not exist"):
        replay.chat(conv("a"))


def crashed_session(path: Path) -> list[ChatReply]:
    """A recorded session whose file a crash left with a half-written last line."""
    recorded = record_session(path)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"hash": "abc", "repl')
    return recorded


def test_a_half_written_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    recorded = crashed_session(path)
    with pytest.warns(RuntimeWarning, match="half-written"):
        assert ReplayBackend(path).chat(conv("a")) == recorded[0]


def test_appending_after_a_crash_cuts_the_half_written_line(tmp_path: Path) -> None:
    """A run restarted on a record file that a crash left mid-line: the next record starts on its own line."""
    path = tmp_path / "calls.jsonl"
    recorded = crashed_session(path)
    with pytest.warns(RuntimeWarning, match="cut off a half-written last line"):
        rec = RecordingBackend(Counter(), path)
    after = [rec.chat(conv("e")), rec.chat(conv("f"))]
    assert [r["reply"] for r in read_records(path)] == [r.to_dict() for r in recorded + after]


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x0b", "\r"])
def test_replies_with_unicode_line_separators_replay(tmp_path: Path, separator: str) -> None:
    """Only a newline ends a record: characters ``str.splitlines`` also splits at stay inside their reply."""
    path = tmp_path / "calls.jsonl"
    rec = RecordingBackend(lambda messages: f"params: [1]{separator}done {messages[-1]['content']}", path)
    rec.chat(conv("a"))
    rec.chat(conv("b"))
    replay = ReplayBackend(path)
    assert [replay.chat(conv(x)).text for x in "ab"] == [f"params: [1]{separator}done {x}" for x in "ab"]


def test_rewind_sets_calls_aside_for_replay_and_keeps_them_in_the_file(tmp_path: Path) -> None:
    """A resumed run asks again what it asked after its checkpoint; the replay follows the new answers."""
    path = tmp_path / "calls.jsonl"
    first = RecordingBackend(Counter(), path)
    first.chat(conv("p"))
    first.chat(conv("q"))  # after the checkpoint (1 call), then a crash
    resumed_inner = Counter()
    resumed_inner.calls = 10  # another server answer to the same prompt
    resumed = RecordingBackend(resumed_inner, path)
    with pytest.warns(RuntimeWarning, match="1 recorded call"):
        assert resumed.rewind(1) == 1
    assert resumed.rewind(1) == 0  # nothing more to set aside
    again = resumed.chat(conv("q"))
    assert [r["messages"][-1]["content"] for r in read_records(path)] == ["p", "q"]
    assert ReplayBackend(path).chat(conv("q")) == again  # not the answer that was set aside
    raw = path.read_text(encoding="utf-8").splitlines()
    assert len(raw) == 4 and json.loads(raw[2])["rewind"] == 1  # the set-aside call stays on disk
    with pytest.raises(ValueError, match=">= 0"):
        resumed.rewind(-1)


def test_a_failed_batch_records_the_replies_it_got(tmp_path: Path) -> None:
    """One conversation of a batch fails: the others' replies are recorded before the error is raised."""
    path = tmp_path / "calls.jsonl"

    def answer(messages: list[dict[str, str]]) -> str:
        if messages[-1]["content"] == "bad":
            raise LLMBackendError("server down")
        return "ok " + messages[-1]["content"]

    rec = RecordingBackend(answer, path)  # a backend without chat_batch: base.answer_batch asks one by one
    with pytest.raises(LLMBackendError, match="server down"):
        rec.chat_batch([conv("a"), conv("bad"), conv("c")])
    assert [r["reply"]["text"] for r in read_records(path)] == ["ok a", "ok c"]  # the others are still asked
    assert [r["messages"][-1]["content"] for r in read_records(path)] == ["a", "c"]  # each with its own request
    assert ReplayBackend(path).chat(conv("c")).text == "ok c"
    result = answer_batch(rec, [conv("d"), conv("bad")])  # the recording passes each conversation's outcome on
    assert [r and r.text for r in result.replies] == ["ok d", None] and str(result.errors[1]) == "server down"
    assert [r["reply"]["text"] for r in read_records(path)] == ["ok a", "ok c", "ok d"]


def test_record_then_replay_through_llm_strings(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    rec = RecordingBackend(lambda messages: "ok " + messages[-1]["content"], path)
    assert isinstance(rec.inner, CallableBackend)
    rec.chat(conv("z"))
    replay = make_backend(f"replay:{path}")
    assert isinstance(replay, ReplayBackend)
    assert replay.chat(conv("z")).text == "ok z"


def test_recording_is_thread_safe_and_picklable(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    rec = RecordingBackend(lambda messages: messages[-1]["content"], path)
    threads = [threading.Thread(target=rec.chat, args=(conv(f"t{i}"),)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r["reply"]["text"] for r in read_records(path)) == sorted(f"t{i}" for i in range(8))
    clone = pickle.loads(pickle.dumps(RecordingBackend(Counter(), path)))
    clone.chat(conv("after pickling"))
    replay = pickle.loads(pickle.dumps(ReplayBackend(path)))
    assert replay.chat(conv("after pickling")).text.startswith("reply 1 to after pickling")


def test_request_hash_ignores_extra_message_keys_and_is_stable() -> None:
    a = request_hash([{"role": "user", "content": "x", "name": "n"}], request_settings(0.0))
    b = request_hash([{"role": "user", "content": "x"}], request_settings(0))
    assert a == b and len(a) == 64
    assert a != request_hash([{"role": "user", "content": "x"}], request_settings(0.5))
    # every message counts, not only the last one: the same question after another system prompt or history
    assert request_hash(conv("x", "sys A"), request_settings(0.0)) != request_hash(conv("x", "sys B"), request_settings(0.0))
    assert request_hash(conv("x", "sys"), request_settings(0.0)) != request_hash(conv("x"), request_settings(0.0))
    swapped = [{"role": "user", "content": "sys"}, {"role": "user", "content": "x"}]
    assert request_hash(conv("x", "sys"), request_settings(0.0)) != request_hash(swapped, request_settings(0.0))


def test_replay_tells_apart_requests_that_differ_before_the_last_message(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    rec = RecordingBackend(Counter(), path)
    first, second = rec.chat(conv("same", "system A")), rec.chat(conv("same", "system B"))
    replay = ReplayBackend(path)
    assert replay.chat(conv("same", "system B")) == second  # asked in the other order: matched by the whole request
    assert replay.chat(conv("same", "system A")) == first
    with pytest.raises(ReplayMissError, match="never recorded"):
        replay.chat(conv("same"))


def test_a_broken_line_before_the_last_is_an_error_not_skipped(tmp_path: Path) -> None:
    """Only a half-written last line (a crash) is skipped; a broken line inside the file means a damaged recording."""
    path = tmp_path / "calls.jsonl"
    record_session(path)
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[2] = lines[2][:40]
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(LLMBackendError, match="line 3 is not JSON"):
        read_records(path)
    with pytest.raises(LLMBackendError, match="line 3 is not JSON"):
        ReplayBackend(path).chat(conv("a"))


def test_a_last_line_cut_inside_a_multibyte_character_is_skipped(tmp_path: Path) -> None:
    """A crash can cut the last record anywhere, also between the bytes of one character: read with a warning."""
    path = tmp_path / "calls.jsonl"
    rec = RecordingBackend(lambda messages: "réponse 😀", path)
    rec.chat(conv("first"))
    rec.chat(conv("naïve € 学 😀"))
    data = path.read_bytes()
    cut = data.rindex("😀".encode()) + 2  # two of the emoji's four bytes
    path.write_bytes(data[:cut])
    with pytest.warns(RuntimeWarning, match="half-written last line 2"):
        assert [r["messages"][-1]["content"] for r in read_records(path)] == ["first"]
    with pytest.warns(RuntimeWarning, match="half-written"):
        assert ReplayBackend(path).chat(conv("first")).text == "réponse 😀"
    with pytest.warns(RuntimeWarning, match="cut off a half-written last line"):
        assert RecordingBackend(lambda messages: "x", path).recorded == 1


def test_a_write_that_fails_half_way_is_cut_back_and_the_next_record_starts_on_its_own_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: part of the line is written, then the write fails. The file is cut back to its last whole record
    before the error reaches the caller, so the next record (the call asked again) is not joined to a torn one."""
    from sb3_r2po.common import files

    path = tmp_path / "calls.jsonl"
    rec = RecordingBackend(lambda messages: "ok " + messages[-1]["content"], path)
    rec.chat(conv("a"))
    before = path.read_bytes()
    real_write = files._write_all

    def disk_full(fd: int, data: bytes) -> None:
        real_write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "_write_all", disk_full)
    with pytest.raises(OSError, match="No space left"):
        rec.chat(conv("b"))
    monkeypatch.undo()
    assert path.read_bytes() == before and rec.recorded == 1
    rec.chat(conv("b"))
    assert [r["reply"]["text"] for r in read_records(path)] == ["ok a", "ok b"]
    assert ReplayBackend(path).chat(conv("b")).text == "ok b"


def test_refresh_counts_the_calls_another_writer_added(tmp_path: Path) -> None:
    """Between two learn() calls another process may append to the transcript (and crash mid-line): refresh() cuts
    the torn line and counts again, so that the next rewind sets the other writer's calls aside."""
    path = tmp_path / "calls.jsonl"
    rec = RecordingBackend(Counter(), path)
    rec.chat(conv("a"))
    other = RecordingBackend(Counter(), path)
    other.chat(conv("b"))
    with open(path, "ab") as fh:
        fh.write(b'{"version": 1, "hash": "torn')
    assert rec.recorded == 1
    with pytest.warns(RuntimeWarning, match="cut off a half-written last line"):
        assert rec.refresh() == 2
    with pytest.warns(RuntimeWarning, match="1 recorded call"):
        assert rec.rewind(1) == 1
    assert [r["messages"][-1]["content"] for r in read_records(path)] == ["a"]
