"""The parse rules and reasons that mutation testing of ``sb3_r2po/common/parsing.py`` (docs/mutation.md) found
unguarded by ``tests/test_parsing.py``: the reasons an unusable reply gets (the LLM reads them in a re-ask, the
history keeps them) as exact texts, the rules of the module docstring that no test pinned (the default reading, cut-off
replies, the index spelling, commentary after a complete vector, words in a value's place, quoting), the bounds
on a reason's length, and the harmony helpers merged into the module (the final channel, a cut-off reply's lines)."""

from __future__ import annotations

import pytest

from sb3_r2po.common.parameters import (
    MAX_REASON_CHARS,
    ParameterSpace,
    as_cut_off,
    before_final,
    bound_reason,
    complete_answer,
    cut_off_lines,
    final_channel,
    parse_params,
    quote,
    to_number,
)

SPACE = ParameterSpace(3, low=-6, high=6, decimals=1)
INDICES = "the indices must be params[0], params[1], ... (decimal digits) in order without gaps or repeats, got "
AMBIGUOUS_LIST = (
    "expected exactly 3 values, but the list can be read in more than one way: it has a comma between digits (a decimal "
    "comma 0,5 or a thousands separator 1,000) besides commas between values; write each number with a decimal point "
    "and no grouping, separated by ', '"
)
NOT_FOUND = "no parameter vector found {}; expected one line with all 3 values in the reply format"
CUT = "<|channel|>final<|message|>params: [1, 2, 3]\nparams: [4,"
"""Raw harmony whose final channel the token limit cut (no ``<|return|>``), in its second line."""


@pytest.mark.parametrize(
    "reply, reading, reason",
    [
        ("", "first", "the reply was empty"),
        ("I would rather not.", "first", NOT_FOUND.format("in the reply")),
        ("I would rather not.", "last_vector", NOT_FOUND.format("in the reply")),
        ("I think so.\nparams: [1, 2, 3]", "first_line", NOT_FOUND.format("on the first line")),
        ("params[x]: 1", "first", NOT_FOUND.format("in the reply")),  # an unreadable index is no value
        ("params[3]: 1", "first", NOT_FOUND.format("in the reply")),  # nor is an index >= n
        ("params[0]: 1, params[2]: 3", "first", "expected all 3 values params[0]..params[2], missing params[1]"),
        ("params[0]: 1, params[x]: 2, params[2]: 3", "last_vector", INDICES + "[0, 'x', 2]"),
        ("params[1]: 5, params[1]: 6, params[2]: 7", "last_vector", INDICES + "[1, 1, 2]"),  # must start at 0
        ("params[0]: 1, params[5]: 2, params[2]: 3", "last_vector", INDICES + "[0, 5, 2]"),
        (
            "params[0]: 0,5, params[1]: 1, params[2]: 2",
            "first",
            "params[0] is written '0,5,': a decimal comma or a digit group (0,5 or 1,000 or 1 000) can be read in more "
            "than one way; write each number with a decimal point and no grouping (0.5, 1000)",
        ),
        ("params: [0,5, 1,5, 2]", "first", AMBIGUOUS_LIST),
        ("params: [0,5, 1,5, 2]", "first_line", AMBIGUOUS_LIST),
        (
            "params: [1, , 2]",
            "first",
            "the list has an empty slot at position 1 (two commas with no value between them); write every value",
        ),
        ("params: [1, abc, 2]", "first", "a value could not be read as a finite number: params[1]: 'abc' is not a number"),
        (
            "params[0]: nan, params[1]: 1, params[2]: 2",  # NaN in a value's place is a value, rejected as such
            "first",
            "a value could not be read as a finite number: params[0]: 'nan' is not a finite number",
        ),
        (
            'params: ["0,5",1,2]',
            "first",
            "a value could not be read as a finite number: params[0]: '\"0' opens '\"' without closing it (a comma inside "
            "a quoted value, such as a decimal comma, splits it)",
        ),
        ("params: [1, 2, 3]\nparams[0]: 4", "last_vector", "expected exactly 3 values, got 1"),  # the last vector counts
        (
            "<|channel|>final<|message|>params: [1, 2",
            "first",
            "the reply was cut off at the token limit before its first line ended",
        ),
    ],
)
def test_each_reason_is_stated_exactly(reply: str, reading: str, reason: str) -> None:
    result = parse_params(reply, SPACE, reading)  # type: ignore[arg-type]
    assert result.params is None and result.error == reason


