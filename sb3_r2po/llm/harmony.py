"""gpt-oss "harmony" replies on the backends' side: stop tokens, reasoning effort, and replies without an answer.

Reading a reply (where its answer is: :func:`final_channel` and its relatives) is pure text handling that R2PO's
parser needs too: it lives in :mod:`sb3_r2po.common.replies` and is re-exported here.

No final channel (the token budget ran out during the analysis) is not an answer: :func:`final_channel`
returns ``None`` and the backends treat it as a parse failure (one retry with a larger budget, then the raw
text, for which :func:`final_channel` is ``None`` again). A reply cut off by the token limit while the answer was
being written (its last value may be cut short, e.g. ``-1`` of ``-1.75``) is passed on as a cut-off reply
(:func:`cut_off_reply`, not retried): R2PO's parser reads its complete lines, as the reference reads a cut reply
(a complete vector on the first line counts), or rejects it with ``reject_cut_off_replies``.

**Reasoning effort.** gpt-oss reasons at one of :data:`REASONING_EFFORTS`; a backend retrying an unanswered reply
asks one step lower (:func:`lower_effort`), with a larger budget (:func:`retry_budget`).
"""

from __future__ import annotations

from sb3_r2po.common.replies import (
    as_cut_off,
    before_final,
    complete_answer,
    final_channel,
    final_is_truncated,
    has_final_channel,
    is_harmony,
)

__all__ = [
    "HARMONY_STOP_TOKENS",
    "REASONING_EFFORTS",
    "analysis_only",
    "as_cut_off",
    "check_reasoning_effort",
    "complete_answer",
    "cut_off_reply",
    "final_channel",
    "final_is_truncated",
    "has_final_channel",
    "is_harmony",
    "lower_effort",
    "retry_budget",
    "without_answer",
]

HARMONY_STOP_TOKENS = ("<|return|>", "<|call|>")
"""Tokens that end a harmony reply (``<|end|>`` only ends one message, e.g. the analysis, so it is not one)."""

REASONING_EFFORTS = ("low", "medium", "high")
"""gpt-oss's reasoning efforts, lowest first."""


def check_reasoning_effort(effort: str | None) -> None:
    """Raise ``ValueError`` unless ``effort`` is one of :data:`REASONING_EFFORTS` or ``None``."""
    if effort is not None and effort not in REASONING_EFFORTS:
        raise ValueError(f"reasoning_effort must be one of {REASONING_EFFORTS} or None, got {effort!r}")


def lower_effort(effort: str | None) -> str | None:
    """One step lower than ``effort`` (``"low"`` stays ``"low"``); anything else is returned unchanged."""
    if effort in REASONING_EFFORTS:
        return REASONING_EFFORTS[max(0, REASONING_EFFORTS.index(effort) - 1)]
    return effort


def retry_budget(budget: int, factor: float) -> int:
    """The token budget of the retry of an unanswered reply: ``factor`` times ``budget``, and at least one more."""
    return max(budget + 1, int(budget * factor))


def analysis_only(reasoning: str) -> str:
    """
    Raw harmony text holding only an analysis message (no final channel), for a reply that has no answer.

    Backends return it when a server reports the reasoning but no content, so that the reply text, like
    every other unanswered reply, is harmony output for which :func:`final_channel` is ``None``
    (:func:`without_answer` uses it for plain text).
    """
    return f"<|channel|>analysis<|message|>{reasoning}"


def cut_off_reply(text: str) -> str:
    """
    What a backend returns for output the token limit cut off: when the answer had begun (a final channel with text),
    the reply as a cut-off reply (:func:`as_cut_off`), which R2PO's parser reads as the reference does (its complete
    lines) unless ``reject_cut_off_replies``; otherwise a reply without an answer (:func:`without_answer`).
    """
    return as_cut_off(text) if final_channel(text) else without_answer(text)


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
    kept = before_final(text)
    return kept if final_channel(kept) is None else analysis_only(kept)
