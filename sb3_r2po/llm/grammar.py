"""GBNF grammars (llama.cpp's constrained-decoding format) admitting exactly one parameter reply of a space:
``params: [v0, ..., v{n-1}]`` (``style="list"``) or ``params[0]: v0, ..., params[n-1]: v{n-1}`` (``"indexed"``),
optionally after one short line of free text (``reason_chars > 0``).

Continuous values are decimals with exactly ``decimals`` digits after the point, no leading zeros, an optional ``-``,
bounded exactly on each side of zero (a range excluding zero is bounded on its far side only; R2PO clips anyway);
discrete values are the allowed integers. :func:`compile_grammar` makes a ``llama_cpp.LlamaGrammar``;
:class:`GreedyGrammar` decodes greedily under a grammar at the cost of checking one token per step.
"""

from __future__ import annotations

import ctypes
import math
from decimal import ROUND_DOWN, Decimal, localcontext
from typing import Any

import numpy as np

from sb3_r2po.common.parameters import REPLY_STYLES, ParameterSpace, ReplyStyle


def _fixed_width_at_most(bound: str) -> list[str]:
    """GBNF alternatives for the digit strings of ``len(bound)`` characters (leading zeros allowed) ``<= bound``."""
    width = len(bound)
    alternatives = []
    for i, ch in enumerate(bound):
        if ch != "0":
            top = chr(ord(ch) - 1)
            head = f'"{bound[:i]}" ' if i else ""
            cls = "[0]" if top == "0" else f"[0-{top}]"
            tail = " [0-9]" * (width - i - 1)
            alternatives.append(f"{head}{cls}{tail}".strip())
    alternatives.append(f'"{bound}"')
    return alternatives


def _integers_below(bound: int) -> list[str]:
    """GBNF alternatives for the integers ``0 .. bound - 1`` written without leading zeros (empty if ``bound == 0``)."""
    if bound <= 0:
        return []
    if bound <= 10:
        return ['"0"'] if bound == 1 else [f"[0-{bound - 1}]"]
    digits = str(bound)
    n = len(digits)
    alternatives = ["[0-9]"]
    # every shorter length with two or more digits: [1-9][0-9]...
    alternatives += ["[1-9]" + " [0-9]" * (k - 1) for k in range(2, n)]
    # n-digit numbers below ``bound``: same prefix, a smaller digit, then anything
    for i, ch in enumerate(digits):
        smallest = "1" if i == 0 else "0"
        if ch > smallest:
            top = chr(ord(ch) - 1)
            head = f'"{digits[:i]}" ' if i else ""
            cls = f"[{smallest}]" if top == smallest else f"[{smallest}-{top}]"
            tail = " [0-9]" * (n - i - 1)
            alternatives.append(f"{head}{cls}{tail}".strip())
    return alternatives


def magnitude_rule(limit: float, decimals: int) -> str:
    """
    The body of a GBNF rule for the non-negative decimals with exactly ``decimals`` decimals that are
    ``<= limit`` (``limit`` rounded down to the precision), written without leading zeros.

    :param limit: The largest magnitude allowed (``>= 0``).
    :param decimals: The number of digits after the decimal point (``0``: an integer, no point).
    """
    if not math.isfinite(limit) or limit < 0:
        raise ValueError(f"limit must be finite and >= 0, got {limit}")
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0, got {decimals}")
    quantum = Decimal(1).scaleb(-decimals)
    with localcontext() as context:  # enough digits for any float's integer part plus the decimals
        context.prec = 400 + decimals
        top = Decimal(repr(float(limit))).quantize(quantum, rounding=ROUND_DOWN)
    scaled = int(top.scaleb(decimals))  # the limit in units of the last decimal
    int_top, frac_top = divmod(scaled, 10**decimals)
    if decimals == 0:
        return " | ".join([*_integers_below(int_top), f'"{int_top}"'])
    frac_any = '"." ' + " ".join(["[0-9]"] * decimals)
    below = _integers_below(int_top)
    alternatives = []
    if below:
        lead = below[0] if len(below) == 1 else "(" + " | ".join(below) + ")"
        alternatives.append(f"{lead} {frac_any}")
    frac_le = _fixed_width_at_most(str(frac_top).zfill(decimals))
    frac = frac_le[0] if len(frac_le) == 1 else "(" + " | ".join(frac_le) + ")"
    alternatives.append(f'"{int_top}." {frac}')
    return " | ".join(alternatives)


