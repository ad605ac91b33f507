"""Final-channel extraction from gpt-oss harmony output (raw and flattened)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sb3_r2po.llm.harmony import analysis_only, final_channel, final_is_truncated, has_final_channel, is_harmony

ANSWER = "params[0]: 1.0, params[1]: -2.5"


def test_raw_final_channel() -> None:
    raw = (
        "<|channel|>analysis<|message|>We need to think.<|end|>"
        f"<|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>"
    )
    assert final_channel(raw) == ANSWER
    assert is_harmony(raw) and has_final_channel(raw) and not final_is_truncated(raw)


def test_raw_final_variants() -> None:
    assert final_channel(f"<|channel|>final<|message|> {ANSWER} <|end|>") == ANSWER
    assert final_channel(f"<|channel|>final <|constrain|>json<|message|>{ANSWER}<|return|>") == ANSWER
    assert (
        final_channel(f"<|channel|>final<|message|>old<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}") == ANSWER
    )
    assert (
        final_channel(f"<|channel|>commentary<|message|>tool talk<|end|><|channel|>final<|message|>{ANSWER}<|return|>")
        == ANSWER
    )


def test_flattened_final_channel() -> None:
    flat = f"analysisWe need to think about the pole.assistantfinal{ANSWER}"
    assert final_channel(flat) == ANSWER
    assert final_channel(f"analysis...assistantfinal{ANSWER}<|return|>") == ANSWER
    assert is_harmony(flat)


def test_no_final_channel_is_none() -> None:
    assert final_channel("<|channel|>analysis<|message|>We ran out of tok") is None
    assert final_channel("analysisWe ran out of tok") is None
    assert final_channel(analysis_only("reasoning only")) is None
    assert not has_final_channel("<|channel|>analysis<|message|>x<|end|>")


def test_truncated_final_channel() -> None:
    cut = "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>params[0]: 1."
    assert final_channel(cut) == "params[0]: 1."
    assert final_is_truncated(cut)
    assert not final_is_truncated(f"analysisxassistantfinal{ANSWER}")  # flattened text cannot tell
    assert not final_is_truncated(ANSWER)


def test_plain_text_is_unchanged() -> None:
    assert final_channel(ANSWER) == ANSWER
    assert final_channel("  spaced  ") == "  spaced  "
    assert final_channel("") == ""
    assert not is_harmony(ANSWER)


@given(st.text(alphabet=st.characters(blacklist_characters="<|>"), max_size=200))
def test_text_without_markers_round_trips(text: str) -> None:
    if not is_harmony(text):
        assert final_channel(text) == text


@given(st.text(alphabet=st.characters(blacklist_characters="<|>"), max_size=100))
def test_any_final_answer_is_extracted(answer: str) -> None:
    raw = f"<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>{answer}<|return|>"
    assert final_channel(raw) == answer.strip()
