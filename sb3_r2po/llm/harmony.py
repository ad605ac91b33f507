"""gpt-oss "harmony" replies on the backends' side: stop tokens, reasoning effort, and replies without an answer.

Reading a reply (where its answer is) is :mod:`sb3_r2po.common.parameters`'s. No final channel is no answer (backends
retry once, then return the raw text); a reply cut off while its answer was written is a cut-off reply.
"""

from __future__ import annotations

from sb3_r2po.common.parameters import as_cut_off, before_final, final_channel

HARMONY_STOP_TOKENS = ("<|return|>", "<|call|>")
"""Tokens that end a harmony reply (``<|end|>`` only ends one message, e.g. the analysis, so it is not one)."""

REASONING_EFFORTS = ("low", "medium", "high")
"""gpt-oss's reasoning efforts, lowest first."""


def check_reasoning_effort(effort: str | None) -> None:
    """Raise ``ValueError`` unless ``effort`` is one of :data:`REASONING_EFFORTS` or ``None``."""
    if effort is not None and effort not in REASONING_EFFORTS:
        raise ValueError(f"reasoning_effort must be one of {REASONING_EFFORTS} or None, got {effort!r}")


def retry_request(
    effort: str | None, budget: int | None, factor: float, lower: bool = True
) -> tuple[str | None, int | None] | None:
    """
    The reasoning effort and token budget of the one retry of an unanswered reply, or ``None`` when there is none.

    :param effort: The first request's effort; the retry's is one step lower (``"low"`` stays) when ``lower``.
    :param budget: The first request's token budget (``None``: the server's default, kept); the retry's is ``factor``
        times it, and at least one more.
    :param factor: The budget multiplier; ``0`` (or less) means no retry, as does a retry that would ask the same.
    :param lower: Whether the retry lowers the effort.
    """
    if factor <= 0:
        return None
    retry_effort = effort
    if lower and effort in REASONING_EFFORTS:
        retry_effort = REASONING_EFFORTS[max(0, REASONING_EFFORTS.index(effort) - 1)]
    retry_budget = None if budget is None else max(budget + 1, int(budget * factor))
    return None if (retry_effort, retry_budget) == (effort, budget) else (retry_effort, retry_budget)


def analysis_only(reasoning: str) -> str:
    """Raw harmony text holding only an analysis message: a reply without an answer (:func:`final_channel` is ``None``)."""
    return f"<|channel|>analysis<|message|>{reasoning}"


def cut_off_reply(text: str) -> str:
    """Output the token limit cut off: a cut-off reply (:func:`as_cut_off`, whose complete lines R2PO's parser reads)
    when the answer had begun, else a reply without an answer (:func:`without_answer`)."""
    return as_cut_off(text) if final_channel(text) else without_answer(text)


def without_answer(text: str) -> str:
    """``text`` as a reply without an answer (:func:`final_channel` is ``None``): what came before its final channel, or
    plain text wrapped by :func:`analysis_only`."""
    if final_channel(text) is None:
        return text
    kept = before_final(text)
    return kept if final_channel(kept) is None else analysis_only(kept)
