"""Final-channel extraction from gpt-oss harmony output (raw and flattened)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sb3_r2po.common.parameters import final_channel, final_is_truncated, is_harmony
from sb3_r2po.llm.base import analysis_only, without_answer

ANSWER = "params[0]: 1.0, params[1]: -2.5"


def test_raw_final_channel() -> None:
    raw = (
        "<|channel|>analysis<|message|>We need to think.<|end|>"
        f"<|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>"
    )
    assert final_channel(raw) == ANSWER
    assert is_harmony(raw) and final_channel(raw) is not None and not final_is_truncated(raw)


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
    # the last final channel is the answer, also when flattened
    assert final_channel(f"analysisxassistantfinalparams[0]: 9, params[1]: 9assistantfinal{ANSWER}") == ANSWER
    assert is_harmony(flat)


def test_no_final_channel_is_none() -> None:
    assert final_channel("<|channel|>analysis<|message|>We ran out of tok") is None
    assert final_channel("analysisWe ran out of tok") is None
    assert final_channel(analysis_only("reasoning only")) is None
    assert final_channel("<|channel|>analysis<|message|>x<|end|>") is None


def test_truncated_final_channel() -> None:
    cut = "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>params[0]: 1."
    assert final_channel(cut) == "params[0]: 1."
    assert final_is_truncated(cut)
    # a completed final channel earlier does not hide that the last one was cut off
    assert final_is_truncated(f"<|channel|>final<|message|>old<|end|><|start|>assistant{cut}")
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


def test_plain_text_starting_with_analysis_and_punctuation_is_not_harmony() -> None:
    for text in ("analysis: moving toward higher reward.\nparams: [1, 2, 3]", "analysis. params: [1]", "analysis - x"):
        assert not is_harmony(text) and final_channel(text) == text
    assert final_channel("  analysis:params: [1]") == "  analysis:params: [1]"
    for text in ("analysisWe need more reward", "assistantanalysis1. try", "analysis**plan**"):
        assert is_harmony(text) and final_channel(text) is None  # flattened analysis, no final


CUT = "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>params[0]: 0.5, params[1]: -1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (CUT, "<|channel|>analysis<|message|>think<|end|><|start|>assistant"),
        ("<|channel|>final<|message|>params: [1, 2", analysis_only("")),
        ("<|channel|>final <|constrain|>json<|message|>{", analysis_only("")),
        ("analysisthinkassistantfinalparams: [1, 2", "analysisthink"),
        ("analysisthinkassistantfinaloldassistantfinalparams: [1, 2", "analysisthink"),  # before the first
        ("assistantfinalparams: [1, 2", analysis_only("")),
        ("params: [1, 2", analysis_only("params: [1, 2")),
        ("", analysis_only("")),
        ("<|channel|>analysis<|message|>no answer yet", "<|channel|>analysis<|message|>no answer yet"),
        ("analysisno answer yet", "analysisno answer yet"),
    ],
)
def test_without_answer_keeps_what_came_before_the_answer(text: str, expected: str) -> None:
    assert without_answer(text) == expected
    assert final_channel(without_answer(text)) is None


_PIECES = ["<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|return|>", "final", "analysis", "assistant"]


@given(st.lists(st.sampled_from([*_PIECES, "assistantfinal", " ", ":", "x", "params: [1]"]), max_size=12).map("".join))
def test_without_answer_never_leaves_an_answer(text: str) -> None:
    assert final_channel(without_answer(text)) is None
