"""TransformersBackend's GPU paths (device placement, ``device_map``, dtype, batching) on the tiny gpt-oss model.

Skipped without CUDA. On a lent GPU machine: ``python -m pytest -q tests/test_llm_transformers_gpu.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pathlib import Path

import pytest
import torch
from tiny_gptoss import DEFAULT_FINAL, spy_generate, tiny_model

from sb3_r2po.llm.transformers_backend import TransformersBackend

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

USER = [{"role": "user", "content": "Propose a parameter vector."}]
CONVERSATIONS = [
    [{"role": "user", "content": "short"}],
    [{"role": "system", "content": "You propose policies."}, {"role": "user", "content": "a longer prompt " * 8}],
    [{"role": "user", "content": "params: [0.1, 0.2] mean return 12.5"}],
    USER,
]


@pytest.fixture(scope="module")
def tiny_dir() -> Path:
    return tiny_model("trained")


@pytest.mark.parametrize("device_map", [None, "auto"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_model_is_placed_on_the_gpu_with_the_dtype_asked(tiny_dir: Path, device_map: str | None, dtype: torch.dtype) -> None:
    backend = TransformersBackend(str(tiny_dir), max_new_tokens=64, dtype=dtype, device_map=device_map)
    model = backend.pipeline.model
    assert {p.device.type for p in model.parameters()} == {"cuda"}
    assert {p.dtype for p in model.parameters() if p.is_floating_point()} == {dtype}
    assert backend.chat(USER).text == DEFAULT_FINAL  # the overfitted greedy reply survives placement and dtype


def test_gpu_batch_gives_the_sequential_replies_in_one_generate_call(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = TransformersBackend(str(tiny_dir), max_new_tokens=64, device="cuda")
    sequential = [backend.chat(conv) for conv in CONVERSATIONS]
    calls = spy_generate(monkeypatch, backend.pipeline.model)
    batched = backend.chat_batch(CONVERSATIONS)
    assert [int(ids.shape[0]) for ids in calls] == [len(CONVERSATIONS)]
    assert all(ids.device.type == "cuda" for ids in calls)
    assert [r.text for r in batched] == [r.text for r in sequential] == [DEFAULT_FINAL] * len(CONVERSATIONS)
    assert [r.prompt_tokens for r in batched] == [r.prompt_tokens for r in sequential]


def test_cpu_device_is_honoured_on_a_gpu_machine(tiny_dir: Path) -> None:
    backend = TransformersBackend(str(tiny_dir), max_new_tokens=64, device="cpu")
    assert {p.device.type for p in backend.pipeline.model.parameters()} == {"cpu"}
    assert backend.chat(USER).text == DEFAULT_FINAL
