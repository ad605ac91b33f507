import numpy as np
import pytest
from helpers import UNTIL_BUDGET, BanditEnv, ScriptedLLM, vector
from hypothesis import given, settings
from hypothesis import strategies as st

from sb3_r2po.common.parameters import NO_FINAL_ANSWER, READINGS, InvalidParameters, ParameterSpace, parse_params
from sb3_r2po.llm.base import without_answer

SPACE = ParameterSpace(3, low=-6, high=6, decimals=1)
ACTIONS = ParameterSpace(4, values=(0, 1, 2, 3))

# our recovery from unusable replies (re-ask with the error, then fall back; duplicates of the history unusable),
# not the reference's rerun of the iteration: these tests exercise it
RECOVERY = {"on_unusable_reply": "reask", "reject_duplicates": True}


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("params[0]: 1.0, params[1]: -2.5, params[2]: 0.3", [1.0, -2.5, 0.3]),
        ("params: [1.0, -2.5, 0.3]", [1.0, -2.5, 0.3]),
        ("Reasoning first.\nparams[0] = 1, params[1] = 2, params[2] = 3\n", [1.0, 2.0, 3.0]),
        ("params[0]: \u22121.5, params[1]: 0, params[2]: 1e0", [-1.5, 0.0, 1.0]),  # unicode minus
        ("params[0]: 7.0, params[1]: -9, params[2]: 0.26", [6.0, -6.0, 0.3]),  # clipped and rounded
        ("echo params[0]: 0, params[1]: 0, params[2]: 0\nanswer: params: [1, 1, 1]", [1.0, 1.0, 1.0]),  # the last wins
        # the last wins whatever the styles: a listed vector before an indexed one (the two kinds are found
        # by separate scans, so the last must be chosen by position)
        ("echo params: [0, 0, 0]\nanswer: params[0]: 1, params[1]: 1, params[2]: 1", [1.0, 1.0, 1.0]),
        (
            "<|channel|>analysis<|message|>params: [5, 5, 5]<|end|><|start|>assistant"
            "<|channel|>final<|message|>params: [1, 2, 3]<|return|>",
            [1, 2, 3],
        ),
        ("analysis I think params: [5, 5, 5] assistantfinalparams: [1, 2, 3]", [1, 2, 3]),
        ('```json\n{"params": [1.0, 2.0, 3.0]}\n```', [1.0, 2.0, 3.0]),
        ("params: [1.0, 2.0, 3.0]", [1.0, 2.0, 3.0]),
    ],
)
def test_accepted_replies(reply: str, expected: list[float] | None) -> None:
    result = parse_params(reply, SPACE, "last_vector")
    if expected is None:
        assert not result.ok
    else:
        assert result.ok, result.error
        np.testing.assert_array_equal(result.params, expected)


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("", "empty"),
        ("I would increase the second weight.", "no parameter vector"),
        ("params: [1, 2]", "exactly 3 values"),
        ("params[0]: 1, params[1]: 2, params[1]: 3", "indices"),
        ("params[0]: 1, params[2]: 2, params[3]: 3", "indices"),
        ("params: [nan, 1, 2]", "finite"),
        ("params: [inf, 1, 2]", "finite"),
        ("params: [-Infinity, 1, 2]", "finite"),
        ("params: [1,000, 2, 3]", "exactly 3 values"),
        ("<|channel|>analysis<|message|>thinking about params: [1, 2, 3] and then the budget ran out", "no final"),
        ("params[0]: <value>, params[1]: <value>, params[2]: <value>", "finite"),
    ],
)
def test_rejected_replies(reply: str, reason: str) -> None:
    result = parse_params(reply, SPACE, "last_vector")
    assert not result.ok and reason in result.error


def test_tabular_values_must_be_in_the_action_set() -> None:
    assert parse_params("params: [0, 1, 2, 3]", ACTIONS).ok
    assert parse_params("params: [0, 1.0, 2, 3]", ACTIONS).ok
    result = parse_params("params: [0, 1, 2, 4]", ACTIONS)
    assert not result.ok and "allowed values" in result.error
    assert not parse_params("params: [0, 1, 2.5, 3]", ACTIONS).ok


