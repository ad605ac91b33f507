"""Read a parameter vector out of an LLM reply. The reply is parsed, never executed.

Accepted, anywhere in the reply (for gpt-oss, in the final channel):

- ``params[0]: v, params[1]: v, ..., params[n-1]: v`` (``=`` also accepted instead of ``:``);
- ``params: [v0, v1, ..., v(n-1)]`` (also as JSON, ``{"params": [...]}``, with numbers or quoted numbers).

Markdown emphasis or backticks around ``params[i]`` or a value are ignored.

When the reply holds several vectors, the last one wins (models often restate their answer, and an
echoed prompt comes before the answer). A value is what Python's ``float()`` accepts after mapping the
Unicode minus sign to ``-``; NaN and infinities are rejected. Indices must be exactly ``0..n-1`` in
order. The vector is then made legal by :meth:`ParameterSpace.project` (clip and round, or check the
action set).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from sb3_r2po.common.parameters import InvalidParameters, ParameterSpace
from sb3_r2po.llm.harmony import final_channel

_INDEXED = re.compile(r"params\s*\[\s*(\d+)\s*\][*`\s]*[:=]\s*([^\s,;\]\)]+)", re.I)
_LISTED = re.compile(r"params[\"'*`]*\s*[:=]\s*\[([^\[\]]*)\]", re.I)
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"})


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
    """Convert one value token; raises ``ValueError`` for anything that is not a finite number."""
    text = token.strip().strip("\"'`*").translate(_MINUS_SIGNS)
    value = float(text)
    if not np.isfinite(value):
        raise ValueError(f"{token!r} is not a finite number")
    return value


def _indexed_blocks(text: str) -> list[tuple[int, list[tuple[int, str]]]]:
    """Group ``params[i]: v`` matches into blocks, a new block starting at every index 0."""
    blocks: list[tuple[int, list[tuple[int, str]]]] = []
    for match in _INDEXED.finditer(text):
        index = int(match.group(1))
        if index == 0 or not blocks:
            blocks.append((match.start(), []))
        blocks[-1][1].append((index, match.group(2)))
    return blocks


def _candidates(text: str) -> list[tuple[int, list[str] | str]]:
    """All vectors in the text as (position, value tokens or an error), in order of position."""
    found: list[tuple[int, list[str] | str]] = []
    for position, entries in _indexed_blocks(text):
        indices = [i for i, _ in entries]
        if indices != list(range(len(indices))):
            found.append(
                (position, f"the indices must be params[0], params[1], ... in order without gaps or repeats, got {indices}")
            )
        else:
            found.append((position, [v for _, v in entries]))
    for match in _LISTED.finditer(text):
        tokens = [t for t in match.group(1).split(",") if t.strip()]
        found.append((match.start(), tokens))
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
        return ParseResult(None, "the reply has no final answer (no final channel after the analysis)")
    found = _candidates(text)
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
