"""Turn the ``llm=`` argument (a string, a callable or a backend object) into a :class:`ChatBackend`. String forms are a
table (:data:`STRING_FORMS`, tried in order); a bad argument after a reserved prefix (``example:``, ``embedded:``,
``replay:``) is a ``ValueError`` saying so. Checks are cheap and offline. An ``llm`` string is stored as given, so one
holding a credential is refused, never stored redacted; messages show :func:`~sb3_r2po.llm.base.redact_spec` of it."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sb3_r2po.llm.base import CallableBackend, ChatBackend, redact, redact_spec, shown
from sb3_r2po.llm.embedded import EmbeddedBackend
from sb3_r2po.llm.example import ExampleLLM
from sb3_r2po.llm.openai_backend import OpenAIBackend, parse_server_url
from sb3_r2po.llm.transformers_backend import TransformersBackend
from sb3_r2po.llm.weights import MODELS


@dataclass(frozen=True)
class StringForm:
    """One accepted form of an ``llm`` string."""

    name: str
    example: str
    matches: Callable[[str], bool]
    build: Callable[[str], ChatBackend]
    check: Callable[[str], None] | None = None  # raises ValueError for a matched string that cannot be built


def reserved_prefix(prefix: str, *, ignore_case: bool = False) -> Callable[[str], bool]:
    """A matcher for ``prefix`` alone or followed by ``:`` and an argument (a reserved prefix, see the module notes)."""
    pattern = re.compile(rf"{prefix}(:|$)", re.IGNORECASE if ignore_case else 0)
    return lambda s: pattern.match(s) is not None


def _check_example(spec: str) -> None:
    _, sep, seed = spec.partition(":")
    if sep and re.fullmatch(r"\d+", seed.strip()) is None:
        raise ValueError(f"llm={shown(spec)}: the seed after 'example:' must be an integer >= 0, e.g. 'example:0'")


def _check_embedded(spec: str) -> None:
    _, sep, size = spec.partition(":")
    if sep and size.lower() not in MODELS:
        sizes = ", ".join(repr(f"embedded:{known}") for known in MODELS)
        raise ValueError(f"llm={shown(spec)}: unknown embedded model size {shown(size)}; use 'embedded' or one of {sizes}")


_IMPORT_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w.]*$")


def _import_failure(spec: str, what: str) -> ValueError:
    hint = ""
    if "." not in spec.partition(":")[0]:
        hint = f" (an Ollama model is named after its server's URL, e.g. 'http://127.0.0.1:11434/v1#{redact_spec(spec)}')"
    return ValueError(
        f"llm={shown(spec)} has the form package.module:attribute, but {what}{hint}. Accepted forms:\n{_accepted_forms()}"
    )


def _check_import(spec: str) -> None:
    top = spec.partition(":")[0].partition(".")[0]
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):  # a broken entry in sys.modules: leave it to the import
        found = True
    if not found:
        raise _import_failure(spec, f"there is no module named {top!r}")


def _build_import(spec: str) -> ChatBackend:
    module_name, _, attr_path = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise _import_failure(spec, f"module {module_name!r} could not be imported ({type(exc).__name__}: {exc})") from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise _import_failure(spec, f"{module_name!r} has no attribute {attr_path!r}") from exc
    if isinstance(obj, type):  # a backend class or factory class: build it with no arguments
        obj = obj()
    if not isinstance(obj, ChatBackend) and callable(obj) and getattr(obj, "is_backend_factory", False):
        obj = obj()
    return as_backend(obj)


_HF_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]*/[A-Za-z0-9][\w.\-]*$")
_PATH_RE = re.compile(r"^(/|\./|\.\./|~/|~$|\.$)")


def _check_openai(spec: str) -> None:
    try:
        parse_server_url(spec, name="llm")
    except ValueError as exc:
        raise ValueError(f"{exc}. Accepted forms:\n{_accepted_forms()}") from None


URL_FORM = StringForm(
    "http(s)://HOST[:PORT]/v1[#MODEL] (OpenAI-compatible server: vLLM, SGLang, llama.cpp, Ollama, transformers serve)",
    "http://127.0.0.1:8000/v1#openai/gpt-oss-20b",
    lambda s: re.match(r"https?://", s, re.IGNORECASE) is not None,  # then checked in full by _check_openai
    OpenAIBackend,
    _check_openai,
)  # the first form after the reserved prefixes

STRING_FORMS: list[StringForm] = [
    StringForm(
        "example[:seed]",
        "example:0",
        reserved_prefix("example"),
        lambda s: ExampleLLM(seed=int(s.partition(":")[2].strip() or 0)),
        _check_example,
    ),
    StringForm(
        "embedded[:size]",
        "embedded:0.5b",
        reserved_prefix("embedded", ignore_case=True),
        lambda s: EmbeddedBackend(size=s.partition(":")[2] or "0.5b"),
        _check_embedded,
    ),
    # replay:PATH comes here, registered by sb3_r2po.llm (its ReplayBackend takes an llm argument as its fallback)
    URL_FORM,
    StringForm(
        "package.module:attribute",
        "my_pkg.llms:make_backend",
        lambda s: _IMPORT_RE.match(s) is not None,
        _build_import,
        _check_import,
    ),
    StringForm(
        "ORG/NAME (Hugging Face model id) or a local model directory path, run in-process with transformers",
        "openai/gpt-oss-20b",
        lambda s: (_HF_ID_RE.match(s) is not None and ".." not in s) or _PATH_RE.match(s) is not None,
        lambda s: TransformersBackend(os.path.expanduser(s) if s.startswith("~") else s),
    ),
]
"""The accepted string forms, tried in order. Backends add theirs with :func:`register_string_form`."""


def register_string_form(form: StringForm, *, before: str | None = None) -> None:
    """Add an accepted ``llm`` string form: last, or before the form named ``before``."""
    names = [known.name for known in STRING_FORMS]
    if before is not None and before not in names:
        raise ValueError(f"no llm string form named {before!r}")
    STRING_FORMS.insert(len(names) if before is None else names.index(before), form)


def as_backend(obj: Any) -> ChatBackend:
    """Wrap a plain callable as a backend; pass backends through."""
    if isinstance(obj, ChatBackend):
        return obj
    if callable(obj):
        return CallableBackend(obj)
    raise TypeError(
        "llm must be a string, a ChatBackend or a callable (messages) -> str, got "
        + redact(f"{type(obj).__name__} {obj!r}")[:200]
    )


def make_backend(llm: str | ChatBackend | Callable[[list[dict[str, str]]], str]) -> ChatBackend:
    """Build the backend for an ``llm`` argument.

    :param llm: A string of a form in :data:`STRING_FORMS`, a :class:`ChatBackend`, or a callable ``(messages) -> str``.
    :raises ValueError: for a string of no form, a reserved prefix with a bad argument, or an import that fails.
    """
    return _checked_form(llm).build(llm.strip()) if isinstance(llm, str) else as_backend(llm)


def _accepted_forms() -> str:
    return "\n".join(f"  - {form.name}   e.g. {form.example!r}" for form in STRING_FORMS)


def _checked_form(llm: str) -> StringForm:
    """The form ``llm`` matches, after its check; ``ValueError`` for a bad argument or a string of no form."""
    spec = llm.strip()
    for form in STRING_FORMS:
        if form.matches(spec):
            if form.check is not None:
                form.check(spec)
            return form
    raise ValueError(f"llm={shown(llm)} matches no accepted form. Accepted forms:\n{_accepted_forms()}")


def check_llm_spec(llm: Any) -> None:
    """Validate an ``llm`` argument without building anything (no network, no load, no import)."""
    if isinstance(llm, str):
        _checked_form(llm)
    elif not (isinstance(llm, ChatBackend) or callable(llm)):
        as_backend(llm)


def imports_a_module(spec: str) -> bool:
    """Whether the ``llm`` string ``spec`` has the ``package.module:attribute`` form: building it imports a module."""
    form = next((form for form in STRING_FORMS if form.matches(spec)), None)
    return form is not None and form.build is _build_import
