"""LLM backends: the ``llm=`` argument of :class:`sb3_r2po.R2PO`.

The heavy backends are imported from their modules, so that importing ``sb3_r2po`` stays light:
``sb3_r2po.llm.transformers_backend.TransformersBackend``, ``sb3_r2po.llm.openai_backend.OpenAIBackend`` and
``sb3_r2po.llm.embedded.EmbeddedBackend``.
"""

from sb3_r2po.llm.base import CallableBackend, ChatBackend, ChatReply, LLMBackendError, Message, chat_batch
from sb3_r2po.llm.example import ExampleLLM
from sb3_r2po.llm.recording import RecordingBackend, ReplayBackend, ReplayMissError
from sb3_r2po.llm.resolve import STRING_FORMS, make_backend

__all__ = [
    "STRING_FORMS",
    "CallableBackend",
    "ChatBackend",
    "ChatReply",
    "ExampleLLM",
    "LLMBackendError",
    "Message",
    "RecordingBackend",
    "ReplayBackend",
    "ReplayMissError",
    "chat_batch",
    "make_backend",
]
