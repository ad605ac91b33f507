"""TransformersBackend through the real ``transformers`` pipeline, on a tiny gpt-oss model built in-process."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_gptoss import (
    CARTPOLE_FINAL,
    DEFAULT_FINAL,
    harmony_reply,
    one_torch_thread,
    shared_tokenizer,
    spy_generate,
    tiny_model,
)

import sb3_r2po
import sb3_r2po.llm.transformers_backend as tb
from sb3_r2po.common.parameters import ParameterSpace, complete_answer, final_channel, final_is_truncated, parse_params
from sb3_r2po.llm.base import ChatReply, LLMBackendError
from sb3_r2po.llm.resolve import make_backend
from sb3_r2po.llm.transformers_backend import TransformersBackend, required_gpu_memory_gb

USER = [{"role": "user", "content": "Propose a parameter vector."}]


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    with one_torch_thread():
        yield


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    return tiny_model("trained")


@pytest.fixture(scope="session")
def random_dir() -> Path:
    return tiny_model("random")


@pytest.fixture(scope="module")
def backend(tiny_dir: Path) -> TransformersBackend:
    return TransformersBackend(str(tiny_dir), max_new_tokens=64, reasoning_effort="medium")


def test_construction_is_lazy(tiny_dir: Path) -> None:
    b = TransformersBackend(str(tiny_dir))
    assert not b.loaded
    assert "TransformersBackend" in repr(b)


def test_final_channel_from_raw_text_and_token_counts(backend: TransformersBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def spy(text: str) -> str | None:
        seen.append(text)
        return complete_answer(text)

    monkeypatch.setattr(tb, "complete_answer", spy)
    reply = backend.chat(USER)
    assert isinstance(reply, ChatReply)
    assert reply.text == DEFAULT_FINAL
    # the pipeline returned only the new text, with the harmony special tokens kept
    assert seen[0] == harmony_reply(DEFAULT_FINAL)
    tok = shared_tokenizer()
    prompt = tok.apply_chat_template(
        USER, add_generation_prompt=True, tokenize=True, return_dict=True, reasoning_effort="medium"
    )
    assert reply.prompt_tokens == len(prompt["input_ids"])
    assert reply.completion_tokens == len(tok(harmony_reply(DEFAULT_FINAL), add_special_tokens=False)["input_ids"])
    assert reply.seconds > 0


def test_reasoning_effort_reaches_the_chat_template(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = TransformersBackend(str(tiny_dir), max_new_tokens=64, reasoning_effort="high")
    tok = b.pipeline.tokenizer
    original = tok.apply_chat_template
    rendered: list[str] = []

    def spy(conversation: Any, **kwargs: Any) -> Any:
        rendered.append(original(conversation, **{**kwargs, "tokenize": False, "return_dict": False}))
        return original(conversation, **kwargs)

    monkeypatch.setattr(tok, "apply_chat_template", spy)
    assert b.chat(USER).text == DEFAULT_FINAL
    assert rendered and all("Reasoning: high" in r for r in rendered)


def test_chat_batch_is_one_generate_call(backend: TransformersBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = spy_generate(monkeypatch, backend.pipeline.model)
    convs = [
        [{"role": "user", "content": "short"}],
        [{"role": "system", "content": "You propose policies."}, {"role": "user", "content": "a longer prompt " * 8}],
        [{"role": "user", "content": "params: [0.1, 0.2] mean return 12.5"}],
    ]
    replies = backend.chat_batch(convs)
    assert [int(ids.shape[0]) for ids in calls] == [3]
    assert [r.text for r in replies] == [DEFAULT_FINAL] * 3
    assert len({r.prompt_tokens for r in replies}) == 3  # left padding does not count as prompt
    assert all(r.completion_tokens == replies[0].completion_tokens for r in replies)


def test_missing_final_channel_is_retried_with_more_budget_and_less_effort(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = TransformersBackend(str(tiny_dir), max_new_tokens=8, retry_budget_factor=6.0, reasoning_effort="high")
    calls = spy_generate(monkeypatch, b.pipeline.model)
    tok = b.pipeline.tokenizer
    original = tok.apply_chat_template
    efforts: list[Any] = []  # the chat template's reasoning_effort, for generating and for counting prompt tokens

    def spy(conversation: Any, **kwargs: Any) -> Any:
        efforts.append(kwargs.get("reasoning_effort"))
        return original(conversation, **kwargs)

    monkeypatch.setattr(tok, "apply_chat_template", spy)
    reply = b.chat(USER)
    assert reply.text == DEFAULT_FINAL
    assert len(calls) == 2
    assert b.stats["retries"] == 1 and b.stats["no_final"] == 0
    assert efforts[0] == "high" and "medium" in efforts
    full = len(shared_tokenizer()(harmony_reply(DEFAULT_FINAL), add_special_tokens=False)["input_ids"])
    assert reply.completion_tokens == 8 + full  # both attempts are counted


def test_still_no_final_channel_returns_raw_text(tiny_dir: Path) -> None:
    b = TransformersBackend(str(tiny_dir), max_new_tokens=3, retry_budget_factor=2.0)
    reply = b.chat(USER)
    assert final_channel(reply.text) is None  # R2PO's parser counts a failed parse
    assert reply.text.startswith("<|channel|>analysis")
    assert b.stats == {"calls": 1, "generate_calls": 2, "retries": 1, "no_final": 1}


CUT_FINAL = (
    "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>"
    "params[0]: 0.50, params[1]: 2.25, params[2]: -1"
)


class OneTokenTokenizer:
    """The tokenizer of :class:`ScriptedPipeline`: every prompt and every reply is one token; no special tokens."""

    pad_token_id = 0
    pad_token = None
    eos_token_id = None
    padding_side = "right"

    def get_vocab(self) -> dict[str, int]:
        return {}

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> dict[str, list[int]]:
        return {"input_ids": [0]}

    def __call__(self, text: str, **kwargs: Any) -> dict[str, list[int]]:
        return {"input_ids": [0]}


class ScriptedPipeline:
    """A text-generation pipeline without a model: answers ``texts`` in turn, the last one again when they run out."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.tokenizer = OneTokenTokenizer()
        self.model = None
        self.calls: list[tuple[str | None, int]] = []
        """The (reasoning effort, token budget) of each call."""

    def __call__(
        self, convs: list[Any], *, tokenizer_encode_kwargs: dict[str, Any], max_new_tokens: int, **kwargs: Any
    ) -> list[list[dict[str, str]]]:
        self.calls.append((tokenizer_encode_kwargs.get("reasoning_effort"), max_new_tokens))
        text = self.texts[min(len(self.calls), len(self.texts)) - 1]
        return [[{"generated_text": text}] for _ in convs]


