"""GBNF grammars (llama.cpp's constrained-decoding format) for R2PO's parameter replies.

A grammar built here admits exactly one reply shape, so a model decoded under it cannot produce a
reply R2PO fails to parse:

- ``style="list"`` (default): ``params: [v0, v1, ..., v{n-1}]``
- ``style="indexed"``: ``params[0]: v0, params[1]: v1, ..., params[n-1]: v{n-1}`` (the format of
  :meth:`sb3_r2po.common.parameters.ParameterSpace.format`)

optionally preceded by one short line of free text (``reason_chars > 0``) and a newline.

Values:

- **continuous** spaces: a decimal with exactly ``decimals`` digits after the point (no point when
  ``decimals == 0``), no leading zeros, an optional ``-``. The magnitude is bounded exactly on each
  side of zero: positive values are at most ``high`` and negative values at least ``low`` (each bound
  rounded towards zero to the precision). A range that excludes zero (``low > 0`` or ``high < 0``) is
  only bounded on its far side; R2PO clips every proposal to the range anyway
  (:meth:`~sb3_r2po.common.parameters.ParameterSpace.project`).
- **discrete** spaces: one of the allowed integers, written as ``str(int(v))``.

The grammar text is plain GBNF; :func:`compile_grammar` turns it into a ``llama_cpp.LlamaGrammar``.

Forced tokens: where the grammar allows exactly one token next (the ``.`` after a value's integer digit, the ``,``
after its last decimal, the ``]``; about 22 of the 52 tokens of a 10-value reply), greedy decoding has no choice to
make, and the model's scores for that step are not needed. :meth:`GreedyGrammar.forced` finds these tokens exactly:
every string of :func:`parameter_grammar`'s language (without a reason line) is made of the characters of
:func:`grammar_alphabet`, so only the tokens made of them can be allowed; among them, llama.cpp's grammar decides.
"""

from __future__ import annotations

import ctypes
import math
import re
from decimal import ROUND_DOWN, Decimal, localcontext
from typing import Any

import numpy as np

from sb3_r2po.common.parameters import REPLY_STYLES, ParameterSpace, ReplyStyle


def _fixed_width_at_most(bound: str) -> list[str]:
    """
    GBNF alternatives for every digit string of ``len(bound)`` characters (leading zeros allowed)
    that is lexicographically, hence numerically, ``<= bound``.
    """
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
    """
    The GBNF rules defining ``value``: one parameter value of ``space``.

    :return: rule name -> rule body, ``value`` first.
    """
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
        items = [f'"params[{i}]: " value' for i in range(n)]
        body = ' ", " '.join(items)
    rules: dict[str, str] = {}
    if reason_chars > 0:
        rules["root"] = "(reason)? params"
        rules["reason"] = f"[^\\n\\[\\]]{{1,{reason_chars}}} " + '"\\n"'
    else:
        rules["root"] = "params"
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
    """
    An upper bound on the length of a reply :func:`parameter_grammar` admits, in characters and in tokens: the
    values and the fixed text take at most one token per character; the free-text reason line may be split into
    byte tokens, so it is counted at 4 per character (UTF-8). A reply budget of this many tokens (plus one for the
    end token) can always finish the reply.
    """
    n = space.size
    values = n * max_value_chars(space) + 2 * (n - 1)
    if style == "list":
        body = len("params: [") + values + 1
    else:
        body = sum(len(f"params[{i}]: ") for i in range(n)) + values
    return body + (4 * reason_chars + 1 if reason_chars > 0 else 0)


def compile_grammar(text: str, llama: Any = None) -> Any:
    """
    Wrap GBNF text for llama.cpp, checking it with llama.cpp's own parser when a model is given.

    ``llama_cpp.LlamaGrammar.from_string`` only stores the text: llama.cpp parses it when a sampler is
    built, and a sampler whose grammar was rejected is silently left out, so an unchecked bad grammar
    means unconstrained replies.

    :param text: The grammar (see :func:`parameter_grammar`).
    :param llama: A loaded ``llama_cpp.Llama`` (``vocab_only=True`` is enough) to check the grammar
        against; ``None`` skips the check.
    :return: A ``llama_cpp.LlamaGrammar``.
    :raises ValueError: when llama.cpp rejects the grammar.
    :raises ImportError: when ``llama-cpp-python`` is not installed.
    """
    import llama_cpp
    from llama_cpp import LlamaGrammar

    if llama is not None:
        llama_cpp.llama_sampler_free(grammar_sampler(text, llama))
    return LlamaGrammar.from_string(text, verbose=False)


