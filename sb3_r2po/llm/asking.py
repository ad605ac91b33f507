"""Ask an LLM for a parameter vector: call, parse, and re-ask with the error stated when the reply is unusable.

The reply is only ever parsed (see :mod:`sb3_r2po.common.parsing`). Every failure reason, the parser's or an extra
check's, is cut to :data:`~sb3_r2po.common.parsing.MAX_REASON_CHARS` characters
(:func:`~sb3_r2po.common.parsing.bound_reason`) before it is kept (:attr:`LLMCall.error`, :attr:`Answer.failures`,
hence the history and the model zip) or sent back in a re-ask; the unusable reply itself is quoted back at most
:data:`MAX_ECHOED_REPLY_CHARS` characters. Backend failures (a server that
stays down after its own retries) are not parse failures: they propagate as
:class:`~sb3_r2po.llm.base.LLMBackendError` so that the caller stops cleanly with its state intact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.common.parsing import Reading, bound_reason, parse_params
from sb3_r2po.llm.base import ChatBackend, ChatReply, Message, chat_batch

MAX_ECHOED_REPLY_CHARS = 2000
"""A re-ask quotes at most this much of the unusable reply back to the model."""


@dataclass
class LLMCall:
    """
    One call to the LLM, as logged.

    :param role: ``"search"`` or ``"critic"``.
    :param messages: The messages sent.
    :param reply: The reply text.
    :param error: Why the reply could not be used (at most :data:`~sb3_r2po.common.parsing.MAX_REASON_CHARS`
        characters), or ``None``.
    :param seconds: The call's latency.
    :param prompt_tokens: Prompt tokens, when the backend reports them.
    :param completion_tokens: Completion tokens, when the backend reports them.
    :param prompt_tokens_cached: Prompt tokens the backend had from an earlier call, when it reports them.
    """

    role: str
    messages: list[Message]
    reply: str
    error: str | None
    seconds: float
    prompt_tokens: int | None
    completion_tokens: int | None
    prompt_tokens_cached: int | None = None


@dataclass
class Answer:
    """
    The outcome of :func:`ask_for_params`.

    :param params: The legal vector, or ``None`` when every attempt failed.
    :param calls: Every call made, in order.
    :param notes: Values that were clipped or rounded in the accepted reply.
    """

    params: np.ndarray | None
    calls: list[LLMCall] = field(default_factory=list)
    notes: tuple[str, ...] = ()

    @property
    def failures(self) -> list[str]:
        """The reasons of the unusable replies (each at most :data:`~sb3_r2po.common.parsing.MAX_REASON_CHARS` characters)."""
        return [call.error for call in self.calls if call.error is not None]


def ask_for_params(
    backend: ChatBackend,
    messages: Sequence[Message],
    space: ParameterSpace,
    *,
    role: str,
    retry_message: Callable[[str], Message],
    check: Callable[[np.ndarray], str | None] = lambda params: None,
    temperature: float = 0.0,
    max_retries: int = 1,
    first_reply: ChatReply | None = None,
    reading: Reading = "first",
    reject_cut_off: bool = False,
) -> Answer:
    """
    Ask for a vector, re-asking up to ``max_retries`` times with the reason of the failure.

    :param backend: The chat backend.
    :param messages: The prompt.
    :param space: The parameter space the reply must fit.
    :param role: ``"search"`` or ``"critic"`` (for the logs).
    :param retry_message: Builds the follow-up user message from a failure reason.
    :param check: Extra validation of a parsed vector (e.g. "already in the history"); returns an error or ``None``
        (cut like the parser's reasons).
    :param temperature: Sampling temperature passed to the backend.
    :param max_retries: Number of re-asks after the first unusable reply.
    :param first_reply: The reply to the first attempt when it was already asked (see :func:`ask_together`).
    :param reading: Which values of a reply make the vector (:data:`~sb3_r2po.common.parsing.Reading`).
    :param reject_cut_off: Whether a reply cut off at the token limit is unusable (see
        :func:`~sb3_r2po.common.parsing.parse_params`).
    """
    conversation = [dict(m) for m in messages]
    answer = Answer(params=None)
    for attempt in range(1 + max(0, max_retries)):
        if attempt == 0 and first_reply is not None:
            reply = first_reply
        else:
            reply = backend.chat(conversation, temperature=temperature)
        result = parse_params(reply.text, space, reading, reject_cut_off)
        error = result.error if not result.ok else check(result.params)  # type: ignore[arg-type]
        if error is not None:
            error = bound_reason(str(error))
        answer.calls.append(
            LLMCall(
                role,
                conversation,
                reply.text,
                error,
                reply.seconds,
                reply.prompt_tokens,
                reply.completion_tokens,
                reply.prompt_tokens_cached,
            )
        )
        if error is None:
            answer.params, answer.notes = result.params, result.notes
            return answer
        conversation = [
            *conversation,
            {"role": "assistant", "content": reply.text[:MAX_ECHOED_REPLY_CHARS]},
            retry_message(error),
        ]
    return answer


def ask_together(
    backend: ChatBackend,
    conversations: Sequence[Sequence[Message]],
    space: ParameterSpace,
    *,
    role: str,
    retry_message: Callable[[str], Message],
    checks: Sequence[Callable[[list[Answer]], Callable[[np.ndarray], str | None]]],
    temperature: float = 0.0,
    max_retries: int = 1,
    reading: Reading = "first",
    reject_cut_off: bool = False,
) -> list[Answer]:
    """
    Ask several independent prompts: the first attempts go out as one batch (see
    :func:`~sb3_r2po.llm.base.chat_batch`), the re-asks of unusable replies one by one, in order.

    :param conversations: The prompts.
    :param checks: One factory per prompt: given the answers settled so far (earlier prompts), it returns the
        extra validation of this prompt's vector (so that a later answer can be required to differ from an earlier one).
    :param reading: See :func:`ask_for_params`.
    :param reject_cut_off: See :func:`ask_for_params`.
    :return: One :class:`Answer` per prompt.
    """
    firsts = chat_batch(backend, conversations, temperature=temperature)
    answers: list[Answer] = []
    for messages, make_check, first in zip(conversations, checks, firsts, strict=True):
        answers.append(
            ask_for_params(
                backend,
                messages,
                space,
                role=role,
                retry_message=retry_message,
                check=make_check(answers),
                temperature=temperature,
                max_retries=max_retries,
                first_reply=first,
                reading=reading,
                reject_cut_off=reject_cut_off,
            )
        )
    return answers