def test_long_lists_of_indices_are_cut_after_twelve() -> None:
    """A reason lists at most 12 indices, then how many there are."""
    twelve = ", ".join(f"params[{i}]: 1" for i in (0, 1, 2, *range(4, 13)))
    assert parse_params(twelve, SPACE, "last_vector").error == INDICES + "[0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12]"
    thirteen = twelve + ", params[13]: 1"
    assert (
        parse_params(thirteen, SPACE, "last_vector").error
        == INDICES + "[0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, ... (13 in all)]"
    )
    missing = ", ".join(f"params[{i}]" for i in range(1, 13))
    space13, space14 = ParameterSpace(13, low=-1, high=1), ParameterSpace(14, low=-1, high=1)
    assert parse_params("params[0]: 1", space13).error == f"expected all 13 values params[0]..params[12], missing {missing}"
    assert parse_params("params[0]: 1", space14).error == (
        f"expected all 14 values params[0]..params[13], missing {missing}, ... (13 in all)"
    )


def test_a_long_reason_is_cut_to_its_bound_with_a_marker() -> None:
    """At most ``MAX_REASON_CHARS`` (400) characters, ending with how long the reason was; each quoted piece at most
    40 characters of the reply, then its length."""
    reply = "params[0]: 1, " + ", ".join(f"params[{'a' * 45}]: 1" for _ in range(13))
    error = parse_params(reply, SPACE, "last_vector").error
    assert error is not None and len(error) == MAX_REASON_CHARS
    assert error.startswith(INDICES + "[0, 'aaaa") and error.endswith("a [... 814 characters, cut]")
    assert bound_reason("x" * 400) == "x" * 400
    assert bound_reason("x" * 401) == "x" * (400 - 26) + " [... 401 characters, cut]"
    assert bound_reason("x" * 50, limit=10) == " [... 50 c"  # a marker longer than the bound is cut too
    assert quote("a" * 40) == repr("a" * 40) and quote("a" * 41) == repr("a" * 40) + "... (41 characters)"


def test_the_default_reading_is_the_first_occurrence_and_cut_off_replies_are_read() -> None:
    """``reading="first"`` (the reference's R2PO) and ``reject_cut_off=False`` by default: a cut-off reply's complete
    lines are read; with ``reject_cut_off=True`` it is refused."""
    twice = "params[0]: 1, params[1]: 2, params[2]: 3\nparams[0]: 4, params[1]: 5, params[2]: 6"
    assert parse_params(twice, SPACE).params.tolist() == [1.0, 2.0, 3.0]  # type: ignore[union-attr]
    assert parse_params(twice, SPACE, "last").params.tolist() == [4.0, 5.0, 6.0]  # type: ignore[union-attr]
    assert parse_params(CUT, SPACE).params.tolist() == [1.0, 2.0, 3.0]  # type: ignore[union-attr]
    refused = parse_params(CUT, SPACE, reject_cut_off=True)
    assert (
        refused.params is None and refused.error == "the reply was cut off at the token limit (cut-off replies are rejected)"
    )


@pytest.mark.parametrize("reading", ["first_line", "last_vector"])
def test_commentary_after_a_complete_vector_is_ignored(reading: str) -> None:
    """Once ``params[0]..params[n-1]`` is complete, later mentions separated from it by words are commentary."""
    reply = "params[0]: 1, params[1]: 2, params[2]: 3. Note that params[1]: 2.0 matters most"
    assert parse_params(reply, SPACE, reading).params.tolist() == [1.0, 2.0, 3.0]  # type: ignore[arg-type, union-attr]


def test_words_in_a_values_place_and_index_spellings() -> None:
    """``params[0]: the weight`` is not a value (emphasis or a period around the word too); an index may have spaces,
    quotes or backticks around it and at most 9 digits."""
    words = "params[0]: the weight, params[0]: **weight**, params[0]: X. params[0]: 1, params[1]: 2, params[2]: 3"
    assert parse_params(words, SPACE).params.tolist() == [1.0, 2.0, 3.0]  # type: ignore[union-attr]
    spelled = 'params[ 0 ]: 1, params["1"]: 2, params[`2`]: 3'
    assert parse_params(spelled, SPACE).params.tolist() == [1.0, 2.0, 3.0]  # type: ignore[union-attr]
    assert parse_params("params[000000000]: 1, params[1]: 2, params[2]: 3", SPACE).params.tolist() == [1.0, 2.0, 3.0]  # type: ignore[union-attr]
    assert parse_params("params[0000000000]: 1, params[1]: 2, params[2]: 3", SPACE).error == (
        "expected all 3 values params[0]..params[2], missing params[0]"
    )
    leading = "\n\n  params: [1, 2, 3]\nparams: [4, 4, 4]"  # blank lines before the first line are skipped
    assert parse_params(leading, SPACE, "first_line").params.tolist() == [1.0, 2.0, 3.0]  # type: ignore[union-attr]