def grammar_sampler(text: str, llama: Any) -> Any:
    """
    llama.cpp's grammar sampler of GBNF ``text`` (start rule ``root``) for the vocabulary of ``llama``; the caller frees
    it (``llama_cpp.llama_sampler_free``).

    :raises ValueError: when llama.cpp rejects the grammar.
    """
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(llama_cpp.llama_model_get_vocab(llama.model), text.encode("utf-8"), b"root")
    if not sampler:
        raise ValueError(f"llama.cpp rejected the grammar:\n{text}")
    return sampler


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
_GBNF_PART = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|#[^\n]*|.', re.DOTALL)
"""A quoted literal, a character class, a comment, or any other single character of GBNF text."""
_CLASS_MEMBER = re.compile(r"(\\.|[^\\])(?:-(\\.|[^\\]))?", re.DOTALL)
"""A character of a class, or a range of them."""


def _unescape(item: str) -> str | None:
    return _ESCAPES.get(item[1]) if item.startswith("\\") else item


def grammar_alphabet(text: str) -> frozenset[str] | None:
    """
    The characters the strings of a GBNF grammar can contain, read off its quoted literals and character classes.

    :param text: GBNF grammar text.
    :return: The characters; ``None`` when the grammar can produce characters not spelled out in it (a negated class
        ``[^...]`` or ``.``, as the free-text reason line of :func:`parameter_grammar` has), uses an escape this
        reading does not know, or leaves a literal or a class unclosed.
    """
    chars: set[str] = set()
    for part in _GBNF_PART.findall(text):
        if part in ('"', "[", "."):  # unclosed, or any character
            return None
        if part.startswith('"'):
            items = re.findall(r"\\.|[^\\]", part[1:-1], re.DOTALL)
            spans = [(item, item) for item in items]
        elif part.startswith("["):
            if part.startswith("[^"):
                return None
            spans = [(first, last or first) for first, last in _CLASS_MEMBER.findall(part[1:-1])]
        else:
            continue
        for first, last in spans:
            low, high = _unescape(first), _unescape(last)
            if low is None or high is None:
                return None
            chars.update(chr(code) for code in range(ord(low), ord(high) + 1))
    return frozenset(chars)


class TokenPieces:
    """
    The vocabulary of a loaded model as llama.cpp's grammar reads it: each token's bytes (special tokens spelled out)
    and the end-of-generation tokens. Built once per model: one pass over the vocabulary (151,936 tokens for Qwen2.5).

    :param llama: A loaded ``llama_cpp.Llama``.
    """

    def __init__(self, llama: Any) -> None:
        import llama_cpp

        vocab = llama_cpp.llama_model_get_vocab(llama.model)
        buffer = ctypes.create_string_buffer(256)
        self.pieces: list[bytes] = []
        """Each token's bytes (empty where llama.cpp gives none)."""
        for token in range(llama.n_vocab()):
            n = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, True)
            self.pieces.append(buffer.raw[:n] if n > 0 else b"")
        eog = [t for t in range(len(self.pieces)) if llama_cpp.llama_vocab_is_eog(vocab, t)]
        eos = int(llama_cpp.llama_vocab_eos(vocab))
        self.eog: tuple[int, ...] = tuple(sorted(eog, key=lambda t: t != eos))
        """The end-of-generation tokens, the model's end-of-sequence token first."""


