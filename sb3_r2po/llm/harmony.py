"""gpt-oss "harmony" replies: extract the final channel from raw or flattened output.

Raw output (special tokens kept)::

    <|channel|>analysis<|message|>...reasoning...<|end|><|start|>assistant<|channel|>final<|message|>ANSWER<|return|>

Flattened output (special tokens skipped by the decoder)::

    analysis...reasoning...assistantfinalANSWER

No final channel (the token budget ran out during the analysis) is not an answer.
"""

from __future__ import annotations

import re

_RAW_FINAL = re.compile(r"<\|channel\|>\s*final\s*(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)(?:<\|return\|>|<\|end\|>|<\|call\|>|$)", re.S)
_RAW_MARKERS = ("<|channel|>", "<|message|>", "<|start|>")
_FLAT_FINAL = re.compile(r"assistantfinal(.*)$", re.S)
_FLAT_ANALYSIS = re.compile(r"^\s*analysis\S")


def is_harmony(text: str) -> bool:
    """Whether ``text`` looks like harmony output (raw or flattened)."""
    return any(m in text for m in _RAW_MARKERS) or bool(_FLAT_ANALYSIS.match(text)) or "assistantfinal" in text


def final_channel(text: str) -> str | None:
    """
    The text of the last final channel of a harmony reply.

    :param text: The model's output.
    :return: The final answer; ``None`` when the reply is harmony output without a final channel.
        Text that is not harmony output at all is returned unchanged.
    """
    if any(m in text for m in _RAW_MARKERS):
        finals = _RAW_FINAL.findall(text)
        return finals[-1].strip() if finals else None
    flat = _FLAT_FINAL.search(text)
    if flat:
        return flat.group(1).strip()
    if _FLAT_ANALYSIS.match(text):
        return None
    return text
