"""GBNF grammars (llama.cpp's constrained-decoding format) admitting exactly one parameter reply of a space
(:func:`parameter_grammar`), and :class:`GreedyGrammar`: greedy decoding under a grammar, checking one token per step."""

from __future__ import annotations

import ctypes
import math
from decimal import ROUND_DOWN, Decimal, localcontext
from typing import Any

import numpy as np

from sb3_r2po.common.parameters import REPLY_STYLES, ParameterSpace, ReplyStyle


def _digits_below(bound: str, first: str = "0") -> list[str]:
    """GBNF alternatives for the digit strings of ``len(bound)`` characters below ``bound`` whose first digit is at least
    ``first``: the same prefix, a smaller digit, then anything."""
    alternatives = []
    for i, ch in enumerate(bound):
        smallest = first if i == 0 else "0"
        if ch > smallest:
            top = chr(ord(ch) - 1)
            head = f'"{bound[:i]}" ' if i else ""
            cls = f"[{smallest}]" if top == smallest else f"[{smallest}-{top}]"
            alternatives.append(f"{head}{cls}{' [0-9]' * (len(bound) - i - 1)}".strip())
    return alternatives


def _integers_below(bound: int) -> list[str]:
    """GBNF alternatives for the integers ``0 .. bound - 1`` written without leading zeros (empty if ``bound == 0``)."""
    if bound <= 0:
        return []
    if bound <= 10:
        return ['"0"'] if bound == 1 else [f"[0-{bound - 1}]"]
    shorter = ["[1-9]" + " [0-9]" * (k - 1) for k in range(2, len(str(bound)))]  # two digits or more
    return ["[0-9]", *shorter, *_digits_below(str(bound), first="1")]


def magnitude_rule(limit: float, decimals: int) -> str:
    """The body of a GBNF rule for the numbers with ``decimals`` decimals (``0``: an integer, no point) from 0 to
    ``limit >= 0`` (rounded down), no leading zeros."""
    if not math.isfinite(limit) or limit < 0:
        raise ValueError(f"limit must be finite and >= 0, got {limit}")
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0, got {decimals}")
    quantum = Decimal(1).scaleb(-decimals)
    with localcontext() as context:  # enough digits for any float's integer part plus the decimals
        context.prec = 400 + decimals
        top = Decimal(repr(float(limit))).quantize(quantum, rounding=ROUND_DOWN)
    int_top, frac_top = divmod(int(top.scaleb(decimals)), 10**decimals)  # the limit in units of the last decimal
    below = _integers_below(int_top)
    if decimals == 0:
        return " | ".join([*below, f'"{int_top}"'])
    alternatives = [f'{_group(below)} "." ' + " ".join(["[0-9]"] * decimals)] if below else []
    frac = str(frac_top).zfill(decimals)
    frac_at_most = _group([*_digits_below(frac), f'"{frac}"'])
    return " | ".join([*alternatives, f'"{int_top}." {frac_at_most}'])


def _group(alternatives: list[str]) -> str:
    return alternatives[0] if len(alternatives) == 1 else "(" + " | ".join(alternatives) + ")"