class _Forcing:
    """What :meth:`GreedyGrammar.forced_token` checks: the token of each single character of the grammar's alphabet, the
    tokens made only of its characters grouped by their first byte (as llama.cpp token-data arrays), an end token."""

    def __init__(self, pieces: TokenPieces, alphabet: frozenset[str]) -> None:
        import llama_cpp

        allowed = {ord(c) for c in alphabet}
        singles = {piece[0]: token for token, piece in enumerate(pieces.pieces) if len(piece) == 1 and piece[0] in allowed}
        self.complete = set(singles) == allowed and bool(pieces.eog)
        """Whether every character of the alphabet has a token of its own and the vocabulary has an end token: without
        them no token can be shown to be forced."""
        self.singles = singles
        self.end = pieces.eog[0] if pieces.eog else -1
        dtype = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)])
        groups: dict[int, list[int]] = {}
        for token, piece in enumerate(pieces.pieces):
            if piece and all(b in allowed for b in piece) and token not in pieces.eog:
                groups.setdefault(piece[0], []).append(token)
        self.by_first: dict[int, tuple[np.ndarray, Any]] = {}
        for first, tokens in groups.items():
            rows = np.zeros(len(tokens), dtype=dtype)
            rows["id"] = tokens
            data = ctypes.cast(rows.ctypes.data, llama_cpp.llama_token_data_p)
            self.by_first[first] = (rows, llama_cpp.llama_token_data_array(data, len(rows), -1, False))


