"""The identity of a chat request: what a recording is keyed by, and what a seeded backend derives its seed from.

The **request hash** is the SHA-256 of the canonical JSON of the messages (role and content) and the request
settings that the :class:`~sb3_r2po.llm.base.ChatBackend` protocol carries (the temperature). Backend settings
(model, reasoning effort, ...) are not part of it: a replay cannot know them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from sb3_r2po.llm.base import Message


def request_settings(temperature: float) -> dict[str, Any]:
    """The request settings that are part of a request's identity."""
    return {"temperature": float(temperature)}


def canonical_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """The messages as they count for a request's identity: ``role`` and ``content`` only, as strings."""
    return [{"role": str(m.get("role", "")), "content": str(m.get("content", ""))} for m in messages]


def request_hash(messages: Sequence[Message], settings: dict[str, Any]) -> str:
    """
    The SHA-256 (hex) identifying a request.

    :param messages: The chat messages (only ``role`` and ``content`` count).
    :param settings: The request settings (see :func:`request_settings`).
    """
    payload = {"messages": canonical_messages(messages), "settings": settings}
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