def test_projection_notes_changes() -> None:
    projection = SPACE.project([1.04, 10.0, -0.5])
    np.testing.assert_array_equal(projection.params, [1.0, 6.0, -0.5])
    assert len(projection.notes) == 2
    with pytest.raises(InvalidParameters):
        SPACE.project([1.0, 2.0])


@pytest.mark.parametrize("low, high", [(1.0, 1.0), (2.0, -2.0), (float("-inf"), 1.0)])
def test_bad_bounds(low: float, high: float) -> None:
    with pytest.raises(ValueError):
        ParameterSpace(3, low=low, high=high)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_parse_never_raises(text: str) -> None:
    result = parse_params(text, SPACE)
    assert result.ok or result.error
    if result.ok:
        assert result.params.shape == (3,) and np.all(np.abs(result.params) <= 6)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5)), max_size=5),
    st.sampled_from([", ", " ", ",", "; "]),
)
def test_parse_never_raises_on_vector_like_text(values: list, sep: str) -> None:
    text = "params: [" + sep.join(str(v) for v in values) + "]"
    result = parse_params(text, SPACE)
    assert result.ok or result.error


CARTPOLE_VECTORS = st.lists(st.floats(-6, 6), min_size=10, max_size=10).map(lambda v: vector(*v))
"""Indexed replies of the 10 parameters of CartPole's linear policy."""


@settings(max_examples=15, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=200), CARTPOLE_VECTORS), min_size=1, max_size=6))
def test_learn_survives_any_replies(make_r2po, replies: list[str]) -> None:
    """Every call is counted, a reply that does not parse (read here as the run reads it) is a parse failure, and
    every candidate in the history is the vector of a reply that parses (an unusable reply reruns the iteration)."""
    llm = ScriptedLLM(replies)
    model = make_r2po(llm=llm, n_eval_episodes=1, warmup_episodes=1, seed=0, max_episodes=5)
    model.learn(UNTIL_BUDGET)
    assert model.episodes_used <= 5
    space, reading = model.policy.parameter_space, model.settings.variant_spec.reading[0]  # the linear policy's reading
    answered = [replies[min(i, len(replies) - 1)] for i in range(len(llm.calls))]
    parsed = [parse_params(reply, space, reading).params for reply in answered]
    assert model.llm_stats["calls"] == len(llm.calls)
    assert model.llm_stats["parse_failures"] == sum(params is None for params in parsed)
    assert model.llm_stats["fallbacks"] == 0 and all(r["kind"] in {"warmup", "search", "critic"} for r in model.history)
    usable = [params for params in parsed if params is not None]
    for record in model.history[1:]:
        candidates = [record["search"]["params"], record["revision"].get("params")]
        assert all(any(np.array_equal(c, params) for params in usable) for c in candidates if c is not None)


def test_failed_search_falls_back_after_a_retry(make_r2po) -> None:
    llm = ScriptedLLM(["no numbers here"])
    model = make_r2po(
        llm=llm,
        n_eval_episodes=2,
        warmup_episodes=2,
        seed=0,
        max_episodes=4,
        max_llm_retries=2,
        **RECOVERY,
    )
    model.learn(UNTIL_BUDGET)
    record = model.history[-1]
    assert record["search"]["kind"] == "fallback" and record["kind"] == "fallback"
    assert len(record["search"]["failures"]) == 3  # first ask + 2 retries
    assert model.llm_stats["fallbacks"] == 1 and model.llm_stats["parse_failures"] == 3
    assert "could not be used" in llm.calls[1][-1]["content"]  # the retry states the error
    assert llm.calls[1][-2] == {"role": "assistant", "content": "no numbers here"}


