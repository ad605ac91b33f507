"""Turn the ``llm=`` argument (a string, a callable or a backend object) into a :class:`ChatBackend`.

String forms are a small table; each entry says what it matches and how to build the backend, so a new
form is one entry. The error for an unknown string lists every accepted form.

Matching is cheap and offline (a regular expression; no import of torch or transformers, no network, no
file access): R2PO validates its ``llm`` string at construction, and builds the backend later. Building is
lazy too: a model or a server is first touched by the backend's first ``chat``.

Forms, tried in order: ``example[:seed]``; ``embedded[:size]``; ``replay:PATH``
(:class:`~sb3_r2po.llm.recording.ReplayBackend`); an ``http(s)://`` URL with an optional ``#MODEL``
(:class:`~sb3_r2po.llm.openai_backend.OpenAIBackend`); ``package.module:attribute``; a Hugging Face model id
``ORG/NAME`` or a local model directory written as a path (``/...``, ``./...``, ``../...``, ``~/...``)
(:class:`~sb3_r2po.llm.transformers_backend.TransformersBackend`). Hub ids without an organisation
(``gpt2``) need it spelled out (``openai-community/gpt2``).
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sb3_r2po.llm.base import CallableBackend, ChatBackend


@dataclass(frozen=True)
class StringForm:
    """One accepted form of an ``llm`` string."""

    name: str
    example: str
    matches: Callable[[str], bool]
    build: Callable[[str], ChatBackend]


def _build_example(spec: str) -> ChatBackend:
    from sb3_r2po.llm.example import ExampleLLM

    _, _, seed = spec.partition(":")
    return ExampleLLM(seed=int(seed) if seed else 0)


_IMPORT_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w.]*$")


def _build_import(spec: str) -> ChatBackend:
    module_name, _, attr_path = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, type):  # a backend class or factory class: build it with no arguments
        obj = obj()
    if not isinstance(obj, ChatBackend) and callable(obj) and getattr(obj, "is_backend_factory", False):
        obj = obj()
    return as_backend(obj)


_REPLAY_RE = re.compile(r"^replay:(?P<path>.+)$", re.S)
_URL_RE = re.compile(r"^https?://[^\s/#]+(/[^\s#]*)?(#[^\s#]+)?$")
_HF_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]*/[A-Za-z0-9][\w.\-]*$")
_PATH_RE = re.compile(r"^(/|\./|\.\./|~/|~$|\.$)")


def _is_model_id_or_dir(spec: str) -> bool:
    return (_HF_ID_RE.match(spec) is not None and ".." not in spec) or _PATH_RE.match(spec) is not None


def _build_replay(spec: str) -> ChatBackend:
    from sb3_r2po.llm.recording import ReplayBackend

    return ReplayBackend(spec.partition(":")[2].strip())


def _build_openai(spec: str) -> ChatBackend:
    from sb3_r2po.llm.openai_backend import OpenAIBackend

    return OpenAIBackend(spec)


def _build_transformers(spec: str) -> ChatBackend:
    from sb3_r2po.llm.transformers_backend import TransformersBackend

    return TransformersBackend(os.path.expanduser(spec) if spec.startswith("~") else spec)


STRING_FORMS: list[StringForm] = [
    StringForm(
        "example[:seed]",
        "example:0",
        lambda s: re.fullmatch(r"example(:\d+)?", s) is not None,
        _build_example,
    ),
    StringForm(
        "embedded[:size]",
        "embedded:0.5b",
        lambda s: re.fullmatch(r"embedded(:(0\.5b|1\.5b))?", s, re.IGNORECASE) is not None,
        lambda s: importlib.import_module("sb3_r2po.llm.embedded").EmbeddedBackend.from_spec(s),
    ),
    StringForm(
        "replay:PATH (answer from a RecordingBackend JSONL file)",
        "replay:runs/llm_calls.jsonl",
        lambda s: _REPLAY_RE.match(s) is not None,
        _build_replay,
    ),
    StringForm(
        "http(s)://HOST[:PORT]/v1[#MODEL] (OpenAI-compatible server: vLLM, SGLang, llama.cpp, Ollama, transformers serve)",
        "http://127.0.0.1:8000/v1#openai/gpt-oss-20b",
        lambda s: _URL_RE.match(s) is not None,
        _build_openai,
    ),
    StringForm(
        "package.module:attribute", "my_pkg.llms:make_backend", lambda s: _IMPORT_RE.match(s) is not None, _build_import
    ),
    StringForm(
        "ORG/NAME (Hugging Face model id) or a local model directory path, run in-process with transformers",
        "openai/gpt-oss-20b",
        _is_model_id_or_dir,
        _build_transformers,
    ),
]
"""The accepted string forms, tried in order. Backends add theirs with :func:`register_string_form`."""


def register_string_form(form: StringForm, *, first: bool = False) -> None:
    """Add an accepted ``llm`` string form (``first=True`` tries it before the others)."""
    if first:
        STRING_FORMS.insert(0, form)
    else:
        STRING_FORMS.append(form)


def as_backend(obj: Any) -> ChatBackend:
    """Wrap a plain callable as a backend; pass backends through."""
    if isinstance(obj, ChatBackend):
        return obj
    if callable(obj):
        return CallableBackend(obj)
    raise TypeError(f"llm must be a string, a ChatBackend or a callable (messages) -> str, got {type(obj).__name__}")


def make_backend(llm: str | ChatBackend | Callable[[list[dict[str, str]]], str]) -> ChatBackend:
    """
    Build the backend for an ``llm`` argument.

    :param llm: A string in one of the forms of :data:`STRING_FORMS`, a :class:`ChatBackend`, or a
        callable ``(messages) -> str``.
    :raises ValueError: for a string that matches no form (the message lists the accepted forms).
    """
    if not isinstance(llm, str):
        return as_backend(llm)
    spec = llm.strip()
    for form in STRING_FORMS:
        if form.matches(spec):
            return form.build(spec)
    accepted = "\n".join(f"  - {form.name}   e.g. {form.example!r}" for form in STRING_FORMS)
    raise ValueError(f"llm={llm!r} matches no accepted form. Accepted forms:\n{accepted}")


def check_llm_spec(llm: Any) -> None:
    """Validate an ``llm`` argument without building anything (no network, no model load)."""
    if isinstance(llm, str):
        spec = llm.strip()
        if not any(form.matches(spec) for form in STRING_FORMS):
            make_backend(spec)  # raises the descriptive ValueError
    elif not (isinstance(llm, ChatBackend) or callable(llm)):
        as_backend(llm)
