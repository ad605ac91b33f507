"""ask_for_params / ask_together: the re-ask conversation, the echoed reply's cap, temperatures, token counts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from helpers import ScriptedLLM, vector

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.llm.base import ChatReply, Message
from sb3_r2po.r2po.roles import MAX_ECHOED_REPLY_CHARS, ask_for_params, ask_together

SPACE = ParameterSpace(2, low=-5, high=5, decimals=1)
PROMPT = [{"role": "system", "content": "sys"}, {"role": "user", "content": "propose"}]


def retry(reason: str) -> Message:
    return {"role": "user", "content": f"RETRY: {reason}"}


class TemperatureLLM(ScriptedLLM):
    """Records the temperature of every call."""

    def __init__(self, replies: Sequence[str]) -> None:
        super().__init__(replies)
        self.temperatures: list[float] = []

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        self.temperatures.append(temperature)
        return super().chat(messages, temperature=temperature)


def test_every_re_ask_keeps_the_whole_conversation_so_far() -> None:
    llm = ScriptedLLM(["no vector here", "params: [1, 2, 3]", vector(1.0, 2.0)])
    answer = ask_for_params(llm, PROMPT, SPACE, role="search", retry_message=retry, max_retries=2)
    np.testing.assert_array_equal(answer.params, [1.0, 2.0])
    first_error, second_error = answer.failures
    assert llm.calls[0] == PROMPT
    assert llm.calls[2] == [
        *PROMPT,
        {"role": "assistant", "content": "no vector here"},
        retry(first_error),
        {"role": "assistant", "content": "params: [1, 2, 3]"},
        retry(second_error),
    ]
    assert [call.messages for call in answer.calls] == llm.calls


def test_the_echoed_unusable_reply_is_capped() -> None:
    long_reply = "x" * (MAX_ECHOED_REPLY_CHARS + 500)
    llm = ScriptedLLM([long_reply, vector(1.0, 2.0)])
    answer = ask_for_params(llm, PROMPT, SPACE, role="search", retry_message=retry, max_retries=1)
    assert answer.params is not None
    echoed = llm.calls[1][-2]
    assert echoed == {"role": "assistant", "content": long_reply[:MAX_ECHOED_REPLY_CHARS]}
    assert answer.calls[0].reply == long_reply  # the log keeps the whole reply


def test_re_asks_use_the_same_temperature() -> None:
    llm = TemperatureLLM(["no vector", vector(1.0, 2.0)])
    ask_for_params(llm, PROMPT, SPACE, role="search", retry_message=retry, temperature=0.7, max_retries=1)
    assert llm.temperatures == [0.7, 0.7]

    llm = TemperatureLLM(["no vector", vector(1.0, 2.0), vector(3.0, 4.0)])
    answers = ask_together(
        llm, [PROMPT, PROMPT], SPACE, role="search", retry_message=retry,
        checks=[lambda settled: lambda p: None] * 2, temperature=0.4, max_retries=1,
    )  # fmt: skip
    assert [a.params is not None for a in answers] == [True, True]
    assert llm.temperatures == [0.4, 0.4, 0.4]


def test_calls_keep_prompt_and_completion_tokens_apart() -> None:
    llm = ScriptedLLM(["no vector", vector(1.0, 2.0)])  # ScriptedLLM reports 10 prompt, 5 completion tokens
    answer = ask_for_params(llm, PROMPT, SPACE, role="search", retry_message=retry, max_retries=1)
    assert [(c.prompt_tokens, c.completion_tokens) for c in answer.calls] == [(10, 5), (10, 5)]
    assert [c.seconds for c in answer.calls] == [0.001, 0.001]


def test_the_accepted_reply_keeps_its_projection_notes() -> None:
    answer = ask_for_params(ScriptedLLM([vector(9.0, 2.04)]), PROMPT, SPACE, role="search", retry_message=retry)
    np.testing.assert_array_equal(answer.params, [5.0, 2.0])
    assert len(answer.notes) == 2
