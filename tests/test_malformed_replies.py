"""The malformed-reply corpus: every kind of broken reply, through the real parse path inside ``learn()``.

Each case is ``(name, reply, expected)``: ``expected`` is the accepted vector, or the text that the failure
reason must contain. A failed Search is re-asked once with the reason (``max_llm_retries=1``), then falls back
to a perturbation of the best candidate (kind ``fallback``); the reasons are kept in the history and counted in
``llm_stats["parse_failures"]`` and ``llm_stats["fallbacks"]``. No case may raise.
"""

import numpy as np
import pytest
from helpers import UNTIL_BUDGET, BanditEnv, ScriptedLLM

from sb3_r2po import R2PO
from sb3_r2po.llm.base import without_answer

HARMONY_FINAL = "<|channel|>analysis<|message|>{a}<|end|><|start|>assistant<|channel|>final<|message|>{f}<|return|>"
ECHOED_PROMPT = (
    "## Previous attempts\nparams[0]: 0.5, params[1]: 0.5; mean reward: 1\n"
    "Your reply has exactly two parts, in this order.\n"
    "First line, with nothing before it: the parameters only, exactly like this:\n"
    "params[0]: <value>, params[1]: <value>\n"
    "The following lines: explain what you changed and why."
)

CONTINUOUS = [
    # empty and prose
    ("empty", "", "empty"),
    ("whitespace", "   \n\t ", "empty"),
    ("prose only", "I would increase the pole-angle weight a little.", "no parameter vector"),
    ("refusal", "I'm sorry, I can't help with that.", "no parameter vector"),
    ("bare list without the params key", "[1.0, 2.0]", "no parameter vector"),
    ("json object keyed by index", '{"params": {"0": 1, "1": 2}}', "no parameter vector"),
    # counts and indices
    ("too few values", "params: [1.0]", "exactly 2 values"),
    ("too many values", "params: [1, 2, 3]", "exactly 2 values"),
    ("empty list slot", "params: [1, , 2]", "empty slot"),
    ("duplicated index 0", "params[0]: 1, params[0]: 2", "exactly 2 values"),
    ("duplicated index 1", "params[0]: 1, params[1]: 2, params[1]: 3", "indices"),
    ("missing index 0", "params[1]: 1", "indices"),
    ("skipped index", "params[0]: 1, params[2]: 2", "indices"),
    ("indices out of order", "params[1]: 1, params[0]: 2", "exactly 2 values"),
    ("10k values", "params: [" + ", ".join(["1"] * 10_000) + "]", "exactly 2 values"),
    # non-finite and unreadable numbers
    ("nan", "params: [nan, 1]", "finite"),
    ("NaN indexed", "params[0]: NaN, params[1]: 1", "finite"),
    ("inf", "params: [inf, 1]", "finite"),
    ("minus inf", "params: [-inf, 1]", "finite"),
    ("overflow 1e309", "params: [1e309, 1]", [6.0, 1.0]),
    ("overflow 400-digit integer", "params: [1, -" + "9" * 400 + "]", [1.0, -6.0]),
    ("hex", "params: [0x1, 2]", "finite"),
    ("percent", "params: [50%, 2]", "finite"),
    ("space separated", "params: [1 2]", "finite"),
    ("semicolon separated list", "params: [1;2]", "finite"),
    ("placeholder echoed", "params[0]: <value>, params[1]: <value>", "finite"),
    ("thousands separator", "params: [1,000.5, 2]", "exactly 2 values"),
    # harmony
    ("analysis only, cut off", "<|channel|>analysis<|message|>maybe params: [1, 2] or", "no final"),
    ("flattened analysis, cut off", "analysisI think params: [1, 2] would", "no final"),
    ("final channel cut at the token limit", without_answer("<|channel|>final<|message|>params: [1, -1"), "cut off"),
    ("plain reply cut at the token limit", without_answer("params: [1, -1"), "cut off"),
    ("plain reply starting 'analysis:'", "analysis: raise the second weight.\nparams: [1, 2]", [1.0, 2.0]),
    ("parameters only in the analysis", HARMONY_FINAL.format(a="params: [1, 2]", f="I am not sure."), "no parameter vector"),
    # the prompt echoed back
    ("prompt echoed", ECHOED_PROMPT, "finite"),
    # accepted, with repair
    ("plain indexed", "params[0]: 1.0, params[1]: -2.5", [1.0, -2.5]),
    ("plain list", "params: [1.0, -2.5]", [1.0, -2.5]),
    ("equals sign", "params = [1, 2]", [1.0, 2.0]),
    ("upper case", "PARAMS: [1, 2]", [1.0, 2.0]),
    ("trailing comma", "params: [1, 2,]", [1.0, 2.0]),
    ("explicit plus and exponent", "params: [+1.5, 2e-1]", [1.5, 0.2]),
    ("leading dot", "params: [.5, -.5]", [0.5, -0.5]),
    ("out of range high", "params: [100, 1]", [6.0, 1.0]),
    ("out of range low", "params: [-7.5, 1]", [-6.0, 1.0]),
    ("huge but finite", "params: [1e300, -1e5]", [6.0, -6.0]),
    ("too many decimals", "params: [1.234, -0.051]", [1.2, -0.1]),
    ("unicode minus", "params: [\u22121.5, 2]", [-1.5, 2.0]),
    ("en dash as minus", "params: [\u20131.5, 2]", [-1.5, 2.0]),
    ("fullwidth digits", "params: [\uff11.5, 2]", [1.5, 2.0]),
    ("arabic-indic digit", "params: [\u0663, 2]", [3.0, 2.0]),
    ("underscore digit grouping", "params: [1_0, 2]", [6.0, 2.0]),
    ("code fence", "```\nparams: [1, 2]\n```", [1.0, 2.0]),
    ("json", '```json\n{"params": [1.0, 2.0]}\n```', [1.0, 2.0]),
    ("json quoted numbers", '{"params": ["1.0", "-2"]}', [1.0, -2.0]),
    ("markdown bold", "**params[0]**: 1, **params[1]**: 2", [1.0, 2.0]),
    ("backticked values", "params[0]: `1.0`, params[1]: `2.0`", [1.0, 2.0]),
    ("semicolons between indexed", "params[0]: 1.0; params[1]: 2.0", [1.0, 2.0]),
    ("one per line", "params[0] = 1.0\nparams[1] = 2.0", [1.0, 2.0]),
    ("reason on the same line", "Raise both. params[0]: 1.0, params[1]: 2.0 (should balance)", [1.0, 2.0]),
    ("units after values", "params[0]: 1.0 N, params[1]: 2.0 N", [1.0, 2.0]),
    ("sentence-ending period", "params[0]: 1.0, params[1]: 2.0.", [1.0, 2.0]),
    ("commentary restating an index", "params[0]: 1.0, params[1]: 2.0\nI changed params[1]: 2.0 the most.", [1.0, 2.0]),
    ("two different vectors: the last wins", "params: [1, 1]\nOn reflection: params: [2, 2]", [2.0, 2.0]),
    ("indexed then list: the last wins", "params[0]: 1, params[1]: 1\nparams: [3, 3]", [3.0, 3.0]),
    ("prompt echoed then answered", ECHOED_PROMPT + "\nparams: [1, 2]", [1.0, 2.0]),
    ("harmony raw", HARMONY_FINAL.format(a="try params: [5, 5]", f="params: [1, 2]"), [1.0, 2.0]),
    ("harmony flattened", "analysisthinking params: [5, 5]assistantfinalparams: [1, 2]", [1.0, 2.0]),
    ("very long reply", "blah " * 20_000 + "params: [1, 2]", [1.0, 2.0]),
    ("very long junk", "blah " * 20_000, "no parameter vector"),
]

