"""No credential in any message, log, zip or transcript, whatever its spelling.

Three corpora, each case with its own fresh secret tokens:

- :data:`SPELLINGS`: ``llm`` strings that carry a credential: user information in every letter case of the scheme
  and with odd model names, percent-encoded, with IPv6 hosts, with ``@``, ``/``, ``#``, ``?`` or spaces in the
  password; query strings and parameters (``?api_key=``, ``?key=``, ``&token=``, ``;key=``, in the fragment,
  percent-encoded); key-like tokens in the path or as the model; strings of no form at all. Every one is refused
  (``check_llm_spec``, ``make_backend``, ``OpenAIBackend``, ``R2PO(...)``, ``set_llm``) with a ``ValueError`` whose
  message, traceback and log records hold no secret, and a model saved afterwards holds none either: a
  credential-bearing string is refused at construction, never stored (see :mod:`sb3_r2po.llm.resolve`).
  ``R2PO.load(..., llm=...)`` refuses it too, before it is stored.
- :data:`ECHOES` x :data:`KEY_SOURCES` x :data:`KEY_STYLES`: a key (``sk-...`` or a plain token) passed with
  ``api_key=`` or through ``api_key_env``, and a server that echoes it back (whole, shortened, in JSON fields, in
  ``Authorization`` text, in a non-JSON body, past the cut of a long body): the key (no 8 characters of it in a
  row) is in no error message, traceback, log record, ``repr`` or pickle.
- :data:`MISPLACED_KEYS`: a key passed where a name is expected (``api_key_env=``, ``model=``): refused without
  repeating it.

A run with a key (``checkpoint_dir``, an echoing server at the end) leaves no key in ``model.zip``, ``history.json``
or ``llm_calls.jsonl``; a recorded backend whose ``repr`` shows a credential is recorded masked.
"""

from __future__ import annotations

import json
import logging
import pickle
import re
import traceback
import urllib.parse
import uuid
import warnings
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fault_server import Action, FaultServer, ok, raw_body, status
from helpers import UNTIL_BUDGET

from sb3_r2po import R2PO
from sb3_r2po.llm.base import ChatReply, redact, redact_spec
from sb3_r2po.llm.openai_backend import LLMServerError, OpenAIBackend, parse_server_url
from sb3_r2po.llm.recording import RecordingBackend
from sb3_r2po.llm.resolve import check_llm_spec, make_backend

USER = [{"role": "user", "content": "Propose a parameter vector."}]

