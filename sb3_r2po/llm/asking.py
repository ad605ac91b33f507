"""Ask an LLM for a parameter vector: call, parse (:mod:`sb3_r2po.common.parsing`), and re-ask with the error stated
when the reply is unusable.

Every failure reason is cut to :data:`~sb3_r2po.common.parsing.MAX_REASON_CHARS` characters before it is kept or sent
back; a re-ask quotes at most :data:`MAX_ECHOED_REPLY_CHARS` of the unusable reply. Backend failures are not parse
failures: :class:`~sb3_r2po.llm.base.LLMBackendError` propagates, so the caller stops with its state intact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.common.parsing import Reading, bound_reason, parse_params
from sb3_r2po.llm.base import ChatBackend, ChatReply, Message, chat_batch

MAX_ECHOED_REPLY_CHARS = 2000  # a re-ask quotes at most this much of the unusable reply back to the model


@dataclass
class LLMCall:
    """
    One call to the LLM, as logged (the token counts as the backend reported them, see
    :class:`~sb3_r2po.llm.base.ChatReply`).

    :param role: ``"search"`` or ``"critic"``.
    :param messages: The messages sent.
    :param reply: The reply text.
    :param error: Why the reply could not be used (cut), or ``None``.
    :param seconds: The call's latency.
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
        """The reasons of the unusable replies."""
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
        reply = (
            first_reply if attempt == 0 and first_reply is not None else backend.chat(conversation, temperature=temperature)
        )
        result = parse_params(reply.text, space, reading, reject_cut_off)
        error = result.error if not result.ok else check(result.params)  # type: ignore[arg-type]
        if error is not None:
            error = bound_reason(str(error))
        tokens = (reply.prompt_tokens, reply.completion_tokens, reply.prompt_tokens_cached)
        answer.calls.append(LLMCall(role, conversation, reply.text, error, reply.seconds, *tokens))
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
    Ask several independent prompts (the other arguments as :func:`ask_for_params`): the first attempts as one batch
    (:func:`~sb3_r2po.llm.base.chat_batch`), the re-asks one by one, in order; one :class:`Answer` per prompt.

    :param conversations: The prompts.
    :param checks: One factory per prompt: given the answers settled so far, it returns this prompt's extra check.
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
