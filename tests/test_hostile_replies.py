"""The hostile-reply corpus: replies written to crash the parser, to be misread by it, or to make it slow or verbose.

Each case is ``(category, name, reply, expected, space)``: ``expected`` is the exact vector the reply must be read
as, or :class:`Rejected` (with a text the reason must contain, when the reason matters). For every case, through
:func:`parse_params` and through :func:`ask_for_params` (which keeps the reasons and sends them back in a re-ask):

- nothing is raised; the result is a :class:`ParseResult`;
- an accepted reply is read as exactly the expected vector (never a silently different one);
- a rejected reply has a reason of at most :data:`MAX_REASON_CHARS` printable characters (control characters
  of the reply are escaped), and the same bound holds for every reason kept in :class:`Answer` and sent back;
- parsing takes well under a second per megabyte (no quadratic regular expression).

``len(CORPUS)`` is the number of hostile replies that docs/reliability.md cites ("N hostile replies tried: 0
crashes, 0 silent misreads"); :data:`CATEGORIES` counts them by category.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pytest
from helpers import UNTIL_BUDGET, BanditEnv, ScriptedLLM
from hypothesis import given, settings
from hypothesis import strategies as st

from sb3_r2po.common.parameters import MAX_REASON_CHARS, READINGS, ParameterSpace, ParseResult, bound_reason, parse_params
from sb3_r2po.llm.base import Message
from sb3_r2po.r2po.roles import MAX_ECHOED_REPLY_CHARS, ask_for_params

SPACE = ParameterSpace(3, low=-6, high=6, decimals=1)
ACTIONS = ParameterSpace(4, values=(0, 1, 2, 3))
WIDE = ParameterSpace(3, low=-1e6, high=1e6, decimals=1)  # room for numbers that need digit groups

SECONDS_PER_MB = 10.0
"""Parsing budget per MB of reply, on top of :data:`BASE_SECONDS`. Generous, for a loaded machine: measured about
0.2 s per MB (1 s for the worst 5 MB reply); a quadratic regular expression takes many minutes on 1 MB
(the trailing-specials expression of an earlier replies.py: 15 s for 130 KB, about 10 minutes for 800 KB)."""

BASE_SECONDS = 20.0


@dataclass(frozen=True)
class Rejected:
    """The reply must be rejected; ``because``, when given, must appear in the reason."""

    because: str | None = None


class Case(NamedTuple):
    category: str
    name: str
    reply: str
    expected: list[float] | Rejected
    space: ParameterSpace = SPACE


def idx(*values: object) -> str:
    return ", ".join(f"params[{i}]: {v}" for i, v in enumerate(values))


def lst(*values: object, sep: str = ", ") -> str:
    return "params: [" + sep.join(str(v) for v in values) + "]"


HUGE_INT = "9" * 5000  # past Python's 4300-digit int-string limit
RAW = "<|channel|>analysis<|message|>{a}<|end|><|start|>assistant<|channel|>final<|message|>{f}<|return|>"
MB = 1_000_000


def _numbers() -> list[Case]:
    c = "huge and long numbers"
    return [
        Case(c, "400-digit integer", lst(1, "9" * 400, 2), [1.0, 6.0, 2.0]),
        Case(c, "5000-digit integer (past the int limit)", lst(1, HUGE_INT, 2), [1.0, 6.0, 2.0]),
        Case(c, "5000-digit negative indexed", idx(1, "-" + HUGE_INT, 2), [1.0, -6.0, 2.0]),
        Case(c, "100k-digit integer", lst(1, "1" * 100_000, 2), [1.0, 6.0, 2.0]),
        Case(c, "1 MB of digits", lst("7" * MB, 1, 2), [6.0, 1.0, 2.0]),
        Case(c, "1e309", lst("1e309", 1, 2), [6.0, 1.0, 2.0]),
        Case(c, "-1e309", lst("-1e309", 1, 2), [-6.0, 1.0, 2.0]),
        Case(c, "1e99999", lst(1, "1e99999", 2), [1.0, 6.0, 2.0]),
        Case(c, "exponent of 5000 digits", lst(1, "1e" + HUGE_INT, 2), [1.0, 6.0, 2.0]),
        Case(c, "negative exponent of 5000 digits", lst(1, "1e-" + HUGE_INT, 2), [1.0, 0.0, 2.0]),
        Case(c, "1e-99999 underflows to 0", lst("1e-99999", 1, 2), [0.0, 1.0, 2.0]),
        Case(c, "100k zeros after the point", lst("0." + "0" * 100_000 + "1", 1, 2), [0.0, 1.0, 2.0]),
        Case(c, "5000 decimals", lst("1.5" + "0" * 5000, 1, 2), [1.5, 1.0, 2.0]),
        Case(c, "long mantissa rounds", lst("0.29999999999999999999999", 1, 2), [0.3, 1.0, 2.0]),
        Case(c, "400 digits scaled back by the exponent", lst("1" + "0" * 400 + "e-400", 1, 2), [1.0, 1.0, 2.0]),
        Case(c, "negative zero", lst("-0", "-0.0", 2), [0.0, 0.0, 2.0]),
        Case(c, "1e308 indexed", idx("1e308", "-1e308", 0), [6.0, -6.0, 0.0]),
    ]


def _indices() -> list[Case]:
    c = "many-digit, negative, duplicate and out-of-order indices"
    return [
        Case(c, "5000-digit index alone", f"params[{'1' * 5000}]: 1", Rejected("indices")),
        Case(c, "5000-digit index in a vector", f"params[0]: 1, params[1]: 2, params[{'2' * 5000}]: 3", Rejected("indices")),
        Case(c, "5000-digit index with leading zeros", f"params[0]: 1, params[{'0' * 5000}1]: 2, params[2]: 3", Rejected()),
        Case(c, "100k-digit index", f"params[0]: 1, params[{'7' * 100_000}]: 2", Rejected("indices")),
        Case(c, "10-digit index", "params[0]: 1, params[1]: 2, params[0000000002]: 3", Rejected("indices")),
        Case(c, "leading zeros in short indices", "params[00]: 1, params[01]: 2, params[02]: 3", [1.0, 2.0, 3.0]),
        Case(c, "index 999999999", "params[0]: 1, params[1]: 2, params[999999999]: 3", Rejected("indices")),
        Case(c, "negative index inside", "params[0]: 1, params[1]: 2, params[-1]: 5, params[2]: 3", Rejected("indices")),
        Case(c, "negative index at the end", "params[0]: 1, params[1]: 2, params[2]: 3, params[-1]: 5", Rejected("indices")),
        Case(c, "negative zero index", "params[-0]: 1, params[1]: 2, params[2]: 3", Rejected("indices")),
        Case(c, "plus-signed index", "params[0]: 1, params[+1]: 2, params[2]: 3", Rejected("indices")),
        Case(c, "fractional index", "params[0]: 1, params[1.0]: 2, params[2]: 3", Rejected("indices")),
        Case(c, "hex index", "params[0]: 1, params[0x1]: 2, params[2]: 3", Rejected("indices")),
        Case(c, "exponent index", "params[0]: 1, params[1e0]: 2, params[2]: 3", Rejected("indices")),
        Case(c, "symbolic index", "params[0]: 1, params[i]: 2, params[2]: 3", Rejected("indices")),
        Case(c, "n-1 index", "params[0]: 1, params[1]: 2, params[n-1]: 3", Rejected("indices")),
        Case(c, "empty index", "params[0]: 1, params[]: 2, params[2]: 3", Rejected("indices")),
        Case(c, "superscript index", "params[0]: 1, params[¹]: 2, params[2]: 3", Rejected("indices")),
        Case(c, "duplicate index", "params[0]: 1, params[1]: 2, params[1]: 3", Rejected("indices")),
        Case(c, "duplicate after a complete vector", "params[0]: 1, params[1]: 2, params[2]: 3, params[1]: 4", Rejected()),
        Case(c, "index 0 restated: a new vector", "params[0]: 5, params[0]: 1, params[1]: 2, params[2]: 3", [1.0, 2.0, 3.0]),
        Case(c, "reversed order", "params[2]: 3, params[1]: 2, params[0]: 1", Rejected("exactly 3 values")),
        Case(c, "swapped", "params[0]: 1, params[2]: 3, params[1]: 2", Rejected("indices")),
        Case(c, "one-based", "params[1]: 1, params[2]: 2, params[3]: 3", Rejected("indices")),
        Case(c, "gap", "params[0]: 1, params[1]: 2, params[3]: 3", Rejected("indices")),
        Case(c, "too many", "params[0]: 1, params[1]: 2, params[2]: 3, params[3]: 4", Rejected("exactly 3 values")),
        Case(c, "too few", "params[0]: 1, params[1]: 2", Rejected("exactly 3 values")),
        Case(c, "spaces inside brackets", "params[ 0 ]: 1, params[ 1 ]: 2, params[ 2 ]: 3", [1.0, 2.0, 3.0]),
        Case(c, "backticked indices", "params[`0`]: 1, params[`1`]: 2, params[`2`]: 3", [1.0, 2.0, 3.0]),
        Case(c, "arabic-indic indices", "params[٠]: 1, params[١]: 2, params[٢]: 3", [1.0, 2.0, 3.0]),
        Case(c, "fullwidth indices", "params[０]: 1, params[１]: 2, params[２]: 3", [1.0, 2.0, 3.0]),
        Case(c, "commentary with a negative index", idx(1, 2, 3) + "\nNote that params[-1]: 3 is the last.", [1.0, 2.0, 3.0]),
        Case(c, "commentary with a huge index", idx(1, 2, 3) + f"\nNever params[{'9' * 5000}]: 1 though.", [1.0, 2.0, 3.0]),
        Case(c, "nested index brackets", "params[[0]]: 1, params[[1]]: 2, params[[2]]: 3", Rejected("no parameter vector")),
    ]


def _unicode() -> list[Case]:
    c = "unicode digits and minus signs"
    return [
        Case(c, "minus sign U+2212", idx("\u22121.5", "\u22122", "\u22120.5"), [-1.5, -2.0, -0.5]),
        Case(c, "en dash", lst("\u20131.5", 2, 3), [-1.5, 2.0, 3.0]),
        Case(c, "fullwidth hyphen-minus", lst("\uff0d1.5", 2, 3), [-1.5, 2.0, 3.0]),
        Case(c, "small hyphen-minus", lst("\ufe631.5", 2, 3), [-1.5, 2.0, 3.0]),
        Case(c, "unicode minus in the exponent", lst("1e\u22121", 2, 3), [0.1, 2.0, 3.0]),
        Case(c, "hyphen U+2010", lst("\u20101.5", 2, 3), Rejected("finite")),
        Case(c, "non-breaking hyphen", lst("\u20111.5", 2, 3), Rejected("finite")),
        Case(c, "em dash", lst("\u20141.5", 2, 3), Rejected("finite")),
        Case(c, "double minus", lst("\u2212\u22121", 2, 3), Rejected("finite")),
        Case(c, "plus then minus", lst("+-1", 2, 3), Rejected("finite")),
        Case(c, "fullwidth digits", lst("\uff11.\uff15", "\uff12", "\uff13"), [1.5, 2.0, 3.0]),
        Case(c, "arabic-indic digits", lst("\u0661.\u0665", "\u0662", "\u0663"), [1.5, 2.0, 3.0]),
        Case(c, "devanagari digits", lst("\u0967.\u096b", "\u0968", "\u0969"), [1.5, 2.0, 3.0]),
        Case(c, "thai digits", idx("\u0e51", "\u0e52", "\u0e53"), [1.0, 2.0, 3.0]),
        Case(c, "arabic decimal separator", lst("\u0661\u066b\u0665", 2, 3), Rejected("finite")),
        Case(c, "fullwidth full stop", lst("\uff11\uff0e\uff15", 2, 3), Rejected("finite")),
        Case(c, "superscript digits", lst("\u00b9", 2, 3), Rejected("finite")),
        Case(c, "circled digit", lst("\u2460", 2, 3), Rejected("finite")),
        Case(c, "roman numeral", lst("\u2163", 2, 3), Rejected("finite")),
        Case(c, "vulgar fraction", lst("\u00bd", 2, 3), Rejected("finite")),
        Case(c, "math bold digits", lst("\U0001d7cf", "\U0001d7d0", 3), [1.0, 2.0, 3.0]),
        Case(c, "fullwidth brackets and colon", "params\uff1a\uff3b1, 2, 3\uff3d", Rejected("no parameter vector")),
        Case(c, "fullwidth commas", lst(1, 2, 3, sep="\uff0c"), Rejected("finite")),
    ]


def _decimal_commas() -> list[Case]:
    c = "decimal commas and thousands separators"
    way = "more than one way"
    grouped = "decimal comma"
    return [
        Case(c, "indexed decimal commas", "params[0]: 0,5, params[1]: 1,5, params[2]: 2,5", Rejected(grouped)),
        Case(c, "indexed one decimal comma", "params[0]: 1, params[1]: 0,5, params[2]: 2", Rejected(grouped)),
        Case(c, "indexed negative decimal comma", "params[0]: -0,5, params[1]: 1, params[2]: 2", Rejected(grouped)),
        Case(c, "indexed decimal comma last", "params[0]: 1, params[1]: 2, params[2]: 2,5", Rejected(grouped)),
        Case(c, "indexed decimal comma, one per line", "params[0] = 0,5\nparams[1] = 1,5\nparams[2] = 2,5", Rejected(grouped)),
        Case(c, "indexed thousands comma", "params[0]: 1,000, params[1]: 2, params[2]: 3", Rejected(grouped), WIDE),
        Case(c, "indexed thousands and decimal", "params[0]: 1,000.5, params[1]: 2, params[2]: 3", Rejected(grouped), WIDE),
        Case(c, "indexed european grouping", "params[0]: 1.000,5, params[1]: 2, params[2]: 3", Rejected(grouped), WIDE),
        Case(c, "indexed space grouping", "params[0]: 1 000, params[1]: 2, params[2]: 3", Rejected(grouped), WIDE),
        Case(
            c, "indexed no-break space grouping", "params[0]: 1\u00a0000, params[1]: 2, params[2]: 3", Rejected(grouped), WIDE
        ),
        Case(c, "indexed thin space grouping", "params[0]: 1\u2009000, params[1]: 2, params[2]: 3", Rejected(grouped), WIDE),
        Case(c, "indexed narrow no-break space", "params[0]: 1\u202f000, params[1]: 2, params[2]: 3", Rejected(grouped), WIDE),
        Case(c, "indexed apostrophe grouping", "params[0]: 1'000, params[1]: 2, params[2]: 3", Rejected("finite"), WIDE),
        Case(c, "indexed two numbers", "params[0]: 1.0 2.0, params[1]: 2, params[2]: 3", Rejected(grouped)),
        Case(c, "indexed quoted decimal comma", 'params[0]: "0,5", params[1]: "1", params[2]: "2"', Rejected(grouped)),
        Case(c, "indexed bold decimal comma", "params[0]: **0,5**, params[1]: 1, params[2]: 2", Rejected(grouped)),
        Case(
            c, "indexed quoted comma and space", "params[0]: '0, 5', params[1]: 1, params[2]: 2", Rejected("without closing")
        ),
        Case(c, "python digit grouping", "params[0]: 1_000, params[1]: -2_000.5, params[2]: 3", [1000.0, -2000.5, 3.0], WIDE),
        Case(c, "list mixed decimal commas", "params: [0,5, 1,5, 2,5]", Rejected(way)),
        Case(c, "list decimal commas, right count if misread", "params: [0,5, 1]", Rejected(way)),
        Case(c, "list decimal commas, two values", "params: [0,5, 1,5]", Rejected(way)),
        Case(c, "list thousands separator", "params: [1,000, 2, 3]", Rejected(way), WIDE),
        Case(c, "list thousands and decimal", "params: [1,000.5, 2]", Rejected(way), WIDE),
        Case(c, "list european grouping", "params: [1.000,5, 2, 3]", Rejected(way), WIDE),
        Case(c, "list thousands compact, right count if misread", "params: [1,000,2]", Rejected(way), WIDE),
        Case(c, "list millions compact", "params: [1,000,000]", Rejected(way), WIDE),
        Case(c, "list leading zero after a comma", "params: [0,05,1]", Rejected(way)),
        Case(c, "list compact decimal commas, wrong count", "params: [0,5,1,5,2,5]", Rejected("exactly 3 values")),
        Case(c, "list space grouping", "params: [1 000, 2, 3]", Rejected("finite"), WIDE),
        Case(c, "list apostrophe grouping", "params: [1'000, 2, 3]", Rejected("finite"), WIDE),
        Case(c, "list dot grouping", "params: [1.000.000, 2, 3]", Rejected("finite"), WIDE),
        Case(c, "list semicolons and decimal commas", "params: [1,5; 2,5; 3,5]", Rejected()),
        Case(c, "list spaces and decimal commas", "params: [0,5 1,5 2,5]", Rejected()),
        Case(c, "list quoted decimal commas", 'params: ["0,5", "1,5", "2,5"]', Rejected(way)),
        Case(c, "json compact quoted decimal commas", '{"params":["0,5","1,5","2,5"]}', Rejected("without closing")),
        Case(c, "json compact quoted, right count if misread", '{"params":["0,5","2"]}', Rejected("without closing")),
        Case(c, "single-quoted decimal commas", "params: ['0,5','2']", Rejected("without closing")),
        Case(c, "bold compact decimal commas", "params: [**0,5**,**1**]", Rejected("without closing")),
        Case(c, "list mixed separators", "params: [1,2, 3]", Rejected(way)),
        Case(c, "list compact", "params: [1,2,3]", [1.0, 2.0, 3.0]),
        Case(c, "list compact decimals", "params: [1.5,0.3,-2.5]", [1.5, 0.3, -2.5]),
        Case(c, "list compact zero", "params: [1,0,0.5]", [1.0, 0.0, 0.5]),
        Case(c, "list compact multiline", "params: [1,2,\n3]", [1.0, 2.0, 3.0]),
        Case(c, "list tabs", "params:\t[1,\t2,\t3]", [1.0, 2.0, 3.0]),
        Case(c, "tabular mixed separators", "params: [0,1, 2,3]", Rejected(way), ACTIONS),
        Case(c, "tabular compact", "params: [0,1,2,3]", [0.0, 1.0, 2.0, 3.0], ACTIONS),
    ]


def _exponents() -> list[Case]:
    c = "exponents"
    return [
        Case(c, "1e0 forms", lst("1e0", "2E0", "-3e+0"), [1.0, 2.0, -3.0]),
        Case(c, "negative exponent", lst("3e-1", "-5E-1", ".5e1"), [0.3, -0.5, 5.0]),
        Case(c, "trailing point mantissa", lst("5.e-1", "1.E0", 0), [0.5, 1.0, 0.0]),
        Case(c, "indexed exponents", idx("1e0", "2.5e0", "-1e-1"), [1.0, 2.5, -0.1]),
        Case(c, "underscore in the exponent", lst("1e1_0", 1, 2), [6.0, 1.0, 2.0]),
        Case(c, "dangling e", lst("1e", 1, 2), Rejected("finite")),
        Case(c, "bare exponent", lst("e5", 1, 2), Rejected("finite")),
        Case(c, "fractional exponent", lst("1e1.5", 1, 2), Rejected("finite")),
        Case(c, "double e", lst("1ee1", 1, 2), Rejected("finite")),
        Case(c, "times ten power", lst("1x10^3", 1, 2), Rejected("finite")),
        Case(c, "python power", lst("10**3", 1, 2), Rejected("finite")),
        Case(c, "caret power", idx("2^3", 1, 2), Rejected("finite")),
        Case(c, "superscript exponent", lst("1e\u00b3", 1, 2), Rejected("finite")),
        Case(c, "hex float", lst("0x1p3", 1, 2), Rejected("finite")),
        Case(c, "fraction", lst("1/2", 1, 2), Rejected("finite")),
        Case(c, "percent", idx("50%", 1, 2), Rejected("finite")),
        Case(c, "approximately", lst("~2", 1, 2), Rejected("finite")),
        Case(c, "plus-minus", lst("2.0\u00b10.1", 1, 2), Rejected("finite")),
    ]


def _non_finite() -> list[Case]:
    c = "NaN and infinity spellings"
    spellings = ["nan", "NaN", "NAN", "-nan", "+nan", "nan.", "`nan`", '"NaN"', "inf", "-inf", "+inf", "Infinity"]
    spellings += ["-Infinity", "INFINITY", "iNfInItY", "inf.", "**inf**"]
    cases = [Case(c, f"list {s}", lst(1, s, 2), Rejected("finite")) for s in spellings]
    cases += [Case(c, f"indexed {s}", idx(s, 1, 2), Rejected("finite")) for s in ("NaN", "-inf", "Infinity")]
    for s in ("\u221e", "-\u221e", "nan(1)", "None", "null", "infinite", "nanx", "NaN%"):
        cases.append(Case(c, f"not a number: {s!a}", lst(1, s, 2), Rejected("finite")))
    cases.append(Case(c, "json NaN", '{"params": [NaN, 1, 2]}', Rejected("finite")))
    return cases


def _brackets() -> list[Case]:
    c = "nested and unbalanced brackets"
    return [
        Case(c, "nested list", "params: [[1, 2, 3]]", Rejected("no parameter vector")),
        Case(c, "inner list", "params: [1, [2], 3]", Rejected("no parameter vector")),
        Case(c, "extra closing bracket", "params: [1, 2, 3]]", [1.0, 2.0, 3.0]),
        Case(c, "extra opening bracket", "params: [[1, 2, 3]", Rejected("no parameter vector")),
        Case(c, "unclosed list", "params: [1, 2, 3", Rejected("no parameter vector")),
        Case(c, "unopened list", "params: 1, 2, 3]", Rejected("no parameter vector")),
        Case(c, "parentheses", "params: (1, 2, 3)", Rejected("no parameter vector")),
        Case(c, "braces", "params: {1, 2, 3}", Rejected("no parameter vector")),
        Case(c, "tuple inside", "params: [1, (2, 3)]", Rejected()),
        Case(c, "bracketed indexed values", "params[0]: [1], params[1]: [2], params[2]: [3]", Rejected("finite")),
        Case(c, "parenthesised indexed values", "params[0]: (1), params[1]: (2), params[2]: (3)", Rejected("finite")),
        Case(c, "unclosed index", "params[0: 1, params[1: 2, params[2: 3", Rejected("no parameter vector")),
        Case(c, "subscript after the list", "params: [1, 2, 3][0]", [1.0, 2.0, 3.0]),
        Case(c, "100k opening brackets", "params: " + "[" * 100_000 + "1, 2, 3" + "]" * 100_000, Rejected()),
        Case(c, "unclosed list then a vector", "params: [9, 9\nparams: [1, 2, 3]", [1.0, 2.0, 3.0]),
    ]


def _json() -> list[Case]:
    c = "JSON variants"
    return [
        Case(c, "json", '{"params": [1, -2.5, 0.3]}', [1.0, -2.5, 0.3]),
        Case(c, "json compact", '{"params":[1,-2.5,0.3]}', [1.0, -2.5, 0.3]),
        Case(c, "json pretty", '{\n  "params": [\n    1,\n    -2.5,\n    0.3\n  ]\n}', [1.0, -2.5, 0.3]),
        Case(c, "json quoted numbers", '{"params": ["1", "-2.5", "0.3"]}', [1.0, -2.5, 0.3]),
        Case(c, "python dict", "{'params': [1, -2.5, 0.3]}", [1.0, -2.5, 0.3]),
        Case(c, "json exponents", '{"params": [1.0e0, 2E0, -3e0]}', [1.0, 2.0, -3.0]),
        Case(c, "json trailing comma", '{"params": [1, 2, 3,]}', [1.0, 2.0, 3.0]),
        Case(c, "json upper-case key", '{"PARAMS": [1, 2, 3]}', [1.0, 2.0, 3.0]),
        Case(c, "json space before colon", '{"params" : [1, 2, 3]}', [1.0, 2.0, 3.0]),
        Case(c, "json in a list", '[{"params": [1, 2, 3]}]', [1.0, 2.0, 3.0]),
        Case(c, "json lines: the last wins", '{"params":[1,2,3]}\n{"params":[4,5,-6]}', [4.0, 5.0, -6.0]),
        Case(c, "json duplicate key: the last wins", '{"params": [1, 2, 3], "params": [4, 5, 6]}', [4.0, 5.0, 6.0]),
        Case(c, "json old_params after", '{"params": [1, 2, 3], "old_params": [0, 0, 0]}', [1.0, 2.0, 3.0]),
        Case(c, "json old_params before", '{"old_params": [0, 0, 0], "params": [1, 2, 3]}', [1.0, 2.0, 3.0]),
        Case(c, "json params_v2 after", '{"params": [1, 2, 3], "params_v2": [0, 0, 0]}', [1.0, 2.0, 3.0]),
        Case(c, "json object by index", '{"params": {"0": 1, "1": 2, "2": 3}}', Rejected("no parameter vector")),
        Case(c, "json indexed keys", '{"params[0]": 1, "params[1]": 2, "params[2]": 3}', Rejected("no parameter vector")),
        Case(c, "json booleans", '{"params": [true, false, null]}', Rejected("finite")),
        Case(c, "json empty list", '{"params": []}', Rejected("exactly 3 values")),
        Case(c, "json string value", '{"params": "1, 2, 3"}', Rejected("no parameter vector")),
        Case(c, "json list in a string", '{"params": "[1, 2, 3]"}', Rejected("no parameter vector")),
        Case(c, "json nested", '{"params": [[1, 2, 3]]}', Rejected("no parameter vector")),
        Case(c, "json escaped quote", '{"params": ["1\\"", 2, 3]}', Rejected("finite")),
        Case(c, "json unbalanced quote", '{"params": ["1, 2, 3]}', Rejected("without closing")),
    ]


def _markdown() -> list[Case]:
    c = "markdown and code fences"
    return [
        Case(c, "code fence", "```\nparams: [1, 2, 3]\n```", [1.0, 2.0, 3.0]),
        Case(c, "python fence", "```python\nparams = [1, 2, 3]\n```", [1.0, 2.0, 3.0]),
        Case(c, "json fence", '```json\n{"params": [1, 2, 3]}\n```', [1.0, 2.0, 3.0]),
        Case(c, "unclosed fence", "```\nparams: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "inline code", "`params: [1, 2, 3]`", [1.0, 2.0, 3.0]),
        Case(c, "bold list", "**params: [1, 2, 3]**", [1.0, 2.0, 3.0]),
        Case(c, "bold indexed line", "**params[0]: 1, params[1]: 2, params[2]: 3**", [1.0, 2.0, 3.0]),
        Case(c, "bold keys", "**params[0]**: 1, **params[1]**: 2, **params[2]**: 3", [1.0, 2.0, 3.0]),
        Case(c, "bold values", "params[0]: **1**, params[1]: **2**, params[2]: **3**", [1.0, 2.0, 3.0]),
        Case(c, "backticked values and period", "params[0]: `1`, params[1]: `2`, params[2]: `3`.", [1.0, 2.0, 3.0]),
        Case(c, "italic values", "params[0]: *1*, params[1]: _2_, params[2]: 3", Rejected("finite")),
        Case(c, "bulleted", "- params[0]: 1\n- params[1]: 2\n- params[2]: 3", [1.0, 2.0, 3.0]),
        Case(c, "numbered list", "1. params[0]: 1\n2. params[1]: 2\n3. params[2]: 3", [1.0, 2.0, 3.0]),
        Case(c, "blockquote", "> params: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "heading", "## Answer\nparams: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "table", "| params[0] | 1 |\n| params[1] | 2 |\n| params[2] | 3 |", Rejected("no parameter vector")),
        Case(c, "escaped brackets", "params\\[0\\]: 1, params\\[1\\]: 2, params\\[2\\]: 3", Rejected("no parameter vector")),
        Case(c, "bold opened, not closed", "params[0]: **1, params[1]: 2, params[2]: 3", Rejected("without closing")),
        Case(c, "strikethrough then answer", "~~params: [9, 9, 9]~~ params: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "latex", "$params = [1, 2, 3]$", [1.0, 2.0, 3.0]),
        Case(c, "latex subscripts", "$params_0 = 1, params_1 = 2, params_2 = 3$", Rejected("no parameter vector")),
    ]


def _harmony() -> list[Case]:
    c = "harmony channel tokens"
    return [
        Case(c, "raw", RAW.format(a="params: [5, 5, 5]", f="params: [1, 2, 3]"), [1.0, 2.0, 3.0]),
        Case(c, "raw, analysis only", "<|channel|>analysis<|message|>params: [1, 2, 3]<|end|>", Rejected("no final")),
        Case(c, "raw, start only", "<|start|>assistant params: [1, 2, 3]", Rejected("no final")),
        Case(
            c,
            "raw, analysis after the final",
            "<|channel|>final<|message|>params: [1, 2, 3]<|end|><|start|>assistant<|channel|>analysis<|message|>"
            "params: [4, 4, 4]<|end|>",
            [1.0, 2.0, 3.0],
        ),
        Case(
            c,
            "raw, two finals: the last wins",
            "<|channel|>final<|message|>params: [4, 4, 4]<|end|><|start|>assistant<|channel|>final<|message|>"
            "params: [1, 2, 3]<|return|>",
            [1.0, 2.0, 3.0],
        ),
        Case(
            c,
            "raw, constrained json",
            '<|channel|>final <|constrain|>json<|message|>{"params":[1,2,3]}<|call|>',
            [1.0, 2.0, 3.0],
        ),
        Case(c, "raw, spaced channel", "<|channel|> final <|message|>params: [1, 2, 3]<|return|>", [1.0, 2.0, 3.0]),
        Case(c, "raw, empty final", "<|channel|>final<|message|><|return|>", Rejected("no parameter vector")),
        Case(c, "raw, special inside the list", "<|channel|>final<|message|>params: [1, 2<|end|>, 3]", Rejected()),
        # an unended final channel is a reply cut off at the token limit, here before its first line ended
        Case(c, "raw, finals repeated 100k times", "<|channel|>final<|message|>" * 100_000, Rejected("cut off")),
        Case(
            c,
            "raw, final then 100k channels",
            RAW.format(a="x", f="params: [1, 2, 3]") + "<|channel|>" * 100_000,
            [1.0, 2.0, 3.0],
        ),
        Case(c, "flattened", "analysisI think params: [5, 5, 5]assistantfinalparams: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "flattened, trailing specials", "assistantfinalparams: [1, 2, 3]<|return|> <|end|>\n", [1.0, 2.0, 3.0]),
        Case(c, "flattened, analysis only", "analysisI think params: [1, 2, 3] would", Rejected("no final")),
        Case(c, "flattened, 100k trailing specials", "assistantfinal" + "<|end|> " * 100_000, Rejected("no parameter vector")),
        Case(
            c, "flattened, vector then 100k specials", "assistantfinalparams: [1, 2, 3]" + "<|end|>" * 100_000, [1.0, 2.0, 3.0]
        ),
        Case(
            c,
            "flattened, 100k specials before the vector",
            "assistantfinal" + "<|end|> " * 100_000 + idx(1, 2, 3),
            [1.0, 2.0, 3.0],
        ),
        Case(c, "flattened, 100k specials then a word", "assistantfinal" + "<|return|>\n" * 100_000 + "done", Rejected()),
        Case(c, "endoftext after a plain reply", "params: [1, 2, 3]<|endoftext|>", [1.0, 2.0, 3.0]),
        Case(c, "lookalike tokens are plain text", "<\uff5cchannel\uff5c>final params: [1, 2, 3]", [1.0, 2.0, 3.0]),
    ]


def _control() -> list[Case]:
    c = "control characters and null bytes"
    return [
        Case(c, "null byte in a value", "params: [1,\x00 2, 3]", Rejected("finite")),
        Case(c, "null byte after a value", "params[0]: 1\x00, params[1]: 2, params[2]: 3", Rejected("finite")),
        Case(c, "null byte before the list", "params:\x00[1, 2, 3]", Rejected("no parameter vector")),
        Case(c, "null byte in the key", "par\x00ams: [1, 2, 3]", Rejected("no parameter vector")),
        Case(c, "null bytes around", "\x00\x00params: [1, 2, 3]\x00", [1.0, 2.0, 3.0]),
        Case(c, "only null bytes", "\x00" * 1000, Rejected("no parameter vector")),
        Case(c, "CRLF lines", "params[0]: 1\r\nparams[1]: 2\r\nparams[2]: 3\r\n", [1.0, 2.0, 3.0]),
        Case(c, "vertical tab and form feed", "params: [1,\x0b2,\x0c3]", [1.0, 2.0, 3.0]),
        Case(c, "zero-width space in a value", "params: [1, \u200b2, 3]", Rejected("finite")),
        Case(c, "zero-width joiner in the key", "par\u200dams: [1, 2, 3]", Rejected("no parameter vector")),
        Case(c, "byte order mark", "\ufeffparams: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "lone surrogate", "params: [1, \ud800, 3]", Rejected("finite")),
        Case(c, "right-to-left override", "params: [1, \u202e2, 3]", Rejected("finite")),
        Case(c, "DEL", "params: [1, 2\x7f, 3]", Rejected("finite")),
        Case(c, "escape sequence inside a value", "params: [1, \x1b[31m2, 3]", Rejected()),
        Case(c, "ANSI colour glued to the key", "\x1b[1mparams: [1, 2, 3]\x1b[0m", Rejected("no parameter vector")),
        Case(c, "bell and backspace", "params\x07: [1, 2\x08, 3]", Rejected()),
        Case(c, "1000 control characters in a value", "params: [1, " + "".join(map(chr, range(32))) * 31 + ", 3]", Rejected()),
    ]


def _long() -> list[Case]:
    c = "extremely long lines"
    return [
        Case(c, "1 MB line before the vector", "a" * MB + " params: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "1 MB line after the vector", "params: [1, 2, 3] " + "a" * MB, [1.0, 2.0, 3.0]),
        Case(c, "1 MB of spaces between values", "params: [1," + " " * MB + "2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "1 MB of spaces in an index", "params[" + " " * MB + "0]: 1, params[1]: 2, params[2]: 3", [1.0, 2.0, 3.0]),
        Case(
            c, "1 MB of spaces before the colon", "params[0]" + " " * MB + ": 1, params[1]: 2, params[2]: 3", [1.0, 2.0, 3.0]
        ),
        Case(c, "1 MB value token", lst("x" * MB, 2, 3), Rejected("finite")),
        Case(c, "1 MB index", "params[" + "x" * MB + "]: 1, params[1]: 2, params[2]: 3", Rejected("indices")),
        Case(c, "1 MB unclosed index", "params[" + "1" * MB, Rejected("no parameter vector")),
        Case(c, "1 MB unclosed list", "params: [" + "1" * MB, Rejected("no parameter vector")),
        Case(c, "1 MB inside a list", "params: [" + "1 " * (MB // 2) + "]", Rejected()),
        Case(c, "5 MB reply, vector at the end", "blah " * MB + "params: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "5 MB reply, no vector", "params " * (5 * MB // 7), Rejected("no parameter vector")),
        Case(c, "10k values", "params: [" + ", ".join(["1"] * 10_000) + "]", Rejected("exactly 3 values")),
        Case(c, "1M values", "params: [" + ",".join(["1"] * MB) + "]", Rejected("exactly 3 values")),
    ]


def _repeated() -> list[Case]:
    c = "repeated fragments"
    n = 200_000
    return [
        Case(c, "params[1]: 1 repeated", "params[1]: 1 " * n, Rejected("indices")),
        Case(c, "params[-1]: 1 repeated", "params[-1]: 1 " * n, Rejected("indices")),
        Case(c, "params[0]: 1, repeated", "params[0]: 1, " * n, Rejected("exactly 3 values")),
        Case(c, "params[0]: 0,5 repeated", "params[0]: 0,5 " * n, Rejected()),
        Case(c, "5000-digit index repeated", f"params[{'9' * 5000}]: 1 " * 100, Rejected("indices")),
        Case(c, "indexed vector repeated", "params[0]: 1, params[1]: 2, params[2]: 3 " * (n // 4), [1.0, 2.0, 3.0]),
        Case(c, "list repeated", "params: [1, 2, 3] " * n, [1.0, 2.0, 3.0]),
        Case(c, "list opening repeated", "params: [" * n, Rejected("no parameter vector")),
        Case(c, "index opening repeated", "params[" * n, Rejected("no parameter vector")),
        Case(c, "index closing repeated", "]: 1" * n, Rejected("no parameter vector")),
        Case(c, "decimal commas repeated in a list", "params: [" + "0,5, " * n + "]", Rejected("more than one way")),
        Case(c, "nan repeated in a list", "params: [" + "nan, " * n + "]", Rejected("finite")),
        Case(c, "empty slots repeated", "params: [" + "," * n + "]", Rejected("empty slot")),
        Case(c, "x repeated in a value", lst("x" * 600_000, 1, 2), Rejected("finite")),
        Case(c, "analysis repeated", "analysis" * n, Rejected("no final")),
        Case(c, "assistantfinal repeated", "assistantfinal" * n, Rejected("no parameter vector")),
        Case(c, "commentary repeated after a vector", idx(1, 2, 3) + " and params[1]: 2" * n, [1.0, 2.0, 3.0]),
    ]


def _empty() -> list[Case]:
    c = "empty and whitespace replies"
    return [
        Case(c, "empty", "", Rejected("empty")),
        Case(c, "space", " ", Rejected("empty")),
        Case(c, "newlines", "\n\n\n", Rejected("empty")),
        Case(c, "tab", "\t", Rejected("empty")),
        Case(c, "ideographic space", "\u3000", Rejected("empty")),
        Case(c, "no-break spaces", "\u00a0" * 10, Rejected("empty")),
        Case(c, "1 MB of whitespace", " \n\t" * (MB // 3), Rejected("empty")),
        Case(c, "zero-width space", "\u200b", Rejected("no parameter vector")),
        Case(c, "empty list", "params: []", Rejected("exactly 3 values")),
        Case(c, "blank list", "params: [ ]", Rejected("exactly 3 values")),
        Case(c, "comma only", "params: [,]", Rejected("empty slot")),
        Case(c, "key only", "params:", Rejected("no parameter vector")),
        Case(c, "empty values", "params[0]: , params[1]: , params[2]: ", Rejected("no parameter vector")),
        Case(c, "one empty value", "params[0]: , params[1]: 2, params[2]: 3", Rejected("indices")),
        Case(c, "value on the next key", "params[0]:\nparams[1]: 2\nparams[2]: 3", Rejected()),
    ]


def _several() -> list[Case]:
    c = "several vectors"
    return [
        Case(c, "list then list", "params: [5, 5, 5]\nparams: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "indexed then list", idx(5, 5, 5) + "\nparams: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "list then indexed", "params: [5, 5, 5]\n" + idx(1, 2, 3), [1.0, 2.0, 3.0]),
        Case(c, "indexed then indexed", idx(5, 5, 5) + "\nThen " + idx(1, 2, 3), [1.0, 2.0, 3.0]),
        Case(c, "three lists", "params: [4, 4, 4] params: [5, 5, 5] params: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "in prose", "I considered params: [5, 5, 5] but params: [1, 2, 3] is better.", [1.0, 2.0, 3.0]),
        Case(
            c,
            "an invalid last vector is not replaced by an earlier one",
            "params: [1, 2, 3]\nparams: [nan, 1, 2]",
            Rejected("finite"),
        ),
        Case(
            c,
            "a short last vector is not replaced by an earlier one",
            "params: [1, 2, 3]\nparams: [1, 2]",
            Rejected("exactly"),
        ),
        Case(c, "a single index after a list", "params: [1, 2, 3]\nparams[1]: 5", Rejected()),
        Case(c, "old_params after", "params: [1, 2, 3]\nold_params: [0, 0, 0]", [1.0, 2.0, 3.0]),
        Case(c, "my_params after", idx(1, 2, 3) + "\nmy_params[0]: 0, my_params[1]: 0, my_params[2]: 0", [1.0, 2.0, 3.0]),
        Case(c, "hyperparams after", "params: [1, 2, 3]\nhyperparams: [0, 0, 0]", [1.0, 2.0, 3.0]),
        Case(c, "only old_params", "old_params: [1, 2, 3]", Rejected("no parameter vector")),
        Case(c, "only params_v2", "params_v2: [1, 2, 3]", Rejected("no parameter vector")),
        Case(c, "parameters is another word", "parameters: [1, 2, 3]", Rejected("no parameter vector")),
        Case(c, "upper case", "PARAMS: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "dotted owner", "policy.params: [1, 2, 3]", [1.0, 2.0, 3.0]),
        Case(c, "a vector per line, the last partial", "params: [1, 2, 3]\nparams: [4, 5", [1.0, 2.0, 3.0]),
        Case(c, "tabular: the last wins", "params: [3, 3, 3, 3]\nparams: [0, 1, 2, 3]", [0.0, 1.0, 2.0, 3.0], ACTIONS),
        Case(c, "tabular: an action outside the set", "params: [0, 1, 2, 4]", Rejected("allowed values"), ACTIONS),
    ]


CORPUS: list[Case] = [
    *_numbers(),
    *_indices(),
    *_unicode(),
    *_decimal_commas(),
    *_exponents(),
    *_non_finite(),
    *_brackets(),
    *_json(),
    *_markdown(),
    *_harmony(),
    *_control(),
    *_long(),
    *_repeated(),
    *_empty(),
    *_several(),
]
"""Every hostile reply; ``len(CORPUS)`` is the figure docs/reliability.md cites."""

CATEGORIES = Counter(case.category for case in CORPUS)
"""How many cases each category holds."""

IDS = [f"{case.category}: {case.name}" for case in CORPUS]


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging) when the block runs longer than ``seconds``: a quadratic regex on a reply of
    megabytes would run for many minutes or hours. SIGALRM interrupts a running regular expression."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"parsing took more than {seconds:.1f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def budget(reply: str) -> float:
    return BASE_SECONDS + SECONDS_PER_MB * len(reply) / MB


def assert_bounded_reason(reason: str | None) -> None:
    assert isinstance(reason, str) and reason, "a rejection must say why"
    assert len(reason) <= MAX_REASON_CHARS, f"reason of {len(reason)} characters: {reason[:200]!r}..."
    assert reason.isprintable(), f"unescaped control characters in {reason!r}"
    reason.encode("utf-8")  # no lone surrogate: it can be written to history.json and sent to a server


def check_result(case: Case, result: ParseResult) -> None:
    assert isinstance(result, ParseResult)
    if isinstance(case.expected, Rejected):
        assert not result.ok, f"read as {result.params}, expected a rejection"
        assert result.params is None
        assert_bounded_reason(result.error)
        if case.expected.because is not None:
            assert case.expected.because in result.error  # type: ignore[operator]
    else:
        assert result.ok, f"rejected ({result.error}), expected {case.expected}"
        assert result.error is None
        np.testing.assert_array_equal(result.params, case.expected)  # exactly, never a different vector
        assert all(len(note) <= MAX_REASON_CHARS for note in result.notes)


def test_corpus_size_and_categories() -> None:
    assert len(CORPUS) >= 250
    assert len(CATEGORIES) == 15 and min(CATEGORIES.values()) >= 14
    assert len(set(IDS)) == len(IDS)
    accepted = sum(not isinstance(case.expected, Rejected) for case in CORPUS)
    assert 0 < accepted < len(CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_hostile_reply_is_read_exactly_or_rejected_with_a_bounded_reason(case: Case) -> None:
    with time_limit(budget(case.reply)):
        result = parse_params(case.reply, case.space, "last_vector")  # the reading the corpus was written for
    check_result(case, result)


@pytest.mark.parametrize("reading", ["first", "last", "first_line"])
@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_hostile_reply_under_the_reference_readings(case: Case, reading: str) -> None:
    """The reference's readings (cut-off replies read, not rejected) keep the parser's guarantees on the whole corpus:
    nothing raised, linear time, a bounded reason, and an accepted vector inside the space; a reply the corpus reads as
    exactly one vector (a single one, not cut off) is read as that vector by each of them."""
    with time_limit(budget(case.reply)):
        result = parse_params(case.reply, case.space, reading)  # type: ignore[arg-type]
    assert isinstance(result, ParseResult)
    if not result.ok:
        assert_bounded_reason(result.error)
        return
    assert result.params is not None and result.params.shape == (case.space.size,)
    if case.space.values is not None:
        assert set(result.params.tolist()) <= set(case.space.values)
    else:
        assert np.all(result.params >= case.space.low) and np.all(result.params <= case.space.high)


def retry(reason: str) -> Message:
    return {"role": "user", "content": f"Your reply could not be used: {reason}."}


@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_hostile_reply_through_ask_for_params(case: Case) -> None:
    """What is kept (``LLMCall.error``, ``Answer.failures``) and what is sent back (the re-ask) stays bounded."""
    llm = ScriptedLLM([case.reply])
    prompt = [{"role": "user", "content": "propose"}]
    with time_limit(2 * budget(case.reply)):
        answer = ask_for_params(
            llm, prompt, case.space, role="search", retry_message=retry, max_retries=1, reading="last_vector"
        )
    if isinstance(case.expected, Rejected):
        assert answer.params is None and len(answer.failures) == 2
        for failure in answer.failures:
            assert_bounded_reason(failure)
        echoed, reask = llm.calls[1][-2:]
        assert len(echoed["content"]) <= MAX_ECHOED_REPLY_CHARS
        assert len(reask["content"]) <= len(retry("")["content"]) + MAX_REASON_CHARS
    else:
        assert answer.failures == [] and len(llm.calls) == 1
        np.testing.assert_array_equal(answer.params, case.expected)


@pytest.mark.slow
@pytest.mark.parametrize(
    "fragment",
    [
        "params[1]: 1 ",
        "params[0]: 1, ",
        "params: [",
        "params[",
        "params ",
        "params:" + " " * 50,
        "params[0]" + " " * 50,
        "0,5, ",
        "<|end|> ",
        "<|channel|>final<|message|>",
        "<|channel|> final <|constrain|>",
        "assistantfinal<|end|>",
        "analysis",
        "]: 1",
        "params[-1]: x ",
        "**",
        "\x00",
    ],
)
def test_parsing_time_of_a_1_mb_reply_is_linear(fragment: str) -> None:
    """1 MB of one fragment repeated (the worst case of each regular expression) parses in seconds; a quadratic
    expression would take a quarter of an hour or more (see :data:`SECONDS_PER_MB`), which the time limit turns into a
    failure. The corpus's 5 MB replies check the same at the larger size for two fragments."""
    reply = fragment * (MB // len(fragment))
    for text in (reply, "assistantfinal" + reply, lst(reply, 1, 2), "params[0]: " + reply):
        start = time.perf_counter()
        for reading in READINGS:
            with time_limit(budget(text)):
                result = parse_params(text, SPACE, reading)
            elapsed = time.perf_counter() - start
            assert elapsed < len(READINGS) * budget(text)
            assert isinstance(result, ParseResult)
            if not result.ok:
                assert_bounded_reason(result.error)


def test_a_long_reason_from_a_check_is_bounded_too() -> None:
    """``ask_for_params`` bounds the reasons of the extra check (a caller's), not only the parser's."""
    llm = ScriptedLLM(["params: [1, 2]"])
    space = ParameterSpace(2, low=-5, high=5, decimals=1)
    answer = ask_for_params(
        llm, [{"role": "user", "content": "x"}], space, role="search", retry_message=retry, check=lambda p: "no " * 300_000
    )
    assert answer.params is None and len(answer.failures) == 2
    for failure in answer.failures:
        assert_bounded_reason(failure)
        assert failure.endswith("characters, cut]")
    assert len(llm.calls[1][-1]["content"]) <= len(retry("")["content"]) + MAX_REASON_CHARS


@pytest.mark.parametrize("length", [0, 1, MAX_REASON_CHARS - 1, MAX_REASON_CHARS, MAX_REASON_CHARS + 1, 10 * MB])
def test_bound_reason(length: int) -> None:
    reason = "r" * length
    bounded = bound_reason(reason)
    assert len(bounded) <= MAX_REASON_CHARS
    if length <= MAX_REASON_CHARS:
        assert bounded == reason
    else:
        assert bounded.startswith("r" * 100) and bounded.endswith(f"[... {length} characters, cut]")


def test_learn_keeps_the_history_small_on_a_pathological_reply(make_r2po) -> None:
    """The issue's 600 KB reason, smaller: a short fragment repeated 50k times, re-asked and fallen back from, leaves
    bounded reasons in the history (and hence history.json and model.zip)."""
    llm = ScriptedLLM(["params[1]: 1 " * 50_000])  # a 150 KB reason before the bound
    model = make_r2po(
        BanditEnv(), llm=llm, n_eval_episodes=1, warmup_episodes=1, max_episodes=3, seed=0,
        on_unusable_reply="reask", reject_duplicates=True,
    )  # fmt: skip
    model.learn(UNTIL_BUDGET)
    failures = [f for record in model.history if record["kind"] != "warmup" for f in record["search"]["failures"]]
    assert len(failures) >= 2
    for failure in failures:
        assert_bounded_reason(failure)
    assert len(json.dumps(model.history)) < 20_000
    assert all(len(call[-1]["content"]) < 5_000 for call in llm.calls)


# -- generated replies: a known vector written in hostile ways is read as itself or rejected, never as another --

WRITINGS = {
    "plain": lambda s: s,
    "decimal comma": lambda s: s.replace(".", ","),
    "thousands comma": lambda s: _group(s, ","),
    "thousands space": lambda s: _group(s, " "),
    "thousands no-break space": lambda s: _group(s, "\u00a0"),
    "european": lambda s: _group(s.replace(".", "#"), ".").replace("#", ","),
    "unicode minus": lambda s: s.replace("-", "\u2212"),
    "fullwidth digits": lambda s: s.translate(str.maketrans("0123456789", "０１２３４５６７８９")),
    "arabic-indic digits": lambda s: s.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")),
    "quoted": lambda s: f'"{s}"',
    "quoted decimal comma": lambda s: '"' + s.replace(".", ",") + '"',
    "bold": lambda s: f"**{s}**",
    "backticks": lambda s: f"`{s}`",
    "with a unit": lambda s: f"{s} N",
}


def _group(number: str, separator: str) -> str:
    sign, digits = ("-", number[1:]) if number.startswith("-") else ("", number)
    whole, dot, fraction = digits.partition(".")
    groups = []
    while len(whole) > 3:
        whole, groups = whole[:-3], [whole[-3:], *groups]
    return sign + separator.join([whole, *groups]) + dot + fraction


def _write(values: list[str], style: str, separator: str) -> str:
    if style == "indexed":
        return separator.join(f"params[{i}]: {v}" for i, v in enumerate(values))
    if style == "json":
        return '{"params": [' + separator.join(values) + "]}"
    return "params: [" + separator.join(values) + "]"


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.integers(-9_999_999, 9_999_999), min_size=3, max_size=3),
    st.lists(st.sampled_from(sorted(WRITINGS)), min_size=3, max_size=3),
    st.sampled_from(["indexed", "list", "json"]),
    st.sampled_from([", ", ",", " , ", ",\n", "; "]),
)
def test_a_vector_written_in_hostile_ways_is_read_as_itself_or_rejected(
    tenths: list[int], writings: list[str], style: str, separator: str
) -> None:
    intended = [t / 10 for t in tenths]
    values = [WRITINGS[w](WIDE.format_value(v)) for w, v in zip(writings, intended, strict=True)]
    reply = _write(values, style, separator)
    result = parse_params(reply, WIDE)
    if result.ok:
        np.testing.assert_array_equal(result.params, intended)
    else:
        assert_bounded_reason(result.error)


FRAGMENTS = [
    "params", "PARAMS", "old_params", "[", "]", "[0]", "[1]", "[2]", "[-1]", "[" + "9" * 5000 + "]", ":", "=", " ",
    ", ", ",", ";", "\n", "0", "1", "5", "-", "\u2212", ".", "0,5", "1,000", "1 000", "e", "e309", "nan", "inf",
    "٣", "２", '"', "'", "`", "**", "{", "}", "<|channel|>final<|message|>", "<|end|>", "<|return|>",
    "<|channel|>analysis<|message|>", "assistantfinal", "analysis", "\x00", "\x1b", "\u200b", "\ud800", "x" * 1000,
    "9" * 5000,
]  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40))
def test_any_assembly_of_hostile_fragments_never_crashes(fragments: list[str]) -> None:
    reply = "".join(fragments)
    with time_limit(budget(reply)):
        result = parse_params(reply, SPACE)
    assert isinstance(result, ParseResult)
    if result.ok:
        assert result.params.shape == (3,) and np.all(np.abs(result.params) <= 6)
    else:
        assert_bounded_reason(result.error)
