"""LLM backends: the ``llm=`` argument of :class:`sb3_r2po.R2PO`. Layers, lowest first (a module imports only from those
below it and :mod:`sb3_r2po.common`): ``base``; ``grammar``, ``weights``; the backends (imported from their modules;
each imports its heavy dependencies when used); ``resolve``; the wrappers ``recording`` and ``batching``; this package,
which registers ``replay:PATH`` into ``resolve``'s table."""

from sb3_r2po.llm.base import CallableBackend, ChatBackend, ChatReply, LLMBackendError, Message, chat_batch
from sb3_r2po.llm.example import ExampleLLM
from sb3_r2po.llm.recording import REPLAY_FORM, RecordingBackend, ReplayBackend, ReplayMissError
from sb3_r2po.llm.resolve import STRING_FORMS, URL_FORM, make_backend, register_string_form

if REPLAY_FORM not in STRING_FORMS:  # once, also when this package is reloaded
    register_string_form(REPLAY_FORM, before=URL_FORM.name)  # with the other reserved prefixes

__all__ = ["STRING_FORMS", "CallableBackend", "ChatBackend", "ChatReply", "ExampleLLM", "LLMBackendError", "Message"]
__all__ += ["RecordingBackend", "ReplayBackend", "ReplayMissError", "chat_batch", "make_backend"]