SPELLINGS: dict[str, str] = {
    # user information, every spelling of the scheme and the model
    "user_password": "http://user:{S}@127.0.0.1:8000/v1",
    "https_user_password_model": "https://user:{S}@llm.example.org/v1#openai/gpt-oss-20b",
    "token_as_user": "http://{S}@127.0.0.1:8000/v1",
    "token_as_user_github_style": "https://{S}:x-oauth-basic@llm.example.org/v1",
    "empty_user": "http://:{S}@127.0.0.1:8000/v1",
    "user_and_password_secret": "http://{S}:{T}@127.0.0.1:8000/v1",
    "upper_scheme": "HTTP://user:{S}@127.0.0.1:8000/v1",
    "mixed_scheme": "hTtPs://user:{S}@llm.example.org/v1",
    "upper_scheme_model": "HTTPS://user:{S}@llm.example.org/v1#m",
    "title_scheme": "Http://user:{S}@host/v1",
    "model_with_space": "http://user:{S}@127.0.0.1:8000/v1#my model",
    "model_with_spaces_and_tab": "http://user:{S}@host/v1#a b\tc",
    "space_before_fragment": "http://user:{S}@host/v1 #m",
    "model_with_at": "http://user:{S}@host/v1#org/model@rev",
    "model_odd_characters": "http://user:{S}@host/v1#mödel™<x>",
    "ipv6": "http://user:{S}@[::1]:8000/v1",
    "ipv6_full": "https://user:{S}@[2001:db8::1]/v1#m",
    "ipv6_broken": "http://user:{S}@[::1:8000/v1",
    "encoded_at_in_password": "http://user:{S}%40{T}@host/v1",
    "encoded_colon_and_at_only": "http://user%3A{S}%40host/v1",
    "encoded_user": "http://us%65r:{S}@host/v1",
    "encoded_credentials_with_space": "http://user%3A{S} {T}%40host/v1",
    "two_ats": "http://user:{S}@{T}@host/v1",
    "slash_in_password": "http://user:{S}/{T}@host/v1",
    "hash_in_password": "http://user:{S}#{T}@host/v1",
    "space_in_password": "http://user:{S} {T}@host/v1",
    "question_mark_in_password": "http://user:{S}?{T}@host/v1",
    "password_where_the_port_goes": "http://user:{S}",
    "no_host": "http://user:{S}@",
    "bad_port": "https://user:{S}@host:99999/v1",
    "leading_and_trailing_spaces": "  http://user:{S}@host/v1  ",
    "newline": "http://user:{S}@host/v1\n",
    "control_character": "http://user:{S}@host/v1\x00",
    "trailing_slash": "http://user:{S}@host/v1/",
    # query strings and parameters
    "query_api_key": "http://127.0.0.1:8000/v1?api_key={S}",
    "query_key": "http://127.0.0.1:8000/v1?key={S}",
    "query_second_token": "http://127.0.0.1:8000/v1?x=1&token={S}",
    "query_access_token": "https://host/v1?access_token={S}",
    "query_signature": "https://host/v1?sv=2024&sig={S}",
    "query_password": "https://host/v1?password={S}",
    "query_unnamed": "https://host/v1?{S}",
    "query_upper_case": "HTTP://HOST/v1?API_KEY={S}",
    "query_then_model": "http://host/v1?api_key={S}#openai/gpt-oss-20b",
    "query_in_the_model": "http://host/v1#openai/gpt-oss-20b?api_key={S}",
    "ampersand_in_the_model": "http://host/v1#m&token={S}",
    "ampersand_without_query": "http://host/v1&token={S}",
    "semicolon_parameter": "http://host/v1;key={S}",
    "percent_encoded_query": "http://host/v1%3Fapi_key%3D{S}",
    "query_and_user": "http://user:{S}@host/v1?api_key={T}",
    "query_with_space": "http://host/v1?api_key={S} #m",
    # keys in the path or as the model
    "key_in_the_path": "https://host/sk-{S}/v1",
    "key_as_the_model": "http://host/v1#sk-{S}",
    "hf_token_in_the_path": "https://host/hf_{S}/v1",
    # strings of no accepted form
    "other_scheme": "ftp://user:{S}@host/v1",
    "broken_scheme": "http:/user:{S}@host/v1",
    "no_scheme": "user:{S}@host:8000/v1",
    "hub_id_with_query": "openai/gpt-oss-20b?api_key={S}",
    "import_form_with_token": "my_pkg.llms:make?token={S}",
    "bare_assignment": "api_key={S}",
    "bare_key": "sk-{S}",
    "bearer_header": "Bearer {S}",
}
"""Credential-bearing spellings of an ``llm`` string (``{S}``, ``{T}``: the secret tokens)."""

ECHOES: dict[str, Callable[[str], Action]] = {
    "401_openai_style": lambda key: status(
        401, body=_json({"error": {"message": f"Incorrect API key provided: {key}.", "code": "invalid_api_key"}})
    ),
    "401_shortened_key": lambda key: status(
        401, body=_json({"error": {"message": f"Incorrect API key provided: {key[:14]}****{key[-4:]}"}})
    ),
    "403_authorization_header": lambda key: status(403, body=_json({"error": f"bad header Authorization: Bearer {key}"})),
    "400_key_in_a_field": lambda key: status(400, body=_json({"error": {"message": "bad request", "api_key": key}})),
    "400_key_in_a_query": lambda key: status(400, body=_json({"error": f"GET /v1?api_key={key} is not allowed"})),
    "404_key_at_the_end_of_a_long_body": lambda key: status(404, body=_json({"error": "x" * 5000 + key})),
    "429_key_across_the_cut": lambda key: status(429, body=_json({"error": {"message": "y" * 280 + key * 3}})),
    "500_key_in_a_nested_field": lambda key: status(500, body=_json({"error": {"request": {"headers": {"auth": key}}}})),
    "502_html_page": lambda key: status(502, body=f"<html><body>upstream refused key {key}</body></html>".encode()),
    "200_not_json": lambda key: raw_body(f"upstream rejected key {key}".encode(), "text/plain"),
    "200_error_body": lambda key: raw_body(_json({"error": {"message": f"key {key} revoked", "code": 401}})),
    "200_not_a_completion": lambda key: raw_body(_json({"object": "list", "key": key})),
}
"""Servers that echo the key back in an error or a malformed answer."""

