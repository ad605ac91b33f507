"""A real end-to-end R2PO run on the embedded CPU model (Qwen2.5-Coder-0.5B-Instruct through llama.cpp).

Skipped, with the reason, when llama-cpp-python or the model wheels are missing (``pip install -e ".[embedded]"``).
It checks that the whole loop runs on real model output (prompts, grammar-constrained replies, parsing,
evaluation, keep-best); it says nothing about how well a 0.5B model optimizes.
"""

import importlib.util

import pytest

from sb3_r2po import R2PO

pytestmark = pytest.mark.embedded


def _model_available() -> str | None:
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed"
    from sb3_r2po.llm.embedded import ensure_model_file

    try:
        ensure_model_file("0.5b")
    except Exception as exc:  # a missing wheel: the error names the pip command
        return str(exc).splitlines()[0]
    return None


def test_r2po_runs_end_to_end_on_the_embedded_model(tmp_path) -> None:
    reason = _model_available()
    if reason:
        pytest.skip(reason)
    model = R2PO(
        "MlpLinear",
        "CartPole-v1",
        llm="embedded:0.5b",
        n_eval_episodes=2,
        warmup_episodes=2,
        seed=0,
        target_return=500,
        tau_c=480,
        max_episodes=2 + 2 * 2 * 2,
        history_best_k=4,
        history_recent=2,
        max_trajectory_steps=10,
        trajectory_digits=2,
        checkpoint_dir=str(tmp_path),
    )
    model.learn(total_timesteps=10**9)
    iterations = [r for r in model.history if r["kind"] != "warmup"]
    assert model.iteration == len(iterations) >= 2
    assert model.llm_stats["calls"] >= 2 * model.iteration - sum(r["revision"]["status"] == "skipped" for r in iterations)
    assert model.llm_stats["prompt_tokens"] > 0 and model.llm_stats["completion_tokens"] > 0
    # with the grammar every reply is well-formed: the only unusable replies are copies of a history vector
    # (a 0.5B model often copies; the grammar guarantees the format, not novelty)
    reasons = [reason for r in iterations for reason in r["search"]["failures"] + r["revision"]["failures"]]
    assert all("already" in reason for reason in reasons), reasons
    assert (tmp_path / "llm_calls.jsonl").read_text().count("\n") == model.llm_stats["calls"]