def test_the_fallback_is_a_small_step_from_the_best_candidate(make_r2po) -> None:
    """At ``step_size=0.1`` the fallback stays within a few steps of the best warm-up candidate (a fresh draw from
    [-6, 6] would not)."""
    model = make_r2po(
        llm=ScriptedLLM(["no numbers here"]),
        n_eval_episodes=2,
        warmup_episodes=2,
        seed=0,
        max_episodes=4,
        step_size=0.1,
        **RECOVERY,
    )
    model.learn(UNTIL_BUDGET)
    record = model.history[-1]
    best = max((r for r in model.history if r["kind"] == "warmup"), key=lambda r: r["mean_return"])
    assert record["kind"] == "fallback" and record["params"] != best["params"]
    assert np.abs(np.subtract(record["params"], best["params"])).max() <= 0.5


def test_duplicate_of_history_counts_as_failure(make_r2po) -> None:
    # iteration 1: search [0.5, 0.5], the critic repeats it (declined, skip_unchanged_revisions); iteration 2: the
    # search repeats it (a failure: it would waste K episodes), the re-ask answers [1.0, 1.0]
    llm = ScriptedLLM(["params: [0.5, 0.5]", "params: [0.5, 0.5]", "params: [0.5, 0.5]", "params: [1.0, 1.0]"])
    model = make_r2po(
        BanditEnv(),
        llm=llm,
        n_eval_episodes=1,
        warmup_episodes=0,
        seed=0,
        max_episodes=2,
        skip_unchanged_revisions=True,
        **RECOVERY,
    )
    model.learn(UNTIL_BUDGET)
    second = model.history[-1]
    assert "already evaluated" in second["search"]["failures"][0]
    assert second["search"]["params"] == [1.0, 1.0]


def test_a_discrete_perturbation_changes_exactly_one_state_to_another_action() -> None:
    space = ParameterSpace(6, values=(0, 1, 2))
    center = np.array([0.0, 1.0, 2.0, 0.0, 1.0, 2.0])
    rng = np.random.default_rng(0)
    for _ in range(50):
        out = space.perturb(center, 1.0, rng)
        changed = np.flatnonzero(out != center)
        assert changed.size == 1 and out[changed[0]] in space.values
    single = ParameterSpace(2, values=(3,))  # one action: nothing else to change to
    np.testing.assert_array_equal(single.perturb(np.array([3.0, 3.0]), 1.0, rng), [3.0, 3.0])


@pytest.mark.parametrize("style", ["indexed", "list"])
@pytest.mark.parametrize("space", [ParameterSpace(10, -6.0, 6.0, 1), ParameterSpace(16, values=(0, 1, 2, 3))])
def test_formatted_vector_parses_back_exactly(style: str, space: ParameterSpace) -> None:
    params = space.sample(np.random.default_rng(0))
    text = space.format(params, style)  # type: ignore[arg-type]
    assert text.startswith("params: [" if style == "list" else "params[0]: ")
    np.testing.assert_array_equal(parse_params(text, space).params, params)


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("params: [1, 1e309, 2]", [1.0, 6.0, 2.0]),
        ("params: [1, -1e309, 2]", [1.0, -6.0, 2.0]),
        ("params: [1, " + "9" * 400 + ", 2]", [1.0, 6.0, 2.0]),
        ("params[0]: 1, params[1]: -" + "9" * 400 + ".5, params[2]: 2", [1.0, -6.0, 2.0]),
        ("params: [1, 1e308, 2]", [1.0, 6.0, 2.0]),
    ],
)
def test_a_literal_too_large_for_a_float_is_clipped_like_1e308(reply: str, expected: list[float]) -> None:
    result = parse_params(reply, SPACE)
    assert result.ok, result.error
    np.testing.assert_array_equal(result.params, expected)
    assert any(note.startswith("params[1]:") and "clipped" in note for note in result.notes)


@pytest.mark.parametrize("reply", ["params: [nan, 1, 2]", "params: [1, inf, 2]", "params: [1, -infinity, 2]"])
def test_literal_nan_and_infinities_stay_rejected(reply: str) -> None:
    result = parse_params(reply, SPACE)
    assert not result.ok and "finite" in result.error


@pytest.mark.parametrize("reply", ["params: [1, , 2, 3]", "params: [, 1, 2, 3]", "params: [1, 2, , ]", "params: [1,,2]"])
def test_an_empty_list_slot_is_rejected_not_dropped(reply: str) -> None:
    result = parse_params(reply, SPACE)
    assert not result.ok and "empty slot" in result.error