TABULAR = [
    ("value outside the action set", "params: [" + ", ".join(["0"] * 15 + ["5"]) + "]", "allowed values"),
    ("negative action", "params: [" + ", ".join(["0"] * 15 + ["-1"]) + "]", "allowed values"),
    ("fractional action", "params: [" + ", ".join(["0"] * 15 + ["1.5"]) + "]", "allowed values"),
    ("wrong table size", "params: [0, 1, 2]", "exactly 16 values"),
    ("float-written actions", "params: [" + ", ".join(["1.0"] * 16) + "]", [1.0] * 16),
]

# our recovery from unusable replies (re-ask with the error, then fall back; duplicates of the history unusable),
# not the reference's rerun of the iteration: these tests exercise it
RECOVERY = {"on_unusable_reply": "reask", "reject_duplicates": True, "reply_reading": "last_vector"}  # the corpus's reading


def search_outcome(model: R2PO) -> dict:
    return next(r for r in model.history if r["kind"] != "warmup")["search"]


@pytest.mark.parametrize("name, reply, expected", CONTINUOUS, ids=[c[0] for c in CONTINUOUS])
def test_continuous_corpus(make_r2po, name: str, reply: str, expected) -> None:
    llm = ScriptedLLM([reply])
    model = make_r2po(BanditEnv(), llm=llm, n_eval_episodes=1, warmup_episodes=1, max_episodes=2, seed=0, **RECOVERY)
    model.learn(UNTIL_BUDGET)  # must not raise
    search = search_outcome(model)
    if isinstance(expected, list):
        assert search["kind"] == "search" and search["failures"] == []
        np.testing.assert_array_equal(search["params"], expected)
        assert model.llm_stats["parse_failures"] == 0
    else:
        assert search["kind"] == "fallback"
        assert len(search["failures"]) == 2 and all(expected in reason for reason in search["failures"])
        assert model.llm_stats["parse_failures"] == 2 and model.llm_stats["fallbacks"] == 1
        assert "Your reply could not be used" in llm.calls[1][-1]["content"]  # the re-ask states the reason


@pytest.mark.parametrize("name, reply, expected", TABULAR, ids=[c[0] for c in TABULAR])
def test_tabular_corpus(make_r2po, name: str, reply: str, expected) -> None:
    llm = ScriptedLLM([reply])
    model = make_r2po(
        "FrozenLake-v1", policy="Tabular", llm=llm, n_eval_episodes=1, warmup_episodes=1, max_episodes=2, seed=0, **RECOVERY
    )
    model.learn(UNTIL_BUDGET)
    search = search_outcome(model)
    if isinstance(expected, list):
        assert search["kind"] == "search"
        np.testing.assert_array_equal(search["params"], expected)
    else:
        assert search["kind"] == "fallback" and all(expected in reason for reason in search["failures"])


def test_corpus_size() -> None:
    assert len(CONTINUOUS) + len(TABULAR) >= 50