KEY_SOURCES = ("api_key", "api_key_env")
"""How the key is passed: ``OpenAIBackend(api_key=...)``, or the name of an environment variable holding it."""

KEY_STYLES: dict[str, Callable[[], str]] = {
    "openai_style": lambda: f"sk-test-{uuid.uuid4().hex}",
    "plain_token": lambda: f"{uuid.uuid4().hex}{uuid.uuid4().hex[:8]}",  # nothing key-like: only the exact key masks it
}
"""What the key looks like."""

MISPLACED_KEYS: dict[str, dict[str, str]] = {
    "key_as_api_key_env": {"api_key_env": "sk-{S}"},
    "key_with_space_as_api_key_env": {"api_key_env": "Bearer {S}"},
    "key_as_model": {"model": "sk-proj-{S}"},
    "hf_token_as_model": {"model": "hf_{S}"},
}
"""A key passed where a name goes."""


def _json(body: Any) -> bytes:
    return json.dumps(body).encode()


def fresh_secrets(template: str) -> tuple[str, list[str]]:
    """``template`` with a fresh token for each of ``{S}`` and ``{T}``, and the tokens."""
    tokens = {name: f"pw{uuid.uuid4().hex[:14]}" for name in ("S", "T")}
    used = [tokens[name] for name in tokens if "{" + name + "}" in template]
    return template.replace("{S}", tokens["S"]).replace("{T}", tokens["T"]), used


def leaked(text: str, secrets: Sequence[str], piece: int = 8) -> list[str]:
    """The secrets of which ``piece`` characters in a row are in ``text``."""
    found = []
    for secret in secrets:
        size = min(piece, len(secret))
        if any(secret[i : i + size] in text for i in range(len(secret) - size + 1)):
            found.append(secret)
    return found


def expected_reason(spec: str) -> str:
    """What ``OpenAIBackend(spec)`` must say first: credentials, then parameters, then a key; else why it is no URL."""
    text = spec.strip()
    if re.match(r"(?i)https?://", text) is None:
        return "must start with http"
    rest = urllib.parse.unquote(text.partition("#")[0].partition("://")[2])
    if "@" in rest:
        return "must not hold credentials"
    if set("?&;=") & set(rest):
        return "must not have a query string"
    if re.search(r"\b(sk|hf)[-_]", rest):
        return "looks like an API key"
    return "could not be read" if ":" in urllib.parse.unquote(text.partition("#")[0]).split("//")[1] else "the model name"


def everything_said(exc: BaseException) -> str:
    """What a user sees of an exception: its message, ``repr`` and the whole printed traceback (chained ones too)."""
    return "\n".join([str(exc), repr(exc), "".join(traceback.format_exception(exc))])


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], str]]:
    """Every log record, of every logger, at DEBUG and above, and every warning, as one text."""
    caplog.set_level(logging.DEBUG)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield lambda: "\n".join(
            [*(f"{r.name} {r.levelname} {r.getMessage()}" for r in caplog.records), *(str(w.message) for w in caught)]
        )


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("saved") / "model.zip"
    R2PO("MlpLinear", "CartPole-v1", llm="example", seed=0, n_eval_episodes=2, warmup_episodes=2, max_episodes=10).save(path)
    return path


def zip_bytes(path: Path) -> bytes:
    with zipfile.ZipFile(path) as archive:
        return b"".join(archive.read(name) for name in archive.namelist())


def test_the_corpora_are_large() -> None:
    assert len(SPELLINGS) >= 50 and len(ECHOES) * len(KEY_SOURCES) * len(KEY_STYLES) >= 40 and len(MISPLACED_KEYS) >= 4
    assert all("{S}" in template for template in SPELLINGS.values())


# ---------------------------------------------------------------------------------------------- spellings


@pytest.mark.parametrize("name", list(SPELLINGS))
def test_a_credential_bearing_llm_string_is_refused_and_never_repeated(
    name: str, logs: Callable[[], str], make_r2po: Callable[..., R2PO], tmp_path: Path
) -> None:
    spec, secrets = fresh_secrets(SPELLINGS[name])
    said: list[str] = []
    for refuse in (
        lambda: check_llm_spec(spec),
        lambda: make_backend(spec),
        lambda: OpenAIBackend(spec),
        lambda: parse_server_url(spec, name="llm"),
        lambda: make_r2po(llm=spec),
    ):
        with pytest.raises(ValueError) as info:
            refuse()
        said.append(everything_said(info.value))
    assert not leaked("\n".join(said), secrets), (name, said)
    reason = expected_reason(spec)
    assert reason in said[2] and (reason == "must start with http" or "api_key_env" in said[2]), said[2]

    model = make_r2po(llm="example")
    with pytest.raises(ValueError) as info:
        model.set_llm(spec)
    assert model.llm == "example" and not leaked(everything_said(info.value), secrets)
    model.save(tmp_path / "model.zip")
    assert not leaked(zip_bytes(tmp_path / "model.zip").decode("latin-1"), secrets)
    assert not leaked(logs(), secrets), name


