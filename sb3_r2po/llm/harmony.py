"""gpt-oss "harmony" replies: extract the final channel from raw or flattened output.

gpt-oss writes its answer in *channels*: ``analysis`` (reasoning), ``commentary`` (tool preambles) and
``final`` (the answer). Only the final channel is the answer.

Raw output (special tokens kept)::

    <|channel|>analysis<|message|>...reasoning...<|end|><|start|>assistant<|channel|>final<|message|>ANSWER<|return|>

Flattened output (special tokens skipped by the decoder, as some servers return it)::

    analysis...reasoning...assistantfinalANSWER

No final channel (the token budget ran out during the analysis) is not an answer: :func:`final_channel`
returns ``None`` and the backends treat it as a parse failure (one retry with a larger budget, then the raw
text, for which :func:`final_channel` is ``None`` again). Nor is a reply cut off by the token limit while the
answer was being written (its last value may be cut short, e.g. ``-1`` of ``-1.75``): the backends pass it
through :func:`without_answer`, which keeps what came before the answer and drops the answer, so that
:func:`final_channel` is ``None`` for it too.

Flattened analysis is recognised by ``analysis`` (or ``assistantanalysis``) at the start, directly followed by
the reasoning's first character: not by whitespace or punctuation (``:;,.!?-``), so a plain reply that begins
``analysis: ...`` stays plain text. A regex extractor is enough here: the official ``openai-harmony`` package
downloads its vocabulary at run time, which fails offline.
"""

from __future__ import annotations

import re

_RAW_FINAL = re.compile(
    r"<\|channel\|>\s*final\s*(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)(?:<\|return\|>|<\|end\|>|<\|call\|>|$)", re.S
)
_RAW_FINAL_END = re.compile(
    r"<\|channel\|>\s*final\s*(?:<\|constrain\|>[^<]*)?<\|message\|>.*?(<\|return\|>|<\|end\|>|<\|call\|>|$)", re.S
)
_RAW_FINAL_START = re.compile(r"<\|channel\|>\s*final(?![A-Za-z0-9_])")
_RAW_MARKERS = ("<|channel|>", "<|message|>", "<|start|>")
_FLAT_FINAL_MARK = "assistantfinal"
_FLAT_ANALYSIS = re.compile(r"^\s*(?:assistant)?analysis[^\s:;,.!?\-]")
_TRAILING_SPECIALS = re.compile(r"(?:<\|(?:return|end|call|endoftext)\|>\s*)+$")

HARMONY_STOP_TOKENS = ("<|return|>", "<|call|>")
"""Tokens that end a harmony reply (``<|end|>`` only ends one message, e.g. the analysis, so it is not one)."""


def is_harmony(text: str) -> bool:
    """Whether ``text`` looks like harmony output (raw or flattened)."""
    return any(m in text for m in _RAW_MARKERS) or bool(_FLAT_ANALYSIS.match(text)) or _FLAT_FINAL_MARK in text


def final_channel(text: str) -> str | None:
    """
    The text of the last final channel of a harmony reply.

    :param text: The model's output.
    :return: The final answer, stripped; ``None`` when the reply is harmony output without a final channel.
        Text that is not harmony output at all is returned unchanged.
    """
    if any(m in text for m in _RAW_MARKERS):
        finals = _RAW_FINAL.findall(text)
        return finals[-1].strip() if finals else None
    if _FLAT_FINAL_MARK in text:
        answer = text.rpartition(_FLAT_FINAL_MARK)[2]
        return _TRAILING_SPECIALS.sub("", answer).strip()
    if _FLAT_ANALYSIS.match(text):
        return None
    return text


def final_is_truncated(text: str) -> bool:
    """
    Whether raw harmony ``text`` ends inside its final channel (no ``<|return|>``/``<|end|>``/``<|call|>`` after
    it): the token budget ran out while the answer was being written. Flattened and non-harmony text cannot
    tell, and give ``False``.
    """
    if not any(m in text for m in _RAW_MARKERS):
        return False
    matches = list(_RAW_FINAL_END.finditer(text))
    return bool(matches) and matches[-1].group(1) == ""


def has_final_channel(text: str) -> bool:
    """Whether ``text`` is an answer: non-harmony text, or harmony output with a final channel."""
    return final_channel(text) is not None


def analysis_only(reasoning: str) -> str:
    """
    Raw harmony text holding only an analysis message (no final channel), for a reply that has no answer.

    Backends return it when a server reports the reasoning but no content, so that the reply text, like
    every other unanswered reply, is harmony output for which :func:`final_channel` is ``None``
    (:func:`without_answer` uses it for plain text).
    """
    return f"<|channel|>analysis<|message|>{reasoning}"


def without_answer(text: str) -> str:
    """
    ``text`` as a reply without an answer: harmony text with no final channel, keeping what came before the
    answer. For a reply that was cut off by the token limit (its answer may be cut short) or that otherwise
    must not count as answered.

    - raw harmony: everything before the first final channel marker (``<|channel|>final``);
    - flattened harmony: everything before the first ``assistantfinal``;
    - harmony without a final channel: unchanged;
    - plain text (or nothing left after the cut): wrapped by :func:`analysis_only`.

    :param text: The model's output.
    :return: Text for which :func:`final_channel` is ``None``.
    """
    if final_channel(text) is None:
        return text
    if any(m in text for m in _RAW_MARKERS):
        match = _RAW_FINAL_START.search(text)
        kept = text[: match.start()] if match else text
    elif _FLAT_FINAL_MARK in text:
        kept = text.partition(_FLAT_FINAL_MARK)[0]
    else:
        kept = text
    return kept if final_channel(kept) is None else analysis_only(kept)
