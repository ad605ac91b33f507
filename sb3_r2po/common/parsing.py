"""Read a parameter vector out of an LLM reply. The reply is parsed, never executed.

Accepted, anywhere in the reply (for gpt-oss, in the final channel):

- ``params[0]: v, params[1]: v, ..., params[n-1]: v`` (``=`` also accepted instead of ``:``);
- ``params: [v0, v1, ..., v(n-1)]`` (also as JSON, ``{"params": [...]}``, with numbers or quoted numbers).

Markdown emphasis or backticks around ``params[i]`` or a value are ignored.

When the reply holds several vectors, the last one wins (models often restate their answer, and an
echoed prompt comes before the answer). An indexed vector starts at every ``params[0]``; its indices must
be exactly ``0..n-1`` in order, except that once a complete run ``0..n-1`` is written, later mentions
separated from it by words (commentary such as ``Note that params[1]: 2.0 matters most``) are ignored. A
list may end with one trailing comma; an empty slot elsewhere (``[1, , 2]``) is rejected, as dropping it
would shift the later values. A value is what Python's ``float()`` accepts after mapping the Unicode minus
sign to ``-`` and dropping one sentence-ending period (``3.0.``). Literal NaN and infinities are rejected;
a finite-looking literal too large for a float (``1e309``, a 400-digit integer) is out of range like
``1e308``, and is clipped to the bounds. The vector is then made legal by :meth:`ParameterSpace.project`
(clip and round, or check the action set).

A reply without a complete final answer is rejected: harmony output without a final channel
(:func:`~sb3_r2po.common.replies.final_channel`), which is also what the backends return for a reply cut off at
the token limit.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass

import numpy as np

from sb3_r2po.common.parameters import InvalidParameters, ParameterSpace
from sb3_r2po.common.replies import final_channel

_INDEXED = re.compile(r"params\s*\[\s*(\d+)\s*\][*`\s]*[:=]\s*([^\s,;\]\)]+)", re.I)
_LISTED = re.compile(r"params[\"'*`]*\s*[:=]\s*\[([^\[\]]*)\]", re.I)
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"})
_QUOTES = "\"'`*"
_WORD = re.compile(r"[^\W\d_]{2,}")

NO_FINAL_ANSWER = "the reply has no complete final answer (no final channel, or the reply was cut off at the token limit)"
"""The reason given for a reply without a final answer."""


@dataclass(frozen=True)
class ParseResult:
    """
    The outcome of :func:`parse_params`.

    :param params: The legal vector, or ``None`` when the reply could not be used.
    :param error: Why the reply could not be used (shown to the LLM on a retry and kept in the history).
    :param notes: Values that were clipped or rounded.
    """

    params: np.ndarray | None
    error: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.params is not None


def to_number(token: str) -> float:
    """
    Convert one value token (quotes, backticks, emphasis and one sentence-ending period are dropped).

    A finite-looking literal too large for a float (``1e309``) becomes the largest float of its sign: out of
    range, so that :meth:`ParameterSpace.project` clips it to the bounds.

    :param token: The value as written in the reply.
    :return: The number.
    :raises ValueError: for anything that is not a number, and for literal NaN and infinities.
    """
    text = token.strip().strip(_QUOTES).translate(_MINUS_SIGNS)
    if len(text) > 1 and text.endswith("."):
        text = text[:-1].strip(_QUOTES)
    value = float(text)
    if math.isinf(value) and not any(word in text.lower() for word in ("inf", "nan")):
        return math.copysign(sys.float_info.max, value)  # overflow of a finite literal
    if not math.isfinite(value):
        raise ValueError(f"{token!r} is not a finite number")
    return value


def _indexed_blocks(text: str) -> list[tuple[int, list[re.Match[str]]]]:
    """Group ``params[i]: v`` matches into blocks, a new block starting at every index 0."""
    blocks: list[tuple[int, list[re.Match[str]]]] = []
    for match in _INDEXED.finditer(text):
        if int(match.group(1)) == 0 or not blocks:
            blocks.append((match.start(), []))
        blocks[-1][1].append(match)
    return blocks


def _indexed_vector(text: str, entries: list[re.Match[str]], size: int) -> list[str] | str:
    """The value tokens of one block of ``params[i]: v`` matches, or why the block is not a vector."""
    indices = [int(m.group(1)) for m in entries]
    run = 0
    while run < len(indices) and indices[run] == run:
        run += 1
    if run < len(indices) and run == size and _WORD.search(text[entries[run - 1].end() : entries[run].start()]):
        entries = entries[:run]  # a complete vector, then commentary mentioning single values
    elif run < len(indices):
        return f"the indices must be params[0], params[1], ... in order without gaps or repeats, got {indices}"
    return [m.group(2) for m in entries]


def _listed_vector(inner: str) -> list[str] | str:
    """The value tokens of the inside of ``params: [...]``, or why it is not a vector."""
    tokens = inner.split(",")
    if not tokens[-1].strip():
        tokens.pop()  # one trailing comma, or an empty list
    empty = [i for i, token in enumerate(tokens) if not token.strip()]
    if empty:
        return f"the list has an empty slot at position {empty[0]} (two commas with no value between them); write every value"
    return tokens


def _candidates(text: str, size: int) -> list[tuple[int, list[str] | str]]:
    """All vectors in the text as (position, value tokens or an error), in order of position."""
    found: list[tuple[int, list[str] | str]] = []
    for position, entries in _indexed_blocks(text):
        found.append((position, _indexed_vector(text, entries, size)))
    for match in _LISTED.finditer(text):
        found.append((match.start(), _listed_vector(match.group(1))))
    return sorted(found, key=lambda item: item[0])


def parse_params(reply: str, space: ParameterSpace) -> ParseResult:
    """
    Parse a reply into a legal parameter vector for ``space``.

    :param reply: The raw reply text.
    :param space: The parameter space (count, bounds and precision, or action set).
    :return: The vector, or the reason it could not be read.
    """
    if not isinstance(reply, str) or not reply.strip():
        return ParseResult(None, "the reply was empty")
    text = final_channel(reply)
    if text is None:
        return ParseResult(None, NO_FINAL_ANSWER)
    found = _candidates(text, space.size)
    if not found:
        return ParseResult(
            None, f"no parameter vector found; expected one line with all {space.size} values in the reply format"
        )
    _, last = found[-1]
    if isinstance(last, str):
        return ParseResult(None, last)
    try:
        values = [to_number(token) for token in last]
    except ValueError as exc:
        return ParseResult(None, f"a value could not be read as a finite number: {exc}")
    try:
        projection = space.project(np.array(values, dtype=np.float64))
    except InvalidParameters as exc:
        return ParseResult(None, str(exc))
    return ParseResult(projection.params, None, projection.notes)
