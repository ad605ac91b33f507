"""Masking credentials in text: what an error message, a log record or a transcript may show of an ``llm`` string,
a backend's ``repr`` or a server's reply (see the "Secrets" notes of :mod:`sb3_r2po.llm.resolve`)."""

from __future__ import annotations

import re
import urllib.parse

REDACTED = "***"
"""What stands in for a credential in messages, logs and transcripts."""

_SECRET_NAME = (
    r"(?:[a-z0-9]+[_.\-])*(?:api[_.\-]?key|apikey|key|token|secret|password|passwd|pwd|pass|auth|authorization"
    r"|signature|sig|credentials?|session)"
)
_VALUE_END = r"\s&#;,\"'<>(){}\[\]"
_SCHEME = r"\b[a-z][a-z0-9+.\-]*://"
_ASSIGNMENT_RE = re.compile(rf"(?i)(?<![a-z0-9])({_SECRET_NAME}\s*(?:=|%3d)\s*)(\"[^\"]*\"|'[^']*'|[^{_VALUE_END}]+)")
_QUOTED_RE = re.compile(rf"(?i)([\"']{_SECRET_NAME}[\"']\s*:\s*[\"'])[^\"']*")
_URL_AUTH_RE = re.compile(rf"(?i)({_SCHEME})\S*@")
_URL_ENCODED_AUTH_RE = re.compile(rf"(?i)({_SCHEME})[^\s/]*%40")
_URL_BAD_PORT_RE = re.compile(rf"(?i)({_SCHEME})[^\s/?#@\[\]:]*:(?=\d*[^\d:/?#{_VALUE_END}])[^:/?#{_VALUE_END}]+")
_URL_QUERY_RE = re.compile(rf"(?i)({_SCHEME}(?:(?!%3f)[^\s?])*)(?:\?|%3f)\S*")
_USERINFO_RE = re.compile(r"[^\s:/@'\"]+:[^\s@/'\"]+@")
_SCHEME_RE = re.compile(r"(?i)\s*([a-z][a-z0-9+.\-]*://)(.*)", re.DOTALL)
_AUTH_HEADER_RE = re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=\-]{6,}")
KEY_LIKE_RE = re.compile(r"\b(?:sk|hf|gsk|xai|ghp|gho|ghs|ghu|github_pat|glpat)[-_][A-Za-z0-9_\-]{16,}|\bAKIA[0-9A-Z]{16}\b")
"""A token that looks like an API key: OpenAI's and Anthropic's ``sk-...``, Stripe's ``sk_live_...``, Hugging Face's
``hf_...``, Groq's, xAI's, GitHub's, GitLab's, AWS's access key ids."""


def _masked_value(match: re.Match[str]) -> str:
    value = match.group(2)
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match.group(1)}{quote}{REDACTED}{quote}"


def redact(text: str) -> str:
    """
    ``text`` with what looks like a credential masked as :data:`REDACTED`: the user information of URLs
    (``scheme://user:password@``, also percent-encoded, and ``user:password@host`` without a scheme), a URL's
    authority whose port is not a number (``scheme://user:password``), query strings, ``Bearer``/``Basic``
    credentials, ``name=value`` and ``"name": "value"`` of secret-sounding names (``api_key``, ``token``,
    ``password``, ...) and tokens that look like API keys. Meant for text of unknown origin (an error a server
    sent, a backend's ``repr``).

    :param text: Any text.
    """
    text = _URL_AUTH_RE.sub(rf"\1{REDACTED}@", text)
    text = _URL_ENCODED_AUTH_RE.sub(rf"\1{REDACTED}%40", text)
    text = _URL_BAD_PORT_RE.sub(rf"\1{REDACTED}", text)
    text = _URL_QUERY_RE.sub(rf"\1?{REDACTED}", text)
    text = _USERINFO_RE.sub(f"{REDACTED}@", text)
    text = _AUTH_HEADER_RE.sub(rf"\1\2{REDACTED}", text)
    text = _ASSIGNMENT_RE.sub(_masked_value, text)
    text = _QUOTED_RE.sub(rf"\1{REDACTED}", text)
    return KEY_LIKE_RE.sub(REDACTED, text)


def redact_spec(spec: str) -> str:
    """
    An ``llm`` string (or a server URL) as messages may show it: as :func:`redact` of it percent-decoded, with also
    everything after its ``scheme://`` (if any) up to its last ``@`` masked (user information; a password may hold
    spaces, ``/`` or ``#``), everything from its first ``?`` (a query string), and an authority whose port is not
    a number (``scheme://user:password``).

    :param spec: The string.
    """
    match = _SCHEME_RE.fullmatch(spec)
    scheme, rest = ("", spec) if match is None else match.groups()  # "user:password@host" without a scheme too
    rest = urllib.parse.unquote(rest)  # shown decoded: a percent-encoded credential is masked like a plain one
    if "@" in rest:
        rest = f"{REDACTED}@{rest.rpartition('@')[2]}"
    rest, query, _ = rest.partition("?")
    authority = re.match(r"[^/#]*", rest)
    port = "" if authority is None else authority.group(0).rpartition("]")[2].rpartition(":")[2]
    if scheme and authority and ":" in authority.group(0).rpartition("]")[2] and not port.isdigit() and port:
        rest = REDACTED + rest[authority.end() :]
    return redact(scheme + rest + (f"?{REDACTED}" if query else ""))


def shown(spec: str) -> str:
    """``repr`` of :func:`redact_spec` of ``spec``: how an error message names an ``llm`` string."""
    return repr(redact_spec(spec))
