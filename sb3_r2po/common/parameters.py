"""The parameter space of a compact policy: what the LLM may propose, how a vector is written, how a reply is read
back into one (:func:`parse_params`; parsed, never executed) and made legal (:meth:`ParameterSpace.project`); the
reply grammar: the Policies page of the documentation, "Reading a reply".
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

ReplyStyle = Literal["indexed", "list"]
"""How a vector is written: ``"indexed"`` (``params[0]: v0, params[1]: v1, ...``) or ``"list"`` (``params: [v0, v1, ...]``)."""

REPLY_STYLES: tuple[str, ...] = ("indexed", "list")


@dataclass(frozen=True)
class Projection:
    """A proposal made legal by :meth:`ParameterSpace.project`: the vector (float64), and a note per value clipped or
    rounded, for the logs."""

    params: np.ndarray
    notes: tuple[str, ...] = ()


class InvalidParameters(ValueError):
    """A proposal that cannot be made legal (wrong count, not finite, not in the action set)."""


@dataclass(frozen=True)
class ParameterSpace:
    """The flat parameter vector of a policy as the LLM sees it: a range and a precision, or a set of allowed values.

    :param size: Number of parameters.
    :param low: Lower bound of every parameter (continuous spaces).
    :param high: Upper bound of every parameter (continuous spaces).
    :param decimals: Number of decimals kept after rounding (continuous spaces).
    :param values: The allowed values (discrete spaces), e.g. ``(0, 1, 2, 3)`` for four actions.
    :param init_std: Standard deviation of a random candidate's values (:meth:`sample`; continuous spaces).
    """

    size: int
    low: float = -6.0
    high: float = 6.0
    decimals: int = 1
    values: tuple[int, ...] | None = None
    init_std: float = 3.0

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"A parameter space needs at least one parameter, got size={self.size}")
        if self.values is not None:
            if len(self.values) == 0:
                raise ValueError("A discrete parameter space needs at least one allowed value")
            return
        if not (np.isfinite(self.low) and np.isfinite(self.high)):
            raise ValueError(f"Parameter bounds must be finite, got ({self.low}, {self.high})")
        if not self.low < self.high:
            raise ValueError(f"Parameter bounds are empty or reversed: low={self.low} must be < high={self.high}")
        if self.decimals < 0:
            raise ValueError(f"decimals must be >= 0, got {self.decimals}")
        if not (np.isfinite(self.init_std) and self.init_std > 0):
            raise ValueError(f"init_std must be a finite number > 0, got {self.init_std}")
        grid_low, grid_high = self.grid_bounds()
        if grid_low > grid_high:
            raise ValueError(
                f"No value with {self.decimals} decimal(s) lies in [{self.low}, {self.high}]; "
                "widen the bounds or raise decimals"
            )

    def grid_bounds(self) -> tuple[float, float]:
        """The smallest and the largest value with ``decimals`` decimals inside ``[low, high]`` (``low > high``: none)."""
        step = 10.0**-self.decimals
        grid_low = round(self.low, self.decimals)
        if grid_low < self.low:
            grid_low = round(grid_low + step, self.decimals)
        grid_high = round(self.high, self.decimals)
        if grid_high > self.high:
            grid_high = round(grid_high - step, self.decimals)
        return float(grid_low), float(grid_high)

    @property
    def is_discrete(self) -> bool:
        """Whether the parameters are chosen from a finite set of values (tabular policies)."""
        return self.values is not None

    def project(self, values: np.ndarray | list[float]) -> Projection:
        """Make a proposal legal: check the count and finiteness, then clip and round (a value rounded out of the bounds
        moves to :meth:`grid_bounds`), or check membership in the value set (else :class:`InvalidParameters`)."""
        vec = np.asarray(values, dtype=np.float64).reshape(-1)
        if vec.size != self.size:
            raise InvalidParameters(f"expected exactly {self.size} values, got {vec.size}")
        bad = np.flatnonzero(~np.isfinite(vec))
        if bad.size:
            raise InvalidParameters(f"params[{bad[0]}] is not a finite number ({vec[bad[0]]})")
        if self.values is not None:
            allowed = np.asarray(self.values, dtype=np.float64)
            if outside := [i for i, v in enumerate(vec) if not np.any(v == allowed)]:
                raise InvalidParameters(
                    f"params[{outside[0]}] = {vec[outside[0]]:.6g} is not one of the allowed values {list(self.values)}"
                )
            return Projection(vec.copy())
        clipped = np.clip(vec, self.low, self.high)
        rounded = np.round(clipped, self.decimals)
        grid_low, grid_high = self.grid_bounds()
        rounded[rounded < self.low] = grid_low  # a bound that is not a multiple of the precision
        rounded[rounded > self.high] = grid_high
        notes = []
        for i in np.flatnonzero(rounded != vec):
            how = "clipped and rounded" if clipped[i] != vec[i] else "rounded"
            notes.append(f"params[{i}]: {float(vec[i])!r} {how} to {rounded[i]:.6g}")
        rounded[rounded == 0.0] = 0.0  # -0.0 becomes 0.0, so saved vectors read well
        return Projection(rounded, tuple(notes))

    def sample(self, rng: np.random.Generator, std: float | None = None) -> np.ndarray:
        """A random candidate: N(0, std) per parameter (``None``: :attr:`init_std`), legal; or uniform over the values."""
        if self.values is not None:
            return rng.choice(np.asarray(self.values, dtype=np.float64), size=self.size)
        return self.project(rng.normal(0.0, self.init_std if std is None else std, size=self.size)).params

    def perturb(self, center: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
        """A random neighbour of ``center``: Gaussian noise of scale ``scale``, or one value changed to another allowed one."""
        if self.values is not None:
            out = np.array(center, dtype=np.float64, copy=True)
            i = int(rng.integers(self.size))
            others = [v for v in self.values if v != out[i]] or list(self.values)
            out[i] = float(rng.choice(others))
            return out
        return self.project(np.asarray(center, dtype=np.float64) + rng.normal(0.0, scale, size=self.size)).params

    def format(self, params: np.ndarray, style: ReplyStyle = "indexed") -> str:
        """``params`` in a reply format (:data:`ReplyStyle`) the parser reads back exactly."""
        if style not in REPLY_STYLES:
            raise ValueError(f"style must be one of {REPLY_STYLES}, got {style!r}")
        values = [self.format_value(v) for v in params]
        if style == "list":
            return "params: [" + ", ".join(values) + "]"
        return ", ".join(f"params[{i}]: {v}" for i, v in enumerate(values))

    def format_value(self, value: float) -> str:
        if self.values is not None:
            return str(int(value))
        return f"{value:.{self.decimals}f}"


MAX_REASON_CHARS = 400  #: The longest failure reason :func:`parse_params` gives (cut by :func:`bound_reason`).
MAX_QUOTED_CHARS = 40  #: A reason quotes at most this much of one piece of the reply (a value, an index).
MAX_INDEX_DIGITS = 9  #: The most digits a readable ``params[i]`` index may have.

_MAX_LISTED_INDICES = 12

_INDEXED = re.compile(r"(?<!\w)params\s*\[([^\[\],;]*)\][*`\s]*[:=]\s*([^\s,;\]\)]+)", re.I)
_LISTED = re.compile(r"(?<!\w)params[\"'*`]*\s*[:=]\s*\[([^\[\]]*)\]", re.I)
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"})
_QUOTES = "\"'`*"
_WORD = re.compile(r"[^\W\d_]{2,}")
_NON_FINITE_WORDS = ("nan", "inf", "infinity")
_GROUPED_AFTER_VALUE = re.compile(r"(?:,\d|[^\S\r\n]+\d)[\d.,]{0,20}")  # 0,5 / 1,000 / 1 000 after an indexed value
_DIGIT_COMMA_DIGIT = re.compile(r"\d,\d")
_COMMA_SPACE = re.compile(r",[^\S\r\n]")
_COMMA_LEADING_ZERO = re.compile(r"\d,[^\S\r\n]*[-+]?0\d")

_RAW_FINAL = re.compile(  # the final channel's text, and the token that ends it ("": the text ran out)
    r"<\|channel\|>\s*final\s*(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)(<\|return\|>|<\|end\|>|<\|call\|>|$)", re.S
)
_RAW_FINAL_START = re.compile(r"<\|channel\|>\s*final(?![A-Za-z0-9_])")
_RAW_MARKERS = ("<|channel|>", "<|message|>", "<|start|>")
_FLAT_FINAL_MARK = "assistantfinal"
_FLAT_ANALYSIS = re.compile(r"^\s*(?:assistant)?analysis[^\s:;,.!?\-]")
_TRAILING_SPECIALS = ("<|return|>", "<|end|>", "<|call|>", "<|endoftext|>")


def _without_trailing_specials(text: str) -> str:
    """``text`` without the special tokens and whitespace at its end (in linear time)."""
    end = len(text)
    while True:
        while end and text[end - 1].isspace():
            end -= 1
        token = next((t for t in _TRAILING_SPECIALS if text.endswith(t, 0, end)), None)
        if token is None:
            return text[:end]
        end -= len(token)


def _is_raw(text: str) -> bool:
    return any(m in text for m in _RAW_MARKERS)


def is_harmony(text: str) -> bool:
    """Whether ``text`` looks like harmony output (raw or flattened)."""
    return _is_raw(text) or bool(_FLAT_ANALYSIS.match(text)) or _FLAT_FINAL_MARK in text


def final_channel(text: str) -> str | None:
    """The last final channel of harmony ``text``, stripped (``None``: there is none); other text unchanged."""
    if _is_raw(text):
        finals = _RAW_FINAL.findall(text)
        return finals[-1][0].strip() if finals else None
    if _FLAT_FINAL_MARK in text:
        answer = text.rpartition(_FLAT_FINAL_MARK)[2]
        return _without_trailing_specials(answer).strip()
    if _FLAT_ANALYSIS.match(text):
        return None
    return text


def final_is_truncated(text: str) -> bool:
    """Whether raw harmony ``text`` ends inside its last final channel (other text cannot tell: ``False``)."""
    finals = _RAW_FINAL.findall(text) if _is_raw(text) else []
    return bool(finals) and finals[-1][1] == ""


def cut_off_lines(text: str) -> str:
    """The complete lines of the cut-off last final channel of raw harmony ``text`` (up to its last line break)."""
    last = max(_RAW_FINAL_START.finditer(text), key=lambda m: m.start(), default=None)
    start = -1 if last is None else text.find("<|message|>", last.end())
    return "" if start < 0 else text[start + len("<|message|>") :].rpartition("\n")[0]


def as_cut_off(text: str) -> str:
    """The cut-off output ``text`` as raw harmony whose final channel is not ended (:func:`final_is_truncated`), what
    came before it kept as analysis; harmony text without a final channel unchanged."""
    if final_is_truncated(text):
        return text
    final = final_channel(text)
    if final is None:
        return text
    before = before_final(text) if is_harmony(text) else ""
    analysis = f"<|channel|>analysis<|message|>{before}<|end|><|start|>assistant" if before.strip() else ""
    return f"{analysis}<|channel|>final<|message|>{final}"


def complete_answer(text: str) -> str | None:
    """The final channel of ``text``, or ``None`` when it has none or it was cut off (:func:`final_is_truncated`)."""
    return None if final_is_truncated(text) else final_channel(text)


def before_final(text: str) -> str:
    """What comes before the first final channel of (raw or flattened) harmony ``text``; all of any other ``text``."""
    if _is_raw(text):
        match = _RAW_FINAL_START.search(text)
        return text[: match.start()] if match else text
    if _FLAT_FINAL_MARK in text:
        return text.partition(_FLAT_FINAL_MARK)[0]
    return text


NO_FINAL_ANSWER = "the reply has no complete final answer (no final channel, or the reply was cut off at the token limit)"
CUT_OFF = "the reply was cut off at the token limit"

Reading = Literal["first", "last", "first_line", "last_vector"]
"""Which values of a reply make the vector: ``first``, the first ``params[i]: v`` of each index ``0..n-1`` anywhere
(words in a value's place and indices ``>= n`` ignored; else the first list); ``last``, the last of each; ``first_line``,
the vector on the answer's first line; ``last_vector`` (ours), the last vector anywhere."""

READINGS: tuple[Reading, ...] = ("first", "last", "first_line", "last_vector")


@dataclass(frozen=True)
class ParseResult:
    """The outcome of :func:`parse_params`.

    :param params: The legal vector, or ``None`` when the reply could not be used.
    :param error: Why the reply could not be used.
    :param notes: Values that were clipped or rounded.
    """

    params: np.ndarray | None
    error: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.params is not None


def bound_reason(reason: str, limit: int = MAX_REASON_CHARS) -> str:
    """``reason`` cut to at most ``limit`` characters (a marker included that says how many it had)."""
    if len(reason) <= limit:
        return reason
    marker = f" [... {len(reason)} characters, cut]"
    return (reason[: max(0, limit - len(marker))] + marker)[:limit]


def quote(piece: str) -> str:
    """``piece`` of a reply as a reason quotes it: ``repr`` (control characters escaped), at most
    :data:`MAX_QUOTED_CHARS` characters of it, then ``...`` and its length when it was longer."""
    if len(piece) <= MAX_QUOTED_CHARS:
        return repr(piece)
    return f"{piece[:MAX_QUOTED_CHARS]!r}... ({len(piece)} characters)"


def _check_closed(text: str) -> None:
    """Raise when ``text`` opens quotes, backticks or emphasis that it does not close (``"0`` of ``"0,5"``)."""
    if not text or text[0] not in _QUOTES:
        return
    if len(text) > 1 and text.endswith(".") and text[-2] in _QUOTES:
        text = text[:-1]  # a sentence-ending period after the closing quote
    body = text.lstrip(_QUOTES)
    opened = text[: len(text) - len(body)]
    closed = body[len(body.rstrip(_QUOTES)) :]
    if opened and body and not closed.startswith(opened[::-1]):
        raise ValueError(
            f"{quote(text)} opens {opened!r} without closing it (a comma inside a quoted value, such as a decimal "
            "comma, splits it)"
        )


def to_number(token: str) -> float:
    """The number of one value token (quotes, backticks, emphasis and one sentence-ending period dropped); a
    finite-looking literal too large for a float becomes the largest float of its sign. ``ValueError`` for anything
    else that is not a finite number, and for unclosed quotes."""
    text = token.strip()
    _check_closed(text)
    text = text.strip(_QUOTES).translate(_MINUS_SIGNS)
    if len(text) > 1 and text.endswith("."):
        text = text[:-1].strip(_QUOTES)
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{quote(token.strip())} is not a number") from None
    if math.isinf(value) and not any(word in text.lower() for word in ("inf", "nan")):
        return math.copysign(sys.float_info.max, value)  # overflow of a finite literal
    if not math.isfinite(value):
        raise ValueError(f"{quote(token.strip())} is not a finite number")
    return value


def _index(spelling: str) -> int | None:
    """The index written inside ``params[...]``, or ``None`` when it is not a readable index."""
    digits = spelling if spelling.isdecimal() else spelling.strip().strip(_QUOTES).strip()
    if not digits.isdecimal() or len(digits) > MAX_INDEX_DIGITS:
        return None
    return int(digits)


def _indexed_blocks(text: str) -> list[list[re.Match[str]]]:
    """The ``params[i]: v`` matches of ``text`` as indexed vectors (a new one starts at every index 0)."""
    blocks: list[list[re.Match[str]]] = []
    for match in _INDEXED.finditer(text):
        if not blocks or _index(match.group(1)) == 0:
            blocks.append([])
        blocks[-1].append(match)
    return blocks


def _first_few(texts: Sequence[str], total: int) -> str:
    """The first few ``texts`` of ``total`` for a reason, and how many in all when there are more."""
    more = f", ... ({total} in all)" if total > _MAX_LISTED_INDICES else ""
    return ", ".join(texts[:_MAX_LISTED_INDICES]) + more


def _grouped_value(text: str, entries: Sequence[re.Match[str]]) -> str | None:
    """Why a value of an indexed vector is ambiguous (a decimal comma, a digit group), or ``None``."""
    for match in entries:
        after = _GROUPED_AFTER_VALUE.match(text, match.end())
        if after is not None:
            return (
                f"params[{_index(match.group(1))}] is written {quote(match.group(2) + after.group())}: a decimal comma "
                "or a digit group (0,5 or 1,000 or 1 000) can be read in more than one way; write each number with a "
                "decimal point and no grouping (0.5, 1000)"
            )
    return None


def _indexed_vector(text: str, entries: list[re.Match[str]], size: int) -> list[str] | str:
    """The value tokens of one block of ``params[i]: v`` matches, or why the block is not a vector."""
    run = 0
    while run < len(entries) and _index(entries[run].group(1)) == run:
        run += 1
    if run < len(entries) and run == size and _WORD.search(text[entries[run - 1].end() : entries[run].start()]):
        entries = entries[:run]  # a complete vector, then commentary mentioning single values
    elif run < len(entries):
        first = entries[:_MAX_LISTED_INDICES]
        spelled = [str(i) if (i := _index(m.group(1))) is not None else quote(m.group(1)) for m in first]
        return (
            "the indices must be params[0], params[1], ... (decimal digits) in order without gaps or repeats, "
            f"got [{_first_few(spelled, len(entries))}]"
        )
    return _grouped_value(text, entries) or [m.group(2) for m in entries]


def _listed_vector(inner: str, size: int) -> list[str] | str:
    """The value tokens of the inside of ``params: [...]``, or why it is not a vector."""
    if _DIGIT_COMMA_DIGIT.search(inner) and (_COMMA_SPACE.search(inner) or _COMMA_LEADING_ZERO.search(inner)):
        return (
            f"expected exactly {size} values, but the list can be read in more than one way: it has a comma between "
            "digits (a decimal comma 0,5 or a thousands separator 1,000) besides commas between values; write each "
            "number with a decimal point and no grouping, separated by ', '"
        )
    tokens = inner.split(",")
    if not tokens[-1].strip():
        tokens.pop()  # one trailing comma, or an empty list
    if empty := [i for i, token in enumerate(tokens) if not token.strip()]:
        return f"the list has an empty slot at position {empty[0]} (two commas with no value between them); write every value"
    return tokens


def _last_vector(text: str, size: int) -> list[str] | str | None:
    """The value tokens of the last vector in the text (indexed or listed), why it is not one, or ``None``: none."""
    block = (_indexed_blocks(text) or [[]])[-1]
    listed = max(_LISTED.finditer(text), key=lambda m: m.start(), default=None)
    if listed is not None and (not block or listed.start() > block[0].start()):
        return _listed_vector(listed.group(1), size)
    return _indexed_vector(text, block, size) if block else None


def _values(tokens: list[str]) -> list[float] | str:
    """The numbers of the value tokens, or why one could not be read."""
    values = []
    for i, token in enumerate(tokens):
        try:
            values.append(to_number(token))
        except ValueError as exc:
            return f"a value could not be read as a finite number: params[{i}]: {exc}"
    return values


def _occurrence_vector(text: str, size: int, first: bool) -> list[str] | str | None:
    """The value tokens of the first (or last) occurrence of each index, else of a listed vector; why not; or ``None``."""
    found: dict[int, re.Match[str]] = {}
    for match in _INDEXED.finditer(text):
        index, word = _index(match.group(1)), match.group(2).strip(_QUOTES).rstrip(".").lower()
        if index is None or index >= size or (word.isalpha() and word not in _NON_FINITE_WORDS):
            continue  # as the reference's pattern, which matches a number only: "params[0]: the weight" is not a value
        if not (first and index in found):
            found[index] = match
    if not found:
        matches = _LISTED.finditer(text)
        listed = next(matches, None) if first else max(matches, key=lambda m: m.start(), default=None)
        return None if listed is None else _listed_vector(listed.group(1), size)
    if len(found) < size:
        missing = [f"params[{i}]" for i in range(size) if i not in found]
        return f"expected all {size} values params[0]..params[{size - 1}], missing {_first_few(missing, len(missing))}"
    entries = [found[i] for i in range(size)]
    return _grouped_value(text, entries) or [m.group(2) for m in entries]


def _vector(text: str, size: int, reading: Reading) -> list[str] | str | None:
    """The value tokens of the vector ``reading`` picks, why it is not a vector, or ``None``: none."""
    if reading == "first_line":
        line = text.lstrip().partition("\n")[0]
        blocks = _indexed_blocks(line)
        return _indexed_vector(line, blocks[0], size) if blocks else _last_vector(line, size)
    if reading == "last_vector":
        return _last_vector(text, size)
    return _occurrence_vector(text, size, first=reading == "first")


def _parse(reply: str, space: ParameterSpace, reading: Reading, reject_cut_off: bool) -> ParseResult:
    if not isinstance(reply, str) or not reply.strip():
        return ParseResult(None, "the reply was empty")
    text = final_channel(reply)
    if text is None:
        return ParseResult(None, NO_FINAL_ANSWER)
    if final_is_truncated(reply):
        if reject_cut_off:
            return ParseResult(None, f"{CUT_OFF} (cut-off replies are rejected)")
        text = cut_off_lines(reply)
        if not text.strip():
            return ParseResult(None, f"{CUT_OFF} before its first line ended")
    tokens = _vector(text, space.size, reading)
    if tokens is None:
        where = "on the first line" if reading == "first_line" else "in the reply"
        return ParseResult(
            None, f"no parameter vector found {where}; expected one line with all {space.size} values in the reply format"
        )
    values = tokens if isinstance(tokens, str) else _values(tokens)
    if isinstance(values, str):
        return ParseResult(None, values)
    try:
        projection = space.project(np.array(values, dtype=np.float64))
    except InvalidParameters as exc:
        return ParseResult(None, str(exc))
    return ParseResult(projection.params, None, projection.notes)


def parse_params(reply: str, space: ParameterSpace, reading: Reading = "first", reject_cut_off: bool = False) -> ParseResult:
    """Parse a reply into a legal parameter vector for ``space``.

    :param reply: The raw reply text.
    :param space: The parameter space (count, bounds and precision, or action set).
    :param reading: Which values make the vector (see :data:`Reading`); ``first`` is the reference's R2PO reading.
    :param reject_cut_off: *Ours*: a reply cut off at the token limit is unusable (the reference reads its complete lines).
    :return: The vector, or the reason it could not be read (at most :data:`MAX_REASON_CHARS` characters).
    """
    result = _parse(reply, space, reading, reject_cut_off)
    return result if result.error is None else ParseResult(None, bound_reason(result.error))