class GreedyGrammar:
    """
    Greedy decoding under a grammar at the cost of checking one token per step: a ``llama_cpp`` logits processor.

    llama-cpp-python applies a grammar to every token of the vocabulary at every step (151,936 for Qwen2.5), which
    costs more than the step's forward pass on a small model. At temperature 0 only the highest-scoring allowed token
    matters, so this processor checks the grammar against the token with the highest logit alone, as llama.cpp's own
    ``common_sampler`` does (``grammar_first=false``). Greedy decoding then picks the same token as under the grammar
    applied first: the best token, when the grammar allows it, is also the best allowed token (ties go to the lowest
    token id in both). When the grammar rejects it, the next best tokens are checked one by one, in order of logit
    (then token id), among the ``candidates`` highest: the first one allowed is the best allowed token when its logit
    is above every logit outside them. Only when none of them decides, the grammar is applied to the whole vocabulary
    (a full pass). The grammar is advanced with the token picked.

    Use it with ``temperature=0``, no grammar on the request and the default penalties (``repeat_penalty=1``, no
    frequency or presence penalty, which llama.cpp applies after the processor): ``create_chat_completion(...,
    logits_processor=LogitsProcessorList([checked]))``. Call :meth:`reset` before every request.

    :param llama: The loaded ``llama_cpp.Llama`` whose vocabulary the grammar is checked against.
    :param text: The GBNF grammar (see :func:`parameter_grammar`).
    :param candidates: How many of the highest-scoring tokens are checked one by one after a rejection, before a full
        pass (``0``: a rejection always makes a full pass).
    :param pieces: The model's vocabulary (:class:`TokenPieces`), to find forced tokens (:meth:`forced`); ``None``, or a
        grammar whose alphabet is not known (:func:`grammar_alphabet`), finds none.
    :raises ValueError: when llama.cpp rejects the grammar.
    """

    def __init__(self, llama: Any, text: str, candidates: int = 64, pieces: TokenPieces | None = None) -> None:
        import llama_cpp

        if candidates < 0:
            raise ValueError(f"candidates must be >= 0, got {candidates}")
        self._llama_cpp = llama_cpp
        self._sampler = grammar_sampler(text, llama)
        self._one = (llama_cpp.llama_token_data * 1)()
        self._one_array = llama_cpp.llama_token_data_array(self._one, 1, -1, False)
        self._full: np.ndarray | None = None  # the vocabulary as llama_token_data rows, for the full pass
        self.candidates = int(candidates)
        self.steps = 0
        """Steps decoded."""
        self.rejections = 0
        """Steps at which the grammar rejected the greedy token."""
        self.full_passes = 0
        """Steps at which the grammar was applied to the whole vocabulary."""
        self.forced_tokens = 0
        """Tokens :meth:`forced` returned (end tokens included)."""
        alphabet = grammar_alphabet(text) if pieces is not None else None
        forcing = _Forcing(pieces, alphabet) if pieces is not None and alphabet is not None else None
        self._forcing = forcing if forcing is not None and forcing.complete else None

    @property
    def can_force(self) -> bool:
        """Whether :meth:`forced` can find forced tokens (a vocabulary was given and the grammar's alphabet is known)."""
        return self._forcing is not None

    def reset(self) -> None:
        """Start a new reply: the grammar back at its start."""
        self._llama_cpp.llama_sampler_reset(self._sampler)

    def __call__(self, input_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """The logits of one step: unchanged when the grammar allows the best token; else with every token but the best
        allowed one at ``-inf``, or, after a full pass, every token the grammar rejects."""
        token = int(np.argmax(logits))
        self.steps += 1
        if not self._allows(token):
            self.rejections += 1
            logits = self._best_candidate(logits)
            token = int(np.argmax(logits))
        self._llama_cpp.llama_sampler_accept(self._sampler, token)
        return logits

    def accept(self, token: int) -> None:
        """Advance the grammar with ``token`` (one :meth:`__call__` did not pick)."""
        self._llama_cpp.llama_sampler_accept(self._sampler, token)

    def forced_token(self) -> int | None:
        """
        The token the grammar allows alone in its current state; an end-of-generation token when it allows only those;
        else (a choice, or no vocabulary) ``None``. Nothing is accepted.

        Exact: each character of the alphabet has a one-character token, and a token is allowed only when its first
        character is (its text must be a prefix of the language's strings, so its first character is one too). So when
        exactly one of those characters is allowed and the end is not, only the tokens starting with it can be, and
        only those made of the alphabet's characters: the grammar is applied to these.
        """
        forcing = self._forcing
        if forcing is None:
            return None
        firsts = [first for first, token in forcing.singles.items() if self._allows(token)]
        if self._allows(forcing.end):  # llama.cpp allows every end-of-generation token or none
            return forcing.end if not firsts else None
        if len(firsts) != 1:
            return None
        rows, array = forcing.by_first[firsts[0]]
        rows["logit"] = 0.0
        self._llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
        survivors = rows["id"][rows["logit"] != -math.inf]
        return int(survivors[0]) if len(survivors) == 1 else None

    def forced(self) -> list[int]:
        """The tokens the grammar forces one after another from its current state (:meth:`forced_token`), each accepted
        but a closing end-of-generation token; empty at a choice."""
        tokens: list[int] = []
        while (token := self.forced_token()) is not None:
            tokens.append(token)
            self.forced_tokens += 1
            if self.ends(token):
                break
            self.accept(token)
        return tokens

    def ends(self, token: int) -> bool:
        """Whether ``token`` is the end-of-generation token :meth:`forced_token` returns."""
        return self._forcing is not None and token == self._forcing.end

    def _allows(self, token: int) -> bool:
        """Whether the grammar, in its current state, allows ``token`` next."""
        one = self._one[0]
        one.id, one.logit, one.p = token, 0.0, 0.0  # type: ignore[assignment]  # ctypes converts the Python numbers
        self._llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(self._one_array))
        return one.logit != -math.inf

    def _best_candidate(self, logits: np.ndarray) -> np.ndarray:
        """After a rejection: logits whose highest entry is the best token the grammar allows. The best allowed among the
        ``candidates`` highest-scoring tokens decides when its logit is above every other token's (then no token outside
        them can score as high: the logits come back with every other token at ``-inf``); otherwise the full pass."""
        k = min(self.candidates, len(logits) - 1)
        if k > 0:
            top = np.argpartition(logits, -k)[-k:]  # the k highest; every token outside them scores at most `boundary`
            values = logits[top]
            boundary = values.min()
            for i in np.lexsort((top, -values)):  # highest logit first, then lowest token id
                if not values[i] > boundary:  # a tie with tokens outside the candidates (or a NaN): the full pass decides
                    break
                if self._allows(int(top[i])):
                    best = np.full_like(logits, -np.inf)
                    best[top[i]] = values[i]
                    return best
        return self._constrained(logits)

    def _constrained(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` with the grammar applied to every token (a full pass)."""
        self.full_passes += 1
        llama_cpp = self._llama_cpp
        if self._full is None or len(self._full) != len(logits):
            self._full = np.zeros(len(logits), dtype=np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)]))
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