def test_quoted_values_must_be_closed_by_their_mirror() -> None:
    """Quotes, backticks and emphasis opened before a value are closed in mirror order; one sentence-ending period is
    dropped; an empty token is not a number."""
    assert to_number('*"0"*') == 0.0 and to_number("\"*'0.5'*\"") == 0.5 and to_number("-2.5.") == -2.5
    for token in ('"0', "\"0'.", "*'0*'", ""):
        with pytest.raises(ValueError):
            to_number(token)
    with pytest.raises(ValueError, match="is not a number"):
        to_number('".')  # the period after a quote is dropped: nothing is left open


def test_the_final_channel_and_what_comes_before_it() -> None:
    """gpt-oss's harmony output: the last final channel without the special tokens and whitespace that end it; the
    complete lines of a cut-off final channel (none before its ``<|message|>`` or without a final channel); what
    comes before the first final channel."""
    assert final_channel("analysisthinkingassistantfinalparams: [1, 2, 3] <|return|> \n<|end|>\n") == "params: [1, 2, 3]"
    assert final_channel("analysisXassistantfinalfirstassistantfinalparams: [1, 2, 3]") == "params: [1, 2, 3]"
    assert final_channel("assistantfinal<|return|>") == ""
    analysis = "<|channel|>analysis<|message|>think<|end|><|start|>assistant"
    assert cut_off_lines(analysis + "<|channel|>final<|message|>params: [1, 2, 3]\nparams: [4,") == "params: [1, 2, 3]"
    assert cut_off_lines("<|channel|>analysis<|message|>think\nmore") == ""
    assert cut_off_lines("<|channel|>final\nx") == ""
    assert cut_off_lines("<|channel|>final<|message|>a <|message|> b\nc") == "a <|message|> b"  # the channel's text
    assert before_final(analysis + "<|channel|>final<|message|>params: [1, 2, 3]") == analysis
    assert before_final("<|channel|>analysis<|message|>think<|end|>") == "<|channel|>analysis<|message|>think<|end|>"
    assert before_final("analysisXassistantfinalAassistantfinalB") == "analysisX"
    assert before_final("plain text") == "plain text"


def test_a_cut_off_output_as_raw_harmony_and_the_complete_answer() -> None:
    """``as_cut_off``: a final channel left open, what came before it (not blank) kept as analysis, output without a
    final channel unchanged; ``complete_answer``: the final channel, ``None`` without one or when it was cut off."""
    cut = "<|channel|>final<|message|>params: [1, 2"
    assert as_cut_off(cut) == cut and complete_answer(cut) is None
    assert as_cut_off("analysisthinkassistantfinalparams: [1, 2") == (
        "<|channel|>analysis<|message|>analysisthink<|end|><|start|>assistant" + cut
    )
    assert as_cut_off("params: [1, 2") == cut and as_cut_off("  assistantfinalparams: [1, 2") == cut
    assert as_cut_off("<|channel|>final<|message|>x<|return|>") == "<|channel|>final<|message|>x"
    for no_final in ("analysisthinking", "<|channel|>analysis<|message|>a<|end|>"):
        assert as_cut_off(no_final) == no_final and complete_answer(no_final) is None
    assert complete_answer("<|channel|>final<|message|>x<|return|>") == "x" and complete_answer("params: [1]") == "params: [1]"


@pytest.mark.parametrize(
    ("reading", "expected"),
    [("first", [1.0, 2.0, 3.0]), ("last", [4.0, 5.0, 3.0]), ("last_vector", [4.0, 5.0, 3.0])],
)
def test_listed_vectors_are_read_by_their_occurrence(reading: str, expected: list[float]) -> None:
    """Three listed vectors: the first reading takes the first, the last and last-vector readings the last (by position,
    not by the text of the match)."""
    reply = "params: [1, 2, 3]\nor params: [0.5, 0.5, 0.5]\nfinally params: [4, 5, 3]"
    result = parse_params(reply, SPACE, reading)  # type: ignore[arg-type]
    assert result.params is not None and list(result.params) == expected


def test_a_listed_vector_after_an_indexed_block_wins_the_last_vector_reading() -> None:
    reply = "params[0]: 1, params[1]: 1, params[2]: 1\nparams: [2, 2, 2]"
    result = parse_params(reply, SPACE, "last_vector")
    assert result.params is not None and list(result.params) == [2.0, 2.0, 2.0]
