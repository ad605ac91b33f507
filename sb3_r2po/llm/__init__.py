"""LLM backends: the ``llm=`` argument of :class:`sb3_r2po.R2PO`.

The heavy backends are imported from their modules, so that importing ``sb3_r2po`` stays light:
``sb3_r2po.llm.transformers_backend.TransformersBackend``, ``sb3_r2po.llm.openai_backend.OpenAIBackend`` and
``sb3_r2po.llm.embedded.EmbeddedBackend``.

Layers, lowest first (a module imports only from layers below it, and from :mod:`sb3_r2po.common`):

1. ``base``: the seam (messages, replies, errors, the optional capabilities as protocols, batch results);
2. what the backends share: ``identity`` (request hashes), ``harmony`` (gpt-oss replies), ``grammar`` (GBNF),
   ``weights`` and ``cpu`` (the embedded model's files and CPU tuning); ``asking`` (asking any backend for a vector);
3. the backends: ``example``, ``openai_backend``, ``transformers_backend``, ``embedded``;
4. ``resolve``: ``llm`` arguments to backends;
5. the wrappers that take an ``llm`` argument themselves: ``recording`` (record and replay), ``batching``;
6. this package, which registers the one string form a wrapper defines, ``replay:PATH``, into ``resolve``'s table.
"""

from sb3_r2po.llm.base import CallableBackend, ChatBackend, ChatReply, LLMBackendError, Message, chat_batch
from sb3_r2po.llm.example import ExampleLLM
from sb3_r2po.llm.recording import REPLAY_FORM, RecordingBackend, ReplayBackend, ReplayMissError
from sb3_r2po.llm.resolve import STRING_FORMS, URL_FORM, make_backend, register_string_form

if REPLAY_FORM not in STRING_FORMS:  # once, also when this package is reloaded
    register_string_form(REPLAY_FORM, before=URL_FORM.name)  # with the other reserved prefixes

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