def scripted_generate(monkeypatch: pytest.MonkeyPatch, texts: list[str]) -> list[tuple[str | None, int]]:
    """Make the next pipeline a backend builds answer ``texts`` in turn; returns the (effort, budget) of each call."""
    import transformers

    pipe = ScriptedPipeline(texts)
    monkeypatch.setattr(transformers, "pipeline", lambda task, model, **kwargs: pipe)
    return pipe.calls


def test_a_final_channel_cut_off_is_a_cut_off_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    """A final channel cut by the budget may end inside its last value (-1 of -1.75): it is passed on as a cut-off
    reply, not retried (the reference reads a cut reply), and its unfinished line is never read."""
    b = TransformersBackend("some/model", memory_check=False, max_new_tokens=50, reasoning_effort="low")
    calls = scripted_generate(monkeypatch, [CUT_FINAL])
    reply = b.chat(USER)
    assert reply.text == CUT_FINAL and final_is_truncated(reply.text)
    assert b.stats["retries"] == 0 and b.stats["no_final"] == 0
    assert "cut off" in str(parse_params(reply.text, ParameterSpace(3, -6, 6, 2)).error)
    assert calls == [("low", 50)]


def test_no_final_channel_then_a_complete_one(monkeypatch: pytest.MonkeyPatch) -> None:
    b = TransformersBackend("some/model", memory_check=False, max_new_tokens=50, retry_budget_factor=1.0)
    complete = harmony_reply("params: [0.5, 2.25, -1.75]")
    calls = scripted_generate(monkeypatch, [CUT_FINAL.partition("<|end|>")[0], complete])
    assert b.chat(USER).text == "params: [0.5, 2.25, -1.75]"
    assert b.stats["no_final"] == 0 and calls == [("medium", 50), ("low", 51)]


def test_random_weights_give_garbage_without_raising(random_dir: Path) -> None:
    b = TransformersBackend(str(random_dir), max_new_tokens=12, retry_budget_factor=1.5)
    reply = b.chat(USER)
    assert isinstance(reply.text, str)
    assert DEFAULT_FINAL not in reply.text
    assert reply.completion_tokens is not None and reply.completion_tokens > 0