def parameter_grammar(space: ParameterSpace, *, style: ReplyStyle = "list", reason_chars: int = 0) -> str:
    """A GBNF grammar (start rule ``root``) admitting exactly one reply with the ``space.size`` values of ``space``: exactly
    ``decimals`` decimals, no leading zeros, bounded exactly on each side of zero (discrete: the allowed integers).

    :param space: The parameter space (continuous or discrete).
    :param style: ``"list"`` for ``params: [v0, ..., v{n-1}]``, ``"indexed"`` for ``params[0]: v0, ..., params[n-1]: v{n-1}``.
    :param reason_chars: When positive, the reply may open with a free-text line (no brackets) of at most this many characters.
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
    if space.values is not None:  # a discrete space: its integers
        literals = sorted({str(int(v)) for v in space.values}, key=lambda s: (len(s), s))
        rules["value"] = " | ".join(f'"{s}"' for s in literals)
    else:  # each side of zero bounded by its own rule
        rules["value"] = " | ".join(side for side, used in (("pos", space.high >= 0), ('"-" neg', space.low < 0)) if used)
        if space.high >= 0:
            rules["pos"] = magnitude_rule(space.high, space.decimals)
        if space.low < 0:
            rules["neg"] = magnitude_rule(-space.low, space.decimals)
    return "\n".join(f"{name} ::= {rule}" for name, rule in rules.items()) + "\n"


def max_reply_chars(space: ParameterSpace, *, style: ReplyStyle = "list", reason_chars: int = 0) -> int:
    """An upper bound on the length of a reply :func:`parameter_grammar` admits, in characters and in tokens (one token
    per character at most; the free-text reason line counts 4 per character: UTF-8 byte tokens)."""
    n = space.size
    if space.values is not None:
        longest = max(len(str(int(v))) for v in space.values)
    else:
        fraction = 1 + space.decimals if space.decimals else 0
        sides = ((space.high, ""), (-space.low, "-"))
        longest = max((len(sign) + len(str(math.floor(limit))) + fraction for limit, sign in sides if limit >= 0), default=0)
    values = n * longest + 2 * (n - 1)
    if style == "list":
        body = len("params: [") + values + 1
    else:
        body = sum(len(f"params[{i}]: ") for i in range(n)) + values
    return body + (4 * reason_chars + 1 if reason_chars > 0 else 0)


def compile_grammar(text: str, llama: Any = None) -> Any:
    """A ``llama_cpp.LlamaGrammar`` of GBNF ``text``, checked by llama.cpp against ``llama``'s vocabulary when given
    (``LlamaGrammar.from_string`` does not parse it, and llama.cpp silently drops a grammar it rejects: ``ValueError``)."""
    import llama_cpp

    if llama is not None:
        llama_cpp.llama_sampler_free(grammar_sampler(text, llama))
    return llama_cpp.LlamaGrammar.from_string(text, verbose=False)


def grammar_sampler(text: str, llama: Any) -> Any:
    """llama.cpp's grammar sampler of ``text`` for ``llama``'s vocabulary (the caller frees it); ``ValueError`` if rejected."""
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(llama_cpp.llama_model_get_vocab(llama.model), text.encode("utf-8"), b"root")
    if not sampler:
        raise ValueError(f"llama.cpp rejected the grammar:\n{text}")
    return sampler


_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)])  # llama_token_data


class GreedyGrammar:
    """Greedy decoding under a grammar, a ``llama_cpp`` logits processor checking the best token alone (the whole vocabulary
    only when the grammar rejects it), for ``temperature=0`` requests without a grammar; :meth:`reset` before each.

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
        self.steps = 0
        self.rejections = 0  # steps at which the grammar rejected the greedy token

    def reset(self) -> None:
        """Start a new reply: the grammar back at its start."""
        self._llama_cpp.llama_sampler_reset(self._sampler)

    def __call__(self, input_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """The logits of one step, with every token the grammar rejects at ``-inf`` when it rejects the best one."""
        token = int(np.argmax(logits))
        self.steps += 1
        one = self._one[0]
        one.id, one.logit, one.p = token, 0.0, 0.0  # type: ignore[assignment]  # ctypes converts the Python numbers
        self._llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(self._one_array))
        if one.logit == -math.inf:  # the grammar over the whole vocabulary
            self.rejections += 1
            full = np.zeros(len(logits), dtype=_TOKEN_DATA)
            full["id"], full["logit"] = np.arange(len(logits), dtype=np.intc), logits
            data = ctypes.cast(full.ctypes.data, self._llama_cpp.llama_token_data_p)
            array = self._llama_cpp.llama_token_data_array(data, len(full), -1, False)
            self._llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
            logits = full["logit"].copy()
            token = int(np.argmax(logits))
        self._llama_cpp.llama_sampler_accept(self._sampler, token)
        return logits

    def close(self) -> None:
        """Free llama.cpp's grammar sampler (idempotent)."""
        sampler = getattr(self, "_sampler", None)  # None when __init__ failed before making it
        if sampler:
            self._llama_cpp.llama_sampler_free(sampler)
        self._sampler = None

    def __del__(self) -> None:
        self.close()
