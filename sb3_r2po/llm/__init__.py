"""LLM backends: the ``llm=`` argument of :class:`sb3_r2po.R2PO`."""

from sb3_r2po.llm.base import CallableBackend, ChatBackend, ChatReply, LLMBackendError, Message, chat_batch
from sb3_r2po.llm.example import ExampleLLM
from sb3_r2po.llm.resolve import make_backend

__all__ = [
    "CallableBackend",
    "ChatBackend",
    "ChatReply",
    "ExampleLLM",
    "LLMBackendError",
    "Message",
    "chat_batch",
    "make_backend",
]