def test_model_and_tokenizer_objects(tiny_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    b = TransformersBackend(model, tokenizer=tok, max_new_tokens=64)
    assert b.chat(USER).text == DEFAULT_FINAL


@pytest.mark.parametrize("pad", [None, "<|return|>"])
def test_a_tokenizer_without_a_pad_token_still_ends_replies_cleanly(tiny_dir: Path, pad: str | None) -> None:
    """No pad token (R2PO picks one that does not end a reply), or a pad token equal to the harmony stop token (a
    padded batch repeats it after each shorter reply): the replies keep their final channel."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    tok.pad_token = pad
    b = TransformersBackend(str(tiny_dir), tokenizer=tok, max_new_tokens=64)
    convs = [USER, [{"role": "user", "content": "a longer prompt " * 8}]]
    assert [r.text for r in b.chat_batch(convs)] == [DEFAULT_FINAL] * 2
    assert b.stats["no_final"] == 0 and b.stats["retries"] == 0


def test_pickle_drops_the_loaded_pipeline(backend: TransformersBackend) -> None:
    backend.chat(USER)
    clone = pickle.loads(pickle.dumps(backend))
    assert backend.loaded and not clone.loaded
    assert clone.model == backend.model and clone.max_new_tokens == backend.max_new_tokens


@pytest.mark.parametrize(
    "environment, asked, expected",
    [
        ({"HF_HUB_OFFLINE": "1"}, None, False),
        ({"HF_HUB_OFFLINE": "1"}, True, True),
        ({"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "yes"}, None, False),  # the hub reads this one as offline too
    ],
)
def test_the_hubs_kernels_are_not_asked_for_offline(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], asked: bool | None, expected: bool
) -> None:
    """Offline, the model runs its own layers: transformers 5 would fetch compiled kernels from the Hub (on CUDA with a
    device_map the load failed offline); use_kernels given in model_kwargs wins (on the CPU, where transformers finds no
    kernel to fetch: on CUDA, asking for them offline fails the load, as it should)."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    model_kwargs = {} if asked is None else {"use_kernels": asked}
    backend = TransformersBackend(str(tiny_dir), max_new_tokens=64, device="cpu", model_kwargs=model_kwargs)
    assert backend.pipeline.model.use_kernels is expected
    assert backend.model_kwargs == model_kwargs  # the setting is the load's, not the backend's
    assert backend.chat(USER).text == DEFAULT_FINAL


def test_load_failure_is_a_backend_error(tmp_path: Path) -> None:
    with pytest.raises(LLMBackendError, match="Could not load"):
        TransformersBackend(str(tmp_path / "missing"), max_new_tokens=4).chat(USER)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the guard only refuses machines without a big enough GPU")
def test_gptoss_20b_memory_guard_raises_at_once_without_download() -> None:
    b = make_backend("openai/gpt-oss-20b")
    assert isinstance(b, TransformersBackend) and not b.loaded
    start = time.perf_counter()
    with pytest.raises(LLMBackendError) as info:
        b.chat(USER)
    assert time.perf_counter() - start < 2.0
    message = str(info.value)
    assert "16 GB" in message and 'llm="embedded"' in message and "http://127.0.0.1:8000/v1" in message
    assert not b.loaded
    with pytest.raises(LLMBackendError):
        TransformersBackend().check_resources()
    TransformersBackend(memory_check=False).check_resources()  # the override skips the guard


def test_memory_requirements_are_known_by_name(tmp_path: Path) -> None:
    assert required_gpu_memory_gb("openai/gpt-oss-20b") == 16.0
    assert required_gpu_memory_gb("/models/snapshots/gpt-oss-20b/") == 16.0
    assert required_gpu_memory_gb("openai/gpt-oss-120b") == 80.0
    assert required_gpu_memory_gb("Qwen/Qwen2.5-0.5B-Instruct") is None
    assert required_gpu_memory_gb(str(tiny_model("trained"))) is None  # a small local gpt-oss checkpoint


def test_invalid_settings() -> None:
    with pytest.raises(ValueError):
        TransformersBackend("x/y", reasoning_effort="extreme")
    with pytest.raises(ValueError):
        TransformersBackend("x/y", max_new_tokens=0)


@pytest.mark.skipif(not hasattr(sb3_r2po, "R2PO"), reason="needs the R2PO algorithm core")
def test_one_full_r2po_iteration_through_the_pipeline() -> None:
    from sb3_r2po import R2PO

    directory = tiny_model("cartpole")
    model = R2PO(
        "MlpLinear",
        "CartPole-v1",
        llm=TransformersBackend(str(directory), max_new_tokens=160),
        n_eval_episodes=2,
        warmup_episodes=2,
        seed=0,
        max_episodes=6,
    )
    model.learn(total_timesteps=100_000)  # the episode budget ends the run: 2 warm-up + one iteration
    kinds = [entry["kind"] for entry in model.history]
    assert kinds.count("warmup") == 2
    searched = [entry for entry in model.history if entry["kind"] in ("search", "critic")]
    assert searched, model.history
    expected = [float(part.split(":")[1]) for part in CARTPOLE_FINAL.split(", ")]
    assert [float(v) for v in searched[0]["params"]] == pytest.approx(expected)


@pytest.mark.parametrize("device, placed", [("cuda:1", {"device": "cuda:1"}), ("cuda", {"device_map": "auto"})])
def test_a_named_gpu_is_honoured_not_mapped_away(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch, device: str, placed: dict[str, str]
) -> None:
    """The pipeline's placement arguments on a (pretended) CUDA machine with accelerate: ``cuda:1`` puts the model
    on that GPU; plain ``cuda`` lets ``device_map="auto"`` place it."""
    import torch
    import transformers

    import sb3_r2po.llm.transformers_backend as module

    seen: dict[str, object] = {}

    def fake_pipeline(task: str, **kwargs: object) -> None:
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(transformers, "pipeline", fake_pipeline)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(module, "has_accelerate", lambda: True)
    with pytest.raises(LLMBackendError, match="stop here"):
        TransformersBackend(str(tiny_dir), device=device, memory_check=False).pipeline  # noqa: B018
    assert {k: seen[k] for k in ("device", "device_map") if k in seen} == placed
