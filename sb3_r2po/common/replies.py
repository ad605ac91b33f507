"""Where the answer is in a reply: the final channel of gpt-oss "harmony" output, raw or flattened.

Raw output keeps the special tokens (``<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final
<|message|>ANSWER<|return|>``); flattened output (some servers skip them) reads ``analysis...assistantfinalANSWER``.
Harmony output without a final channel is no answer (``None``); text that is not harmony output is its own answer.
Flattened analysis is recognised by ``analysis`` (or ``assistantanalysis``) at the start directly followed by the
reasoning (not by whitespace or ``:;,.!?-``, so a plain ``analysis: ...`` stays plain text).
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
_TRAILING_SPECIALS = ("<|return|>", "<|end|>", "<|call|>", "<|endoftext|>")


def _without_trailing_specials(text: str) -> str:
    """``text`` without the special tokens (and whitespace) at its end, in linear time."""
    end = len(text.rstrip())
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
        return finals[-1].strip() if finals else None
    if _FLAT_FINAL_MARK in text:
        answer = text.rpartition(_FLAT_FINAL_MARK)[2]
        return _without_trailing_specials(answer).strip()
    if _FLAT_ANALYSIS.match(text):
        return None
    return text


def final_is_truncated(text: str) -> bool:
    """
    Whether raw harmony ``text`` ends inside its final channel (no ``<|return|>``/``<|end|>``/``<|call|>`` after
    it): the token budget ran out while the answer was being written. Flattened and non-harmony text cannot
    tell, and give ``False``.
    """
    if not _is_raw(text):
        return False
    matches = list(_RAW_FINAL_END.finditer(text))
    return bool(matches) and matches[-1].group(1) == ""


def cut_off_lines(text: str) -> str:
    """
    The complete lines of the last final channel of raw harmony ``text`` that the token budget cut off
    (:func:`final_is_truncated`): everything up to its last line break, whose last line may be cut short; empty
    when the cut came inside its first line.
    """
    last = None
    for last in _RAW_FINAL_START.finditer(text):  # noqa: B007  (the last final channel is wanted)
        pass
    start = -1 if last is None else text.find("<|message|>", last.end())
    return "" if start < 0 else text[start + len("<|message|>") :].rpartition("\n")[0]


def as_cut_off(text: str) -> str:
    """
    A reply the token budget cut off, as raw harmony whose final channel is not ended (:func:`final_is_truncated`),
    so the parser reads it as cut off; what came before the final channel is kept as analysis; harmony text without a
    final channel is returned unchanged.

    :param text: The cut-off output.
    """
    if _is_raw(text) and final_is_truncated(text):
        return text
    final = final_channel(text)
    if final is None:  # no answer had begun: nothing to read
        return text
    before = before_final(text) if is_harmony(text) else ""
    analysis = f"<|channel|>analysis<|message|>{before}<|end|><|start|>assistant" if before.strip() else ""
    return f"{analysis}<|channel|>final<|message|>{final}"


def has_final_channel(text: str) -> bool:
    """Whether ``text`` is an answer: non-harmony text, or harmony output with a final channel."""
    return final_channel(text) is not None


def complete_answer(text: str) -> str | None:
    """
    The final channel of ``text`` (:func:`final_channel`), or ``None`` when it has none or the token budget cut
    it off (:func:`final_is_truncated`): an answer whose last value may be cut short is no answer.
    """
    final = final_channel(text)
    return None if final is None or final_is_truncated(text) else final


def before_final(text: str) -> str:
    """
    What comes before the first final channel of ``text``: everything before the first ``<|channel|>final`` of
    raw harmony, before the first ``assistantfinal`` of flattened harmony; all of ``text`` otherwise.
    """
    if _is_raw(text):
        match = _RAW_FINAL_START.search(text)
        return text[: match.start()] if match else text
    if _FLAT_FINAL_MARK in text:
        return text.partition(_FLAT_FINAL_MARK)[0]
    return text