def value_rules(space: ParameterSpace) -> dict[str, str]:
    """The GBNF rules (name -> body, ``value`` first) defining ``value``: one parameter value of ``space``."""
    if space.values is not None:
        literals = sorted({str(int(v)) for v in space.values}, key=lambda s: (len(s), s))
        return {"value": " | ".join(f'"{s}"' for s in literals)}
    rules: dict[str, str] = {}
    parts = []
    if space.high >= 0:
        parts.append("pos")
        rules["pos"] = magnitude_rule(space.high, space.decimals)
    if space.low < 0:
        parts.append('"-" neg')
        rules["neg"] = magnitude_rule(-space.low, space.decimals)
    return {"value": " | ".join(parts), **rules}


def parameter_grammar(space: ParameterSpace, *, style: ReplyStyle = "list", reason_chars: int = 0) -> str:
    """
    A GBNF grammar admitting exactly one reply with the ``space.size`` values of ``space``.

    :param space: The parameter space (continuous or discrete).
    :param style: ``"list"`` for ``params: [v0, ..., v{n-1}]``, ``"indexed"`` for
        ``params[0]: v0, ..., params[n-1]: v{n-1}``.
    :param reason_chars: When positive, the reply may start with one line of at most this many
        characters of free text (no newline, no square brackets), then a newline; ``0`` allows only
        the parameter line.
    :return: The grammar text; its start rule is ``root``.
    """
    if style not in REPLY_STYLES:
        raise ValueError(f"style must be one of {REPLY_STYLES}, got {style!r}")
    if reason_chars < 0:
        raise ValueError(f"reason_chars must be >= 0, got {reason_chars}")
    n = space.size
    if style == "list":
        body = '"params: [" value' + ' ", " value' * (n - 1) + ' "]"'
    else:
        body = ' ", " '.join(f'"params[{i}]: " value' for i in range(n))
    rules: dict[str, str] = {"root": "(reason)? params" if reason_chars > 0 else "params"}
    if reason_chars > 0:
        rules["reason"] = f"[^\\n\\[\\]]{{1,{reason_chars}}} " + '"\\n"'
    rules["params"] = body
    rules.update(value_rules(space))
    return "\n".join(f"{name} ::= {rule}" for name, rule in rules.items()) + "\n"


def max_value_chars(space: ParameterSpace) -> int:
    """The length of the longest value the grammar of ``space`` admits."""
    if space.values is not None:
        return max(len(str(int(v))) for v in space.values)
    longest = 0
    for limit, sign in ((space.high, ""), (-space.low, "-")):
        if limit >= 0:
            int_digits = len(str(math.floor(limit)))
            longest = max(longest, len(sign) + int_digits + (1 + space.decimals if space.decimals else 0))
    return longest


def max_reply_chars(space: ParameterSpace, *, style: ReplyStyle = "list", reason_chars: int = 0) -> int:
    """An upper bound on the length of a reply :func:`parameter_grammar` admits, in characters and in tokens (one token
    per character at most; the free-text reason line counts 4 per character: UTF-8 byte tokens)."""
    n = space.size
    values = n * max_value_chars(space) + 2 * (n - 1)
    if style == "list":
        body = len("params: [") + values + 1
    else:
        body = sum(len(f"params[{i}]: ") for i in range(n)) + values
    return body + (4 * reason_chars + 1 if reason_chars > 0 else 0)


def compile_grammar(text: str, llama: Any = None) -> Any:
    """
    A ``llama_cpp.LlamaGrammar`` of GBNF ``text``, checked by llama.cpp's own parser against ``llama``'s vocabulary
    when given (``LlamaGrammar.from_string`` only stores the text, and llama.cpp silently drops a grammar it rejects).

    :raises ValueError: when llama.cpp rejects the grammar.
    """
    import llama_cpp
    from llama_cpp import LlamaGrammar

    if llama is not None:
        llama_cpp.llama_sampler_free(grammar_sampler(text, llama))
    return LlamaGrammar.from_string(text, verbose=False)


