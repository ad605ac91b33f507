"""Turn the ``llm=`` argument (a string, a callable or a backend object) into a :class:`ChatBackend`.

String forms are a small table; each entry says what it matches and how to build the backend, so a new
form is one entry. The error for an unknown string lists every accepted form.
"""

from __future__ import annotations

import importlib
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


STRING_FORMS: list[StringForm] = [
    StringForm(
        "example[:seed]",
        "example:0",
        lambda s: re.fullmatch(r"example(:\d+)?", s) is not None,
        _build_example,
    ),
    StringForm("package.module:attribute", "my_pkg.llms:make_backend", lambda s: _IMPORT_RE.match(s) is not None, _build_import),
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