@pytest.mark.parametrize("reply", ["params: [1, 2, 3,]", "params: [1, 2, 3, ]", "params: [1,\n 2,\n 3,\n]"])
def test_one_trailing_comma_is_accepted(reply: str) -> None:
    np.testing.assert_array_equal(parse_params(reply, SPACE).params, [1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    "reply",
    [
        # a sentence-ending period is dropped
        "params[0]: 1.0, params[1]: 2.0, params[2]: 3.0.",
        "params: [1.0, 2.0, 3.0.]",
        "params[0]: `1.0`, params[1]: **2.0**, params[2]: `3.0`.",
        "params[0]: 1., params[1]: 2., params[2]: 3.",
        # commentary mentioning an index after a complete indexed vector is ignored
        "params[0]: 1.0, params[1]: 2.0, params[2]: 3.0\nNote that params[1]: 2.0 is the key.",
        "params[0]: 1.0, params[1]: 2.0, params[2]: 3.0 (I raised params[1] = 2.0 and kept params[2]: 3.0)",
    ],
)
def test_tolerated_variants_read_as_the_vector(reply: str) -> None:
    result = parse_params(reply, SPACE)
    assert result.ok, result.error
    np.testing.assert_array_equal(result.params, [1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    "reply",
    [
        "params[0]: 1, params[1]: 2, params[2]: 3, params[1]: 4",  # a repeat inside the vector, no words between
        "params[0]: 1, params[1]: 2\nNote that params[1]: 2 is the key.",  # no complete vector before the note
        "params[0]: 1, params[1]: 2, params[2]: 3, params[3]: 4\nNote params[1]: 2",  # too many values
    ],
)
def test_irregular_indices_without_a_complete_vector_first_stay_rejected(reply: str) -> None:
    assert not parse_params(reply, SPACE, "last_vector").ok
    # the reference's reading takes the first value of each index 0..n-1 and ignores the others (params[3] included)
    first = parse_params(reply, SPACE, "first")
    if "params[2]" in reply:
        np.testing.assert_array_equal(first.params, [1.0, 2.0, 3.0])
    else:
        assert not first.ok and "missing params[2]" in first.error


TWO_VECTORS = "params[0]: 0, params[1]: 0, params[2]: 0; params[0]: 1, params[1]: 2, params[2]: 3"
"""Two indexed vectors on one line, no word between them: each ``params[0]`` starts a new vector."""


@pytest.mark.parametrize(
    "reading, expected", [("first", [0, 0, 0]), ("last", [1, 2, 3]), ("first_line", [0, 0, 0]), ("last_vector", [1, 2, 3])]
)
def test_every_params_0_starts_a_new_indexed_vector(reading: str, expected: list[float]) -> None:
    """Read as one vector, the six entries would be irregular indices (a repeat of params[0]) and the reply rejected."""
    result = parse_params(TWO_VECTORS, SPACE, reading)
    assert result.ok, result.error
    np.testing.assert_array_equal(result.params, expected)


AMBIGUOUS_INDEXED = "a decimal comma or a digit group (0,5 or 1,000 or 1 000) can be read in more than one way"
AMBIGUOUS_LIST = "the list can be read in more than one way: it has a comma between digits"


@pytest.mark.parametrize("reading", READINGS)
@pytest.mark.parametrize(
    "reply, reason",
    [
        ("params[0]: 0,5, params[1]: 1, params[2]: 2", f"params[0] is written '0,5,': {AMBIGUOUS_INDEXED}"),
        ("params[0]: 1, params[1]: 1,000, params[2]: 2", f"params[1] is written '1,000,': {AMBIGUOUS_INDEXED}"),
        ("params[0]: 1 000, params[1]: 1, params[2]: 2", f"params[0] is written '1 000,': {AMBIGUOUS_INDEXED}"),
        ("params: [0,5, 1,5, 2]", AMBIGUOUS_LIST),
        ("params: [1,000, 2, 3]", AMBIGUOUS_LIST),
    ],
)
def test_a_decimal_comma_or_digit_group_is_rejected_as_ambiguous(reading: str, reply: str, reason: str) -> None:
    """Read value by value, each of these replies would give a vector (0,5 as 0, or [0, 5, 1, 5, 2] cut or refused
    for its size): the reason must say that the reply can be read in more than one way."""
    result = parse_params(reply, SPACE, reading)
    assert not result.ok and reason in result.error, result.error


@pytest.mark.parametrize("reading", READINGS)
@pytest.mark.parametrize(
    "reply",
    [
        "old_params: [1, 2, 3]",
        '{"old_params": [1, 2, 3]}',
        "my_params[0]: 1, my_params[1]: 2, my_params[2]: 3",
        "theta_params[0]=1, theta_params[1]=2, theta_params[2]=3",
    ],
)
def test_params_must_be_a_word_of_its_own(reading: str, reply: str) -> None:
    result = parse_params(reply, SPACE, reading)
    assert not result.ok and "no parameter vector found" in result.error, result


def test_a_plain_reply_starting_with_analysis_colon_is_read() -> None:
    for reply in ("analysis: moving toward higher reward.\nparams: [1, 2, 3]", "analysis - params: [1, 2, 3]"):
        np.testing.assert_array_equal(parse_params(reply, SPACE).params, [1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    "reply",
    [
        "params[0]: 0.5, params[1]: 2.25, params[2]: -1",
        "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>params: [0.5, 2.25, -1",
        "analysisxassistantfinalparams: [0.5, 2.25, -1]",
    ],
)
def test_a_cut_off_reply_passed_through_without_answer_fails_with_the_reason(reply: str) -> None:
    result = parse_params(without_answer(reply), SPACE)
    assert not result.ok and result.error == NO_FINAL_ANSWER
    assert "cut off at the token limit" in result.error and "no final" in result.error


@pytest.mark.parametrize(
    ("space", "proposal", "expected"),
    [
        (ParameterSpace(1, 0.25, 0.75, 1), [0.0], [0.3]),
        (ParameterSpace(1, 0.25, 0.75, 1), [0.25], [0.3]),
        (ParameterSpace(1, 0.25, 0.75, 1), [1.0], [0.7]),
        (ParameterSpace(1, 0.25, 0.75, 1), [0.75], [0.7]),
        (ParameterSpace(1, -123.45, 99.9, 1), [-123.45], [-123.4]),
        (ParameterSpace(1, -2.675, 2.675, 2), [-9.0], [-2.67]),
        (ParameterSpace(1, 0.3, 0.7, 1), [0.0], [0.3]),  # 0.3 * 10 is not exactly 3 in floating point
        (ParameterSpace(1, 0.0, 1.0, 0), [0.6], [1.0]),
    ],
)
def test_projection_stays_inside_bounds_that_are_not_on_the_precision(
    space: ParameterSpace, proposal: list[float], expected: list[float]
) -> None:
    projection = space.project(proposal)
    np.testing.assert_array_equal(projection.params, expected)
    assert np.all(projection.params >= space.low) and np.all(projection.params <= space.high)


def test_bounds_holding_no_value_at_the_precision_are_refused() -> None:
    with pytest.raises(ValueError, match="No value with 1 decimal"):
        ParameterSpace(2, 0.21, 0.29, 1)
    assert ParameterSpace(2, 0.21, 0.29, 2).grid_bounds() == (0.21, 0.29)
    assert ParameterSpace(2, 0.25, 0.35, 1).grid_bounds() == (0.3, 0.3)


@settings(max_examples=300, deadline=None)
@given(
    st.floats(-100, 100, allow_nan=False),
    st.floats(0.001, 50, allow_nan=False),
    st.integers(0, 3),
    st.floats(-1e6, 1e6, allow_nan=False),
)
def test_projection_is_always_inside_the_bounds(low: float, width: float, decimals: int, value: float) -> None:
    try:
        space = ParameterSpace(1, low, low + width, decimals)
    except ValueError:
        return  # no value at the precision in the bounds
    params = space.project([value]).params
    assert space.low <= params[0] <= space.high
    assert params[0] == round(params[0], decimals)