def grammar_sampler(text: str, llama: Any) -> Any:
    """llama.cpp's grammar sampler of ``text`` (start rule ``root``) for ``llama``'s vocabulary, which the caller frees;
    ``ValueError`` when llama.cpp rejects the grammar."""
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(llama_cpp.llama_model_get_vocab(llama.model), text.encode("utf-8"), b"root")
    if not sampler:
        raise ValueError(f"llama.cpp rejected the grammar:\n{text}")
    return sampler


_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)])  # llama_token_data


class GreedyGrammar:
    """
    Greedy decoding under a grammar at the cost of checking one token per step: a ``llama_cpp`` logits processor.

    llama-cpp-python applies a grammar to the whole vocabulary at every step (151,936 tokens for Qwen2.5). At
    temperature 0 only the best allowed token matters, so this processor checks the grammar against the token with the
    highest logit alone (as llama.cpp's ``common_sampler`` does with ``grammar_first=false``): when it is allowed it is
    the best allowed token (ties go to the lowest id in both); only when it is rejected is the grammar applied to the
    whole vocabulary (a full pass). The grammar is advanced with the token picked.

    Use it with ``temperature=0``, no grammar on the request and the default penalties:
    ``create_chat_completion(..., logits_processor=[checked])``; call :meth:`reset` before every request.

    :param llama: The loaded ``llama_cpp.Llama`` whose vocabulary the grammar is checked against.
    :param text: The GBNF grammar (see :func:`parameter_grammar`).
    :raises ValueError: when llama.cpp rejects the grammar.
    """

    def __init__(self, llama: Any, text: str) -> None:
        import llama_cpp

        self._llama_cpp = llama_cpp
        self._sampler = grammar_sampler(text, llama)
        self._one = (llama_cpp.llama_token_data * 1)()
        self._one_array = llama_cpp.llama_token_data_array(self._one, 1, -1, False)
        self._full: np.ndarray | None = None  # the vocabulary as llama_token_data rows, for the full pass
        self.steps = 0  # steps decoded
        self.rejections = 0  # steps at which the grammar rejected the greedy token (a full pass)

    def reset(self) -> None:
        """Start a new reply: the grammar back at its start."""
        self._llama_cpp.llama_sampler_reset(self._sampler)

    def __call__(self, input_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """The logits of one step: unchanged when the grammar allows the best token, else with every token it rejects at
        ``-inf``."""
        token = int(np.argmax(logits))
        self.steps += 1
        if not self._allows(token):
            self.rejections += 1
            logits = self._full_pass(logits)
            token = int(np.argmax(logits))
        self._llama_cpp.llama_sampler_accept(self._sampler, token)
        return logits

    def _allows(self, token: int) -> bool:
        """Whether the grammar, in its current state, allows ``token`` next."""
        one = self._one[0]
        one.id, one.logit, one.p = token, 0.0, 0.0  # type: ignore[assignment]  # ctypes converts the Python numbers
        self._llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(self._one_array))
        return one.logit != -math.inf

    def _full_pass(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` with the grammar applied to every token."""
        llama_cpp = self._llama_cpp
        if self._full is None or len(self._full) != len(logits):
            self._full = np.zeros(len(logits), dtype=_TOKEN_DATA)
            self._full["id"] = np.arange(len(logits), dtype=np.intc)
        full = self._full
        full["logit"] = logits  # the grammar writes only logits: the ids and p stay as made
        data = ctypes.cast(full.ctypes.data, llama_cpp.llama_token_data_p)
        array = llama_cpp.llama_token_data_array(data, len(full), -1, False)
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
        return full["logit"].copy()

    def close(self) -> None:
        """Free llama.cpp's grammar sampler (idempotent)."""
        sampler = getattr(self, "_sampler", None)  # None when __init__ failed before making it
        if sampler:
            self._llama_cpp.llama_sampler_free(sampler)
        self._sampler = None

    def __del__(self) -> None:
        self.close()
