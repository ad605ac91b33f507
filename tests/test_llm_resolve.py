"""The llm string forms: each maps to its backend class without loading or contacting anything."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from sb3_r2po.llm.openai_backend import OpenAIBackend
from sb3_r2po.llm.recording import ReplayBackend
from sb3_r2po.llm.resolve import STRING_FORMS, check_llm_spec, make_backend
from sb3_r2po.llm.transformers_backend import TransformersBackend


@pytest.mark.parametrize(
    ("spec", "cls"),
    [
        ("openai/gpt-oss-20b", TransformersBackend),
        ("Qwen/Qwen2.5-0.5B-Instruct", TransformersBackend),
        ("/path/to/model_dir", TransformersBackend),
        ("./models/tiny", TransformersBackend),
        ("../tiny", TransformersBackend),
        ("~/models/tiny", TransformersBackend),
        ("http://127.0.0.1:8000/v1", OpenAIBackend),
        ("https://llm.example.org/v1#openai/gpt-oss-20b", OpenAIBackend),
        ("http://localhost:11434/v1#gpt-oss:20b", OpenAIBackend),
        ("replay:/tmp/calls.jsonl", ReplayBackend),
        ("replay:calls.jsonl", ReplayBackend),
    ],
)
def test_string_forms_build_the_right_backend_lazily(spec: str, cls: type) -> None:
    check_llm_spec(spec)
    backend = make_backend(spec)
    assert isinstance(backend, cls)
    if isinstance(backend, TransformersBackend):
        assert not backend.loaded
    if isinstance(backend, OpenAIBackend):
        assert not backend.client_created


def test_details_of_the_built_backends() -> None:
    url = make_backend("http://localhost:11434/v1#gpt-oss:20b")
    assert isinstance(url, OpenAIBackend) and url.base_url == "http://localhost:11434/v1" and url.model == "gpt-oss:20b"
    assert isinstance(make_backend("http://127.0.0.1:8000/v1"), OpenAIBackend)
    assert make_backend("http://127.0.0.1:8000/v1").model is None  # asked from /models on first use
    replay = make_backend("replay:/tmp/calls.jsonl")
    assert isinstance(replay, ReplayBackend) and str(replay.path) == "/tmp/calls.jsonl"
    local = make_backend("~/models/tiny")
    assert isinstance(local, TransformersBackend) and not local.model.startswith("~")


def test_the_other_forms_are_kept() -> None:
    names = [form.name for form in STRING_FORMS]
    assert any(name.startswith("example") for name in names)
    assert any(name.startswith("package.module:attribute") for name in names)
    assert type(make_backend("example:3")).__name__ == "ExampleLLM"
    assert type(make_backend("sb3_r2po.llm.example:ExampleLLM")).__name__ == "ExampleLLM"


@pytest.mark.parametrize(
    "spec",
    [
        "gpt2",
        "not a model",
        "http://",
        "HTTPS://",
        "ftp://host/v1",
        "a/b/c",
        "org/../x",
        "",
        "http://host:port/v1",
        "https://host/v1#bad model",
        "http://host/v1?x=1",
    ],
)
def test_unknown_strings_list_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ValueError) as info:
        make_backend(spec)
    message = str(info.value)
    for form in STRING_FORMS:
        assert form.name in message
    with pytest.raises(ValueError):
        check_llm_spec(spec)


def test_matching_imports_neither_torch_nor_transformers_nor_openai() -> None:
    code = (
        "import sys\n"
        "from sb3_r2po.llm.resolve import STRING_FORMS, check_llm_spec\n"
        "before = set(sys.modules)\n"
        "for s in ['openai/gpt-oss-20b', '/models/x', 'http://127.0.0.1:8000/v1#m', 'replay:x.jsonl']:\n"
        "    check_llm_spec(s)\n"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('torch', 'transformers', 'openai')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("spec", "phrase"),
    [
        ("example:abc", "seed after 'example:'"),
        ("example:-1", "seed after 'example:'"),
        ("example:", "seed after 'example:'"),
        ("embedded:large", "unknown embedded model size 'large'"),
        ("Embedded:3B", "unknown embedded model size '3B'"),
        ("embedded:", "unknown embedded model size ''"),
        ("replay:", "needs the path"),
        ("replay:   ", "needs the path"),
        ("replay", "needs the path"),
    ],
)
def test_reserved_prefixes_check_their_argument(spec: str, phrase: str) -> None:
    """``example:``, ``embedded:`` and ``replay:`` are never taken for ``package.module:attribute``."""
    with pytest.raises(ValueError, match=re.escape(phrase)):
        check_llm_spec(spec)
    with pytest.raises(ValueError, match=re.escape(phrase)):
        make_backend(spec)


def test_reserved_prefixes_with_good_arguments() -> None:
    assert make_backend("example:12").seed == 12  # type: ignore[attr-defined]
    assert make_backend("example").seed == 0  # type: ignore[attr-defined]
    for spec in ("embedded", "embedded:0.5b", "EMBEDDED:1.5B"):
        check_llm_spec(spec)


@pytest.mark.parametrize("spec", ["mistral:latest", "no_such_pkg_r2po.sub:make", "gemma:latest"])
def test_an_import_string_of_a_missing_package_is_refused_at_the_check(spec: str) -> None:
    with pytest.raises(ValueError) as info:
        check_llm_spec(spec)
    message = str(info.value)
    assert spec in message and "package.module:attribute" in message
    for form in STRING_FORMS:
        assert form.name in message
    with pytest.raises(ValueError, match=r"could not be imported|no module named"):
        make_backend(spec)
    if "." not in spec.partition(":")[0]:
        assert f"http://127.0.0.1:11434/v1#{spec}" in message  # the Ollama spelling


@pytest.mark.parametrize(
    ("spec", "phrase"),
    [
        ("sb3_r2po.no_such_module:make", "module 'sb3_r2po.no_such_module' could not be imported (ModuleNotFoundError"),
        ("sb3_r2po.llm.example:NoSuchClass", "'sb3_r2po.llm.example' has no attribute 'NoSuchClass'"),
    ],
)
def test_import_failures_at_build_are_value_errors_naming_the_string(spec: str, phrase: str) -> None:
    check_llm_spec(spec)  # the package exists: only building finds out
    with pytest.raises(ValueError) as info:
        make_backend(spec)
    message = str(info.value)
    assert repr(spec) in message and phrase in message
    for form in STRING_FORMS:
        assert form.name in message


@pytest.mark.parametrize(
    ("spec", "base_url", "model"),
    [
        ("HTTP://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1", None),
        ("Https://llm.example.org/v1/#openai/gpt-oss-20b", "https://llm.example.org/v1", "openai/gpt-oss-20b"),
        ("http://[::1]:11434/v1#gpt-oss:20b", "http://[::1]:11434/v1", "gpt-oss:20b"),
    ],
)
def test_a_server_url_in_any_letter_case_is_the_url_form(spec: str, base_url: str, model: str | None) -> None:
    check_llm_spec(spec)
    backend = make_backend(spec)
    assert isinstance(backend, OpenAIBackend) and (backend.base_url, backend.model) == (base_url, model)


def test_a_url_with_credentials_is_refused_at_the_check() -> None:
    with pytest.raises(ValueError, match="api_key_env") as info:
        check_llm_spec("https://user:pw-secret@llm.example.org/v1#m")
    assert "pw-secret" not in str(info.value)


def test_the_replay_form_comes_with_the_reserved_prefixes() -> None:
    """``replay:PATH`` (registered by the ``sb3_r2po.llm`` package) is tried before the open-ended forms."""
    names = [form.name.split(" ")[0] for form in STRING_FORMS]
    assert names[:4] == ["example[:seed]", "embedded[:size]", "replay:PATH", "http(s)://HOST[:PORT]/v1[#MODEL]"]
    assert names.count("replay:PATH") == 1