def test_load_refuses_a_credential_bearing_llm_string(saved_model: Path, tmp_path: Path) -> None:
    for name, template in SPELLINGS.items():
        spec, secrets = fresh_secrets(template)
        try:
            model = R2PO.load(saved_model, llm=spec)
        except ValueError as exc:
            assert not leaked(everything_said(exc), secrets), name
            continue
        model.save(tmp_path / "model.zip")
        assert not leaked(zip_bytes(tmp_path / "model.zip").decode("latin-1"), secrets), name
        raise AssertionError(f"{name}: R2PO.load(..., llm=...) accepted a credential-bearing llm string")


@pytest.mark.parametrize("name", list(SPELLINGS))
def test_the_masked_spelling_holds_no_secret(name: str) -> None:
    """What messages show of a string (and :func:`redact` of a text quoting it) holds no secret token."""
    spec, secrets = fresh_secrets(SPELLINGS[name])
    assert not leaked(redact_spec(spec), secrets), redact_spec(spec)
    if " " not in spec.strip():  # a text's words are cut at spaces: a password with a space is a whole string's case
        assert not leaked(redact(f"the server {spec.strip()} failed"), secrets), redact(spec)


def test_good_urls_in_any_letter_case_still_work() -> None:
    for url, base, model in [
        ("HTTP://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1", None),
        ("hTtPs://llm.example.org/v1/#openai/gpt-oss-20b", "https://llm.example.org/v1", "openai/gpt-oss-20b"),
        ("http://[::1]:8000/v1#gpt-oss:20b", "http://[::1]:8000/v1", "gpt-oss:20b"),
        ("http://localhost:11434/v1#hf.co/org/model-GGUF:Q4_K_M", "http://localhost:11434/v1", "hf.co/org/model-GGUF:Q4_K_M"),
        ("http://127.0.0.1:8000/v1#org/model@rev", "http://127.0.0.1:8000/v1", "org/model@rev"),
    ]:
        check_llm_spec(url)
        backend = make_backend(url)
        assert isinstance(backend, OpenAIBackend) and (backend.base_url, backend.model) == (base, model), url


# ---------------------------------------------------------------------------------------------- keys and echoes


