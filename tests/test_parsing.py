import numpy as np
import pytest
from helpers import BanditEnv, ScriptedLLM
from hypothesis import given, settings
from hypothesis import strategies as st

from sb3_r2po import R2PO
from sb3_r2po.common.parameters import InvalidParameters, ParameterSpace
from sb3_r2po.common.parsing import parse_params

SPACE = ParameterSpace(3, low=-6, high=6, decimals=1)
ACTIONS = ParameterSpace(4, values=(0, 1, 2, 3))


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("params[0]: 1.0, params[1]: -2.5, params[2]: 0.3", [1.0, -2.5, 0.3]),
        ("params: [1.0, -2.5, 0.3]", [1.0, -2.5, 0.3]),
        ("Reasoning first.\nparams[0] = 1, params[1] = 2, params[2] = 3\n", [1.0, 2.0, 3.0]),
        ("params[0]: \u22121.5, params[1]: 0, params[2]: 1e0", [-1.5, 0.0, 1.0]),  # unicode minus
        ("params[0]: 7.0, params[1]: -9, params[2]: 0.26", [6.0, -6.0, 0.3]),  # clipped and rounded
        ("echo params[0]: 0, params[1]: 0, params[2]: 0\nanswer: params: [1, 1, 1]", [1.0, 1.0, 1.0]),  # the last wins
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
    result = parse_params(reply, SPACE)
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
        ("params: [1e309, 1, 2]", "finite"),
        ("params: [1,000, 2, 3]", "exactly 3 values"),
        ("<|channel|>analysis<|message|>thinking about params: [1, 2, 3] and then the budget ran out", "no final"),
        ("params[0]: <value>, params[1]: <value>, params[2]: <value>", "finite"),
    ],
)
def test_rejected_replies(reply: str, reason: str) -> None:
    result = parse_params(reply, SPACE)
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


@settings(max_examples=15, deadline=None)
@given(st.lists(st.text(max_size=200), min_size=1, max_size=6))
def test_learn_survives_any_replies(replies: list[str]) -> None:
    llm = ScriptedLLM(replies)
    model = R2PO("MlpLinear", "CartPole-v1", llm=llm, n_eval_episodes=1, warmup_episodes=1, seed=0, max_episodes=5)
    model.learn(10**6)
    assert model._episode_num <= 5
    assert model.llm_stats["parse_failures"] >= 0
    assert all(r["kind"] in {"warmup", "search", "critic", "fallback"} for r in model.history)


def test_failed_search_falls_back_after_a_retry() -> None:
    llm = ScriptedLLM(["no numbers here"])
    model = R2PO(
        "MlpLinear", "CartPole-v1", llm=llm, n_eval_episodes=2, warmup_episodes=2, seed=0, max_episodes=4, max_llm_retries=2
    )
    model.learn(10**6)
    record = model.history[-1]
    assert record["search"]["kind"] == "fallback" and record["kind"] == "fallback"
    assert len(record["search"]["failures"]) == 3  # first ask + 2 retries
    assert model.llm_stats["fallbacks"] == 1 and model.llm_stats["parse_failures"] == 3
    assert "could not be used" in llm.calls[1][-1]["content"]  # the retry states the error
    assert llm.calls[1][-2] == {"role": "assistant", "content": "no numbers here"}


def test_duplicate_of_history_counts_as_failure() -> None:
    # iteration 1: search [0.5, 0.5], the critic repeats it (declined); iteration 2: the search repeats it
    # (a failure: it would waste K episodes), the re-ask answers [1.0, 1.0]
    llm = ScriptedLLM(["params: [0.5, 0.5]", "params: [0.5, 0.5]", "params: [0.5, 0.5]", "params: [1.0, 1.0]"])
    model = R2PO("MlpLinear", BanditEnv(), llm=llm, n_eval_episodes=1, warmup_episodes=0, seed=0, max_episodes=2)
    model.learn(10**6)
    second = model.history[-1]
    assert "already evaluated" in second["search"]["failures"][0]
    assert second["search"]["params"] == [1.0, 1.0]


@pytest.mark.parametrize("style", ["indexed", "list"])
@pytest.mark.parametrize("space", [ParameterSpace(10, -6.0, 6.0, 1), ParameterSpace(16, values=(0, 1, 2, 3))])
def test_formatted_vector_parses_back_exactly(style: str, space: ParameterSpace) -> None:
    params = space.sample(np.random.default_rng(0))
    text = space.format(params, style)  # type: ignore[arg-type]
    assert text.startswith("params: [" if style == "list" else "params[0]: ")
    np.testing.assert_array_equal(parse_params(text, space).params, params)