def keyed_backend(url: str, source: str, key: str, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> OpenAIBackend:
    if source == "api_key":
        return OpenAIBackend(url, api_key=key, **kwargs)
    monkeypatch.setenv("R2PO_SECRET_TEST_KEY", key)
    return OpenAIBackend(url, api_key_env="R2PO_SECRET_TEST_KEY", **kwargs)


@pytest.mark.parametrize("style", list(KEY_STYLES))
@pytest.mark.parametrize("source", KEY_SOURCES)
@pytest.mark.parametrize("name", list(ECHOES))
def test_a_key_a_server_echoes_back_is_masked(
    name: str, source: str, style: str, logs: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = KEY_STYLES[style]()
    with FaultServer(default=ECHOES[name](key), handler_limit=5.0, lifetime=60) as server:
        llm = keyed_backend(server.url, source, key, monkeypatch, model="fault-model", max_retries=1, backoff=0.01)
        with pytest.raises(LLMServerError) as info:
            llm.chat(USER)
        assert all(r.headers.get("authorization") == f"Bearer {key}" for r in server.chat_requests)  # the key was sent
    said = everything_said(info.value)
    assert str(server.url) in said and not leaked(said, [key]), said
    assert not leaked(repr(llm), [key]) and not leaked(pickle.dumps(llm).decode("latin-1"), [key])
    assert not leaked(logs(), [key])


@pytest.mark.parametrize("source", KEY_SOURCES)
def test_a_key_is_in_no_repr_and_no_pickle(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    key = f"sk-test-{uuid.uuid4().hex}"
    with FaultServer(default=ok("fine"), handler_limit=5.0, lifetime=60) as server:
        llm = keyed_backend(server.url, source, key, monkeypatch, model="fault-model")
        assert llm.chat(USER).text == "fine"
        assert server.chat_requests[0].headers.get("authorization") == f"Bearer {key}"
        for shown in (repr(llm), str(llm.__getstate__()), pickle.dumps(llm).decode("latin-1")):
            assert not leaked(shown, [key])
        again = pickle.loads(pickle.dumps(llm))
        if source == "api_key":  # never pickled: the unpickled backend says so, without the key
            with pytest.raises(Exception, match="api_key= is never pickled") as info:
                again.chat(USER)
            assert not leaked(everything_said(info.value), [key])
        else:
            assert again.chat(USER).text == "fine"


@pytest.mark.parametrize("name", list(MISPLACED_KEYS))
def test_a_key_passed_where_a_name_goes_is_refused_and_not_repeated(name: str) -> None:
    settings = {k: fresh_secrets(v)[0] for k, v in MISPLACED_KEYS[name].items()}
    secrets = [v.split(" ")[-1] for v in settings.values()]
    with pytest.raises(ValueError) as info:
        OpenAIBackend("http://127.0.0.1:9/v1", **settings)
    assert not leaked(everything_said(info.value), secrets), str(info.value)


# ---------------------------------------------------------------------------------------------- runs


def cartpole_reply(index: int, body: dict[str, Any]) -> str:
    return f"params: [0, 0, 0, 0, 0, 1, 0, 1, 0, {index / 10:.1f}]"


@pytest.mark.parametrize("source", KEY_SOURCES)
def test_a_run_with_a_key_leaves_it_nowhere(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_r2po: Callable[..., R2PO], logs: Callable[[], str]
) -> None:
    """A run's files and the error of an echoing server hold no key; the transcript names the backend, not the key."""
    key = f"sk-test-{uuid.uuid4().hex}"
    with FaultServer([ok(cartpole_reply)] * 4, default=ECHOES["401_openai_style"](key), lifetime=60) as server:
        llm = keyed_backend(server.url, source, key, monkeypatch, model="fault-model", max_retries=0)
        run_dir = tmp_path / "run"
        model = make_r2po(
            llm=llm, n_eval_episodes=2, warmup_episodes=2, max_episodes=2 + 3 * 2 * 2, seed=0, checkpoint_dir=str(run_dir)
        )
        with pytest.raises(LLMServerError) as info:
            model.learn(total_timesteps=UNTIL_BUDGET)
        assert model.iteration == 2 and len(server.chat_requests) == 5
    assert not leaked(everything_said(info.value), [key])
    model.save(tmp_path / "model.zip")
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {"model.zip", "history.json", "llm_calls.jsonl"} <= {p.name for p in files}
    for path in [*files, tmp_path / "model.zip"]:
        text = zip_bytes(path).decode("latin-1") if path.suffix == ".zip" else path.read_text(errors="replace")
        assert not leaked(text, [key]), path
    transcript = [json.loads(line) for line in (run_dir / "llm_calls.jsonl").read_text().splitlines() if line.strip()]
    assert transcript and all(entry["backend"]["base_url"] == server.url for entry in transcript)
    assert not leaked(logs(), [key])


class LeakyBackend:
    """A user's backend whose ``repr`` (and attributes) show credentials."""

    def __init__(self, secret: str) -> None:
        self.base_url = f"https://user:{secret}@llm.example.org/v1?api_key={secret}"
        self.model = "m"
        self.secret = secret

    def chat(self, messages: Any, *, temperature: float = 0.0) -> ChatReply:
        return ChatReply(text="params: [1]")

    def __repr__(self) -> str:
        return f"LeakyBackend(url={self.base_url!r}, api_key={self.secret!r}, token='Bearer {self.secret}')"


def test_the_transcript_masks_what_a_backend_shows_of_itself(tmp_path: Path) -> None:
    secret = f"pw{uuid.uuid4().hex[:14]}"
    recorder = RecordingBackend(LeakyBackend(secret), tmp_path / "llm_calls.jsonl")
    recorder.chat(USER)
    text = (tmp_path / "llm_calls.jsonl").read_text()
    assert not leaked(text, [secret]), text
    record = json.loads(text.splitlines()[0])
    assert record["backend"]["class"] == "LeakyBackend" and record["backend"]["model"] == "m"
    assert "llm.example.org" in record["backend"]["base_url"]
